"""Benchmark 2 — agent cold start: a no-op agent through executor.execute_agent, per layer set.

sandbox_coldstart.py (issue 6) times the bare launch of a `pass` script under each sandbox layer
set; this benchmark reuses its layer sets and its launcher for that column and adds two, so each
step's cost stands on its own: the bare interpreter under the layers, the same launch of a real
agent (the trusted runtime around a run() that returns at once, so the runtime's imports count),
and that agent through execute_agent (scratch directory, environment, rlimits, the fork with a
preexec hook, the pipe pump). The executor's layers are narrowed the way sandbox_coldstart does
it, through sandbox.prepare's `layers` argument.

Two interpreters: the one the executor picks in a fresh home (ours: the empty agent venv it
creates from our interpreter), and a system python3 in a world-readable agent venv, when the
machine has one. The uid layer needs the second: the dropped uid cannot read an interpreter kept
under a private home such as /root/.pyenv.
"""

from __future__ import annotations

import functools
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import agents

from agentgod import agentvenv, executor, sandbox
from bench import harness, sandbox_coldstart

TARGETS_MS = {"none": 60.0, "all": 120.0}
NOOP_BODY = """
def run(task, previous_outputs):
    return "ok"
"""


def _world_readable(path: Path) -> bool:
    """Whether a uid that owns nothing can reach and read `path`."""
    path = path.resolve()
    if not path.is_file() or not path.stat().st_mode & stat.S_IROTH:
        return False
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in path.parents)


def system_python() -> str | None:
    """A world-readable python3 other than ours, to build an agent venv the uid layer accepts."""
    ours = Path(sys.executable).resolve()
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        path = Path(candidate)
        if path.exists() and path.resolve() != ours and _world_readable(path):
            return candidate
    return None


def _launch_ms(python: str, layers: tuple[str, ...], base: Path) -> float:
    """One launch of base/noop.py, prepared and started as sandbox_coldstart does it."""
    launch, scratch = sandbox_coldstart.prepare(python, layers, base)
    return sandbox_coldstart.start_once(launch, scratch) * 1000


def _executor_ms(path: Path, layers: tuple[str, ...]) -> tuple[float, tuple[str, ...]]:
    """One execute_agent call with sandbox.prepare narrowed to `layers`."""
    os.environ["SANDBOX"] = "auto" if layers else "off"
    narrowed = functools.partial(sandbox.prepare, layers=layers)
    with mock.patch.object(sandbox, "prepare", narrowed):
        started = time.perf_counter()
        result = executor.execute_agent(path, "cold start", {}, timeout=30)
        seconds = time.perf_counter() - started
    if not result.ok:
        raise harness.BenchError(f"no-op agent failed ({result.kind}): {result.error}")
    return seconds * 1000, tuple(layer for layer in result.layers if layer != "rlimits")


def measure(runs: int, with_venv: str | None) -> dict[str, dict[str, Any]]:
    """Median milliseconds per layer set for one interpreter, round robin across the sets."""
    with harness.environment(SANDBOX="off") as home:
        if with_venv:
            venv = home / ".agent_venv"
            subprocess.run([with_venv, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = agentvenv.agent_python()
        agent = agents.write_agent(NOOP_BODY, "noop_agent")
        bases = {}
        for kind, source in (("bare", "pass\n"), ("agent", agent.read_text(encoding="utf-8"))):
            bases[kind] = Path(tempfile.mkdtemp(prefix=f"coldstart-{kind}-", dir=home))
            bases[kind].chmod(0o755)
            (bases[kind] / "noop.py").write_text(source, encoding="utf-8")
        times: dict[str, dict[str, list[float]]] = {
            name: {"bare": [], "agent": [], "executor": []} for name in sandbox_coldstart.SETS
        }
        active: dict[str, tuple[str, ...]] = {}
        for _ in range(runs):  # round robin, so a busy moment hits every set alike
            for name, layers in sandbox_coldstart.SETS.items():
                times[name]["bare"].append(_launch_ms(python, layers, bases["bare"]))
                times[name]["agent"].append(_launch_ms(python, layers, bases["agent"]))
                elapsed, active[name] = _executor_ms(agent, layers)
                times[name]["executor"].append(elapsed)
    return {
        name: {
            "python": python,
            "active": list(active[name]),
            **{f"{kind}_ms": harness.median(values) for kind, values in columns.items()},
        }
        for name, columns in times.items()
    }


def run(options: harness.Options) -> harness.Report:
    runs = options.repetitions(full=10, quick=3)
    interpreters: dict[str, str | None] = {"ours": None}
    found = system_python()
    if found:
        interpreters[f"{found} venv"] = found
    rows: list[list[Any]] = []
    figures: list[harness.Figure] = []
    data: dict[str, Any] = {"runs": runs, "interpreters": {}}
    for label, venv_from in interpreters.items():
        results = measure(runs, venv_from)
        data["interpreters"][label] = results
        for name, result in results.items():
            figure = harness.Figure(
                f"agent cold start {name}, {label}",
                result["executor_ms"],
                "ms",
                TARGETS_MS.get(name),
            )
            if figure.target is not None:
                figures.append(figure)
            rows.append(
                [
                    label,
                    name,
                    ",".join(result["active"]) or "-",
                    f"{result['bare_ms']:.1f}",
                    f"{result['agent_ms']:.1f}",
                    f"{result['executor_ms']:.1f}",
                    f"{result['executor_ms'] - result['agent_ms']:+.1f}",
                    figure.shown_target(),
                    figure.verdict,
                ]
            )
    notes = [
        "bare = `pass` launched as sandbox_coldstart does; agent = the runtime agent launched the "
        "same way; execute_agent = that agent through the executor (what a run pays)",
        f"'ours' is the agent venv the executor creates from {sys.executable}",
    ]
    if not found:
        notes.append("no world-readable system python3: the uid layer could not be measured")
    table = harness.Table(
        f"2. Agent cold start (no-op agent, ms, median of {runs})",
        [
            "interpreter",
            "layers",
            "active",
            "bare",
            "agent",
            "execute_agent",
            "executor adds",
            "target",
            "",
        ],
        rows,
        notes,
    )
    return harness.Report("coldstart", [table], figures, data)
