"""executor: real agent subprocesses against the fake Messages API."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import write_agent, write_raw
from conftest import TEST_KEY, OpenDoor
from fakeapi import FakeMessagesAPI, Reply

from agentgod import agentvenv, config, executor, generator, sandbox
from agentgod.agent_runtime import BROKER_FD_VARIABLE, encode_frame
from agentgod.agentpool import AgentPool, Planned


def test_output_and_usage_round_trip(fake_api: FakeMessagesAPI, door: OpenDoor) -> None:
    fake_api.queue(Reply("the model's words", usage={"input_tokens": 11, "output_tokens": 7}))
    path = write_agent(
        """
        def run(task, previous_outputs):
            return call_llm("Answer: " + task, system="You are terse.") + " | " + task
        """
    )
    channel = door("usage_agent")
    result = executor.execute_agent(path, "what?", {}, timeout=30, door=channel)
    assert result.ok, result.error
    assert result.output == "the model's words | what?"
    assert result.kind == "ok"
    assert result.exit_code == 0
    assert channel.wait_ended(10)
    billed = channel.usage
    assert (billed.calls, billed.input_tokens, billed.output_tokens) == (1, 11, 7)
    [request] = fake_api.messages()
    assert request.api_key == TEST_KEY, "the broker adds the key; the agent never had it"
    assert request.system == "You are terse."
    assert request.prompt == "Answer: what?"


def test_previous_outputs_arrive_as_given(fake_api: FakeMessagesAPI) -> None:
    path = write_agent(
        """
        def run(task, previous_outputs):
            return json.dumps(previous_outputs, sort_keys=True)
        """
    )
    upstream = {"research_agent": "facts", "analysis_agent": "insight"}
    result = executor.execute_agent(path, "t", upstream, timeout=30)
    assert json.loads(result.output) == upstream


def test_utf8_survives_both_ways(fake_api: FakeMessagesAPI, door: OpenDoor) -> None:
    text = "emoji 🚀🧠, CJK 漢字かな, RTL עברית مرحبا, combining é"
    fake_api.handler = lambda request: Reply(request.prompt[::-1])
    path = write_agent(
        """
        def run(task, previous_outputs):
            return task + "\\n" + call_llm(task) + "\\n" + previous_outputs["up"]
        """
    )
    result = executor.execute_agent(path, text, {"up": text.upper()}, timeout=30, door=door())
    assert result.ok, result.error
    assert result.output.splitlines() == [text, text[::-1], text.upper()]
    assert fake_api.messages()[0].prompt == text


def test_five_megabytes_of_output(fake_api: FakeMessagesAPI) -> None:
    path = write_agent(
        """
        def run(task, previous_outputs):
            return "x" * (5 * 1024 * 1024)
        """
    )
    result = executor.execute_agent(path, "t", {}, timeout=60)
    assert result.ok, result.error
    assert len(result.output) == 5 * 1024 * 1024


def test_runaway_output_is_cut_off(fake_api: FakeMessagesAPI) -> None:
    path = write_agent(
        """
        def run(task, previous_outputs):
            while True:
                sys.stdout.write("y" * 65536)
        """
    )
    result = executor.execute_agent(path, "t", {}, timeout=60)
    assert not result.ok
    assert result.kind == "output_limit"
    assert result.output == ""


def test_a_crash_carries_its_traceback(fake_api: FakeMessagesAPI) -> None:
    path = write_agent(
        """
        def helper(value):
            raise ValueError(f"cannot handle {value}")

        def run(task, previous_outputs):
            return helper(task)
        """
    )
    result = executor.execute_agent(path, "this input", {}, timeout=30)
    assert not result.ok
    assert result.kind == "crash"
    assert result.exit_code == 1
    assert "Traceback" in result.error
    assert "ValueError: cannot handle this input" in result.error


def test_an_empty_result_fails_with_a_reason(fake_api: FakeMessagesAPI) -> None:
    path = write_agent(
        """
        def run(task, previous_outputs):
            return "   "
        """
    )
    result = executor.execute_agent(path, "t", {}, timeout=30)
    assert not result.ok
    assert result.exit_code != 0
    assert "empty result" in result.error


def test_a_silent_program_fails(fake_api: FakeMessagesAPI) -> None:
    path = write_raw("import sys\nsys.stdin.read()\n")
    result = executor.execute_agent(path, "t", {}, timeout=30)
    assert not result.ok
    assert result.kind == "silent"
    assert result.exit_code == 0


def test_an_unstartable_interpreter_is_a_result(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    broken = isolated_home / ".agent_venv" / "bin" / "python"
    broken.parent.mkdir(parents=True)
    broken.write_text("not a program")
    broken.chmod(stat.S_IRUSR)
    path = write_agent("def run(task, previous_outputs):\n    return 'x'\n")
    result = executor.execute_agent(path, "t", {}, timeout=30)
    assert not result.ok
    assert result.kind == "unstartable"
    assert result.exit_code is None


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as handle:  # a zombie is as good as gone
        return handle.read().split(") ")[1].startswith("Z")


def _wait_until_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.02)
    return False


def test_timeout_kills_the_whole_process_group(
    fake_api: FakeMessagesAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX", "off")  # the sandbox would refuse the fork this test needs
    pid_file = tmp_path / "grandchild.pid"
    path = write_raw(
        f"""
        import os, subprocess, sys, time
        sys.stdin.read()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open({str(pid_file)!r}, "w") as handle:
            handle.write(str(child.pid))
        time.sleep(120)
        """
    )
    result = executor.execute_agent(path, "t", {}, timeout=2)
    assert result.timed_out
    assert result.kind == "timeout"
    assert "timed out after 2 s" in result.error
    assert result.seconds < 30
    grandchild = int(pid_file.read_text())
    assert _wait_until_gone(grandchild), "the grandchild outlived the timeout"


def test_an_agent_that_never_reads_a_large_payload_still_times_out(
    fake_api: FakeMessagesAPI,
) -> None:
    path = write_raw("import time\ntime.sleep(120)\n")
    result = executor.execute_agent(path, "t", {"big": "z" * 2_000_000}, timeout=2)
    assert result.kind == "timeout"


def _wakeups() -> int:
    """How many times this thread has gone to sleep and been woken (voluntary switches)."""
    status = Path("/proc/thread-self/status").read_text(encoding="ascii")
    return int(re.search(r"voluntary_ctxt_switches:\s+(\d+)", status).group(1))  # type: ignore[union-attr]


def test_waiting_for_a_quiet_agent_does_not_wake_the_parent_on_a_clock(
    fake_api: FakeMessagesAPI,
) -> None:
    """The pump sleeps on the agent's pipes and its exit (a pidfd), not on a 100 ms timer: the
    thread that waits two seconds for an agent that says nothing is woken a handful of times
    (the output, the pipes closing, the exit), not twenty."""
    path = write_raw("import sys, time\nsys.stdin.read()\ntime.sleep(2)\nprint('done')\n")
    agent = executor.start_agent(path, timeout=30)
    assert isinstance(agent, executor.AgentProcess)
    before = _wakeups()
    result = agent.run("t", {})
    woken = _wakeups() - before
    assert (result.ok, result.output) == (True, "done"), result.error
    assert woken < 10, f"the waiting thread was woken {woken} times in two quiet seconds"


def test_without_a_pidfd_the_pump_still_sees_the_end_and_the_deadline(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another system (or an old kernel) has no pidfd_open: the pump looks on a clock instead."""
    monkeypatch.delattr(os, "pidfd_open", raising=False)
    quick = write_raw("import sys\nsys.stdin.read()\nprint('done')\n", name="quick_agent")
    result = executor.execute_agent(quick, "t", {}, timeout=30)
    assert (result.ok, result.output) == (True, "done"), result.error
    hang = write_raw("import time\ntime.sleep(120)\n", name="hanging_agent")
    assert executor.execute_agent(hang, "t", {}, timeout=1).kind == "timeout"


