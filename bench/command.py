"""Benchmark 7 — what a person runs: `agentgod --json --no-input "a short task"`, whole, beside a
hand-written LangGraph script of the same shape (bench/peer_langgraph.py), in the same run, on the
same fake Messages API at the same latency.

Both run the target shape (12 agents in 3 waves, each agent of a wave depending on every agent of
the one before) as separate processes, interleaved, the order swapped every repetition so a busy
moment hits both alike. Measured from the fake's clock and ours (one monotonic clock):

- first request -> last reply, over each one's own ideal: AgentGOD's critical path is plan + one
  generation round + one call per wave + merge + judge = (waves + 4) x L; the script writes no
  code, so its path is one call shorter, (waves + 3) x L. The task is short (under the small-talk
  check's limit), so AgentGOD's intake call runs too, beside the plan.
- process start -> exit, and AgentGOD's over the script's.
- process start -> first request (AgentGOD's plan request).

The script needs `langgraph` and `anthropic` (`pip install -e ".[bench]"`); it runs on this
interpreter, or on BENCH_PEER_PYTHON when that names another. Where LangGraph cannot be had, the
same graph runs on plain threads with the SDK, and the table says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fakeapi import Reply, Request
from scripted import Factory

from bench import harness, overhead

TASK = "write a short comparative survey of three sorting algorithms"
"""Ten words: short enough for the small-talk check, so the command's intake runs as well."""
SHAPE = overhead.Shape(overhead.TARGET_SHAPE, (4, 4, 4))
TARGET_OVERHEAD = 5.0
"""Percent over the ideal, first request to last reply, at L = 0.5 s."""
TARGET_RATIO = 0.8
"""AgentGOD's whole process over the LangGraph script's."""
TARGET_FIRST_MS = 600.0
"""Launch to the first request, on an idle machine."""
PEER = Path(__file__).resolve().parent / "peer_langgraph.py"


def peer_python() -> str:
    """The interpreter the script runs on: BENCH_PEER_PYTHON, else ours."""
    return os.environ.get("BENCH_PEER_PYTHON") or sys.executable


def peer_reply(shape: overhead.Shape) -> Any:
    """The fake's answers to the script, by the kind its system prompt names."""
    planned = overhead.plan_for(shape)

    def answer(request: Request) -> Reply | str:
        kind = request.system.removeprefix("peer:")
        if kind == "plan":
            return Reply.json({"agents": planned["agents"]})
        if kind == "agent":
            return f"result from {request.prompt.split()[0].removeprefix('agent=')}"
        if kind == "merge":
            return "MERGED"
        return Reply.json({"missing": "", "done": True})

    return answer


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(started, ended, stdout) of one whole process, both on our monotonic clock."""
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    ended = time.monotonic()
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()[-3:]
        raise harness.BenchError(f"{' '.join(argv[:2])} exited with {done.returncode}: {detail}")
    return started, ended, done.stdout


def _timing(requests: list[Request], started: float, ended: float) -> dict[str, float]:
    first = min(r.arrived for r in requests)
    last = max(r.ended or r.replied for r in requests)
    return {
        "process_seconds": ended - started,
        "first_request_seconds": first - started,
        "busy_seconds": last - first,
        "calls": len(requests),
    }


def measure_agentgod(factory: Factory, argv: list[str]) -> dict[str, float]:
    factory.plans = [overhead.plan_for(SHAPE)]
    factory.calls.clear()
    factory.api.requests.clear()
    started, ended, out = _run([*argv, "--json", "--no-input", TASK], dict(os.environ))
    reply = json.loads(out)
    failed = [a["name"] for a in reply.get("agents", []) if not a.get("ok")]
    if not reply.get("ok") or failed or len(reply.get("agents", [])) != SHAPE.agents:
        raise harness.BenchError(f"the command did not run the shape: {out[:300]}")
    mine = [r for r in factory.api.messages() if not r.system.startswith("peer:")]
    timing = _timing(mine, started, ended)
    first = min(mine, key=lambda r: r.arrived)
    if factory.kind(first) != "plan":
        raise harness.BenchError(f"the command's first request was {factory.kind(first)}")
    [screened] = factory.of("intake")
    split = overhead.breakdown(factory, SHAPE, started, ended)
    split["(intake reply - plan reply)"] = screened.replied - factory.of("plan")[0].replied
    timing.update({f"split:{key}": value for key, value in split.items()})
    return timing


def measure_peer(factory: Factory, threads: bool) -> tuple[dict[str, float], str]:
    factory.api.requests.clear()
    argv = [peer_python(), str(PEER), *(["--no-langgraph"] if threads else []), TASK]
    started, ended, out = _run(argv, dict(os.environ))
    reply = json.loads(out)
    if reply.get("agents") != SHAPE.agents:
        raise harness.BenchError(f"the peer did not run the shape: {out[:300]}")
    theirs = [r for r in factory.api.messages() if r.system.startswith("peer:")]
    return _timing(theirs, started, ended), str(reply["engine"])


def _peer_engine() -> bool:
    """Whether LangGraph can be had by the peer's interpreter (else: plain threads)."""
    probe = subprocess.run(
        [peer_python(), "-c", "import langgraph, anthropic"], capture_output=True, check=False
    )
    return probe.returncode == 0


