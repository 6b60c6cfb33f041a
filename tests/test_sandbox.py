"""sandbox and sandbox_boot: real children under each layer. Escapes are contained; a legitimate
agent still works; the bootstrap stays lean.

Every run goes through `sandbox.prepare` and is started the way the executor starts agents
(scratch cwd, minimal environment, own session, rlimits in preexec, `Launch.pass_fds`). A layer
is skipped only when this machine lacks it, with the reason `prepare` or `probe` gives. Agents
without a network get one end of a socketpair whose other end a thread here echoes: the broker.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import escapes
import pytest
from agents import agent_source
from conftest import IMPORT_ROOT
from hypothesis import given
from hypothesis import strategies as st

from agentgod import agent_runtime, sandbox, sandbox_boot
from agentgod.attachments import file_identity

SECRET = "the-planted-secret"
ALL = "all"  # the layer set `prepare` picks by itself
SETS = ("landlock", "seccomp", "caps", "pids", "uid", "bwrap", ALL)
FOREIGN_UID = 12345  # owns a 0600 file: only a capability lets root read it


class _EchoAPI(BaseHTTPRequestHandler):
    """Stands in for the Messages API: echoes the JSON body."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
        data = json.dumps({"echo": body}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class World:
    """A world-readable place outside scratch, the servers, the host's sinks and a victim."""

    base: Path
    api_port: int
    other: socket.socket  # a TCP listener no agent may reach: handshakes queue unaccepted
    udp: socket.socket  # a UDP port no agent may reach
    abstract: str  # the name of an abstract unix listener no agent may reach
    victim: subprocess.Popen[bytes]

    @property
    def other_port(self) -> int:
        return int(self.other.getsockname()[1])

    @property
    def secret(self) -> Path:
        return self.base / "secret.txt"

    @property
    def foreign(self) -> Path:
        return self.base / "foreign.txt"

    @property
    def outside(self) -> Path:
        return self.base / "outside"

    @property
    def outside_file(self) -> Path:
        """What write_outside_scratch tries to create."""
        return self.outside / "pwned"

    def received(self) -> list[str]:
        """What reached the TCP listener or the UDP port (waiting briefly: loopback is async)."""
        got = []
        while select.select([self.other, self.udp], [], [], 0.5)[0]:
            with contextlib.suppress(BlockingIOError):
                connection, _ = self.other.accept()
                connection.close()
                got.append("a TCP connection")
            with contextlib.suppress(BlockingIOError):
                got.append(f"a datagram {self.udp.recv(100)!r}")
        return got


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    base = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    base.chmod(0o755)  # the unprivileged uid must reach agents and scratch, not the secret
    (base / "secret.txt").write_text(SECRET, encoding="utf-8")
    (base / "secret.txt").chmod(0o600)
    (base / "foreign.txt").write_text(SECRET, encoding="utf-8")
    (base / "foreign.txt").chmod(0o600)
    if os.geteuid() == 0:
        os.chown(base / "foreign.txt", FOREIGN_UID, FOREIGN_UID)
    (base / "outside").mkdir(mode=0o755)
    api = ThreadingHTTPServer(("127.0.0.1", 0), _EchoAPI)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    other = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    for sink in (other, udp):
        sink.setblocking(False)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"agentgod-sink-{uuid.uuid4().hex[:8]}"
    abstract.bind("\0" + name)
    abstract.listen()
    victim = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    try:
        yield World(base, api.server_address[1], other, udp, name, victim)
    finally:
        victim.kill()
        victim.wait()
        api.shutdown()
        for sink in (other, udp, abstract):
            sink.close()
        shutil.rmtree(base)


@dataclass
class Run:
    launch: sandbox.Launch
    returncode: int
    stdout: str
    stderr: str
    scratch: Path


def _python_for(layer_set: str, world: World) -> str:
    """The uid layer needs an interpreter the unprivileged uid can read (not a pyenv in /root)."""
    if layer_set in ("uid", ALL):
        for python in (sys.executable, "/usr/bin/python3"):
            if os.path.exists(python) and _uid_reaches(python, world):
                return python
    return sys.executable


def _uid_reaches(python: str, world: World) -> bool:
    scratch = Path(tempfile.mkdtemp(dir=world.base))
    try:
        launch = sandbox.prepare(
            world.base / "none.py",
            python=python,
            scratch=scratch,
            api_url="http://127.0.0.1:1",
            layers={"uid"},
        )
        return "uid" in launch.layers
    finally:
        shutil.rmtree(scratch)


def _kill_group(pgid: int) -> None:
    """Kill and wait until the group is gone: RLIMIT_NPROC counts the dying, per uid."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.01)


def _echo(broker: socket.socket) -> None:
    """The broker's side: send back whatever arrives, until the agent hangs up."""
    with broker:
        while data := broker.recv(65536):
            broker.sendall(data)


@dataclass
class Started:
    """An agent that is running; `finish` waits for it (or kills it) and collects its run."""

    launch: sandbox.Launch
    process: subprocess.Popen[str]
    out: IO[str]
    err: IO[str]
    scratch: Path
    broker: threading.Thread | None = field(default=None)
    run: Run = field(init=False)

    def stdout_so_far(self) -> str:
        return os.pread(self.out.fileno(), 1 << 20, 0).decode()

    def finish(self, *, kill: bool = False, timeout: float = 60) -> Run:
        if self.out.closed:
            return self.run
        try:
            if not kill:
                self.process.wait(timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            _kill_group(self.process.pid)  # as the executor does after every run
        if self.broker is not None:
            self.broker.join(10)
        self.out.seek(0)
        self.err.seek(0)
        stdout, stderr = self.out.read(), self.err.read()
        self.out.close()
        self.err.close()
        self.run = Run(self.launch, self.process.returncode, stdout, stderr, self.scratch)
        return self.run


def start_agent(
    source: str,
    layer_set: str | set[str],
    world: World,
    *,
    network: str = "tcp",
    ahead: bool = False,
    python: str | None = None,
    read_only: tuple[Path, ...] = (),
    task: dict[str, object] | None = None,
) -> Started:
    """Write the agent, prepare its launch and start it as the executor would.

    `layer_set` is one of SETS or a set of layers; `network` "none" gives it a broker's socket
    (its number is the task's `broker_fd`); `ahead` starts it before its code is written.
    """
    layers = layer_set if isinstance(layer_set, set) else None
    name_of_set = ALL if isinstance(layer_set, set) else layer_set
    python = python or _python_for(name_of_set, world)
    name = uuid.uuid4().hex[:8]
    folder = world.base / f"ahead_{name}"
    agent = folder / "agent.py" if ahead else world.base / f"agent_{name}.py"
    if ahead:
        folder.mkdir(mode=0o755)
    else:
        agent.write_text(textwrap.dedent(source), encoding="utf-8")
    scratch = world.base / f"scratch_{name}"
    scratch.mkdir(mode=0o700)
    broker, child_end = socket.socketpair() if network == "none" else (None, None)
    if layers is None and name_of_set != ALL:
        layers = {name_of_set}
    launch = sandbox.prepare(
        folder if ahead else agent,
        python=python,
        scratch=scratch,
        api_url=f"http://127.0.0.1:{world.api_port}" if network == "tcp" else None,
        broker_fd=None if child_end is None else child_end.fileno(),
        layers=layers,
        read_only=read_only,
    )
    expected = {"landlock", "seccomp", "caps", "pids"} if layers is None else set(layers)
    expected -= {"uid"} if isinstance(layer_set, set) else set()  # as the machine allows
    if not expected <= set(launch.layers):
        pytest.skip("; ".join(launch.skipped))

    def limits() -> None:  # the executor's preexec, which Launch.preexec is chained after
        if launch.user is not None and "pids" not in launch.layers:
            resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if launch.preexec:
            launch.preexec()

    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LC_ALL": "C.UTF-8",
        "MALLOC_ARENA_MAX": "2",
    }
    if network == "tcp":
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{world.api_port}"
    params = {
        "target": world.victim.pid,
        "secret": str(world.secret),
        "foreign": str(world.foreign),
        "outside": str(world.outside_file),
        "api_port": world.api_port,
        "other_port": world.other_port,
        "udp_port": world.udp.getsockname()[1],
        "abstract": world.abstract,
        "tag": name,
        "broker_fd": None if child_end is None else child_end.fileno(),
        **(task or {}),
    }
    payload = json.dumps({"task": json.dumps(params), "previous_outputs": {}})  # as the executor
    # Files, not pipes: fork-bomb children keep pipes open, and the executor kills them anyway.
    out = tempfile.TemporaryFile("w+")  # noqa: SIM115 - Started.finish closes both
    err = tempfile.TemporaryFile("w+")  # noqa: SIM115
    try:
        child = subprocess.Popen(
            launch.argv,
            cwd=scratch,
            env=env,
            start_new_session=True,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            text=True,
            preexec_fn=limits,
            user=launch.user,
            group=launch.group,
            extra_groups=None if launch.group is None else [],
            pass_fds=launch.pass_fds,
        )
    finally:
        if child_end is not None:
            child_end.close()  # the agent holds the only copy: its exit is the broker's EOF
    echo = None
    if broker is not None:
        echo = threading.Thread(target=_echo, args=(broker,), daemon=True)
        echo.start()
    if ahead:
        agent.write_text(textwrap.dedent(source), encoding="utf-8")
        payload = f"{agent.name}\n{payload}"
    assert child.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        child.stdin.write(payload)
        child.stdin.close()
    return Started(launch, child, out, err, scratch, echo)


def run_agent(source: str, layer_set: str | set[str], world: World, **how: Any) -> Run:
    """Run an agent to its end (see start_agent for `how`)."""
    return start_agent(source, layer_set, world, **how).finish()


# ----------------------------------------------------------------------------------------------
# The escape corpus (tests/escapes.py, shared with test_escapes.py), one layer at a time. Each
# escape prints ESCAPED when its attempt worked; here are the layers that stop it on their own.

CONTAINED_BY = {
    "write_outside_scratch": {"landlock", "uid", "bwrap"},
    "read_planted_secret": {"landlock", "uid", "bwrap"},
    "read_parent_environ": {"landlock", "uid", "bwrap"},
    "shell_by_os_system": {"landlock", "seccomp"},
    "shell_by_subprocess": {"landlock", "seccomp"},
    "shell_by_execv": {"landlock", "seccomp"},
    "shell_by_ctypes_libc": {"landlock", "seccomp"},
    "fork_a_thousand_times": {"seccomp", "uid"},  # uid: RLIMIT_NPROC binds once not root
    "kill_the_parent": {"landlock", "seccomp", "uid", "bwrap"},
    "connect_to_another_port": {"landlock"},
    "fastopen_to_another_port": {"seccomp"},  # Landlock checks connect(), which TFO skips
    "create_ipc_objects": {"seccomp"},  # bwrap's own IPC namespace still lets them be made
    "use_capabilities": {"caps", "uid", "bwrap"},
}

CASES = [
    pytest.param(layer_set, name, id=f"{layer_set}-{name}")
    for layer_set in SETS
    for name, layers in CONTAINED_BY.items()
    if layer_set == ALL or layer_set in layers
]


def _refused(run: Run) -> bool:
    """The attempt failed visibly: an OSError ended the agent, or its shell could not start."""
    raised = run.returncode == 1 and re.search(r"^\w+Error: \[Errno \d+\]", run.stderr, re.M)
    return bool(raised or re.fullmatch(r"status [1-9]\d*\n", run.stdout))


@pytest.mark.parametrize(("layer_set", "name"), CASES)
def test_escape_is_contained(layer_set: str, name: str, world: World) -> None:
    abi = sandbox.probe().landlock_abi
    if layer_set == "landlock" and name == "connect_to_another_port" and abi < 4:
        pytest.skip(f"landlock ABI {abi} on this kernel has no network rules")
    if layer_set == "landlock" and name == "kill_the_parent" and abi < 6:
        pytest.skip(f"landlock ABI {abi} on this kernel cannot scope signals")
    if name == "use_capabilities" and os.geteuid() != 0:
        pytest.skip("only a root parent has capabilities to lose")
    with escapes.ipc_names() as names:
        run = run_agent(escapes.SOURCES[name], layer_set, world, task=names)
    assert "ESCAPED" not in run.stdout, (run.launch.layers, run.stdout, run.stderr)
    assert _refused(run), (run.launch.layers, run.returncode, run.stdout, run.stderr)
    assert world.victim.poll() is None, "the victim was killed"
    assert not world.outside_file.exists()
    if name.endswith("_port"):
        assert world.received() == []


LEGITIMATE = """
    import json, os, ssl, sys, tempfile, threading, urllib.request

    p = json.loads(json.load(sys.stdin)["task"])
    answers = []

    def post(host, i):
        request = urllib.request.Request(
            f"http://{host}:{p['api_port']}/v1/messages", data=json.dumps({"i": i}).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answers.append(json.load(response)["echo"]["i"])

    threads = [threading.Thread(target=post, args=("127.0.0.1", i)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    post("localhost", 4)  # through name resolution
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "note.txt"), "w") as note:
            note.write("kept")
        with open(os.path.join(tmp, "note.txt")) as note:
            kept = note.read()
    roots = ssl.create_default_context().cert_store_stats()["x509_ca"]
    print(json.dumps({"answers": sorted(answers), "kept": kept, "tls_roots": roots > 0}))
"""


@pytest.mark.parametrize("layer_set", SETS)
def test_legitimate_agent_still_works(layer_set: str, world: World) -> None:
    run = run_agent(LEGITIMATE, layer_set, world)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"answers": [0, 1, 2, 3, 4], "kept": "kept", "tls_roots": True}