def test_the_child_environment_is_minimal(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARENT_SECRET", "do-not-leak-this-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "another-secret-value")
    path = write_raw(
        "import json, os, sys\nsys.stdin.read()\nprint(json.dumps(dict(os.environ)))\n"
    )
    result = executor.execute_agent(path, "t", {}, timeout=30)
    env = json.loads(result.output)
    assert "do-not-leak-this-value" not in result.output
    assert "PARENT_SECRET" not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert TEST_KEY not in result.output, "agents hold no key: the broker does"
    assert not {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "LLM_EFFORT"} & set(env)
    assert env["AGENT_MODEL"] == "claude-sonnet-5-5"
    assert env["PATH"] == "/usr/bin:/bin"
    allowed = {
        "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONUTF8", "PYTHONIOENCODING",
        "PYTHONDONTWRITEBYTECODE", "MALLOC_ARENA_MAX", "AGENT_MODEL", "AGENTGOD_BROKER_FD",
        "PWD",  # bubblewrap sets it to the scratch directory
    }  # fmt: skip
    assert set(env) <= allowed


def test_cwd_home_and_tmpdir_are_a_fresh_scratch_directory(fake_api: FakeMessagesAPI) -> None:
    path = write_raw(
        "import json, os, sys, tempfile\nsys.stdin.read()\n"
        "print(json.dumps([os.getcwd(), os.environ['HOME'], tempfile.gettempdir()]))\n"
    )
    result = executor.execute_agent(path, "t", {}, timeout=30)
    cwd, home, tmp = json.loads(result.output)
    assert cwd == home == tmp
    assert Path(cwd).name.startswith("agentgod-raw_agent-")
    assert Path(cwd).resolve() != Path.cwd().resolve()
    assert not Path(cwd).exists(), "the scratch directory must be removed afterwards"


