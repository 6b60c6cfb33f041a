"""Benchmark 7 — agent processes alive, and the parent's CPU while agents wait (issue 30, item 5).

Both through the command a person runs (`python -m agentgod --json TASK`, this checkout), against
the fake API here in the bench's own process, so nothing the fake does is counted.

Processes alive: while the command runs a plan, a sampler in this process counts the command's
agent processes every few milliseconds — its direct children whose command line names the home's
`generated_agents/` (one per agent: the interpreter, or bubblewrap around it). The target is
MAX_PARALLEL_AGENTS at work plus a standby margin of as many again (at most STANDBY_CAP): one
process ready for each agent that can start next, so the next wave never waits for start-up.

Parent CPU while agents wait: every agent's model call is held at the fake until the window is
over; once all of them have arrived (and a moment has passed for the command to settle), the CPU
time of the command's threads is read from /proc before and after the window. Measured with one
agent waiting and with eight: what the eight cost beyond the one, per extra agent, is what a
polling loop per agent would show.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fakeapi import Request
from scripted import Factory

from bench import harness
from bench.overhead import Shape, plan_for

STANDBY_CAP = 4
"""The standby margin is MAX_PARALLEL_AGENTS, but never more than this many processes."""
COUNTED = (
    ("8 independent", Shape("8 independent", (8,), independent=True), 1),
    ("8 independent", Shape("8 independent", (8,), independent=True), 2),
    ("12 in 3 waves", Shape("12 in 3 waves", (4, 4, 4)), 4),
)
"""(plan, its shape, MAX_PARALLEL_AGENTS) for the processes-alive rows."""
WAITING = (1, 8)
"""How many agents wait at once in the CPU rows."""
TARGET_CPU_PER_AGENT_MS = 0.1
"""CPU ms per second that one more waiting agent may add to the parent: effectively nothing."""
TARGET_CPU_MS = 1.0
"""CPU ms per second of the whole parent while eight agents wait (0.1 % of a core): a run that
only waits should sleep."""
SAMPLE_SECONDS = 0.005
SETTLE_SECONDS = 0.5
"""After the last held call arrives: the command's own bookkeeping of the start is over."""
RUN_TIMEOUT = 120.0


def process_target(parallel: int) -> int:
    """MAX_PARALLEL_AGENTS at work, plus one ready for each that can start next (capped)."""
    return parallel + min(parallel, STANDBY_CAP)


def _command(task: str) -> list[str]:
    return [sys.executable, "-m", "agentgod", "--json", "--no-input", task]


def _children(pid: int) -> list[int]:
    """The direct children of `pid`, over all its threads (each thread lists its own)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as listing:
                found.extend(int(child) for child in listing.read().split())
        except OSError:
            continue
    return found


class Sampler:
    """Counts a process's agent children every SAMPLE_SECONDS, on a thread, until stopped."""

    def __init__(self, pid: int, marker: str) -> None:
        self.pid = pid
        self.marker = marker.encode()
        self.peak = 0
        self.samples = 0
        self._agents: set[int] = set()
        """Children already seen to be agents (their command line names the agents' folder)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _is_agent(self, pid: int) -> bool:
        if pid in self._agents:
            return True
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                found = self.marker in cmdline.read()
        except OSError:
            return False
        if found:  # a child between fork and exec still shows the command's own line
            self._agents.add(pid)
        return found

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            alive = sum(self._is_agent(child) for child in _children(self.pid))
            self.peak = max(self.peak, alive)
            self.samples += 1


def _cpu_seconds(pid: int) -> dict[int, float]:
    """CPU time of each of `pid`'s threads, in seconds (schedstat: nanoseconds on a CPU)."""
    times: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with (
            contextlib.suppress(OSError, ValueError, IndexError),
            open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as stat,
        ):
            times[int(tid)] = int(stat.read().split()[0]) / 1e9
    return times


def _finish(process: subprocess.Popen[bytes], log: Path, what: str) -> dict[str, Any]:
    """Wait for the command; its --json reply, or BenchError with the reason it failed."""
    try:
        stdout, _ = process.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise harness.BenchError(
            f"{what}: the command did not finish in {RUN_TIMEOUT:g} s"
        ) from None
    try:
        reply: dict[str, Any] = json.loads(stdout.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError):
        reply = {}
    failed = [a["name"] for a in reply.get("agents", []) if not a.get("ok")]
    if process.returncode != 0 or not reply.get("ok") or failed:
        tail = log.read_text(encoding="utf-8", errors="replace").strip()[-400:]
        raise harness.BenchError(f"{what}: exit {process.returncode}, failed {failed}: {tail}")
    return reply


def count_processes(factory: Factory, home: Path, shape: Shape, parallel: int) -> dict[str, Any]:
    """One command on `shape` with MAX_PARALLEL_AGENTS=`parallel`: the peak of agents alive."""
    factory.plans = [plan_for(shape)]
    os.environ["MAX_PARALLEL_AGENTS"] = str(parallel)
    log = home / f"count-{shape.widths}-{parallel}.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            _command(f"benchmark task: {shape.label}"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        with Sampler(process.pid, str(home / "generated_agents")) as sampler:
            _finish(process, log, f"{shape.label}, MAX_PARALLEL_AGENTS={parallel}")
    return {"peak": sampler.peak, "samples": sampler.samples}


