"""executor.py — agent files and agent processes. No model calls here.

Every way an agent can fail — crash, hang, unstartable, silent, a flood of output, a wall of the
sandbox — comes back as an `AgentResult`, never as an exception, so one bad agent can never take the
run down. The child gets a minimal environment, a scratch directory as cwd/HOME/TMPDIR, its own
process group (killed whole on timeout and after exit) and resource limits; sandbox.py adds the
OS-level layers on top, agentvenv.py the interpreter (and packages) they run on.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentgod import config, redact, sandbox
from agentgod.agent_runtime import INPUT_FILES_VARIABLE
from agentgod.agentvenv import agent_python
from agentgod.broker import Channel
from agentgod.kinds import AGENT_NAME, AgentKind
from agentgod.scratch import RunSpace
from agentgod.signals import die_with_parent, prctl

MAX_OUTPUT_BYTES = 16 * 1024 * 1024
"""Stdout beyond this is a runaway agent: it is killed and fails with kind "output_limit"."""
MAX_STDERR_CHARS = 64 * 1024
"""Stderr kept for repair prompts and failure reports (the end matters: tracebacks)."""
EXIT_GRACE_SECONDS = 0.5
"""After the agent exits, how long a leftover holder of its pipes may keep them open."""
_GIB = 1024**3


@dataclass
class AgentResult:
    """The outcome of one agent process."""

    name: str
    ok: bool
    output: str = ""
    """Stdout, UTF-8 decoded with replacement; the agent's answer when ok."""
    error: str = ""
    """Why it failed: stderr (usage lines removed, secrets redacted) or the executor's reason."""
    exit_code: int | None = None
    """The process's exit status; negative for a signal; None when it never started."""
    timed_out: bool = False
    seconds: float = 0.0
    kind: AgentKind = AgentKind.OK
    """ok, crash, timeout, silent, unstartable, output_limit or sandbox."""
    layers: tuple[str, ...] = ()
    """Confinement layers that were active for this process."""


# ---- files -----------------------------------------------------------------------------------


def save_agent_file(
    name: str,
    source: str,
    folder: Path | None = None,
    *,
    settings: config.Settings | None = None,
) -> Path:
    """Write <folder>/<name>.py, refusing any name or folder that could land outside it.

    `folder` is a run's own (scratch.RunSpace.folder), which must exist: a run that is over has
    removed it, and a late write must fail rather than bring it back. Without one, the file goes
    to generated_agents/ itself. `settings` is the run's snapshot (read now when not given).
    """
    if not AGENT_NAME.fullmatch(name):
        raise ValueError(f"unsafe agent name {name!r}")
    root = (settings or config.settings()).agents_dir
    if folder is None:
        root.mkdir(parents=True, exist_ok=True)
        folder = root
    resolved = folder.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise ValueError(f"agent folder {folder} is outside {root}")
    path = resolved / f"{name}.py"
    if path.is_symlink():  # the name is a plain file name: only a link could lead elsewhere
        raise ValueError(f"agent path {path} escapes {folder}")
    temporary = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(source, encoding="utf-8")
    temporary.replace(path)
    return path


# ---- processes -------------------------------------------------------------------------------


def _limits(timeout: float, *, dropped_uid: bool) -> list[tuple[int, int]]:
    """rlimits for the child: memory, CPU, file size, open files, no core dumps.

    RLIMIT_NPROC counts every process and thread of the uid system-wide, so it is set only for
    the sandbox's dedicated uid when the sandbox's own per-agent task count (the pids layer) is
    not up, generously (seccomp already refuses fork); for a normal user it would starve their
    other programs, and root ignores it.
    """
    import resource

    limits = [
        (resource.RLIMIT_AS, 2 * _GIB),
        (resource.RLIMIT_CPU, int(timeout) + 5),
        (resource.RLIMIT_FSIZE, 64 * 1024 * 1024),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_CORE, 0),
    ]
    if dropped_uid:
        limits.append((resource.RLIMIT_NPROC, 1024))
    return limits