def test_call_llm_retries_a_529(fake_api: FakeMessagesAPI, door: OpenDoor) -> None:
    fake_api.queue(Reply.error(529), Reply.error(529), Reply("third time lucky"))
    path = write_agent("def run(task, previous_outputs):\n    return call_llm(task)\n")
    result = executor.execute_agent(path, "t", {}, timeout=60, door=door())
    assert result.ok, result.error
    assert result.output == "third time lucky"
    assert [r.status for r in fake_api.messages()] == [529, 529, 200]


def test_call_llm_does_not_retry_a_401(fake_api: FakeMessagesAPI, door: OpenDoor) -> None:
    fake_api.valid_keys = {"some-other-key"}
    path = write_agent("def run(task, previous_outputs):\n    return call_llm(task)\n")
    result = executor.execute_agent(path, "t", {}, timeout=30, door=door())
    assert result.kind == "crash"
    assert "authentication" in result.error
    assert len(fake_api.messages()) == 1
    assert TEST_KEY not in result.error


@pytest.mark.parametrize(
    ("model", "effort", "sent"),
    [
        ("claude-sonnet-5-5", "medium", {"effort": "medium"}),
        ("claude-sonnet-5-5", "max", {"effort": "high"}),
        ("claude-haiku-4-5", "high", None),
    ],
)
def test_the_granted_effort_is_sent_only_when_the_model_takes_it(
    fake_api: FakeMessagesAPI,
    door: OpenDoor,
    model: str,
    effort: str,
    sent: dict[str, str] | None,
) -> None:
    path = write_agent("def run(task, previous_outputs):\n    return call_llm(task)\n")
    channel = door(model=model, effort=effort)
    result = executor.execute_agent(path, "t", {}, timeout=30, model=model, door=channel)
    assert result.ok, result.error
    body = fake_api.messages()[0].body
    assert body["model"] == model
    assert body.get("output_config") == sent