def parent_cpu(factory: Factory, home: Path, waiting: int, window: float) -> float:
    """CPU ms per second the command spends while `waiting` agents wait for the model."""
    factory.plans = [plan_for(Shape(f"{waiting} waiting", (waiting,), independent=True))]
    os.environ["MAX_PARALLEL_AGENTS"] = str(max(waiting, 1))
    release = threading.Event()
    arrived: list[Request] = []

    def held(name: str, request: Request) -> str:
        arrived.append(request)
        release.wait(RUN_TIMEOUT)
        return f"result from {name}"

    factory.agent_reply = held
    log = home / f"cpu-{waiting}.log"
    try:
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                _command(f"benchmark task: {waiting} agents wait"),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
            try:
                deadline = time.monotonic() + RUN_TIMEOUT
                while len(arrived) < waiting:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise harness.BenchError(f"{waiting} waiting: the agents never all called")
                    time.sleep(0.01)
                time.sleep(SETTLE_SECONDS)
                before = _cpu_seconds(process.pid)
                began = time.monotonic()
                time.sleep(window)
                after = _cpu_seconds(process.pid)
                elapsed = time.monotonic() - began
            finally:
                release.set()
            _finish(process, log, f"{waiting} agents waiting")
    finally:
        factory.agent_reply = lambda name, request: f"result from {name}"
    spent = sum(seconds - before.get(tid, 0.0) for tid, seconds in after.items())
    return spent / elapsed * 1000


def run(options: harness.Options) -> harness.Report:
    runs = options.repetitions(full=3, quick=1)
    window = 2.0 if options.quick else 4.0
    mode = options.sandbox[-1]
    settings = {**harness.TASK_SETTINGS, "SANDBOX": mode}
    counts: dict[str, list[int]] = {}
    cpu: dict[int, list[float]] = {n: [] for n in WAITING}
    with (
        harness.environment(**settings) as home,
        harness.scripted_model(options.latency) as factory,
    ):
        for _ in range(runs):
            for label, shape, parallel in COUNTED:
                key = f"{label}, MAX_PARALLEL_AGENTS={parallel}"
                found = count_processes(factory, home, shape, parallel)
                counts.setdefault(key, []).append(found["peak"])
        factory.api.latency = 0.05  # only the agents' calls matter here; they are held
        for _ in range(runs):
            for waiting in WAITING:  # interleaved, so a busy moment hits both alike
                cpu[waiting].append(parent_cpu(factory, home, waiting, window))
    figures: list[harness.Figure] = []
    count_rows: list[list[Any]] = []
    for label, shape, parallel in COUNTED:
        key = f"{label}, MAX_PARALLEL_AGENTS={parallel}"
        peak = max(counts[key])
        figure = harness.Figure(f"agent processes alive, {key}", peak, "", process_target(parallel))
        figures.append(figure)
        count_rows.append(
            [label, parallel, shape.agents, peak, figure.shown_target(), figure.verdict]
        )
    median = {n: harness.median(values) for n, values in cpu.items()}
    low, high = WAITING
    growth = (median[high] - median[low]) / (high - low)
    whole = harness.Figure(
        f"parent CPU while {high} agents wait", median[high], "ms/s", TARGET_CPU_MS
    )
    per_agent = harness.Figure(
        "parent CPU per extra waiting agent", growth, "ms/s", TARGET_CPU_PER_AGENT_MS
    )
    figures += [whole, per_agent]
    processes = harness.Table(
        f"7. Agent processes alive at once (peak, highest of {runs}; SANDBOX={mode})",
        ["plan", "MAX_PARALLEL_AGENTS", "agents", "peak alive", "target", ""],
        count_rows,
        [
            f"L = {options.latency:g} s per model call; sampled every "
            f"{SAMPLE_SECONDS * 1000:g} ms from outside the command",
            f"target = MAX_PARALLEL_AGENTS + min(MAX_PARALLEL_AGENTS, {STANDBY_CAP})",
        ],
    )
    waiting_rows: list[list[Any]] = [
        [n, f"{median[n]:.2f}", " ".join(f"{v:.2f}" for v in cpu[n])] for n in WAITING
    ]
    waiting_rows.append(
        [
            f"per extra agent ({low} -> {high})",
            f"{growth:.2f}",
            f"{per_agent.shown_target()} {per_agent.verdict}",
        ]
    )
    waiting_table = harness.Table(
        f"7b. The command's CPU while agents wait for the model (ms per second, median of {runs})",
        ["agents waiting", "CPU ms/s", "all runs"],
        waiting_rows,
        [
            f"window {window:g} s, after every agent's call has arrived; SANDBOX={mode}",
            f"{whole.name}: {whole.shown()} ({whole.shown_target()}) {whole.verdict}",
        ],
    )
    data = {
        "runs": runs,
        "sandbox": mode,
        "peaks": counts,
        "cpu_ms_per_second": cpu,
        "window_seconds": window,
    }
    return harness.Report("processes", [processes, waiting_table], figures, data)