def test_all_layers_are_active_on_this_machine(world: World) -> None:
    """Landlock and seccomp work on the machines this project runs on; CI must use them."""
    run = run_agent("print('hi')", ALL, world)
    assert run.stdout == "hi\n"
    assert run.launch.layers[:2] == ("landlock", "seccomp")
    assert sandbox.probe() is sandbox.probe()
    for layer in sandbox.LAYERS:
        explained = any(note.startswith(f"{layer}:") for note in run.launch.skipped)
        assert layer in run.launch.layers or explained, run.launch.skipped


def test_seccomp_refuses_setting_any_limit_but_not_reading_them(world: World) -> None:
    """Hard limits only hold if nothing can raise them: not even the agent's own, not even down."""
    run = run_agent(
        """
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        print("read", soft > 0)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        """,
        "seccomp",
        world,
    )
    assert run.stdout == "read True\n"
    # Setting a limit to exactly its current value is refused: only seccomp does that (Python
    # reports the EPERM as a ValueError).
    assert run.stderr.splitlines()[-1] == "ValueError: not allowed to raise maximum limit"


def test_agent_runs_as_main_and_refusals_name_the_layer(world: World) -> None:
    run = run_agent(
        """
        import os, sys
        print(sys.argv == [__file__], __name__, __file__)
        os.fork()
        """,
        ALL,
        world,
    )
    agent = run.launch.argv[-1]
    assert run.stdout == f"True __main__ {agent}\n"
    assert run.returncode == 1
    frames = [line for line in run.stderr.splitlines() if line.lstrip().startswith("File ")]
    assert frames and all(agent in frame for frame in frames), run.stderr
    last = run.stderr.splitlines()[-1]
    assert last.startswith("sandbox: refused by seccomp ("), last
    assert last.endswith("PermissionError [Errno 1] Operation not permitted")


