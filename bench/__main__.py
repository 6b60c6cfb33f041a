"""`python -m bench`: every benchmark, a table each, then every target with PASS or MISS.

Numbers, not assertions: a MISS still exits 0, so a slow machine gets its report. A benchmark
that cannot measure (the product failed the scenario) is reported, the rest still run, and the
exit status is 1. Progress goes to stderr, so `--json` leaves stdout to the one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from bench import (
    attachments_scale,
    batchrun,
    calls,
    cli_start,
    coldstart,
    command,
    evalrun,
    first_request,
    harness,
    history_scale,
    library_scale,
    memory,
    overhead,
    processes,
)

BENCHMARKS: dict[str, Callable[[harness.Options], harness.Report]] = {
    "overhead": overhead.run,
    "command": command.run,
    "coldstart": coldstart.run,
    "cli": cli_start.run,
    "first_request": first_request.run,
    "calls": calls.run,
    "memory": memory.run,
    "processes": processes.run,
    "batch": batchrun.run,
    "history": history_scale.run,
    "library": library_scale.run,
    "attachments": attachments_scale.run,
    "eval": evalrun.run,
}


def _names(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    wrong = [name for name in chosen if name not in allowed]
    if wrong or not chosen:
        raise argparse.ArgumentTypeError(f"{what} must be some of {', '.join(allowed)}")
    return chosen


def parse(argv: list[str]) -> tuple[harness.Options, tuple[str, ...], bool]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--latency", type=float, default=0.5, help="seconds per model call (default 0.5)"
    )
    parser.add_argument(
        "--sandbox",
        type=lambda text: _names(text, ("off", "auto", "strict"), "--sandbox"),
        default=("off", "auto"),
        help="SANDBOX modes for the overhead benchmark, comma-separated (default off,auto); "
        "the memory benchmark uses the last",
    )
    parser.add_argument("--runs", type=int, help="repetitions for every benchmark")
    parser.add_argument(
        "--only",
        type=lambda text: _names(text, tuple(BENCHMARKS), "--only"),
        default=tuple(BENCHMARKS),
        help="benchmarks to run, comma-separated: " + ", ".join(BENCHMARKS),
    )
    args = parser.parse_args(argv)
    if args.latency <= 0:
        parser.error("--latency must be positive")
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")
    options = harness.Options(args.quick, args.latency, args.sandbox, args.runs)
    return options, args.only, args.json


def summary(reports: list[harness.Report]) -> harness.Table:
    rows = [
        [figure.name, figure.shown(), figure.shown_target(), figure.verdict]
        for report in reports
        for figure in report.figures
        if figure.target is not None
    ]
    missed = sum(row[-1] == "MISS" for row in rows)
    return harness.Table(
        f"Targets: {len(rows) - missed} PASS, {missed} MISS",
        ["figure", "value", "target", ""],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    options, selected, as_json = parse(sys.argv[1:] if argv is None else argv)
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    started = time.monotonic()
    reports: list[harness.Report] = []
    errors: dict[str, str] = {}
    if not as_json:
        print(
            f"AgentGOD benchmarks — {machine['cpus']} CPUs, Python {machine['python']}, "
            f"load average {machine['load_average']} (1, 5, 15 min) at the start"
        )
        print(f"options: {asdict(options)}\n")
    for name in selected:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        began = time.monotonic()
        try:
            report = BENCHMARKS[name](options)
        except harness.BenchError as error:
            errors[name] = str(error)
            print(f"bench: {name} could not measure: {error}", file=sys.stderr, flush=True)
            continue
        report.seconds = time.monotonic() - began
        reports.append(report)
        if not as_json:
            for table in report.tables:
                print(harness.render(table) + "\n", flush=True)
    total = time.monotonic() - started
    targets = summary(reports)
    if as_json:
        result: dict[str, Any] = {
            "machine": machine,
            "options": asdict(options),
            "seconds": round(total, 1),
            "benchmarks": {report.name: report.as_json() for report in reports},
            "targets": [f.as_json() for r in reports for f in r.figures if f.target is not None],
            "errors": errors,
        }
        print(json.dumps(result, indent=2, default=str))
    else:
        print(harness.render(targets))
        for name, message in errors.items():
            print(f"ERROR {name}: {message}")
        print(f"\n{len(reports)} benchmarks in {total:.0f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
