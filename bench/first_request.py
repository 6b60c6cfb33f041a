"""Benchmark 4 — time to the first model request, in one-shot mode and in the REPL.

One-shot: process start to the fake API's recorded arrival of the first request (the planner's),
both on this process's monotonic clock; the child is killed as soon as the request lands (the
command benchmark holds it to 0.6 s). Floors are timed alongside, from process start to the end
of their code: the interpreter alone, and — what the first request used to wait for, before the
road spoke HTTP itself — `import anthropic` and the import plus a client.

REPL: the CLI on a pseudo-terminal; once its prompt is up, a person "types" for TYPING_SECONDS
(the time the background SDK import has to finish), then the task and Enter are written at once.
Measured: Enter to the first request (target <= 100 ms): the plan's, which leaves before the
clarifying question asked beside it.
"""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import termios
import time
from collections.abc import Sequence
from typing import Any

from fakeapi import FakeMessagesAPI
from scripted import agent_spec, plan

from bench import harness

FLOORS = {
    "python -c pass": "pass",
    "import anthropic": "import anthropic",
    "import anthropic + client": (
        "import anthropic; anthropic.Anthropic(api_key='sk-ant-x', base_url='http://127.0.0.1:9')"
    ),
}
REPL_TARGET_MS = 100.0
TYPING_SECONDS = 2.5
REPL_TASK = "find the main facts about sea otters and summarise them in a short list for me please"


def _read_until(fd: int, marker: bytes, seconds: float) -> None:
    """Drain the terminal until `marker` shows up (the child must never block on a full pty)."""
    seen = b""
    deadline = time.monotonic() + seconds
    while marker not in seen:
        if time.monotonic() > deadline:
            raise harness.BenchError(f"the REPL never printed {marker!r}")
        if select.select([fd], [], [], 0.05)[0]:
            seen = (seen + os.read(fd, 65536))[-4096:]


def _drain(fd: int) -> None:
    while select.select([fd], [], [], 0)[0]:
        try:
            os.read(fd, 65536)
        except OSError:
            return


def repl_first_request(argv: Sequence[str], api: FakeMessagesAPI) -> float:
    """Seconds from Enter to the first request of a REPL session."""
    pid, fd = pty.fork()
    if pid == 0:  # the child becomes the CLI, on the terminal pty.fork gave it
        os.execve(argv[0], list(argv), {**os.environ, "TERM": "xterm", "COLUMNS": "100"})
    try:
        _read_until(fd, b"agentgod> ", 60)
        time.sleep(TYPING_SECONDS)
        _drain(fd)
        # Type only once the line editor holds the terminal: it flushes input typed before.
        while termios.tcgetattr(fd)[3] & termios.ICANON:
            time.sleep(0.005)
        api.requests.clear()
        entered = time.monotonic()
        os.write(fd, (REPL_TASK + "\n").encode())
        while not api.messages():
            if time.monotonic() - entered > 60:
                raise harness.BenchError("the REPL made no request within 60 s of Enter")
            _drain(fd)
            time.sleep(0.001)
        return api.messages()[0].arrived - entered
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # pty.fork made the child a session leader
        os.waitpid(pid, 0)
        os.close(fd)


def run(options: harness.Options) -> harness.Report:
    runs = options.repetitions(full=5, quick=2)
    label, argv = harness.cli_commands()[-1]
    command = [*argv, "--no-input", "--plain", REPL_TASK]  # too long for a small-talk check
    arrivals: list[float] = []
    after_enter: list[float] = []
    floor_runs: dict[str, list[float]] = {name: [] for name in FLOORS}
    settings = {**harness.TASK_SETTINGS, "SANDBOX": "off"}
    with harness.environment(**settings) as home, harness.scripted_model() as factory:
        factory.plans = [plan(agent_spec("only_agent"))]
        for _ in range(runs):  # round robin, so a busy moment hits every measure alike
            factory.api.requests.clear()
            arrivals.append(harness.until_first_request(command, factory.api))
            if factory.kind(factory.api.messages()[0]) != "plan":
                raise harness.BenchError("the one-shot's first request was not the planner's")
            for name, code in FLOORS.items():
                floor_runs[name].append(harness.seconds_until_done(code, cwd=home))
            after_enter.append(repl_first_request(argv, factory.api))
        first_kind = factory.kind(factory.api.messages()[0])
    floors = {name: harness.median(values) for name, values in floor_runs.items()}
    first = harness.median(arrivals)
    repl = harness.Figure(
        "REPL: Enter -> first request", harness.median(after_enter) * 1000, "ms", REPL_TARGET_MS
    )
    rows: list[list[Any]] = [
        ["one-shot: start -> first request", f"{first * 1000:.0f}", "-", ""],
        *(
            [f"  floor: {name}", f"{seconds * 1000:.0f}", "-", ""]
            for name, seconds in floors.items()
        ),
        [
            f"REPL: Enter -> first request ({first_kind})",
            f"{repl.value:.0f}",
            "<= 100",
            repl.verdict,
        ],
    ]
    table = harness.Table(
        f"4. Time to first model request (ms, median of {runs})",
        ["measure", "ms", "target", ""],
        rows,
        [
            f"one-shot = {label}: {' '.join(command)}",
            "floors: process start to the end of `python -c CODE` on our interpreter (the SDK's "
            "are no longer on the path: shown for what the first request used to wait for)",
            f"REPL: the task is written {TYPING_SECONDS:g} s after the prompt appears, "
            "as one line and Enter",
        ],
    )
    figures = [harness.Figure("one-shot: start -> first request", first * 1000, "ms"), repl]
    data = {
        "runs": runs,
        "command": command,
        "first_request_seconds": first,
        "all_seconds": [round(a, 4) for a in arrivals],
        "floor_seconds": floors,
        "repl_enter_to_request_seconds": [round(s, 4) for s in after_enter],
        "repl_first_request_kind": first_kind,
    }
    return harness.Report("first_request", [table], figures, data)