def test_uid_layer_hands_scratch_over_without_new_privileges(world: World) -> None:
    source = """
        import os
        status = dict(line.split(":\t") for line in open("/proc/self/status").read().splitlines())
        print(os.getuid(), os.getgid(), os.getgroups(), status["NoNewPrivs"])
    """
    run = run_agent(source, "uid", world)
    assert (run.launch.user, run.launch.group) == (sandbox.DROP_UID, sandbox.DROP_GID)
    assert run.stdout == f"{sandbox.DROP_UID} {sandbox.DROP_GID} [] 1\n", run.stderr
    assert run.scratch.stat().st_uid == sandbox.DROP_UID


def test_uid_layer_skipped_when_the_interpreter_is_out_of_reach(tmp_path: Path) -> None:
    if not sandbox.probe().can_drop_uid:
        pytest.skip(sandbox.probe().why_not["uid"])
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    (hidden / "python").symlink_to(sys.executable)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    launch = sandbox.prepare(
        tmp_path / "agent.py",
        python=str(hidden / "python"),
        scratch=scratch,
        api_url="http://127.0.0.1:1",
        layers={"uid"},
    )
    assert launch.layers == () and launch.user is None
    assert len(launch.skipped) == 1 and launch.skipped[0].startswith("uid: not dropping to uid")
    assert str(hidden / "python") in launch.skipped[0]
    assert scratch.stat().st_uid == os.getuid()


