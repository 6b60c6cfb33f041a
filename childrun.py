"""childrun.py — one run of a batch as a child process: the real `agentgod --json --no-input`.

A batch's unit is a whole run, run exactly as a person's `agentgod --json --no-input` runs it
(sandbox, broker, records): a child process, so runs are isolated from each other and from the
batch, which holds the key. `Job` says what to run (the command's arguments, its environment on
top of the batch's clean one, its folder); `JobResult` is what came back (the exit code, the
one JSON object, the end of stderr).

Starting `agentgod` costs two seconds of CPU in imports, which on a small machine would cost a
batch more than its runs do; so the local engine starts one *fork server*
(`python -m agentgod.forkserver`) that imports the product once, without the key, and forks a
fresh process per run, which then runs the command's own entry point with the run's arguments
and environment (`ForkServer`). Where fork is not available the command is started as it is
(`spawn`). The environment a child gets never holds the real key (`child_env`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

STDERR_TAIL = 4000
"""How much of a child's stderr is kept to explain a failure."""
KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
"""What a child's environment must never carry from the batch's: the real credentials."""
BATCH_ONLY = ("BUDGET_USD",)
"""The batch's own settings, not each run's: its budget binds the batch (at the gateway); a
run's own cap is the --budget of its line. Each is set empty in a run's environment, which
reads as unset and wins over the home's `.env`, where the batch may have found it."""


@dataclass(frozen=True)
class Job:
    """One run to start: `agentgod ARGS`, in `cwd`, with `env` on top of the base environment."""

    run_id: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str

    @property
    def retries(self) -> str | None:
        """The run this job retries (its command line ends `retry RUN`), or None."""
        args = self.args
        return args[-1] if len(args) >= 2 and args[-2] == "retry" else None


@dataclass
class JobResult:
    """How the run ended: its exit code, the JSON object it printed (None if none), stderr's end."""

    exit_code: int
    reply: dict[str, Any] | None
    stderr: str
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
    """What an engine brings back besides (a Ray worker: the run's records and artifacts)."""


class RunLost(RuntimeError):
    """The process or machine running a run died, and took the run's record with it (a Ray
    worker that crashed, its node gone): the run crashed, and all that is known of it is what
    the gateway billed for it. The message says what the engine saw, for a person.
    `interrupted`: it was stopped (Ctrl-C) and did not hand its record back in time, so it
    ended as an interrupted run rather than a crashed one."""

    def __init__(self, message: str, *, interrupted: bool = False) -> None:
        super().__init__(message)
        self.interrupted = interrupted


def command() -> list[str]:
    """How the product is started: this interpreter, this package."""
    return [sys.executable, "-m", "agentgod"]


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every child starts from: the batch's own, without the real key."""
    env = dict(os.environ if base is None else base)
    for name in KEY_VARIABLES:
        env.pop(name, None)
    env.update(dict.fromkeys(BATCH_ONLY, ""))
    return env


def parse_reply(stdout: str) -> dict[str, Any] | None:
    """The run's one JSON object (its last line that is one), or None."""
    for line in reversed(stdout.strip().splitlines()):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    return None


def _tail(text: str) -> str:
    return text[-STDERR_TAIL:]


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the code, or 128 + the signal that ended it."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


# ---- spawn: the command as it is ---------------------------------------------------------------