def _preexec(limits: list[tuple[int, int]], then: Callable[[], None] | None, parent: int) -> None:
    """Runs in the child between fork and exec: die with the parent, the sandbox's hook, then
    lower the limits.

    Hard limits are lowered too (CPU's one second above the soft one, so SIGXCPU comes first):
    a soft limit alone is a suggestion the agent could lift with one setrlimit call.
    """
    import resource
    import signal as signals

    die_with_parent(parent)
    # Our worker threads block Ctrl-C so the main thread gets it; the agent must not inherit that.
    signals.pthread_sigmask(signals.SIG_SETMASK, set())
    # The sandbox's hook opens a file (its cgroup's), so it runs before RLIMIT_NOFILE comes down:
    # the fork still holds every descriptor of ours until exec closes them, and in a parent with
    # many open a low limit would leave the hook none.
    if then is not None:
        then()
    for which, wanted in limits:
        try:
            _, hard = resource.getrlimit(which)
            soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            ceiling = soft + 1 if which == resource.RLIMIT_CPU else soft
            resource.setrlimit(
                which, (soft, ceiling if hard == resource.RLIM_INFINITY else min(ceiling, hard))
            )
        except (ValueError, OSError):
            pass


def child_environment(
    scratch: Path, *, model: str, door: Channel | None, inputs: Mapping[str, Path] = {}
) -> dict[str, str]:
    """Exactly what an agent needs, and nothing else of ours: no key, no URL, no meter.

    `inputs` ({attachment name: absolute path}) reach the runtime's input_files() as JSON.
    """
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUTF8": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MALLOC_ARENA_MAX": "2",
        "AGENT_MODEL": model,
    }
    if inputs:
        named = {name: str(path) for name, path in inputs.items()}
        env[INPUT_FILES_VARIABLE] = json.dumps(named, ensure_ascii=True)
    if door is not None:
        env.update(door.child_env())
    return env


_live: dict[subprocess.Popen[bytes], Path] = {}
"""Every agent process still running, with its scratch directory."""
_live_lock = threading.Lock()
STOP_WAIT_SECONDS = 5.0
"""How long stop_all waits for a killed agent to be gone before it removes its scratch anyway."""


def stop_all() -> int:
    """Kill every agent process group still running, and remove their scratch (a stop signal).

    Done here, on the stopping thread, rather than left to the workers that ran them: after a
    signal the process exits as soon as the main thread is done, and a worker still on its way
    out would leave the scratch behind. Returns how many were live.
    """
    with _live_lock:
        live = list(_live.items())
    for process, _ in live:
        _kill_group(process)
    for process, scratch in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_WAIT_SECONDS)  # dead, so it can no longer write into its scratch
        shutil.rmtree(scratch, ignore_errors=True)
    return len(live)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the agent's whole process group, grandchildren included."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


@dataclass
class _Streams:
    """What the pump collected from the child's pipes."""

    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    overflow: bool = False
    timed_out: bool = False


def _exit_watch(process: subprocess.Popen[bytes]) -> int | None:
    """A descriptor that becomes readable when `process` ends (a Linux pidfd), or None.

    With one, waiting for an agent costs nothing until something happens; without one (another
    system, an old kernel) the pump looks every POLL_SECONDS. Opened before anything reaps the
    process, so the pid cannot have been reused.
    """
    opener = getattr(os, "pidfd_open", None)
    if opener is None or process.returncode is not None:
        return None
    try:
        descriptor: int = opener(process.pid)
    except OSError:
        return None
    return descriptor


POLL_SECONDS = 0.1
"""Without a pidfd: how often the pump looks whether the agent has ended."""


