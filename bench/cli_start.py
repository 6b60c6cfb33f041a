"""Benchmark 3 — CLI start: `agentgod --version`, `--help` and `history` as whole processes, and
what a one-shot run imports before its first model request.

The interpreter's own start (`python -c pass`) is timed alongside as the floor nothing can beat.
The import breakdown runs `python -X importtime` on the console script's entry point with a task,
against the fake API, and stops the process at its first request; each module's own time is
summed by top-level package, which names the package to blame.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any

from scripted import agent_spec, plan

from bench import harness

TARGETS_MS = {"--version": 100.0, "--help": 150.0, "history": 100.0}
"""The issue-25 targets: --version and history at most 100 ms, --help at most 150 ms."""
ONE_SHOT_TASK = "list the main facts about sea otters and summarise them in a short list for me"
"""Longer than the small-talk check's limit, so the first request is the planner's."""
ONE_SHOT = "import sys; from agentgod.main import cli_main; sys.exit(cli_main())"
"""The console script's entry point, run under -X importtime."""


def heaviest_imports(log: str, top: int = 10) -> list[tuple[str, float, int]]:
    """(package, milliseconds of its modules' own import time, module count), heaviest first."""
    self_us: dict[str, int] = defaultdict(int)
    modules: dict[str, int] = defaultdict(int)
    for line in log.splitlines():
        if not line.startswith("import time:"):
            continue
        own, _, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if not own.isdigit():  # the header line
            continue
        package = name.split(".")[0]
        self_us[package] += int(own)
        modules[package] += 1
    ranked = sorted(self_us, key=lambda package: -self_us[package])[:top]
    return [(package, self_us[package] / 1000, modules[package]) for package in ranked]


def one_shot_imports() -> tuple[float, list[tuple[str, float, int]], float]:
    """Run a one-shot task under -X importtime until its first request.

    Returns the seconds to that request, the heaviest packages, and the total import time (ms).
    """
    settings = {**harness.TASK_SETTINGS, "SANDBOX": "off"}
    with harness.environment(**settings) as home, harness.scripted_model() as factory:
        factory.plans = [plan(agent_spec("only_agent"))]
        log = home / "importtime.log"
        argv = [sys.executable, "-X", "importtime", "-c", ONE_SHOT, "--no-input", ONE_SHOT_TASK]
        seconds = harness.until_first_request(argv, factory.api, stderr=log)
        text = log.read_text(encoding="utf-8", errors="replace")
    everything = heaviest_imports(text, top=10_000)
    return seconds, everything[:10], sum(ms for _, ms, _ in everything)


def run(options: harness.Options) -> harness.Report:
    runs = options.repetitions(full=15, quick=5)
    commands = [*harness.cli_commands(), ("python -c pass (floor)", [sys.executable, "-c", "pass"])]
    rows: list[list[Any]] = []
    figures: list[harness.Figure] = []
    data: dict[str, Any] = {"runs": runs, "commands": {}}
    measured = [
        (label, flag, [*argv, flag] if flag else argv)
        for label, argv in commands
        for flag in ([""] if label.endswith("(floor)") else list(TARGETS_MS))
    ]
    times: dict[tuple[str, str], list[float]] = {(label, flag): [] for label, flag, _ in measured}
    with harness.environment() as home:
        harness.time_process(measured[0][2], cwd=home)  # unmeasured: the OS's file cache
        for _ in range(runs):  # round robin, so a busy moment hits every command alike
            for label, flag, command in measured:
                times[label, flag].append(harness.time_process(command, cwd=home) * 1000)
    for label, flag, command in measured:
        figure = harness.Figure(
            f"{label} {flag}".strip(),
            harness.median(times[label, flag]),
            "ms",
            TARGETS_MS.get(flag),
        )
        figures += [figure] if figure.target is not None else []
        data["commands"][figure.name] = {"argv": command, "median_ms": figure.value}
        rows.append([label, flag or "-", figure.shown(), figure.shown_target(), figure.verdict])
    notes = [f"{label}: {' '.join(argv)}" for label, argv in commands]
    timing = harness.Table(
        f"3. CLI start (whole process, median of {runs})",
        ["command", "flag", "median", "target", ""],
        rows,
        notes,
    )
    seconds, heaviest, total = one_shot_imports()
    breakdown = harness.Table(
        "3b. Heaviest imports of a one-shot run before its first model request (own time summed"
        " by package)",
        ["package", "ms", "modules"],
        [[package, f"{ms:.1f}", count] for package, ms, count in heaviest],
        [
            f"all imports: {total:.0f} ms of own time; first request {seconds * 1000:.0f} ms "
            "after start under -X importtime (which slows imports down)",
            "the road to the model needs no SDK (wire.py speaks HTTP itself), so `anthropic` "
            "is not among them",
        ],
    )
    data["one_shot_imports"] = {
        "first_request_seconds": seconds,
        "total_import_ms": total,
        "heaviest": [{"package": p, "ms": ms, "modules": n} for p, ms, n in heaviest],
    }
    return harness.Report("cli", [timing, breakdown], figures, data)