class Spawner:
    """Starts each run as `python -m agentgod ARGS`; `interrupt` sends SIGINT to those running.

    With `die_with_parent` each run is killed by the kernel when the thread that started it
    dies (a Ray worker killed outright): a run must not go on spending without anyone to hand
    its answer to, nor keep using a home that will be swept as its owner's leftovers.
    """

    def __init__(self, base_env: Mapping[str, str], *, die_with_parent: bool = False) -> None:
        self._base = dict(base_env)
        self._running: dict[int, subprocess.Popen[str]] = {}
        self._lock = threading.Lock()
        self._die_with_parent = die_with_parent

    def run(self, job: Job) -> JobResult:
        from agentgod import signals

        started = time.monotonic()
        guard = None
        if self._die_with_parent:
            signals.prctl()  # looked up here: the child must not load a library before exec
            guard = functools.partial(signals.die_with_parent, os.getpid())
        process = subprocess.Popen(
            [*command(), *job.args],
            cwd=job.cwd,
            env={**self._base, **job.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=guard,
        )
        with self._lock:
            self._running[process.pid] = process
        try:
            out, err = process.communicate()
        finally:
            with self._lock:
                self._running.pop(process.pid, None)
        code = process.returncode if process.returncode >= 0 else 128 - process.returncode
        return JobResult(code, parse_reply(out), _tail(err), time.monotonic() - started)

    def interrupt(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)

    def close(self) -> None:
        """Nothing to stop: every run was waited for."""


# ---- the fork server's client ------------------------------------------------------------------


class ForkServerError(RuntimeError):
    """The fork server could not be started or stopped answering."""


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    pid: int | None = None
    code: int | None = None


class ForkServer:
    """One `python -m agentgod.forkserver` for a batch: a fresh forked process per run.

    Its stdin takes one JSON line per run ({id, args, env, cwd, stdout, stderr}: the child's
    streams go to files in a private folder); its stdout answers {id, pid} when the run has
    started and {id, exit} when it has ended. It ignores Ctrl-C itself (its children get it, as
    the command would); it ends when its stdin closes, once its children have.
    """

    def __init__(self, base_env: Mapping[str, str]) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="agentgod-batch-"))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "agentgod.forkserver"],
            env=dict(base_env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._ids = 0
        self._ready = threading.Event()
        self._failed = False
        self._reader = threading.Thread(target=self._read, name="agentgod-forkserver", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        from agentgod import signals

        signals.shield_from_signals()
        assert self._process.stdout is not None
        for line in self._process.stdout:
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if message.get("ready"):
                    self._ready.set()
                    continue
                with self._lock:
                    pending = self._pending.get(int(message["id"]))
                if pending is None:
                    continue
                if "pid" in message:
                    pending.pid = int(message["pid"])
                if "exit" in message:
                    pending.code = int(message["exit"])
                    pending.done.set()
        with self._lock:  # the server is gone: nobody waits for it forever
            self._failed = True
            for pending in self._pending.values():
                pending.done.set()
        self._ready.set()

    def run(self, job: Job) -> JobResult:
        if not self._ready.wait(120) or self._failed:
            raise ForkServerError("the fork server did not start")
        with self._lock:
            self._ids += 1
            number = self._ids
            pending = self._pending[number] = _Pending()
        out, err = self._folder / f"{number}.out", self._folder / f"{number}.err"
        request = {
            "id": number,
            "args": list(job.args),
            "env": dict(job.env),
            "cwd": job.cwd,
            "stdout": str(out),
            "stderr": str(err),
        }
        started = time.monotonic()
        try:
            self._send(request)
            pending.done.wait()
            if pending.code is None:
                raise ForkServerError("the fork server stopped while a run was going on")
            stdout = _read_text(out)
            stderr = _read_text(err)
        finally:
            with self._lock:
                self._pending.pop(number, None)
            out.unlink(missing_ok=True)
            err.unlink(missing_ok=True)
        return JobResult(
            pending.code, parse_reply(stdout), _tail(stderr), time.monotonic() - started
        )

    def _send(self, request: dict[str, Any]) -> None:
        stdin: IO[str] | None = self._process.stdin
        assert stdin is not None
        with self._lock:
            try:
                stdin.write(json.dumps(request) + "\n")
                stdin.flush()
            except (BrokenPipeError, ValueError):
                raise ForkServerError("the fork server is gone") from None

    def interrupt(self) -> None:
        """SIGINT to every run started: each archives itself as interrupted and ends."""
        with self._lock:
            pids = [p.pid for p in self._pending.values() if p.pid and p.code is None]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)

    def close(self) -> None:
        """End the server once its runs are over; remove the private folder."""
        with contextlib.suppress(OSError, ValueError):
            if self._process.stdin is not None:
                self._process.stdin.close()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        with contextlib.suppress(OSError):
            for leftover in self._folder.iterdir():
                leftover.unlink()
            self._folder.rmdir()


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