def run(options: harness.Options) -> harness.Report:
    runs = options.repetitions(full=5, quick=1)
    latency = options.latency
    label, argv = harness.cli_commands()[-1]
    langgraph = _peer_engine()
    loads = [os.getloadavg()]
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    engine = ""
    settings = {**harness.TASK_SETTINGS, "MAX_PARALLEL_AGENTS": str(max(SHAPE.widths))}
    with harness.environment(**settings), harness.scripted_model() as factory:
        factory.api.route(lambda r: r.system.startswith("peer:"), peer_reply(SHAPE))
        # Warm-up, unmeasured: the agents' venv, the sandbox probe's caches, the OS's file cache.
        measure_agentgod(factory, argv)
        measure_peer(factory, not langgraph)
        factory.api.latency = latency
        for index in range(runs):
            order = ("ours", "theirs") if index % 2 == 0 else ("theirs", "ours")
            for which in order:
                if which == "ours":
                    ours.append(measure_agentgod(factory, argv))
                else:
                    timing, engine = measure_peer(factory, not langgraph)
                    theirs.append(timing)
    loads.append(os.getloadavg())

    def med(samples: list[dict[str, float]], key: str) -> float:
        return harness.median([s[key] for s in samples])

    ideal_ours = overhead.ideal_seconds(SHAPE.waves, latency)
    ideal_theirs = (SHAPE.waves + 3) * latency
    over_ours = (med(ours, "busy_seconds") / ideal_ours - 1) * 100
    over_theirs = (med(theirs, "busy_seconds") / ideal_theirs - 1) * 100
    ratio = med(ours, "process_seconds") / med(theirs, "process_seconds")
    at_half = latency == 0.5
    figures = [
        harness.Figure(
            "command: first request -> last reply over ideal",
            over_ours,
            "%",
            TARGET_OVERHEAD if at_half else None,
        ),
        harness.Figure("command: whole process / LangGraph script", ratio, "x", TARGET_RATIO),
        harness.Figure(
            "command: launch -> first request",
            med(ours, "first_request_seconds") * 1000,
            "ms",
            TARGET_FIRST_MS,
        ),
        harness.Figure("peer: first request -> last reply over ideal", over_theirs, "%"),
    ]
    rows: list[list[Any]] = [
        [
            "agentgod --json --no-input",
            harness.show(med(ours, "first_request_seconds"), "s"),
            harness.show(med(ours, "busy_seconds"), "s"),
            harness.show(ideal_ours, "s"),
            harness.show(over_ours, "%"),
            harness.show(med(ours, "process_seconds"), "s"),
            f"{med(ours, 'calls'):g}",
        ],
        [
            f"peer script ({engine})",
            harness.show(med(theirs, "first_request_seconds"), "s"),
            harness.show(med(theirs, "busy_seconds"), "s"),
            harness.show(ideal_theirs, "s"),
            harness.show(over_theirs, "%"),
            harness.show(med(theirs, "process_seconds"), "s"),
            f"{med(theirs, 'calls'):g}",
        ],
    ]
    table = harness.Table(
        f"7. The command as a person runs it, beside a LangGraph script ({SHAPE.label}, "
        f"L = {latency:g} s, median of {runs})",
        ["process", "start->1st req", "1st req->last reply", "ideal", "over", "whole", "calls"],
        rows,
        [
            f"agentgod = {label}: {' '.join(argv)} --json --no-input {TASK!r}",
            f"peer = {peer_python()} bench/peer_langgraph.py; "
            + (
                "LangGraph with the anthropic SDK in its nodes"
                if langgraph
                else "LangGraph could not be imported: the same graph on plain threads with the SDK"
            ),
            "ideal: agentgod (waves + 4) x L (plan, code, waves, merge, judge; its intake call "
            "runs beside the plan); the script writes no code: (waves + 3) x L",
            "load average (1, 5, 15 min) before / after: "
            + " / ".join(", ".join(f"{x:.2f}" for x in load) for load in loads),
        ],
    )
    split_keys = [key for key in ours[0] if key.startswith("split:")]
    split = harness.Table(
        f"7b. Where the command's time goes (ms, median; {SHAPE.label})",
        ["segment", "ms"],
        [[key.removeprefix("split:"), f"{med(ours, key) * 1000:.0f}"] for key in split_keys],
        ["as in table 1b; 'start -> plan' is from process start; 'judge -> return' to exit"],
    )
    data = {
        "runs": runs,
        "latency": latency,
        "task": TASK,
        "engine": engine,
        "ideal_seconds": {"agentgod": ideal_ours, "peer": ideal_theirs},
        "agentgod": ours,
        "peer": theirs,
        "load_average": loads,
    }
    return harness.Report("command", [table, split], figures, data)