def test_a_token_share_caps_each_call_and_stops_the_agent(
    fake_api: FakeMessagesAPI, door: OpenDoor
) -> None:
    fake_api.queue(Reply("first", usage={"input_tokens": 100, "output_tokens": 400}))
    path = write_agent(
        """
        def run(task, previous_outputs):
            first = call_llm(task, max_tokens=9000)
            return first + call_llm(task, max_tokens=9000)
        """
    )
    channel = door(share_tokens=700)
    result = executor.execute_agent(path, "t", {}, timeout=30, door=channel)
    [request] = fake_api.messages()
    assert 0 < request.body["max_tokens"] < 700, "the share minus the prompt's estimate"
    assert not result.ok
    assert "BrokerRefused" in result.error and "budget" in result.error
    assert channel.wait_ended(10)
    assert channel.usage.output_tokens == 400
    assert channel.usage.refusals == {"budget": 1}


def test_secrets_in_stderr_are_redacted(fake_api: FakeMessagesAPI) -> None:
    path = write_raw(
        f"import sys\nsys.stdin.read()\nsys.stderr.write('key is {TEST_KEY}\\n')\nsys.exit(1)\n"
    )
    result = executor.execute_agent(path, "t", {}, timeout=30)
    assert TEST_KEY not in result.error
    assert "[redacted]" in result.error


@pytest.mark.parametrize("name", ["../../../pwned", "Bad", "a", "x" * 41, "con/../../x", ""])
def test_save_agent_file_refuses_unsafe_names(name: str) -> None:
    with pytest.raises(ValueError):
        executor.save_agent_file(name, "pass\n")


def test_save_agent_file_writes_inside_generated_agents(isolated_home: Path) -> None:
    path = executor.save_agent_file("csv_reader", "print('hi')\n")
    assert path == (isolated_home / "generated_agents" / "csv_reader.py").resolve()
    assert path.read_text() == "print('hi')\n"
    assert list(path.parent.iterdir()) == [path]


def test_save_agent_file_never_writes_through_a_link(isolated_home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("theirs\n", encoding="utf-8")
    folder = isolated_home / "generated_agents"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "csv_reader.py").symlink_to(outside)
    with pytest.raises(ValueError, match="escapes"):
        executor.save_agent_file("csv_reader", "print('hi')\n")
    assert outside.read_text(encoding="utf-8") == "theirs\n"


def test_refused_packages_are_reported_and_never_installed(isolated_home: Path) -> None:
    report = agentvenv.install_dependencies(["definitely-not-allowed-pkg", "os-sys"])
    assert report.refused == ["definitely-not-allowed-pkg", "os-sys"]
    assert report.installed == report.failed == []
    assert not (isolated_home / ".agent_venv").exists()


