"""What the benchmarks share: options, an isolated home, the scripted model, targets and tables.

A benchmark is a function `run(options) -> Report`. A Report carries tables for people and
figures for machines; a Figure with a target knows whether it passed, so the verdict is computed
in one place and printed the same way everywhere.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fakeapi import FakeMessagesAPI, Reply, Request
from scripted import Factory

from agentgod import config
from bench import IMPORT_ROOT

FAKE_KEY = "sk-ant-bench-0123456789abcdefghijklmnop"
# A whole task: no council (its calls are not on the formula's path), one judge call, no repairs.
TASK_SETTINGS = {
    "COUNCIL": "off",
    "TASK_REVISIONS": "1",
    "AGENT_REPAIR_ATTEMPTS": "0",
    "MAX_AGENTS": "12",
    "AGENT_TIMEOUT_SECONDS": "60",
}


class BenchError(RuntimeError):
    """A benchmark could not measure what it set out to (the product failed the scenario)."""


@dataclass(frozen=True)
class Options:
    quick: bool = False
    latency: float = 0.5
    """Seconds the fake model takes for every call."""
    sandbox: tuple[str, ...] = ("off", "auto")
    """SANDBOX modes the orchestration benchmark runs under."""
    runs: int | None = None
    """Repetitions, overriding each benchmark's own full/quick count."""

    def repetitions(self, full: int, quick: int) -> int:
        if self.runs is not None:
            return self.runs
        return quick if self.quick else full


@dataclass
class Figure:
    """One number, with the target it is held to (if any) and its verdict."""

    name: str
    value: float | None
    unit: str
    target: float | None = None
    exact: bool = False
    """The value must equal the target (a count) rather than stay at or below it."""

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        if self.value is None:
            return "MISS"
        met = self.value == self.target if self.exact else self.value <= self.target
        return "PASS" if met else "MISS"

    def shown(self) -> str:
        return show(self.value, self.unit)

    def shown_target(self) -> str:
        if self.target is None:
            return "-"
        return ("= " if self.exact else "<= ") + show(self.target, self.unit)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict or None}


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    name: str
    tables: list[Table]
    figures: list[Figure]
    """Every figure that has a target (and a few key ones without)."""
    data: dict[str, Any]
    """The raw numbers behind the tables, for --json."""
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 1),
            "figures": [figure.as_json() for figure in self.figures],
            "tables": [asdict(table) for table in self.tables],
            "data": self.data,
        }


