"""The broker's round trip: what one `call_llm` costs an agent when the model costs nothing.

`python -m bench.broker_roundtrip [--runs N]` prints the median (and 90th percentile) of a call's
round trip, measured inside a real agent process (`python -I -S`) that calls
`agent_runtime.call_llm` on its inherited socket, for a 1 KB and a 100 KB prompt; the fake road
answers at once with a reply as large as the prompt. Two servers answer: the broker itself
(validation, ledger, billing) and a bare echo of the same frames, so the difference is what the
broker's checks and bookkeeping add. The broker's pacing (frames per second per agent, a bound
for hostile agents: a real agent's calls are a model call apart) is lifted here, so the figure is
the work of one frame. It prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
from typing import Any

from agentgod import agent_runtime, broker, ledger, models
from bench import IMPORT_ROOT

SIZES = {"1 KB": 1024, "100 KB": 100 * 1024}
WARMUP = 20

CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from agentgod import agent_runtime
prompt = "p" * {size}
times = []
for call in range({warmup} + {runs}):
    started = time.perf_counter_ns()
    agent_runtime.call_llm(prompt, max_tokens=1024)
    times.append(time.perf_counter_ns() - started)
print(json.dumps(times[{warmup}:]))
"""


def fake_send(request: dict[str, Any]) -> dict[str, Any]:
    """The model, free and instant: a reply as large as the prompt."""
    size = len(request["messages"][0]["content"])
    return {
        "content": [{"type": "text", "text": "r" * size}],
        "usage": {"input_tokens": size // 4, "output_tokens": size // 4},
        "stop_reason": "end_turn",
    }


def _echo(sock: socket.socket) -> None:
    """The floor: read a frame, answer one of the same shape, no checks, no bookkeeping."""
    with sock:
        while header := sock.recv(4, socket.MSG_WAITALL):
            frame = json.loads(sock.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL))
            sock.sendall(agent_runtime.encode_frame({"ok": True, **fake_send(frame["request"])}))


def _measure(fd: int, size: int, runs: int) -> list[float]:
    """Microseconds per call, as the agent process saw them."""
    script = CHILD.format(root=str(IMPORT_ROOT), size=size, warmup=WARMUP, runs=runs)
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script],
        env={"PATH": "/usr/bin:/bin", agent_runtime.BROKER_FD_VARIABLE: str(fd)},
        pass_fds=(fd,),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return [nanoseconds / 1000 for nanoseconds in json.loads(done.stdout)]


def through_broker(size: int, runs: int) -> list[float]:
    with broker.Broker(
        fake_send,
        ledger.Usage(),
        price=lambda model: models.price_of(model)[0],
        effort_for_model=models.effort_for_model,
        budget_error=ledger.BudgetExhaustedError,
        pacing=(1e9, 1e9, 1e15, 1e15),
    ) as door:
        channel = door.open_channel("bench", model=models.DEFAULT_MODEL)
        try:
            return _measure(channel.child_fd, size, runs)
        finally:
            channel.close_child_end()


def through_echo(size: int, runs: int) -> list[float]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server = threading.Thread(target=_echo, args=(ours,), daemon=True)
    server.start()
    with theirs:
        return _measure(theirs.fileno(), size, runs)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.broker_roundtrip")
    parser.add_argument("--runs", type=int, default=500, help="calls per row (default 500)")
    runs = parser.parse_args(argv).runs
    print(f"call_llm round trip in an agent process, {runs} calls per row (microseconds)")
    print(f"{'server':<8} {'prompt':>7} {'median':>8} {'p90':>8}")
    for label, size in SIZES.items():
        for server, measure in (("broker", through_broker), ("echo", through_echo)):
            times = sorted(measure(size, runs))
            p90 = times[int(len(times) * 0.9)]
            print(f"{server:<8} {label:>7} {statistics.median(times):>8.0f} {p90:>8.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