def _pump(process: subprocess.Popen[bytes], payload: bytes, deadline: float) -> _Streams:
    """Feed stdin and drain stdout/stderr without ever blocking past the deadline.

    A child that never reads stdin, floods stdout, or leaves a grandchild holding its pipes
    cannot stall the parent: every wait is bounded by the deadline or the post-exit grace. An
    agent waiting for the model wakes the parent for nothing: the pump sleeps until its pipes or
    its exit (a pidfd) say something, or the deadline comes.
    """
    streams = _Streams()
    selector = selectors.DefaultSelector()
    assert process.stdin and process.stdout and process.stderr
    pipes = 2
    if payload:
        os.set_blocking(process.stdin.fileno(), False)
        selector.register(process.stdin, selectors.EVENT_WRITE)
        pipes += 1
    else:
        process.stdin.close()
    selector.register(process.stdout, selectors.EVENT_READ, streams.stdout)
    selector.register(process.stderr, selectors.EVENT_READ, streams.stderr)
    ended = _exit_watch(process)
    if ended is not None:
        selector.register(ended, selectors.EVENT_READ)
    sent = 0
    exited_at: float | None = None
    try:
        while pipes:
            now = time.monotonic()
            if exited_at is None and process.poll() is not None:
                exited_at = now
            if now >= deadline:
                streams.timed_out = process.poll() is None
                break
            if exited_at is not None and now - exited_at > EXIT_GRACE_SECONDS:
                break
            wait = deadline - now
            if exited_at is not None:
                wait = min(wait, exited_at + EXIT_GRACE_SECONDS - now)
            elif ended is None:
                wait = min(wait, POLL_SECONDS)
            for key, _ in selector.select(timeout=max(wait, 0.0)):
                if key.fileobj == ended:  # it ended: poll() above reaps it and starts the grace
                    selector.unregister(ended)
                    continue
                if key.fileobj is process.stdin:
                    try:
                        sent += os.write(process.stdin.fileno(), payload[sent : sent + 65536])
                    except BlockingIOError:
                        continue
                    except OSError:  # the child closed stdin: it will not read the rest
                        sent = len(payload)
                    if sent >= len(payload):
                        selector.unregister(process.stdin)
                        process.stdin.close()
                        pipes -= 1
                    continue
                chunk = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                if not chunk:
                    selector.unregister(key.fileobj)
                    pipes -= 1
                    continue
                key.data.extend(chunk)
                if key.data is streams.stderr and len(streams.stderr) > 4 * MAX_STDERR_CHARS:
                    del streams.stderr[: len(streams.stderr) - 2 * MAX_STDERR_CHARS]
                if len(streams.stdout) > MAX_OUTPUT_BYTES:
                    streams.overflow = True
                    return streams
    finally:
        selector.close()
        if ended is not None:
            os.close(ended)
    return streams


def _stopped_by_sandbox(stderr: str, exit_code: int) -> bool:
    """The bootstrap names the layer under the traceback; 125 means a wall could not go up."""
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    killed_by_seccomp = exit_code == -signal.SIGSYS
    return (
        last.startswith("sandbox: ") or exit_code == sandbox.BOOT_FAILURE_EXIT or killed_by_seccomp
    )


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hints = {"SIGXCPU": " (CPU time limit)", "SIGSYS": " (a system call the sandbox forbids)"}
        hint = hints.get(name, "")
        return f"killed by {name}{hint}"
    return f"exited with status {code}"


def check_confinement(settings: config.Settings | None = None) -> None:
    """Under SANDBOX=strict, refuse before anything is spent if agents cannot be confined."""
    if (settings or config.settings()).sandbox == "strict":
        sandbox.require_strict()


