"""Benchmark 8 — a batch: many one-agent tasks through `agentgod batch`, and its memory.

Twelve one-agent tasks with `--parallel 4`, every model call L seconds at the fake API: each run
is five calls on its critical path (plan, one generation, the agent's call, merge, judge), so a
perfect scheduler finishes in ceil(12 / 4) x 5 x L. The figure held to its target is the time
from the batch's first model request to its last reply against that ideal: what the batch adds
to its runs (the gateway's hop, forking each run, waiting for a free slot). The command's wall
time, start-up included (its imports and the fork server's), is shown beside it.

Then a batch of 100 tasks at a small latency, with the parent's resident memory read from /proc
as its tasks finish: the parent must not grow with every finished task (the slope over the last
four fifths of the batch, in kB per task).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripted import agent_spec, plan

from bench import harness

TASKS = 12
PARALLEL = 4
CALLS_PER_RUN = 5
TARGET_RATIO = 1.15
MEMORY_TASKS = 100
MEMORY_LATENCY = 0.02
TARGET_KB_PER_TASK = 20.0
"""A flat parent: less than this per finished task (allocator noise, not a leak)."""


def ideal_seconds(tasks: int, parallel: int, latency: float) -> float:
    """The fastest any scheduler could run `tasks` one-agent runs `parallel` at a time."""
    rounds = -(-tasks // parallel)
    return rounds * CALLS_PER_RUN * latency


def _tasks(count: int) -> str:
    """Tasks long enough that no run makes a small-talk check first (as real tasks are)."""
    words = "summarise the topic named in this line in one page"
    return "".join(
        json.dumps({"id": f"t{n}", "task": f"benchmark task {n}: {words}"}) + "\n"
        for n in range(count)
    )


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _batch(
    count: int, *, watch_memory: bool = False
) -> tuple[float, list[str], list[tuple[int, int]]]:
    """Run `agentgod batch -` over `count` tasks; its wall time, output lines and, when asked,
    (finished tasks, parent RSS kB) samples taken as lines arrive."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "agentgod", "batch", "-", "--parallel", str(PARALLEL)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(_tasks(count))
    process.stdin.close()
    lines: list[str] = []
    samples: list[tuple[int, int]] = []
    for line in process.stdout:
        lines.append(line)
        if watch_memory:
            rss = _rss_kb(process.pid)
            if rss is not None:
                samples.append((len(lines), rss))
    process.wait()
    seconds = time.monotonic() - started
    if process.returncode != 0:
        detail = process.stderr.read()[-800:] if process.stderr else ""
        raise harness.BenchError(f"the batch exited with {process.returncode}: {detail}")
    return seconds, lines, samples


def _check(lines: list[str], count: int) -> None:
    rows = [json.loads(line) for line in lines]
    done = [row for row in rows if row.get("type") == "task" and row.get("ok")]
    if len(done) != count:
        failed = [row.get("status") for row in rows if row.get("type") == "task" and not row["ok"]]
        raise harness.BenchError(f"{len(done)} of {count} tasks answered; the others: {failed}")


def run(options: harness.Options) -> harness.Report:
    runs = options.repetitions(full=3, quick=1)
    latency = options.latency
    ideal = ideal_seconds(TASKS, PARALLEL, latency)
    measured: list[dict[str, float]] = []
    settings = {**harness.TASK_SETTINGS, "SANDBOX": options.sandbox[-1]}
    with harness.environment(**settings), harness.scripted_model(latency) as factory:
        factory.plans = [plan(agent_spec("solver"), complexity="simple")]
        for _ in range(runs):
            before = len(factory.api.messages())
            wall, lines, _ = _batch(TASKS)
            _check(lines, TASKS)
            calls = factory.api.messages()[before:]
            span = max(r.replied + 0.0 for r in calls) - min(r.arrived for r in calls)
            measured.append({"wall": wall, "span": span, "calls": len(calls)})
    with harness.environment(**settings), harness.scripted_model(MEMORY_LATENCY) as factory:
        factory.plans = [plan(agent_spec("solver"), complexity="simple")]
        _, lines, samples = _batch(MEMORY_TASKS, watch_memory=True)
        _check(lines, MEMORY_TASKS)
    span = harness.median([m["span"] for m in measured])
    wall = harness.median([m["wall"] for m in measured])
    ratio = span / ideal
    slope = _slope(samples)
    figures = [
        harness.Figure(
            f"batch, {TASKS} one-agent tasks, --parallel {PARALLEL}: first request to end / ideal",
            round(ratio, 3),
            "x",
            TARGET_RATIO,
        ),
        harness.Figure(
            f"batch parent memory growth over {MEMORY_TASKS} tasks",
            round(slope, 2),
            "kB/task",
            TARGET_KB_PER_TASK,
        ),
    ]
    first = samples[0][1] / 1000 if samples else None
    last = samples[-1][1] / 1000 if samples else None
    table = harness.Table(
        f"8. A batch: {TASKS} one-agent tasks, {PARALLEL} at a time (median of {runs})",
        ["measure", "value", "target", ""],
        [
            ["ideal (ceil(12/4) x 5 calls x L)", f"{ideal:.3f} s", "", ""],
            ["first request to last reply", f"{span:.3f} s", "", ""],
            ["  / ideal", f"{ratio:.3f}x", figures[0].shown_target(), figures[0].verdict],
            ["command wall time (start-up included)", f"{wall:.3f} s", "", ""],
            [
                f"parent RSS, {MEMORY_TASKS} tasks: first / last line",
                f"{first} / {last} MB",
                "",
                "",
            ],
            [
                "  growth over the last 4/5",
                f"{slope:.2f} kB/task",
                figures[1].shown_target(),
                figures[1].verdict,
            ],
        ],
        [f"L = {latency:g} s per model call; the memory batch at L = {MEMORY_LATENCY:g} s"],
    )
    data: dict[str, Any] = {
        "ideal_seconds": ideal,
        "runs": measured,
        "memory_samples": samples,
        "slope_kb_per_task": slope,
    }
    return harness.Report("batch", [table], figures, data)


def _slope(samples: list[tuple[int, int]]) -> float:
    """kB per finished task over the last four fifths (least squares), from (tasks, kB)."""
    tail = [s for s in samples if s[0] >= len(samples) // 5]
    if len(tail) < 2:
        return 0.0
    xs = [float(s[0]) for s in tail]
    ys = [float(s[1]) for s in tail]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
