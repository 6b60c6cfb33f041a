"""Benchmark 6 — peak memory of the main process during the 12-agent run.

A fresh interpreter imports the orchestrator, loads the SDK, and runs the 12-agent, 3-wave plan
against the fake API, which runs here in the parent so that its own memory is not counted. The
child reports its RSS high-water mark (getrusage(RUSAGE_SELF).ru_maxrss) and its resident size
after each step, so the table also says what the memory goes to. MB are 10^6 bytes, the stricter
reading of the target. The agents are separate processes and not counted (their RUSAGE_CHILDREN
peak would only show the parent's pages that each fork shares for a moment before exec).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from bench import IMPORT_ROOT, harness
from bench.overhead import SHAPES, TARGET_SHAPE, plan_for

TARGET_MB = 150.0
CHILD = """
import json, os, resource, sys

sys.path.insert(0, sys.argv[1])


def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


steps = {"interpreter": resident()}
from agentgod import orchestrator
steps["+ product modules"] = resident()
from agentgod import config
result = orchestrator.handle_task("benchmark task: peak memory", settings=config.settings())
steps["after the run"] = resident()
print(json.dumps({
    "steps": steps,
    "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6,
    "failed": [agent.name for agent in result.agents if not agent.ok],
}))
"""


def run(options: harness.Options) -> harness.Report:
    runs = options.repetitions(full=3, quick=1)
    mode = options.sandbox[-1]
    shape = next(shape for shape in SHAPES if shape.label == TARGET_SHAPE)
    settings = {
        **harness.TASK_SETTINGS,
        "SANDBOX": mode,
        "MAX_PARALLEL_AGENTS": str(max(shape.widths)),
    }
    reports: list[dict[str, Any]] = []
    with harness.environment(**settings), harness.scripted_model(options.latency) as factory:
        factory.plans = [plan_for(shape)]
        for _ in range(runs):
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(IMPORT_ROOT)], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise harness.BenchError(f"memory run failed: {done.stderr.strip()[-500:]}")
            report = json.loads(done.stdout.strip().splitlines()[-1])
            if report["failed"]:
                raise harness.BenchError(f"memory run: agents failed: {report['failed']}")
            reports.append(report)
    peak = harness.median([report["peak"] for report in reports])
    figure = harness.Figure(f"main-process peak RSS ({TARGET_SHAPE})", peak, "MB", TARGET_MB)
    steps = {
        step: harness.median([report["steps"][step] for report in reports])
        for step in reports[0]["steps"]
    }
    rows: list[list[Any]] = [
        [f"resident {step}", f"{mb:.1f}", "", ""] for step, mb in steps.items()
    ]
    rows.append(["peak (ru_maxrss)", f"{peak:.1f}", figure.shown_target(), figure.verdict])
    table = harness.Table(
        f"6. Peak memory, main process, {TARGET_SHAPE} (MB = 10^6 bytes, median of {runs})",
        ["measure", "MB", "target", ""],
        rows,
        [f"SANDBOX={mode}, L = {options.latency:g} s per model call"],
    )
    data = {"runs": runs, "sandbox": mode, "steps_mb": steps, "peak_mb": peak, "all": reports}
    return harness.Report("memory", [table], [figure], data)