def test_allowed_packages_install_into_the_agent_venv_and_agents_can_use_them(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    report = agentvenv.install_dependencies(["Tabulate", "numpy", "tabulate"])
    assert report.installed == ["tabulate"], report.detail
    assert report.refused == ["numpy"]
    assert report.failed == []
    venv_python = isolated_home / ".agent_venv" / "bin" / "python"
    assert agentvenv.agent_python() == str(venv_python)
    again = agentvenv.install_dependencies(["tabulate"])
    assert again.installed == ["tabulate"], "already present: probed, not reinstalled"
    path = write_agent(
        """
        import tabulate

        def run(task, previous_outputs):
            return tabulate.tabulate([[task, len(task)]], headers=["task", "length"])
        """
    )
    result = executor.execute_agent(path, "hello", {}, timeout=60)
    assert result.ok, result.error
    assert "hello" in result.output and "length" in result.output


def test_an_agent_starts_from_a_parent_with_many_open_descriptors(
    fake_api: FakeMessagesAPI, door: OpenDoor
) -> None:
    """The fork holds every descriptor of ours until exec; the sandbox's hook must still open
    its cgroup file, so it runs before the open-files limit comes down."""
    held = [socket.socket() for _ in range(400)]
    try:
        path = write_agent("def run(task, previous_outputs):\n    return call_llm(task)\n")
        result = executor.execute_agent(path, "t", {}, timeout=30, door=door())
    finally:
        for sock in held:
            sock.close()
    assert result.ok, result.error


# ---- the user's files, mounted read-only ----------------------------------------------------

READS_ITS_ATTACHMENTS = """
import errno

def attempt(path, mode):
    try:
        with open(path, mode, encoding="utf-8") as handle:
            if mode == "r":
                handle.read()
            else:
                handle.write("x")
        return "ok"
    except OSError as error:
        return type(error).__name__ + " " + errno.errorcode.get(error.errno or 0, "?")

def run(task, previous_outputs):
    paths = json.loads(task)
    files = input_files()
    with open(files["sales.csv"], encoding="utf-8") as handle:
        report = {"names": sorted(files), "sales": handle.read()}
    report["listing"] = sorted(os.listdir(files["reports"]))
    with open(os.path.join(files["reports"], "q1.txt"), encoding="utf-8") as handle:
        report["q1"] = handle.read()
    if paths:
        report["write"] = attempt(files["sales.csv"], "a")
        report["beside"] = attempt(paths["beside"], "w")
        report["into_folder"] = attempt(os.path.join(files["reports"], "new.txt"), "w")
        report["sibling"] = attempt(paths["sibling"], "r")
    return json.dumps(report)
"""

SALES = "region,amount\nnorth,3\nsouth,4\n"


@pytest.fixture
def user_files(tmp_path: Path) -> Path:
    """A user's folder: two attachments (a file and a folder) and a file that is not attached."""
    folder = tmp_path / "user files"
    (folder / "reports").mkdir(parents=True)
    (folder / "sales.csv").write_text(SALES, encoding="utf-8")
    (folder / "reports" / "q1.txt").write_text("q1 was good", encoding="utf-8")
    (folder / "private.txt").write_text("not attached", encoding="utf-8")
    return folder


def run_reader(user_files: Path, *, attempt_writes: bool) -> executor.AgentResult:
    inputs = {"sales.csv": user_files / "sales.csv", "reports": user_files / "reports"}
    task = {"beside": str(user_files / "new.txt"), "sibling": str(user_files / "private.txt")}
    return executor.execute_agent(
        write_agent(READS_ITS_ATTACHMENTS, name="reader_agent"),
        json.dumps(task if attempt_writes else {}),
        {},
        timeout=30,
        inputs=inputs,
        read_only=list(inputs.values()),
    )


def without_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """bwrap out of reach: probe() caches per process, so it must probe again (and after)."""
    empty = tmp_path / "bin-without-bwrap"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    sandbox.probe.cache_clear()


@pytest.fixture
def probe_again() -> Iterator[None]:
    yield
    sandbox.probe.cache_clear()  # the next test probes the real PATH again


@pytest.mark.parametrize("bwrap", ["with bwrap", "without bwrap"])
def test_an_agent_reads_its_attachments_and_can_change_nothing(
    bwrap: str,
    user_files: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    probe_again: None,
) -> None:
    if bwrap == "without bwrap":
        without_bwrap(monkeypatch, tmp_path)
    elif sandbox.probe().bwrap is None:
        pytest.skip(sandbox.probe().why_not["bwrap"])
    if "landlock" in sandbox.probe().why_not:
        pytest.skip(sandbox.probe().why_not["landlock"])
    result = run_reader(user_files, attempt_writes=True)
    assert result.ok, result.error
    assert ("bwrap" in result.layers) == (bwrap == "with bwrap"), result.layers
    assert "landlock" in result.layers
    report = json.loads(result.output)
    assert report["names"] == ["reports", "sales.csv"]
    assert (report["sales"], report["listing"], report["q1"]) == (SALES, ["q1.txt"], "q1 was good")
    refused = {"PermissionError EACCES", "OSError EROFS"}  # Landlock; bwrap's read-only mount
    assert {report["write"], report["beside"], report["into_folder"]} <= refused, report
    assert report["sibling"] in {"PermissionError EACCES", "FileNotFoundError ENOENT"}, report
    assert (user_files / "sales.csv").read_text(encoding="utf-8") == SALES
    assert sorted(p.name for p in user_files.iterdir()) == ["private.txt", "reports", "sales.csv"]
    assert [p.name for p in (user_files / "reports").iterdir()] == ["q1.txt"]


def test_with_the_sandbox_off_an_agent_is_still_given_its_attachments(
    user_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX", "off")
    result = run_reader(user_files, attempt_writes=False)
    assert result.ok, result.error
    assert result.layers == ("rlimits",)
    report = json.loads(result.output)
    assert (report["names"], report["sales"], report["q1"]) == (
        ["reports", "sales.csv"],
        SALES,
        "q1 was good",
    )


def test_the_child_environment_names_the_attachments_as_json(tmp_path: Path) -> None:
    inputs = {"sales.csv": Path("/data/sales ✓.csv")}
    env = executor.child_environment(tmp_path, model="m", door=None, inputs=inputs)
    assert json.loads(env["AGENTGOD_INPUT_FILES"]) == {"sales.csv": "/data/sales ✓.csv"}
    assert env["AGENTGOD_INPUT_FILES"].isascii()
    assert "AGENTGOD_INPUT_FILES" not in executor.child_environment(tmp_path, model="m", door=None)


def attached(user_files: Path) -> dict[str, Path]:
    """The user's files as a run hands them to its agents: a file and a folder."""
    return {"sales.csv": user_files / "sales.csv", "reports": user_files / "reports"}


@contextlib.contextmanager
def standby_agent(
    door: OpenDoor, user_files: Path, name: str
) -> Iterator[tuple[Callable[[], executor.AgentProcess], executor.AgentProcess]]:
    """An agent started ahead of its code, as the pool starts one (the user's files attached),
    and a way to start more; whichever were not run are killed after."""
    started: list[executor.AgentProcess] = []

    def start() -> executor.AgentProcess:
        inputs = attached(user_files)
        agent = executor.start_agent(
            None,
            timeout=30,
            door=door(name),
            preload=generator.RUNTIME_MODULES,
            inputs=inputs,
            read_only=list(inputs.values()),
        )
        assert isinstance(agent, executor.AgentProcess), agent
        started.append(agent)
        return agent

    try:
        yield start, start()
    finally:
        for agent in started:
            if agent.process.returncode is None:
                agent.discard()


def _eventually(holds: Callable[[], bool], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not holds():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_standby_agent_is_given_the_attachments_when_it_starts(
    fake_api: FakeMessagesAPI, door: OpenDoor, user_files: Path
) -> None:
    """The pool starts processes before any plan, with the user's files already mounted: the
    agent that is given one reads them."""
    inputs = attached(user_files)
    pool = AgentPool(
        config.settings(),
        open_door=door,
        preload=generator.RUNTIME_MODULES,
        inputs=inputs,
        read_only=list(inputs.values()),
    )
    try:
        pool.expect_plan()
        assert _eventually(lambda: pool.census().standby > 0), pool.census()
        pool.begin_round([Planned("reader_agent")])
        with pool.writing("reader_agent"):
            path = write_agent(READS_ITS_ATTACHMENTS, name="reader_agent")
        pool.ready("reader_agent", path, None)
        assert pool.census().held == 1, "a standby process became the agent's"
        assert pool.take_slot("reader_agent")
        result, _ = pool.run("reader_agent", path, "{}", {})
    finally:
        pool.close()
    assert result.ok, result.error
    assert json.loads(result.output)["sales"] == SALES
    assert pool.census().alive == 0


def test_an_agent_given_its_code_ahead_runs_it_and_refuses_another_file(
    fake_api: FakeMessagesAPI, door: OpenDoor, user_files: Path
) -> None:
    with standby_agent(door, user_files, "reader_agent") as (start, agent):
        path = write_agent(READS_ITS_ATTACHMENTS, name="reader_agent")
        agent.give_code(path)
        with pytest.raises(ValueError, match="already has its code"):
            agent.give_code(path)
        with pytest.raises(ValueError, match="was given"):
            agent.run("{}", {}, path=path.with_name("other_agent.py"))
        elsewhere = start()
        try:
            with pytest.raises(ValueError, match="not in the folder"):
                elsewhere.give_code(user_files / "reader_agent.py")
        finally:
            elsewhere.discard()
        result = agent.run("{}", {}, path=path)
    assert result.ok, result.error
    assert json.loads(result.output)["sales"] == SALES


ECHOES_ITS_INPUT = """
def run(task, previous_outputs):
    return json.dumps({"task": task, "previous_outputs": previous_outputs})
"""


@pytest.mark.parametrize("size", [10, 300_000], ids=["small", "more-than-a-pipe-holds"])
def test_an_agent_given_its_input_ahead_is_collected_by_run(
    fake_api: FakeMessagesAPI, door: OpenDoor, user_files: Path, size: int
) -> None:
    """The builder hands a first-wave agent its input; run() only sends what the pipe could
    not take and collects the answer, which is the same as if run() had given the input."""
    task = "t" * size
    with standby_agent(door, user_files, "echo_agent") as (_, agent):
        path = write_agent(ECHOES_ITS_INPUT, name="echo_agent")
        agent.give_code(path)
        agent.give_input(task, {})
        assert (agent.unsent == b"") == (size == 10)
        with pytest.raises(ValueError, match="takes one input"):
            agent.give_input(task, {})
        with pytest.raises(ValueError, match="another input"):
            agent.run("other task", {}, path=path)
        result = agent.run(task, {}, path=path)
    assert result.ok, result.error
    assert json.loads(result.output) == {"task": task, "previous_outputs": {}}


def test_an_agent_without_its_code_cannot_take_its_input(door: OpenDoor, user_files: Path) -> None:
    with (
        standby_agent(door, user_files, "echo_agent") as (_, agent),
        pytest.raises(ValueError, match="needs its code first"),
    ):
        agent.give_input("t", {})


# ---- artifacts through the broker's door ---------------------------------------------------


def test_an_agents_artifact_reaches_the_broker_as_one_frame(fake_api: FakeMessagesAPI) -> None:
    """The test plays the broker on a socketpair: reads the frame, checks it, answers."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    frames: list[dict[str, Any]] = []

    def broker() -> None:
        with ours:
            header = ours.recv(4, socket.MSG_WAITALL)
            frame = json.loads(ours.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL))
            frames.append(frame)
            data = base64.b64decode(frame["data"], validate=True)
            ours.sendall(encode_frame({"ok": True, "name": "report-2.md", "bytes": len(data)}))
            ours.recv(1)  # until the agent hangs up

    serving = threading.Thread(target=broker, daemon=True)
    serving.start()
    door = _SocketDoor(theirs)
    path = write_agent(
        """
        def run(task, previous_outputs):
            return save_artifact("report.md", "# Total\\n7 ✓\\n")
        """
    )
    result = executor.execute_agent(path, "t", {}, timeout=30, door=door)  # type: ignore[arg-type]
    serving.join(10)
    assert result.ok, result.error
    assert result.output == "report-2.md", "the agent is told the name the run stored"
    assert frames == [
        {
            "op": "artifact",
            "name": "report.md",
            "data": base64.b64encode("# Total\n7 ✓\n".encode()).decode("ascii"),
        }
    ]


class _SocketDoor:
    """The part of broker.Channel the executor uses, around one end of a socketpair."""

    def __init__(self, child: socket.socket) -> None:
        self.child = child
        self.name = "agent"

    @property
    def child_fd(self) -> int:
        return self.child.fileno()

    def child_env(self) -> dict[str, str]:
        return {BROKER_FD_VARIABLE: str(self.child.fileno())}

    def close_child_end(self) -> None:
        self.child.close()

    def close(self) -> None:
        self.child.close()