def show(value: float | None, unit: str) -> str:
    """A value as the tables print it: precision follows the unit."""
    if value is None:
        return "n/a"
    if unit == "%":
        return f"{value:+.1f} %"
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "x":
        return f"{value:.2f} x"
    if unit == "ms/s":
        return f"{value:.2f} {unit}"
    if unit in ("ms", "MB"):
        return f"{value:.1f} {unit}"
    return f"{value:g}" + (f" {unit}" if unit else "")


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def render(table: Table) -> str:
    """A plain-text table: first column left-aligned, the rest right-aligned."""
    cells = [[str(value) for value in row] for row in table.rows]
    widths = [
        max([len(heading), *(len(row[i]) for row in cells)])
        for i, heading in enumerate(table.columns)
    ]

    def line(values: list[str]) -> str:
        parts = [
            value.ljust(width) if i == 0 else value.rjust(width)
            for i, (value, width) in enumerate(zip(values, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    out = [table.title, line(table.columns), "  ".join("-" * width for width in widths)]
    out += [line(row) for row in cells]
    out += [f"  note: {note}" for note in table.notes]
    return "\n".join(out)


# ---- text ----------------------------------------------------------------------------------------


@functools.cache
def english() -> str:
    """Real English prose to make answers and files of: the standard library's own
    documentation (the size and compressibility of text people and models write, unlike a
    repeated sentence). The same for one Python version."""
    import argparse
    import csv
    import json
    import logging
    import sqlite3
    import threading

    modules = (argparse, csv, json, logging, subprocess, threading, sqlite3, contextlib)
    parts = [inspect.getdoc(module) or "" for module in modules]
    parts += [
        inspect.getdoc(member) or ""
        for module in modules
        for _, member in inspect.getmembers(module, inspect.isclass)
    ]
    return " ".join(" ".join(parts).split())


def prose(label: str, size: int) -> str:
    """`size` characters of prose after `label: `, a different stretch for each label."""
    text = english()
    start = zlib.crc32(label.encode()) % max(len(text) - size, 1)
    return f"{label}: " + text[start : start + size]


# ---- environment -------------------------------------------------------------------------------


@contextlib.contextmanager
def environment(**settings: str) -> Iterator[Path]:
    """A fresh AGENTGOD_HOME, a fake key and exactly these settings; the old environment after.

    The home is world-readable (0755) so the sandbox's dropped uid can reach the agents in it.
    PYTHONPATH makes every process the benchmarks start import this checkout as `agentgod`.
    """
    saved = dict(os.environ)
    home = Path(tempfile.mkdtemp(prefix="agentgod-bench-"))
    home.chmod(0o755)
    for name in config.SETTING_NAMES:
        os.environ.pop(name, None)
    os.environ.update(
        {
            "AGENTGOD_HOME": str(home),
            "ANTHROPIC_API_KEY": FAKE_KEY,
            "PYTHONPATH": str(IMPORT_ROOT),
            **settings,
        }
    )
    try:
        yield home
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(home, ignore_errors=True)


class BenchAPI(FakeMessagesAPI):
    """The fake API, keeping the usage it reported per request and quiet about vanished clients.

    The benchmarks kill CLI processes mid-connection on purpose; the server's default is to
    print a traceback for each reset connection, which would bury the tables.
    """

    def __init__(self) -> None:
        super().__init__()
        self.usage_of: dict[int, dict[str, int]] = {}
        """Reported usage by id() of the recorded Request (they live as long as the server)."""
        self._server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]

    def _usage(self, request: Request, reply: Reply) -> dict[str, int]:
        usage = super()._usage(request, reply)
        self.usage_of[id(request)] = usage
        return usage


@contextlib.contextmanager
def scripted_model(latency: float = 0.0) -> Iterator[Factory]:
    """The fake API with the scripted model answering every kind of call, each after `latency`.

    ANTHROPIC_BASE_URL points at it for the duration (call inside `environment`).
    """
    server = BenchAPI().start()
    server.latency = latency
    os.environ["ANTHROPIC_BASE_URL"] = server.base_url
    try:
        yield Factory(server)
    finally:
        server.stop()


# ---- processes ---------------------------------------------------------------------------------


def cli_commands() -> list[tuple[str, list[str]]]:
    """The ways to start the CLI worth timing.

    The command as PATH finds it (what a person types); when that is a wrapper such as a pyenv
    shim, also the console script beside our interpreter, which is the product's own cost; and
    `python -m agentgod` (this checkout) when neither is installed.
    """
    found: list[tuple[str, list[str]]] = []
    on_path = shutil.which("agentgod")
    beside = Path(sys.executable).parent / "agentgod"
    if on_path:
        found.append(("agentgod (PATH)", [on_path]))
    if beside.is_file() and (not on_path or Path(on_path).resolve() != beside.resolve()):
        found.append(("console script", [str(beside)]))
    if not found:
        found.append(("python -m agentgod", [sys.executable, "-m", "agentgod"]))
    return found


def time_process(argv: Sequence[str], *, cwd: Path | None = None) -> float:
    """Wall time of one whole process, output discarded; raises BenchError if it fails."""
    started = time.perf_counter()
    done = subprocess.run(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        raise BenchError(f"{' '.join(argv)} exited with {done.returncode}: {detail}")
    return seconds


def command_ms(argv: Sequence[str], runs: int) -> float:
    """Median wall time of a whole command in milliseconds, after one untimed run that warms
    the disk cache and the bytecode cache up."""
    time_process(argv)
    return median([time_process(argv) * 1000 for _ in range(runs)])


def seconds_until_done(code: str, *, cwd: Path | None = None) -> float:
    """From just before starting `python -c code` to the moment the code has run.

    Not the process's wall time: tearing down thousands of modules at exit (the SDK's) takes
    long enough to skew a start-up floor. The child reports its monotonic clock, which on Linux
    is the same clock as ours.
    """
    script = f"{code}\nimport time as _t\nprint(_t.monotonic())"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, check=True
    )
    return float(done.stdout.split()[-1]) - started


def until_first_request(
    argv: Sequence[str], api: FakeMessagesAPI, *, stderr: Path | None = None, timeout: float = 60
) -> float:
    """Start `argv`, wait for its first model request, then kill it (and only it).

    Returns seconds from just before the process was started to the request's arrival, both read
    from the monotonic clock of this process (the fake API runs here). The child gets its own
    session, so the kill reaches exactly the process group it founded.
    """
    log = stderr.open("wb") if stderr else subprocess.DEVNULL
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
    )
    try:
        while not api.messages():
            if process.poll() is not None:
                raise BenchError(f"{argv[0]} exited with {process.returncode} before any request")
            if time.monotonic() - started > timeout:
                raise BenchError(f"{argv[0]} made no request within {timeout:g} s")
            time.sleep(0.001)
        return api.messages()[0].arrived - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if stderr:
            log.close()  # type: ignore[union-attr]