@dataclass
class AgentProcess:
    """An agent whose interpreter and sandbox are already up, blocked reading its input.

    Started while its upstream agents still run, it takes interpreter start-up, the sandbox's
    walls and the runtime's imports off the critical path: when the input arrives, the agent is
    already at its first line of work. Exactly one of `run` and `discard` must follow.
    """

    name: str
    process: subprocess.Popen[bytes]
    scratch: Path
    model: str
    timeout: float
    layers: tuple[str, ...]
    """Confinement layers active for this process."""
    awaiting_code: bool = False
    """Started before its code existed: `run` must say which file in `folder` it is."""
    door: Channel | None = None
    """Its connection to the broker, its only way to the model; None: it has none."""
    folder: Path | None = None
    """The folder it may read and waits in, when it started ahead of its code."""
    space: RunSpace | None = None
    """The run whose scratch directory it has, if it belongs to one."""
    code: Path | None = None
    """The file it was given (`give_code`), when it started ahead of its code."""
    given: bytes | None = None
    """The input it was given ahead of `run` (`give_input`), which `run` must match."""
    unsent: bytes = b""
    """What of that input the pipe could not take at once: `run` sends it."""
    given_at: float | None = None
    """When it got its input ahead: its timeout counts from then."""

    def give_code(self, path: Path) -> None:
        """Name the agent's file now, ahead of its input: it loads while its upstream agents
        still run, so compiling and executing the file is off the critical path too.

        The file must be in the folder the agent waits in: it can read nothing else. The agent
        then waits for its input in the footer; nothing above the footer may depend on it.
        """
        if not self.awaiting_code:
            raise ValueError(f"{self.name} already has its code")
        # Compared as written (both come resolved from the run's folder), not resolved again:
        # these are system calls on the way to the agent's start, and a mismatch fails closed.
        if self.folder is None or path.parent != self.folder or path.is_symlink():
            raise ValueError(f"{path} is not in the folder the agent waits in")
        self.name = path.stem
        if self.door is not None:
            self.door.name = self.name
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):  # it died already: run() will tell why
            # Unbuffered, and a line into an empty pipe: it never blocks.
            os.write(self.process.stdin.fileno(), path.name.encode("ascii") + b"\n")
        self.awaiting_code = False
        self.code = path

    def give_input(self, task: str, previous_outputs: dict[str, str]) -> None:
        """Hand the agent its input now, from the thread that gave it its code: an agent that
        waits for no other needs no trip through the scheduler to start, and `run` (with the
        same input) then only collects what it says. Its timeout starts now.

        What the pipe cannot take at once is left for `run` to send.
        """
        if self.awaiting_code or self.given is not None:
            raise ValueError(f"{self.name} needs its code first, and takes one input")
        payload = _payload(task, previous_outputs)
        assert self.process.stdin is not None
        descriptor = self.process.stdin.fileno()
        os.set_blocking(descriptor, False)
        sent = 0
        try:
            while sent < len(payload):
                sent += os.write(descriptor, payload[sent : sent + 65536])
        except BlockingIOError:
            pass  # the pipe is full: run() sends the rest
        except OSError:  # it died already, or closed stdin: run() will tell why
            sent = len(payload)
        self.given, self.unsent, self.given_at = payload, payload[sent:], time.monotonic()
        if not self.unsent:
            self.process.stdin.close()

    def run(
        self,
        task: str,
        previous_outputs: dict[str, str],
        *,
        path: Path | None = None,
    ) -> AgentResult:
        """Hand the agent its input and collect the outcome; the timeout starts now.

        An agent started ahead of its code that was not given it yet (`give_code`) is given
        it now, with `path`; one that was must be run with the same path, or none. One given
        its input ahead (`give_input`) must be run with the same input: the rest of it is sent,
        and the answer collected.
        """
        payload = _payload(task, previous_outputs)
        if self.awaiting_code:
            if path is None:
                raise ValueError("an agent started ahead of its code needs the code's path")
            self.give_code(path)
        elif path is not None and self.code is not None and path != self.code:
            raise ValueError(f"{self.name} was given {self.code}, not {path}")
        if self.given is not None and payload != self.given:
            raise ValueError(f"{self.name} was given another input ahead")
        started = self.given_at if self.given_at is not None else time.monotonic()
        try:
            unsent = self.unsent if self.given is not None else payload
            streams = _pump(self.process, unsent, started + self.timeout)
        finally:
            exit_code = self.discard()
        return _result(self, streams, exit_code, time.monotonic() - started)

    def discard(self) -> int:
        """Kill the agent's whole process group and remove its scratch; returns its exit status.

        Its door stays open until the broker sees the agent's end close: a call in flight is
        still answered to nobody and billed.
        """
        _kill_group(self.process)
        exit_code = self.process.wait()
        with _live_lock:
            _live.pop(self.process, None)
        if self.space is not None:
            self.space.release(self.scratch)
        else:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return exit_code


