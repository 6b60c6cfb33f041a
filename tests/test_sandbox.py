"""sandbox and sandbox_boot: real children under each layer. Escapes are contained; a legitimate
agent still works; the bootstrap stays lean.

Every run goes through `sandbox.prepare` and is started the way the executor starts agents
(scratch cwd, minimal environment, own session, rlimits in preexec). A layer is skipped only
when this machine lacks it, with the reason `prepare` or `probe` gives.
"""

from __future__ import annotations

import json
import os
import re
import resource
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
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import escapes
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandbox
import sandbox_boot

SECRET = "the-planted-secret"
ALL = "all"  # the layer set `prepare` picks by itself
SETS = ("landlock", "seccomp", "uid", "bwrap", ALL)


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
    """A world-readable place outside scratch, the servers and a victim process."""

    base: Path
    api_port: int
    other_port: int
    victim: subprocess.Popen[bytes]

    @property
    def secret(self) -> Path:
        return self.base / "secret.txt"

    @property
    def outside(self) -> Path:
        return self.base / "outside"

    @property
    def outside_file(self) -> Path:
        """What write_outside_scratch tries to create."""
        return self.outside / "pwned"


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    base = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    base.chmod(0o755)  # the unprivileged uid must reach agents and scratch, not the secret
    (base / "secret.txt").write_text(SECRET, encoding="utf-8")
    (base / "secret.txt").chmod(0o600)
    (base / "outside").mkdir(mode=0o755)
    api = ThreadingHTTPServer(("127.0.0.1", 0), _EchoAPI)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    other = socket.create_server(("127.0.0.1", 0))  # the kernel completes handshakes unaccepted
    victim = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    try:
        yield World(base, api.server_address[1], other.getsockname()[1], victim)
    finally:
        victim.kill()
        victim.wait()
        api.shutdown()
        other.close()
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


def run_agent(
    source: str,
    layer_set: str,
    world: World,
    *,
    python: str | None = None,
    read_only: tuple[Path, ...] = (),
) -> Run:
    """Write the agent, prepare its launch and run it as the executor would."""
    python = python or _python_for(layer_set, world)
    name = uuid.uuid4().hex[:8]
    agent = world.base / f"agent_{name}.py"
    agent.write_text(textwrap.dedent(source), encoding="utf-8")
    scratch = world.base / f"scratch_{name}"
    scratch.mkdir(mode=0o700)
    layers = None if layer_set == ALL else {layer_set}
    launch = sandbox.prepare(
        agent,
        python=python,
        scratch=scratch,
        api_url=f"http://127.0.0.1:{world.api_port}",
        layers=layers,
        read_only=read_only,
    )
    expected = {"landlock", "seccomp"} if layer_set == ALL else {layer_set}
    if not expected <= set(launch.layers):
        pytest.skip("; ".join(launch.skipped))

    def limits() -> None:  # the executor's preexec, which Launch.preexec is chained after
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
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{world.api_port}",
    }
    params = {
        "target": world.victim.pid,
        "secret": str(world.secret),
        "outside": str(world.outside_file),
        "api_port": world.api_port,
        "other_port": world.other_port,
    }
    payload = {"task": json.dumps(params), "previous_outputs": {}}  # as the executor sends it
    # Files, not pipes: fork-bomb children keep pipes open, and the executor kills them anyway.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
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
        )
        try:
            child.communicate(json.dumps(payload), timeout=60)
        finally:
            _kill_group(child.pid)  # as the executor does after every run
            child.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    return Run(launch, child.returncode, stdout, stderr, scratch)


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
    run = run_agent(escapes.SOURCES[name], layer_set, world)
    assert "ESCAPED" not in run.stdout, (run.launch.layers, run.stdout, run.stderr)
    assert _refused(run), (run.launch.layers, run.returncode, run.stdout, run.stderr)
    assert world.victim.poll() is None, "the victim was killed"
    assert not world.outside_file.exists()


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
        sys.path.insert(0, {str(Path(sandbox.__file__).parent)!r})
        from pathlib import Path
        import sandbox
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
    read_only=st.lists(st.sampled_from(["--", "--read-only", "a,b", ""]) | _ANY_ARG).map(tuple),
    read_write=st.lists(_ANY_ARG).map(tuple),
    ports=st.lists(st.integers(0, 65535)).map(tuple),
    agent=st.lists(_ANY_ARG, min_size=1),
)
def test_walls_survive_the_command_line(
    layers: tuple[str, ...],
    abi: int,
    read_only: tuple[str, ...],
    read_write: tuple[str, ...],
    ports: tuple[int, ...],
    agent: list[str],
) -> None:
    """Any path, even one spelled like a flag or like the end marker, arrives as it was sent."""
    sent = sandbox_boot.Walls(
        layers, landlock_abi=abi, read_only=read_only, read_write=read_write, tcp_ports=ports
    )
    walls, rest = sandbox_boot.Walls.parse([*sent.to_argv(), *agent])
    assert (walls.layers, walls.landlock_abi, walls.tcp_ports) == (layers, abi, ports)
    assert (walls.read_only, walls.read_write, rest) == (read_only, read_write, agent)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([], id="empty"),
        pytest.param(["--layers", "landlock"], id="no-end-marker"),
        pytest.param(["--layers", "landlock", "--landlock-abi", "7", "--"], id="no-agent"),
        pytest.param(["--layers", "", "--landlock-abi", "0", "--off", "1", "--", "a"], id="flag"),
        pytest.param(["--layers", "landlock", "--landlock-abi", "x", "--", "a"], id="abi"),
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


# Everything the bootstrap imports is paid by every agent, before its first line. The os family
# comes with `site` anyway; ctypes is the one binding Landlock and libseccomp need. A new import
# belongs here only with a measurement (python -X importtime) that says it is worth its cost.
BOOTSTRAP_IMPORTS = {
    *("ctypes", "ctypes._endian", "_ctypes", "struct", "_struct", "types", "errno"),
    *("os", "os.path", "posixpath", "genericpath", "stat", "_stat", "_collections_abc"),
}


def test_the_bootstrap_imports_only_what_it_needs() -> None:
    script = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"sys.path.insert(0, {str(Path(sandbox_boot.__file__).parent)!r})\n"
        "import sandbox_boot\n"
        "print(' '.join(sorted(set(sys.modules) - before - {'sandbox_boot'})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-X", "utf8", "-I", "-S", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) <= BOOTSTRAP_IMPORTS


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