def test_venv_packages_import_and_their_pth_files_run_confined(world: World) -> None:
    python = _python_for(ALL, world)
    venv = world.base / f"venv_{uuid.uuid4().hex[:8]}"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    [site_packages] = venv.glob("lib/python3*/site-packages")
    (site_packages / "hello_pkg.py").write_text("VALUE = 'from the venv'\n", encoding="utf-8")
    planted = world.outside / "pth_was_here"
    (site_packages / "zz_planted.pth").write_text(
        f"import os; open({str(planted)!r}, 'w').write('x')\n", encoding="utf-8"
    )
    run = run_agent(
        "import hello_pkg\nprint(hello_pkg.VALUE)\n",
        ALL,
        world,
        python=str(venv / "bin" / "python"),
        read_only=(site_packages,),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "from the venv\n"
    assert "Error processing line 1 of" in run.stderr
    assert not planted.exists()


def test_off_mode_is_the_plain_command_line(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    launch = sandbox.prepare(
        agent,
        python="/opt/py/bin/python",
        scratch=tmp_path,
        api_url="https://api.anthropic.com",
        mode="off",
    )
    assert launch.argv == ["/opt/py/bin/python", "-X", "utf8", "-I", str(agent)]
    assert (launch.preexec, launch.user, launch.group, launch.layers) == (None, None, None, ())
    assert launch.skipped == ("sandbox is off: only the executor's limits apply",)


def test_strict_mode_uses_landlock_and_seccomp_here(tmp_path: Path) -> None:
    caps = sandbox.probe()
    for layer in ("landlock", "seccomp"):
        if layer in caps.why_not:
            pytest.skip(caps.why_not[layer])
    launch = sandbox.prepare(
        tmp_path / "agent.py",
        python=sys.executable,
        scratch=tmp_path,
        api_url="https://api.anthropic.com",
        mode="strict",
    )
    assert launch.layers[:2] == ("landlock", "seccomp")


def test_strict_mode_refuses_a_kernel_without_landlock(tmp_path: Path) -> None:
    """A child whose seccomp filter hides Landlock (ENOSYS) is a kernel without it."""
    if "seccomp" in sandbox.probe().why_not:
        pytest.skip(sandbox.probe().why_not["seccomp"])
    script = f"""
        import ctypes, sys
        lib = ctypes.CDLL("libseccomp.so.2")
        lib.seccomp_init.restype = ctypes.c_void_p
        ctx = ctypes.c_void_p(lib.seccomp_init(ctypes.c_uint32(0x7FFF0000)))
        for number in (444, 445, 446):
            assert lib.seccomp_rule_add(ctx, ctypes.c_uint32(0x50000 | 38), number, 0) == 0
        assert lib.seccomp_load(ctx) == 0
        sys.path.insert(0, {str(IMPORT_ROOT)!r})
        from pathlib import Path
        from agentgod import sandbox
        where = dict(python=sys.executable, scratch=Path({str(tmp_path)!r}),
                     api_url="https://api.anthropic.com")
        auto = sandbox.prepare(Path("agent.py"), **where, layers={{"landlock", "seccomp"}})
        print(auto.layers, auto.skipped[0])
        try:
            sandbox.prepare(Path("agent.py"), mode="strict", **where)
        except sandbox.SandboxUnavailable as exc:
            print("REFUSED", exc)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    auto, refused = done.stdout.splitlines()
    assert auto.startswith("('seccomp',) landlock: the kernel has no Landlock")
    assert refused.startswith("REFUSED strict sandbox refused to run agents: landlock: ")


def test_a_machine_without_the_walls_is_said_to_run_agents_with_your_permissions(
    tmp_path: Path,
) -> None:
    """SANDBOX=auto on a kernel without Landlock and with no bubblewrap: agents could read any
    file the user can, and the run says so first (issue 23); with the walls, nothing is said."""
    if "seccomp" in sandbox.probe().why_not:
        pytest.skip(sandbox.probe().why_not["seccomp"])
    if "landlock" not in sandbox.probe().why_not:
        assert sandbox.unconfined_warning("auto") is None, "this machine has its walls"
    script = f"""
        import ctypes, sys
        lib = ctypes.CDLL("libseccomp.so.2")
        lib.seccomp_init.restype = ctypes.c_void_p
        ctx = ctypes.c_void_p(lib.seccomp_init(ctypes.c_uint32(0x7FFF0000)))
        for number in (444, 445, 446):
            assert lib.seccomp_rule_add(ctx, ctypes.c_uint32(0x50000 | 38), number, 0) == 0
        assert lib.seccomp_load(ctx) == 0
        sys.path.insert(0, {str(IMPORT_ROOT)!r})
        from agentgod import sandbox
        print(sandbox.unconfined_warning("auto"))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(tmp_path)},  # no bwrap on it
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith("no OS walls on this machine (Landlock, and no bubblewrap): ")
    assert "agents run with your own permissions" in said
    assert "the key in your AgentGOD home's .env included" in said
    assert "open connections" not in said, "seccomp still refuses them"


def test_the_bootstrap_fails_closed(world: World) -> None:
    """A wall that cannot be raised stops the agent before its first line runs."""
    agent = world.base / f"agent_{uuid.uuid4().hex[:8]}.py"
    agent.write_text("print('ran')\n", encoding="utf-8")
    scratch = Path(tempfile.mkdtemp(dir=world.base))
    launch = sandbox.prepare(
        agent,
        python=sys.executable,
        scratch=scratch,
        api_url="http://127.0.0.1:1",
        layers={"landlock"},
    )
    if "landlock" not in launch.layers:
        pytest.skip("; ".join(launch.skipped))
    scratch.rmdir()  # Landlock can no longer grant it
    done = subprocess.run(launch.argv, cwd=world.base, capture_output=True, text=True, timeout=60)
    assert done.returncode == sandbox.BOOT_FAILURE_EXIT
    assert done.stdout == ""
    assert done.stderr.startswith("sandbox: landlock could not be applied: [Errno 2]")


@pytest.mark.parametrize("layer_set", ["landlock", "bwrap", ALL])
def test_an_attachment_swapped_after_its_check_is_never_followed(
    layer_set: str, world: World
) -> None:
    """The parent checks a vetted file's identity, then starts the agent; a link put in its
    place in between is caught by the bootstrap itself, before any wall grants or mounts it."""
    attached = world.base / f"attached_{uuid.uuid4().hex[:8]}.txt"
    attached.write_text("what was vetted", encoding="utf-8")
    attached.chmod(0o644)
    vetted = os.stat(attached)
    agent = world.base / f"agent_{uuid.uuid4().hex[:8]}.py"
    agent.write_text(f"print(open({str(attached)!r}).read())\n", encoding="utf-8")
    scratch = Path(tempfile.mkdtemp(dir=world.base))
    launch = sandbox.prepare(
        agent,
        python=sys.executable,
        scratch=scratch,
        api_url="http://127.0.0.1:1",
        layers=None if layer_set == ALL else {layer_set},
        read_only=(attached,),
        identities={attached: file_identity(vetted)},
    )
    if layer_set != ALL and layer_set not in launch.layers:
        pytest.skip("; ".join(launch.skipped))
    attached.unlink()
    attached.symlink_to(world.secret)  # after the parent's check, before the child's walls
    done = subprocess.run(
        launch.argv, cwd=scratch, capture_output=True, text=True, timeout=60, user=launch.user
    )
    assert SECRET not in done.stdout + done.stderr
    assert done.returncode == sandbox.BOOT_FAILURE_EXIT, done.stderr
    assert "was replaced since it was attached" in done.stderr
    with pytest.raises(sandbox.AttachmentReplaced, match="was replaced since it was attached"):
        sandbox.prepare(
            agent,
            python=sys.executable,
            scratch=scratch,
            read_only=(attached,),
            identities={attached: file_identity(vetted)},
        )


def _walls(launch: sandbox.Launch) -> tuple[sandbox_boot.Walls, list[str]]:
    """What the bootstrap will read from the launch's command line."""
    boot = launch.argv.index(str(Path(sandbox_boot.__file__).resolve()))
    return sandbox_boot.Walls.parse(launch.argv[boot + 1 :])


@pytest.mark.parametrize(
    ("url", "port"),
    [("https://api.anthropic.com", 443), ("http://127.0.0.1:8123", 8123), ("http://h/v1", 80)],
)
def test_the_api_port_is_the_only_tcp_port(url: str, port: int, tmp_path: Path) -> None:
    launch = sandbox.prepare(
        tmp_path / "a.py", python=sys.executable, scratch=tmp_path, api_url=url, layers={"landlock"}
    )
    if "landlock" not in launch.layers:
        pytest.skip("; ".join(launch.skipped))
    walls, agent = _walls(launch)
    assert walls.tcp_ports == (port,)
    assert agent == [str((tmp_path / "a.py").resolve())]


@pytest.mark.parametrize(
    "bad",
    [
        {"mode": "paranoid"},
        {"layers": {"landlock", "jail"}},
        {"api_url": "ftp://host"},
        {"python": "python3"},
    ],
)
def test_nonsense_is_refused(bad: dict[str, object], tmp_path: Path) -> None:
    where: dict[str, object] = {
        "python": sys.executable,
        "scratch": tmp_path,
        "api_url": "https://api.anthropic.com",
        **bad,
    }
    with pytest.raises(ValueError):
        sandbox.prepare(tmp_path / "a.py", **where)  # type: ignore[arg-type]


_ANY_ARG = st.text(st.characters(blacklist_characters="\x00"))  # argv strings cannot hold NUL


@given(
    layers=st.lists(st.sampled_from(sandbox.LAYERS), unique=True).map(tuple),
    abi=st.integers(0, 99),
    network=st.sampled_from(sandbox_boot.Walls.NETWORKS),
    task_limit=st.integers(0, 1 << 20),
    read_only=st.lists(st.sampled_from(["--", "--read-only", "a,b", ""]) | _ANY_ARG).map(tuple),
    read_write=st.lists(_ANY_ARG).map(tuple),
    ports=st.lists(st.integers(0, 65535)).map(tuple),
    keep_fds=st.lists(st.integers(3, 1 << 20)).map(tuple),
    agent=st.lists(_ANY_ARG, min_size=1),
)
def test_walls_survive_the_command_line(
    layers: tuple[str, ...],
    abi: int,
    network: str,
    task_limit: int,
    read_only: tuple[str, ...],
    read_write: tuple[str, ...],
    ports: tuple[int, ...],
    keep_fds: tuple[int, ...],
    agent: list[str],
) -> None:
    """Any path, even one spelled like a flag or like the end marker, arrives as it was sent."""
    sent = sandbox_boot.Walls(
        layers,
        landlock_abi=abi,
        network=network,
        task_limit=task_limit,
        read_only=read_only,
        read_write=read_write,
        tcp_ports=ports,
        keep_fds=keep_fds,
    )
    walls, rest = sandbox_boot.Walls.parse([*sent.to_argv(), *agent])
    assert (walls.layers, walls.landlock_abi, walls.tcp_ports) == (layers, abi, ports)
    assert (walls.network, walls.task_limit, walls.keep_fds) == (network, task_limit, keep_fds)
    assert (walls.read_only, walls.read_write, rest) == (read_only, read_write, agent)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([], id="empty"),
        pytest.param(["--layers", "landlock"], id="no-end-marker"),
        pytest.param(["--layers", "landlock", "--landlock-abi", "7", "--"], id="no-agent"),
        pytest.param(["--layers", "", "--landlock-abi", "0", "--off", "1", "--", "a"], id="flag"),
        pytest.param(["--layers", "landlock", "--landlock-abi", "x", "--", "a"], id="abi"),
        pytest.param(
            [*("--layers", "", "--landlock-abi", "0", "--network", "open"), "--", "a"],
            id="network",
        ),
        pytest.param(["--landlock-abi", "0", "--", "a"], id="no-layers"),
    ],
)
def test_a_garbled_command_line_fails_closed(argv: list[str], tmp_path: Path) -> None:
    (tmp_path / "a").write_text("print('ran')\n", encoding="utf-8")  # the agent, were it run
    boot = [sys.executable, "-X", "utf8", "-I", "-S", sandbox_boot.__file__]
    done = subprocess.run([*boot, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == sandbox.BOOT_FAILURE_EXIT
    assert done.stdout == ""
    assert done.stderr.startswith("sandbox: the bootstrap's command line is not understood: ")


def test_a_bootstrap_without_its_seccomp_module_fails_closed(tmp_path: Path) -> None:
    """The filter lives beside the bootstrap: a child that cannot read it never runs the agent."""
    if "seccomp" in sandbox.probe().why_not:
        pytest.skip(sandbox.probe().why_not["seccomp"])
    alone = tmp_path / "sandbox_boot.py"
    shutil.copyfile(sandbox_boot.__file__, alone)
    (tmp_path / "a").write_text("print('ran')\n", encoding="utf-8")
    walls = sandbox_boot.Walls(("seccomp",))
    boot = [sys.executable, "-X", "utf8", "-I", "-S", str(alone), *walls.to_argv(), "a"]
    done = subprocess.run(boot, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == sandbox.BOOT_FAILURE_EXIT, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("sandbox: seccomp could not be applied: No module named"), (
        done.stderr
    )


# Everything the bootstrap imports is paid by every agent, before its first line. The os family
# comes with `site` anyway; ctypes is the one binding Landlock and libseccomp need. A new import
# belongs here only with a measurement (python -X importtime) that says it is worth its cost.
BOOTSTRAP_IMPORTS = {
    *("ctypes", "ctypes._endian", "_ctypes", "struct", "_struct", "types", "errno"),
    *("os", "os.path", "posixpath", "genericpath", "stat", "_stat", "_collections_abc"),
}


def test_the_bootstrap_imports_only_what_it_needs() -> None:
    """sandbox_seccomp is the bootstrap's too: imported in the child when seccomp is asked for."""
    ours = {"sandbox_boot", "sandbox_seccomp"}
    script = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"sys.path.insert(0, {str(Path(sandbox_boot.__file__).parent)!r})\n"
        "import sandbox_boot, sandbox_seccomp\n"
        f"print(' '.join(sorted(set(sys.modules) - before - {ours!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-X", "utf8", "-I", "-S", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) <= BOOTSTRAP_IMPORTS


_FAILING_THROUGH_THE_RUNTIME = """
def helper(value):
    return format_previous(value)

def run(task, previous_outputs):
    return helper(len(task))
"""


def test_an_assembled_agent_runs_on_the_runtime_compiled_ahead() -> None:
    """The standby compiles the runtime before its file exists; a file holding it uses that."""
    runtime = sandbox_boot._runtime_ahead()
    assert runtime is not None
    assert runtime[0] == agent_runtime.runtime_source().encode()
    source = agent_source(_FAILING_THROUGH_THE_RUNTIME).encode()
    assert len(sandbox_boot._compiled(source, "agent.py", runtime)) == 2
    changed = source.replace(b"import json\n", b"import json  # changed\n", 1)
    assert len(sandbox_boot._compiled(changed, "agent.py", runtime)) == 1, "compiled whole"


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_a_standby_agents_traceback_is_the_files_own(tmp_path: Path, mode: str) -> None:
    """Runtime compiled ahead or not, every frame names the agent file and its true line."""
    folder = tmp_path / "agents"
    folder.mkdir()
    agent = folder / "failing.py"
    agent.write_text(agent_source(_FAILING_THROUGH_THE_RUNTIME), encoding="utf-8")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    payload = '{"task": "t", "previous_outputs": {}}'
    launch = sandbox.prepare(
        folder, python=sys.executable, scratch=scratch, api_url="http://127.0.0.1:1", mode=mode
    )
    standby = subprocess.run(
        launch.argv,
        input=f"failing.py\n{payload}",
        capture_output=True,
        text=True,
        cwd=scratch,
        timeout=60,
        preexec_fn=launch.preexec,
    )
    direct = subprocess.run(
        [sys.executable, "-X", "utf8", "-I", str(agent)],
        input=payload,
        capture_output=True,
        text=True,
        cwd=scratch,
        timeout=60,
    )
    assert direct.returncode == standby.returncode == 1
    assert "in format_previous" in direct.stderr, "a frame inside the runtime"
    assert standby.stderr == direct.stderr


@pytest.mark.parametrize("mode", ["off", "auto"])
@pytest.mark.parametrize("name", ["../escape.py", "/etc/passwd", ".hidden.py", ""])
def test_an_agent_started_before_its_code_takes_only_a_file_name(
    tmp_path: Path, mode: str, name: str
) -> None:
    """The first line of its stdin names its file inside the folder; nothing else is accepted."""
    folder = tmp_path / "agents"
    folder.mkdir()
    (tmp_path / "escape.py").write_text("print('ESCAPED')\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    launch = sandbox.prepare(
        folder, python=sys.executable, scratch=scratch, api_url="http://127.0.0.1:1", mode=mode
    )
    done = subprocess.run(
        launch.argv, input=f"{name}\n{{}}", capture_output=True, text=True, cwd=scratch, timeout=30
    )
    assert done.returncode == sandbox.BOOT_FAILURE_EXIT, done.stderr
    assert "ESCAPED" not in done.stdout
    assert "sandbox: no agent file name arrived on stdin" in done.stderr


def test_an_agent_started_before_its_code_runs_it_when_named(tmp_path: Path) -> None:
    folder = tmp_path / "agents"
    folder.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    launch = sandbox.prepare(
        folder,
        python=sys.executable,
        scratch=scratch,
        api_url="http://127.0.0.1:1",
        preload=("json",),
    )
    process = subprocess.Popen(
        launch.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=scratch
    )
    (folder / "late.py").write_text(
        "import sys\n"
        "print(sys.argv[0].endswith('late.py'), 'json' in sys.modules, sys.stdin.read())\n"
    )
    out, _ = process.communicate("late.py\nthe input", timeout=30)
    assert process.returncode == 0
    assert out == "True True the input\n"


# ----------------------------------------------------------------------------------------------
# One agent's thread bomb against its sibling's work, and agents without a network.


def _bomb_then_sibling(
    layer_set: str | set[str], world: World, sibling: str, **how: Any
) -> tuple[Run, Run]:
    """Start the bomb; once it holds all it got, run the sibling to its end; then kill the bomb."""
    bomb = start_agent(escapes.THREAD_BOMB, layer_set, world, **how)
    try:
        deadline = time.monotonic() + 60
        while "threads" not in bomb.stdout_so_far() and bomb.process.poll() is None:
            assert time.monotonic() < deadline, "the bomb never said how many threads it got"
            time.sleep(0.02)
        return bomb.finish(kill=True), run_agent(sibling, layer_set, world, **how)
    finally:
        bomb.finish(kill=True)


def _bomb_was_stopped(bomb: Run) -> None:
    assert "ESCAPED" not in bomb.stdout, bomb.stdout
    started = int(re.search(r"^threads (\d+)$", bomb.stdout, re.M).group(1))  # type: ignore[union-attr]
    assert 0 < started < sandbox.TASK_LIMIT, bomb.stdout
    assert "stopped: can't start new thread" in bomb.stdout


@pytest.mark.parametrize("layer_set", ["pids", ALL])
def test_a_thread_bomb_does_not_starve_its_sibling(layer_set: str, world: World) -> None:
    """Root ignores RLIMIT_NPROC, and a shared uid shares it: each agent needs its own count."""
    bomb, sibling = _bomb_then_sibling(layer_set, world, LEGITIMATE)
    _bomb_was_stopped(bomb)
    assert sibling.returncode == 0, sibling.stderr
    assert json.loads(sibling.stdout)["answers"] == [0, 1, 2, 3, 4]  # five threads of its own


WITHOUT_BWRAP = "auto-without-bwrap"
AHEAD = "auto-started-before-its-code"
AS_NOBODY = "auto-as-uid-65534"
CONFIGURATIONS = ("auto", WITHOUT_BWRAP, AHEAD, AS_NOBODY)


@pytest.fixture(params=CONFIGURATIONS)
def networkless(request: pytest.FixtureRequest, world: World) -> dict[str, Any]:
    """start_agent's arguments for an agent without a network, in the configurations of
    test_escapes.py (on the executor's interpreter: a root child here), and as the uid layer's
    unprivileged child."""
    caps = sandbox.probe()
    missing = [caps.why_not[layer] for layer in ("landlock", "seccomp") if layer in caps.why_not]
    if missing:
        pytest.skip("; ".join(missing))
    how: dict[str, Any] = {"network": "none", "python": sys.executable, "ahead": False}
    how["layer_set"] = set(sandbox.LAYERS) - {"uid"}
    if request.param == WITHOUT_BWRAP:
        how["layer_set"] -= {"bwrap"}
    elif request.param == AHEAD:
        how["ahead"] = True
    elif request.param == AS_NOBODY:
        how["python"] = _python_for("uid", world)
        how["layer_set"] = set(sandbox.LAYERS)
        if not _uid_reaches(how["python"], world):
            pytest.skip(f"no interpreter here that uid {sandbox.DROP_UID} can read")
    return how


def _check_layers(run: Run, how: dict[str, Any]) -> None:
    expected = {"landlock", "seccomp", "caps", "pids"} | ({"uid"} & how["layer_set"])
    if "bwrap" in how["layer_set"] and sandbox.probe().bwrap:
        expected.add("bwrap")
    assert set(run.launch.layers) == expected, run.launch.skipped
    assert run.launch.pass_fds != ()


NETWORKLESS = """
    import asyncio, json, os, select, socket, sys
    from concurrent.futures import ThreadPoolExecutor

    p = json.loads(json.load(sys.stdin)["task"])
    fds = []
    for fd in range(1024):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            pass
    broker = socket.socket(fileno=p["broker_fd"])
    broker.settimeout(10)
    answers = []
    for message in (b"ping", b"pong"):
        broker.sendall(message)
        assert select.select([broker], [], [], 10)[0]
        answers.append(broker.recv(16).decode())
    asyncio.run(asyncio.sleep(0))  # its self-pipe is a unix stream socketpair
    with ThreadPoolExecutor(4) as pool:
        squares = list(pool.map(lambda n: n * n, range(4)))
    local = socket.getaddrinfo("localhost", 80)[0][4][0]
    broker.shutdown(socket.SHUT_RDWR)
    broker.close()
    print(json.dumps({"fds": fds, "answers": answers, "squares": squares, "local": local}))
"""


def test_no_network_still_does_a_round_trip_to_the_broker(
    networkless: dict[str, Any], world: World
) -> None:
    """The broker's socket works both ways, and it is the only fd the agent has beyond 0, 1, 2."""
    run = run_agent(NETWORKLESS, world=world, **networkless)
    assert run.returncode == 0, run.stderr
    _check_layers(run, networkless)
    result = json.loads(run.stdout)
    [broker_fd] = run.launch.pass_fds
    assert result["fds"] == [0, 1, 2, broker_fd]
    assert result["answers"] == ["ping", "pong"]
    assert result["squares"] == [0, 1, 4, 9]
    assert result["local"] in ("127.0.0.1", "::1")


NO_NETWORK_ESCAPES = {
    **escapes.NO_NETWORK_SOURCES,
    **{
        name: escapes.SOURCES[name]
        for name in (
            "connect_to_another_port",
            "fastopen_to_another_port",
            "create_ipc_objects",
            "use_capabilities",
        )
    },
}


def _no_network_escape_was_refused(name: str, run: Run, world: World) -> None:
    assert "ESCAPED" not in run.stdout, (run.launch.layers, run.stdout, run.stderr)
    assert _refused(run), (run.launch.layers, run.returncode, run.stdout, run.stderr)
    if name.endswith("_port"):
        assert world.received() == []
    if name == "no_socket_of_any_family":
        assert run.stdout == "refused {'EPERM': 138}\n"  # 46 families x 3 types
    elif name == "use_the_socket_it_has":
        calls = ("bind", "listen", "connect", "sendto", "sendmsg", "ioctl")
        assert run.stdout.splitlines() == [f"{call} EPERM" for call in calls]
    elif name == "create_ipc_objects":
        assert run.stdout == "refused shm EPERM msg EPERM sem EPERM mq EPERM\n"
    elif name.endswith("_port"):
        assert run.stderr.splitlines()[-1].endswith(
            "PermissionError [Errno 1] Operation not permitted"
        )


@pytest.mark.parametrize("name", NO_NETWORK_ESCAPES)
def test_no_network_escape_is_contained(
    name: str, networkless: dict[str, Any], world: World
) -> None:
    if name == "use_capabilities" and os.geteuid() != 0:
        pytest.skip("only a root parent has capabilities to lose")
    with escapes.ipc_names() as names:
        run = run_agent(NO_NETWORK_ESCAPES[name], world=world, task=names, **networkless)
    _check_layers(run, networkless)
    _no_network_escape_was_refused(name, run, world)
    if name == "use_capabilities":
        assert run.stdout == "capabilities 0x0\n"


@pytest.mark.parametrize("name", [*escapes.NO_NETWORK_SOURCES, "fastopen_to_another_port"])
def test_seccomp_alone_leaves_no_network(name: str, world: World) -> None:
    """The filter holds on its own: no Landlock, no empty network namespace behind it."""
    run = run_agent(NO_NETWORK_ESCAPES[name], "seccomp", world, network="none")
    _no_network_escape_was_refused(name, run, world)


def test_no_network_thread_bomb_does_not_starve_its_sibling(
    networkless: dict[str, Any], world: World
) -> None:
    bomb, sibling = _bomb_then_sibling(world=world, sibling=NETWORKLESS, **networkless)
    _check_layers(bomb, networkless)
    _bomb_was_stopped(bomb)
    assert sibling.returncode == 0, sibling.stderr
    assert json.loads(sibling.stdout)["squares"] == [0, 1, 4, 9]


def test_the_broker_socket_must_be_a_unix_stream(tmp_path: Path) -> None:
    """A datagram socket could send to any abstract name through sendmsg's hidden address."""
    where: dict[str, Any] = {"python": sys.executable, "scratch": tmp_path}
    datagram, stream = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM), socket.socketpair()
    try:
        with pytest.raises(ValueError, match="AF_UNIX SOCK_STREAM"):
            sandbox.prepare(tmp_path / "a.py", broker_fd=datagram[0].fileno(), **where)
        with pytest.raises(ValueError, match="not both"):
            url = "http://127.0.0.1:1"
            sandbox.prepare(tmp_path / "a.py", broker_fd=stream[0].fileno(), api_url=url, **where)
    finally:
        for end in (*datagram, *stream):
            end.close()
    with open(tmp_path / "file", "w") as not_a_socket:
        before = sorted(os.listdir("/proc/self/fd"))
        with pytest.raises(ValueError, match="is not a socket"):
            sandbox.prepare(tmp_path / "a.py", broker_fd=not_a_socket.fileno(), **where)
        assert sorted(os.listdir("/proc/self/fd")) == before  # the copy it looked at is closed


def test_a_missing_broker_socket_fails_closed(world: World) -> None:
    """Launched without its fd (pass_fds forgotten), the agent never starts."""
    agent = world.base / f"agent_{uuid.uuid4().hex[:8]}.py"
    agent.write_text("print('ran')\n", encoding="utf-8")
    scratch = Path(tempfile.mkdtemp(dir=world.base))
    ours, child_end = socket.socketpair()
    try:
        launch = sandbox.prepare(
            agent, python=sys.executable, scratch=scratch, broker_fd=child_end.fileno()
        )
        done = subprocess.run(launch.argv, cwd=scratch, capture_output=True, text=True, timeout=60)
    finally:
        ours.close()
        child_end.close()
    assert done.returncode == sandbox.BOOT_FAILURE_EXIT
    assert done.stdout == ""
    assert done.stderr.startswith("sandbox: inherited fds could not be applied: [Errno 9] fd ")


OPEN_FDS = """
    import os

    def is_open(fd):
        try:
            os.fstat(fd)
            return True
        except OSError:
            return False

    print([fd for fd in range(1024) if is_open(fd)])
"""


def test_the_bootstrap_closes_every_fd_it_was_not_told_to_keep(world: World) -> None:
    """Whatever a launcher lets through besides the broker's socket, the agent never sees."""
    agent = world.base / f"agent_{uuid.uuid4().hex[:8]}.py"
    agent.write_text(textwrap.dedent(OPEN_FDS), encoding="utf-8")
    scratch = Path(tempfile.mkdtemp(dir=world.base))
    ours, child_end = socket.socketpair()
    broker_fd = child_end.fileno()
    try:
        with open(world.secret) as stray:
            launch = sandbox.prepare(
                agent, python=sys.executable, scratch=scratch, broker_fd=broker_fd, layers={"caps"}
            )
            done = subprocess.run(
                launch.argv,
                cwd=scratch,
                capture_output=True,
                text=True,
                timeout=60,
                pass_fds=(*launch.pass_fds, stray.fileno()),
            )
    finally:
        ours.close()
        child_end.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{[0, 1, 2, broker_fd]}\n"


# ----------------------------------------------------------------------------------------------
# The user's attachments: files and folders given to read, and only read, at their own paths.

READS_WHAT_IT_WAS_GIVEN = """
    import errno, json, os, sys

    p = json.loads(json.load(sys.stdin)["task"])

    def attempt(path, mode):
        try:
            with open(path, mode) as handle:
                handle.read() if mode == "r" else handle.write("x")
            return "ok"
        except OSError as error:
            return type(error).__name__ + " " + errno.errorcode.get(error.errno or 0, "?")

    with open(p["file"]) as file, open(os.path.join(p["folder"], "inner.txt")) as inner:
        report = {"file": file.read(), "inner": inner.read(), "listing": os.listdir(p["folder"])}
    report["write"] = attempt(p["file"], "a")
    report["into_folder"] = attempt(os.path.join(p["folder"], "new.txt"), "w")
    report["beside"] = attempt(p["beside"], "w")
    report["sibling"] = attempt(p["sibling"], "r")
    print(json.dumps(report))
"""


@dataclass
class Attachments:
    """A user's folder in the world: a file and a folder attached, a sibling that is not."""

    base: Path

    @property
    def file(self) -> Path:
        return self.base / "data file.csv"

    @property
    def folder(self) -> Path:
        return self.base / "reports"

    def task(self) -> dict[str, object]:
        return {
            "file": str(self.file),
            "folder": str(self.folder),
            "beside": str(self.base / "new.txt"),
            "sibling": str(self.base / "private.txt"),
        }

    def unchanged(self) -> bool:
        return (
            self.file.read_text() == "a,b\n1,2\n"
            and sorted(p.name for p in self.base.iterdir())
            == [self.file.name, "private.txt", "reports"]
            and [p.name for p in self.folder.iterdir()] == ["inner.txt"]
        )


@pytest.fixture
def attachments(world: World) -> Attachments:
    """World-readable, so the unprivileged uid may read them too."""
    base = world.base / f"user_{uuid.uuid4().hex[:8]}"
    (base / "reports").mkdir(parents=True, mode=0o755)
    base.chmod(0o755)
    (base / "reports").chmod(0o755)
    made = Attachments(base)
    made.file.write_text("a,b\n1,2\n")
    (made.folder / "inner.txt").write_text("inner")
    (base / "private.txt").write_text("not attached")
    for path in (made.file, made.folder / "inner.txt", base / "private.txt"):
        path.chmod(0o644)
    return made


REFUSED_WRITE = {"PermissionError EACCES", "OSError EROFS"}  # Landlock; a read-only bind
REFUSED_READ = {"PermissionError EACCES", "FileNotFoundError ENOENT"}  # Landlock; not bound


@pytest.mark.parametrize("layer_set", ["landlock", "bwrap", ALL])
def test_an_agent_reads_what_it_was_given_and_changes_nothing(
    layer_set: str, world: World, attachments: Attachments
) -> None:
    run = run_agent(
        READS_WHAT_IT_WAS_GIVEN,
        layer_set,
        world,
        read_only=(attachments.file, attachments.folder),
        task=attachments.task(),
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert (report["file"], report["inner"], report["listing"]) == (
        "a,b\n1,2\n",
        "inner",
        ["inner.txt"],
    )
    assert {report["write"], report["into_folder"]} <= REFUSED_WRITE, report
    assert report["sibling"] in REFUSED_READ, report
    if "landlock" in run.launch.layers:  # bwrap alone: a private /tmp inside, not the host's
        assert report["beside"] == "PermissionError EACCES", report
    assert attachments.unchanged()


def test_attachments_are_read_rules_and_read_only_binds(tmp_path: Path) -> None:
    given = tmp_path / "data.csv"
    given.write_text("x")
    launch = sandbox.prepare(
        tmp_path / "agent.py",
        python=sys.executable,
        scratch=tmp_path,
        read_only=[given, tmp_path / "missing.csv"],
        layers={"landlock", "bwrap"},
    )
    if not {"landlock", "bwrap"} <= set(launch.layers):
        pytest.skip("; ".join(launch.skipped))
    argv = launch.argv
    at = argv.index("--ro-bind")
    assert argv[at : at + 3] == ["--ro-bind", str(given), str(given)]
    assert "missing.csv" not in " ".join(argv), "a path that does not exist is not mounted"
    boot = argv.index("-S") + 1  # python -X utf8 -I -S sandbox_boot.py <walls> -- agent.py
    assert argv[boot] == str(sandbox._BOOTSTRAP)
    walls, _ = sandbox_boot.Walls.parse(argv[boot + 1 :])
    assert str(given) in walls.read_only
    assert str(given) not in walls.read_write


def test_the_uid_layer_says_which_attachment_it_could_not_read(world: World) -> None:
    if not sandbox.probe().can_drop_uid:
        pytest.skip(sandbox.probe().why_not["uid"])
    python = _python_for("uid", world)
    if not _uid_reaches(python, world):
        pytest.skip(f"uid {sandbox.DROP_UID} cannot run any interpreter here")
    folder = world.base / f"given_{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o755)
    (folder / "open.txt").write_text("x")
    (folder / "open.txt").chmod(0o644)
    (folder / "closed.txt").write_text("x")
    (folder / "closed.txt").chmod(0o600)

    def uid_launch(*given: Path) -> sandbox.Launch:
        scratch = Path(tempfile.mkdtemp(dir=world.base))
        return sandbox.prepare(
            world.base / "agent.py",
            python=python,
            scratch=scratch,
            read_only=given,
            layers={"uid"},
        )

    assert uid_launch(folder / "open.txt").layers == ("uid",)
    [file_reason] = uid_launch(folder / "open.txt", folder / "closed.txt").skipped
    assert file_reason == (
        f"uid: not dropping to uid {sandbox.DROP_UID}: it cannot read {folder / 'closed.txt'}, "
        "which the agent was given to read (an attachment); make it readable by others to keep "
        "this layer"
    )
    launch = uid_launch(folder)
    assert (launch.layers, launch.user) == ((), None)
    [folder_reason] = launch.skipped
    assert f"it cannot read {folder / 'closed.txt'} (in {folder}), which the agent" in folder_reason
