"""Median start-up cost of a no-op agent under each sandbox layer set (issue 6: all < +60 ms).

Run as root on Linux to see every layer: `python bench/sandbox_coldstart.py [--json]`. The uid
layer needs an interpreter that an unprivileged uid can read; when the default one is not,
pass e.g. `--python /usr/bin/python3` (its pids layer is then RLIMIT_NPROC in a user namespace,
not a cgroup). Layers the machine lacks are reported, not measured. `--imports
json,urllib.request` measures a typical agent instead, whose own imports overlap the
bootstrap's. The sets marked "no network" inherit one end of a socketpair, as agents behind the
broker will.
"""

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentgod import sandbox

SETS = {
    "none": (),
    "+landlock": ("landlock",),
    "+seccomp": ("seccomp",),
    "+caps": ("caps",),
    "+pids": ("pids",),
    "+uid": ("uid",),
    "+bwrap": ("bwrap",),
    "all": sandbox.LAYERS,
}
ALL_BUT_PIDS = tuple(layer for layer in sandbox.LAYERS if layer != "pids")
# Measured here only: name -> (layers, whether the agent has no network).
VARIANTS = {
    **{name: (layers, False) for name, layers in SETS.items()},
    "all-pids": (ALL_BUT_PIDS, False),
    "all, no network": (sandbox.LAYERS, True),
    "all-pids, no network": (ALL_BUT_PIDS, True),
}


def prepare(
    python: str, layers: tuple[str, ...], base: Path, *, broker_fd: int | None = None
) -> tuple[sandbox.Launch, Path]:
    """A launch of base/noop.py; with `broker_fd`, one without a network that inherits it."""
    scratch = Path(tempfile.mkdtemp(dir=base))
    launch = sandbox.prepare(
        base / "noop.py",
        python=python,
        scratch=scratch,
        api_url="http://127.0.0.1:9" if broker_fd is None else None,
        broker_fd=broker_fd,
        mode="auto" if layers else "off",
        layers=layers,
    )
    return launch, scratch


def start_once(launch: sandbox.Launch, scratch: Path) -> float:
    """One run, started the way the executor starts agents; returns its wall time."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LC_ALL": "C.UTF-8",
        "MALLOC_ARENA_MAX": "2",
    }
    start = time.perf_counter()
    subprocess.run(
        launch.argv,
        cwd=scratch,
        env=env,
        check=True,
        start_new_session=True,
        input=b'{"task": "", "previous_outputs": {}}',  # what the executor writes
        stdout=subprocess.DEVNULL,
        preexec_fn=launch.preexec,
        pass_fds=launch.pass_fds,
        user=launch.user,
        group=launch.group,
        extra_groups=None if launch.group is None else [],
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter the agents run on")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--imports", default="", help="modules the agent imports, e.g. json,urllib.request"
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    try:
        base.chmod(0o755)  # the unprivileged uid must reach the agent
        source = "".join(f"import {name}\n" for name in filter(None, args.imports.split(",")))
        (base / "noop.py").write_text(source or "pass\n", encoding="utf-8")
        _, broker_end = socket.socketpair()  # the broker's side is never used: agents are no-ops
        end = broker_end.fileno()
        launches = {
            name: prepare(args.python, layers, base, broker_fd=end if networkless else None)
            for name, (layers, networkless) in VARIANTS.items()
        }
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(args.runs):  # round robin, so that a busy moment hits every set alike
            for name, (launch, scratch) in launches.items():
                times[name].append(start_once(launch, scratch))
    finally:
        shutil.rmtree(base)
    medians = {name: statistics.median(runs) * 1000 for name, runs in times.items()}
    results: dict[str, dict[str, Any]] = {
        name: {
            "active": list(launch.layers),
            "skipped": list(launch.skipped),
            "median_ms": round(medians[name], 1),
            "added_ms": round(medians[name] - medians["none"], 1),
        }
        for name, (launch, _) in launches.items()
    }
    if args.json:
        report = {"python": args.python, "runs": args.runs, "imports": args.imports}
        print(json.dumps({**report, "sets": results}, indent=2))
        return
    print(f"{'set':<21} {'median ms':>10} {'added ms':>9}  active layers")
    for name, result in results.items():
        print(
            f"{name:<21} {result['median_ms']:>10} {result['added_ms']:>9}  "
            f"{', '.join(result['active']) or '-'}"
        )
    notes = dict.fromkeys(note for result in results.values() for note in result["skipped"])
    for note in notes:
        print(f"note: {note}")
    agent = f"importing {args.imports}" if args.imports else "no-op"
    print(f"({args.runs} runs each of a {agent} agent, python {args.python})")


if __name__ == "__main__":
    main()