def _payload(task: str, previous_outputs: dict[str, str]) -> bytes:
    """An agent's input as its footer reads it from stdin."""
    return json.dumps(
        {"task": task, "previous_outputs": previous_outputs}, ensure_ascii=True
    ).encode("ascii")


def start_agent(
    path: Path | None,
    *,
    name: str | None = None,
    timeout: float | None = None,
    model: str | None = None,
    door: Channel | None = None,
    preload: tuple[str, ...] = (),
    space: RunSpace | None = None,
    inputs: Mapping[str, Path] = {},
    read_only: Sequence[Path] = (),
    identities: Mapping[Path, tuple[int, int, int]] = {},
    settings: config.Settings | None = None,
) -> AgentProcess | AgentResult:
    """Start an agent up to the point where it reads its input; an AgentResult if it cannot.

    With `path` None the agent's code does not exist yet: the process starts anyway, imports
    `preload` (the runtime's modules) and waits in its run's folder (`space.folder`, else
    generated_agents/) for `run` to name its file, so even start-up that would coincide with
    writing the code is off the critical path. Its scratch directory is the run's (`space`); a
    run that is over starts nothing.
    Start it from a thread that lives until it is used: the agent dies with the thread that
    started it (PR_SET_PDEATHSIG, and bubblewrap's --die-with-parent, follow the thread).
    `door` is the agent's end of a broker channel, inherited as its only open file besides the
    three standard streams; without one the agent cannot reach the model.
    `inputs` are the user's attachments by name, which the agent finds through input_files(), and
    `read_only` the files and folders to mount for them (the attachments' roots): the agent may
    read those and each input, and write none of them. A path relative to our cwd is made
    absolute, as the agent's cwd is its scratch. `identities` say what each attached file was
    when it was vetted (attachments.file_identity): one that is another file now is not given to
    the agent (sandbox.prepare). `settings` is the run's snapshot (read now when not given).
    """
    settings = settings or config.settings()
    name = name or (path.stem if path is not None else "agent")
    folder = space.folder if space is not None else settings.agents_dir
    if path is None and space is None:
        folder.mkdir(parents=True, exist_ok=True)
    timeout = timeout or settings.agent_timeout_seconds
    model = model or settings.model
    inputs = {name: Path(path).absolute() for name, path in inputs.items()}
    mounts = [Path(path).absolute() for path in read_only] + list(inputs.values())
    python = agent_python(settings)
    if not os.access(python, os.X_OK):
        if door is not None:
            door.close()
        return AgentResult(
            name, False, error=f"cannot execute {python}", kind=AgentKind.UNSTARTABLE
        )
    if space is None:
        scratch = Path(tempfile.mkdtemp(prefix=f"agentgod-{name}-"))
    else:
        made = space.scratch_dir(name)
        if made is None:
            if door is not None:
                door.close()
            return AgentResult(name, False, error="the run is over", kind=AgentKind.UNSTARTABLE)
        scratch = made
    parent = os.getpid()
    prctl()  # looked up here: the child must not load a library between fork and exec
    try:
        launch = sandbox.prepare(
            path or folder,
            python=python,
            scratch=scratch,
            broker_fd=door.child_fd if door is not None else None,
            mode=settings.sandbox,
            read_only=mounts,
            identities={Path(path).absolute(): found for path, found in identities.items()},
            preload=preload,
        )
        counted = launch.user is not None and "pids" not in launch.layers
        limits = _limits(timeout, dropped_uid=counted)
        layers = ("rlimits", *launch.layers)
        process = subprocess.Popen(
            launch.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=scratch,
            env=child_environment(scratch, model=model, door=door, inputs=inputs),
            pass_fds=launch.pass_fds,
            start_new_session=True,
            preexec_fn=lambda: _preexec(limits, launch.preexec, parent),
            user=launch.user,
            group=launch.group,
            extra_groups=[] if launch.group is not None else None,
        )
    except BaseException as error:
        if space is not None:
            space.release(scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        if door is not None:
            door.close()
        if not isinstance(error, OSError | subprocess.SubprocessError):
            raise
        # SubprocessError: a preexec step failed between fork and exec (a limit, the cgroup).
        return AgentResult(
            name, False, error=f"could not start: {error}", kind=AgentKind.UNSTARTABLE
        )
    if door is not None:
        door.close_child_end()  # the agent holds it now; its death must end the channel
    with _live_lock:
        _live[process] = scratch
    return AgentProcess(
        name,
        process,
        scratch,
        model,
        timeout,
        layers,
        path is None,
        door,
        folder if path is None else None,
        space,
    )


def execute_agent(
    path: Path,
    task: str,
    previous_outputs: dict[str, str],
    *,
    timeout: float | None = None,
    model: str | None = None,
    door: Channel | None = None,
    space: RunSpace | None = None,
    inputs: Mapping[str, Path] = {},
    read_only: Sequence[Path] = (),
    identities: Mapping[Path, tuple[int, int, int]] = {},
    settings: config.Settings | None = None,
) -> AgentResult:
    """Run one agent file as a contained subprocess; every outcome is an AgentResult.

    `inputs`, `read_only` and `identities` are the user's attachments, and `settings` the run's
    snapshot, as `start_agent` takes them.
    """
    agent = start_agent(
        path,
        timeout=timeout,
        model=model,
        door=door,
        space=space,
        inputs=inputs,
        read_only=read_only,
        identities=identities,
        settings=settings,
    )
    if isinstance(agent, AgentResult):
        return agent
    return agent.run(task, previous_outputs)


def _result(agent: AgentProcess, streams: _Streams, exit_code: int, seconds: float) -> AgentResult:
    """Classify what the process did into one AgentResult."""
    output = streams.stdout.decode("utf-8", errors="replace")
    stderr = streams.stderr.decode("utf-8", errors="replace").strip()
    stderr = redact.redact(stderr[-MAX_STDERR_CHARS:])
    result = AgentResult(
        agent.name,
        False,
        output,
        stderr,
        exit_code,
        streams.timed_out,
        seconds,
        layers=agent.layers,
    )
    if streams.timed_out:
        result.kind = AgentKind.TIMEOUT
        result.error = f"timed out after {agent.timeout:g} s" + (f"\n{stderr}" if stderr else "")
    elif streams.overflow:
        result.kind = AgentKind.OUTPUT_LIMIT
        result.output = ""
        result.error = f"printed more than {MAX_OUTPUT_BYTES // (1024 * 1024)} MB on stdout"
    elif exit_code != 0:
        result.kind = (
            AgentKind.SANDBOX if _stopped_by_sandbox(stderr, exit_code) else AgentKind.CRASH
        )
        result.error = stderr or _describe_exit(exit_code)
        if stderr and exit_code < 0:
            result.error += f"\n({_describe_exit(exit_code)})"
    elif not output.strip():
        result.kind = AgentKind.SILENT
        result.error = stderr or "exited successfully but printed nothing"
    else:
        result.ok = True
        result.output = output.strip()
    return result
