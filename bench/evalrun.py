"""Benchmark 9 — an eval: 20 cases x 2 arms (single, factory) through `agentgod eval`.

Every model call takes L seconds at the fake API. A factory run of a one-agent task is five
calls on its critical path (plan, one generation, the agent's call, merge, judge); the single
arm is one call. With `--parallel 4` every (case, arm) pair is one of the batch's four slots,
so a perfect scheduler on the same calls packs 20 x 5 L + 20 x 1 L into four slots: 30 L (15 s
at L = 0.5 s). The figure held to its target is the time from the eval's first model request to
its last reply against that ideal: what the eval adds to its runs (the batch's engine, the
gateway's hop, forking each run, scoring each answer, the order the pairs start in). The
command's wall time, start-up and the final report included, is shown beside it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripted import agent_spec, plan

from bench import harness

CASES = 20
PARALLEL = 4
RUN_CALLS = 5
SINGLE_CALLS = 1
TARGET_RATIO = 1.15


def ideal_seconds(cases: int, parallel: int, latency: float) -> float:
    """A perfect scheduler's time for `cases` runs of RUN_CALLS and as many single calls,
    `parallel` at a time: the work divided among the slots (the runs fill whole rounds of
    slots, the single calls the rest, so it packs exactly)."""
    work = cases * (RUN_CALLS + SINGLE_CALLS) * latency
    return max(work / parallel, RUN_CALLS * latency)


def _suite(folder: Path, count: int) -> Path:
    """Cases long enough that no run makes a small-talk check first (as real tasks are)."""
    words = "summarise the topic named in this line in one careful page for a reader"
    path = folder / "suite.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"c{n}",
                    "task": f"benchmark case {n}: {words}",
                    "expect": {"not_contains": "never-in-an-answer"},
                }
            )
            + "\n"
            for n in range(count)
        )
    )
    return path


def _eval(suite: Path) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgod",
            "eval",
            str(suite),
            "--parallel",
            str(PARALLEL),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.monotonic() - started
    if process.returncode != 0:
        raise harness.BenchError(
            f"the eval exited with {process.returncode}: {process.stderr[-800:]}"
        )
    report = json.loads(process.stdout)
    if report.get("complete") != CASES:
        raise harness.BenchError(f"{report.get('complete')} of {CASES} cases were scored")
    return seconds, report


def run(options: harness.Options) -> harness.Report:
    runs = options.repetitions(full=3, quick=1)
    latency = options.latency
    ideal = ideal_seconds(CASES, PARALLEL, latency)
    measured: list[dict[str, float]] = []
    settings = {**harness.TASK_SETTINGS, "SANDBOX": options.sandbox[-1]}
    with harness.environment(**settings), harness.scripted_model(latency) as factory:
        factory.plans = [plan(agent_spec("solver"), complexity="simple")]
        folder = Path(tempfile.mkdtemp(prefix="agentgod-bench-eval-"))
        suite = _suite(folder, CASES)
        for _ in range(runs):
            before = len(factory.api.messages())
            wall, report = _eval(suite)
            calls = factory.api.messages()[before:]
            expected = CASES * (RUN_CALLS + SINGLE_CALLS)
            if len(calls) != expected:
                raise harness.BenchError(f"{len(calls)} model calls, not {expected}")
            span = max(r.replied + 0.0 for r in calls) - min(r.arrived for r in calls)
            measured.append({"wall": wall, "span": span, "calls": len(calls)})
            del report
    span = harness.median([m["span"] for m in measured])
    wall = harness.median([m["wall"] for m in measured])
    ratio = span / ideal
    figure = harness.Figure(
        f"eval, {CASES} cases x 2 arms, --parallel {PARALLEL}: first request to end / ideal",
        round(ratio, 3),
        "x",
        TARGET_RATIO,
    )
    table = harness.Table(
        f"9. An eval: {CASES} cases x 2 arms (single, factory), {PARALLEL} at a time "
        f"(median of {runs})",
        ["measure", "value", "target", ""],
        [
            ["ideal (20 x (5 + 1) calls x L / 4)", f"{ideal:.3f} s", "", ""],
            ["first request to last reply", f"{span:.3f} s", "", ""],
            ["  / ideal", f"{ratio:.3f}x", figure.shown_target(), figure.verdict],
            ["command wall time (start-up and report included)", f"{wall:.3f} s", "", ""],
            ["one case after another (20 x 6 calls x L)", f"{CASES * 6 * latency:.1f} s", "", ""],
        ],
        [f"L = {latency:g} s per model call"],
    )
    return harness.Report("eval", [table], [figure], {"ideal_seconds": ideal, "runs": measured})
