"""Stop signals to real agentgod processes: SIGINT, SIGTERM and SIGHUP end a run the same way.

Each test starts `agentgod` against the scripted fake, waits until its first agent is working
(the fake sees that agent's call), signals it, and then checks what is observable afterwards: the
exit code, the JSON reply, the run file, /proc (no process naming this home's generated_agents/
is left), and the scratch the run made (its folder, its agents' scratch dirs in TMPDIR).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY, agentgod_command, agentgod_env
from fakeapi import FakeMessagesAPI, Request
from scripted import Factory, agent_spec, plan
from terminal import Terminal

from agentgod import cli, executor, signals

SLEEPER = (
    "def run(task, previous_outputs):\n"
    "    call_llm('agent=sleeper_one keys=[]')\n"  # the fake API sees it start working
    "    time.sleep(120)\n"
)


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    """A run whose first agent calls the model and then sleeps; its second waits for it."""
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("sleeper_one"), agent_spec("sleeper_two", ["sleeper_one"]))]
    made.bodies["sleeper_one"] = [SLEEPER]
    return made


@pytest.fixture
def temp_dir(tmp_path: Path) -> Path:
    """The TMPDIR of the agentgod under test: where its agents' scratch dirs are made."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder


class Started:
    """One agentgod process whose first agent is known to be working."""

    def __init__(self, process: subprocess.Popen[Any], home: Path, temp_dir: Path) -> None:
        self.process = process
        self.home = home
        self.temp_dir = temp_dir

    def agents(self) -> list[int]:
        """Pids of live processes whose command line names this home's agent folder."""
        marker = str(self.home / "generated_agents")
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if marker in cmdline and state != "Z":
                found.append(int(entry.name))
        return found

    def scratch_dirs(self) -> list[str]:
        return sorted(p.name for p in self.temp_dir.iterdir() if p.name.startswith("agentgod-"))

    def run_folders(self) -> list[str]:
        folder = self.home / "generated_agents"
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def start(
    factory: Factory, isolated_home: Path, temp_dir: Path
) -> Iterator[Callable[..., Started]]:
    """Start agentgod on a long task and return once its first agent calls the model."""
    working = threading.Event()

    def agent_reply(name: str, request: Request) -> str:
        working.set()
        return f"result from {name}"

    factory.agent_reply = agent_reply
    started: list[subprocess.Popen[str]] = []

    def begin(*args: str, sandbox: str = "off") -> Started:
        env = agentgod_env(
            isolated_home,
            SANDBOX=sandbox,
            TMPDIR=str(temp_dir),
            ANTHROPIC_BASE_URL=factory.api.base_url,
            ANTHROPIC_API_KEY=TEST_KEY,
        )
        process = subprocess.Popen(
            [*agentgod_command(), *args, "a long task"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        started.append(process)
        assert working.wait(60), "the first agent never called the model"
        return Started(process, isolated_home, temp_dir)

    yield begin
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def _wait_for(condition: Callable[[], bool], what: str, seconds: float) -> None:
    """Look until `condition` holds (nothing announces it); fail after `seconds` naming `what`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {seconds:g} s")
        time.sleep(0.02)


@pytest.mark.parametrize("sandbox", ["off", "auto"])
@pytest.mark.parametrize(
    ("signum", "code"),
    [
        (signal.SIGINT, cli.EXIT_INTERRUPTED),
        (signal.SIGTERM, cli.EXIT_TERMINATED),
        (signal.SIGHUP, cli.EXIT_HANGUP),
    ],
)
def test_a_stop_signal_ends_the_run_cleanly_and_archives_it_as_interrupted(
    start: Callable[..., Started], signum: signal.Signals, code: int, sandbox: str
) -> None:
    """With the sandbox on, agents start slower: one is often still starting when the signal
    comes, and its scratch dir was the one left behind."""
    run = start("--json", sandbox=sandbox)
    assert run.agents(), "the running agent is visible in /proc"
    assert run.scratch_dirs(), "its scratch dir is in TMPDIR while it runs"
    run.process.send_signal(signum)
    stdout, stderr = run.process.communicate(timeout=60)

    assert run.process.returncode == code == 128 + signum, stderr
    reply = json.loads(stdout)
    assert reply["ok"] is False and reply["error"]["type"] == "interrupted"
    assert "Stopped." in stderr
    _wait_for(lambda: not run.agents(), "every agent process gone", 10)
    assert run.scratch_dirs() == [], "no agent scratch dir is left"
    assert run.run_folders() == [], "the run's agent folder is gone"

    [run_file] = (run.home / "runs").glob("*.md")
    text = run_file.read_text(encoding="utf-8")
    assert f"interrupted by {signum.name} before the run finished" in text
    assert "sleeper_one" in text, "what the run had done is in the record"
    with sqlite3.connect(run.home / "runs" / "history.db") as db:
        [(task, ok, calls)] = db.execute("SELECT task, ok, llm_calls FROM runs").fetchall()
    assert (task, ok) == ("a long task", 0)
    assert calls >= 3, "plan, generation and the agent's own call were spent and are counted"


def test_a_second_signal_does_not_cut_the_cleanup_short(start: Callable[..., Started]) -> None:
    run = start()
    run.process.send_signal(signal.SIGTERM)
    run.process.send_signal(signal.SIGHUP)
    run.process.send_signal(signal.SIGTERM)
    _, stderr = run.process.communicate(timeout=60)
    assert run.process.returncode in (cli.EXIT_TERMINATED, cli.EXIT_HANGUP), stderr
    assert "Traceback" not in stderr
    _wait_for(lambda: not run.agents(), "every agent process gone", 10)
    assert run.scratch_dirs() == [] and run.run_folders() == []
    assert len(list((run.home / "runs").glob("*.md"))) == 1


def test_an_agent_dies_with_a_parent_killed_outright(start: Callable[..., Started]) -> None:
    """SIGKILL runs no cleanup at all; without bubblewrap only PR_SET_PDEATHSIG stops the agent."""
    run = start()
    agents = run.agents()
    assert agents
    run.process.kill()
    run.process.communicate(timeout=60)
    _wait_for(lambda: not run.agents(), "the agents of a killed agentgod gone", 10)


def test_an_agent_dies_with_the_thread_that_started_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX", "off")  # no bubblewrap, whose --die-with-parent would do it
    started: list[executor.AgentProcess | executor.AgentResult] = []
    thread = threading.Thread(target=lambda: started.append(executor.start_agent(None)))
    thread.start()
    thread.join()
    [agent] = started
    assert isinstance(agent, executor.AgentProcess)
    try:
        # It waits for its input, so only the kernel's parent-death signal can end it.
        assert agent.process.wait(timeout=30) == -signal.SIGKILL
    finally:
        agent.discard()


def test_a_child_whose_parent_is_not_the_expected_one_does_not_start() -> None:
    """The parent may die between fork and prctl; the orphan must then never run the agent."""
    process = subprocess.Popen(
        ["/bin/sleep", "60"], preexec_fn=lambda: signals.die_with_parent(parent=1)
    )
    try:
        assert process.wait(timeout=30) == signals.ORPHANED_EXIT
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def repl(
    factory: Factory, isolated_home: Path, temp_dir: Path
) -> Iterator[tuple[Terminal, threading.Event]]:
    """The REPL on a pseudo-terminal, and an event set once a run's first agent is working."""
    working = threading.Event()

    def agent_reply(name: str, request: Request) -> str:
        working.set()
        return f"result from {name}"

    factory.agent_reply = agent_reply
    env = agentgod_env(
        isolated_home,
        SANDBOX="off",
        TMPDIR=str(temp_dir),
        TERM="xterm",
        ANTHROPIC_BASE_URL=factory.api.base_url,
        ANTHROPIC_API_KEY=TEST_KEY,
    )
    terminal = Terminal(agentgod_command(), env)
    try:
        yield terminal, working
    finally:
        terminal.stop()


def test_sigterm_mid_run_in_the_repl_ends_the_session_with_143(
    repl: tuple[Terminal, threading.Event], isolated_home: Path, temp_dir: Path
) -> None:
    terminal, working = repl
    terminal.expect("agentgod> ")
    terminal.type("a long task\n")
    assert working.wait(60), "the first agent never called the model"
    terminal.process.send_signal(signal.SIGTERM)
    assert terminal.close() == cli.EXIT_TERMINATED, "a polite kill ends the session, not the task"
    run = Started(terminal.process, isolated_home, temp_dir)
    _wait_for(lambda: not run.agents(), "every agent process gone", 10)
    assert run.scratch_dirs() == [] and run.run_folders() == []
    assert "Remove the" not in terminal.text, "a stop asks nothing"


def test_the_terminal_closing_mid_run_ends_it_like_sighup(
    repl: tuple[Terminal, threading.Event], isolated_home: Path, temp_dir: Path
) -> None:
    terminal, working = repl
    terminal.expect("agentgod> ")
    terminal.type("a long task\n")
    assert working.wait(60), "the first agent never called the model"
    os.close(terminal.fd)  # the kernel hangs up: SIGHUP, and every later write fails
    terminal.fd = -1
    assert terminal.process.wait(timeout=60) == cli.EXIT_HANGUP
    run = Started(terminal.process, isolated_home, temp_dir)
    _wait_for(lambda: not run.agents(), "every agent process gone", 10)
    assert run.scratch_dirs() == [] and run.run_folders() == []
    [run_file] = (isolated_home / "runs").glob("*.md")
    assert "interrupted by SIGHUP" in run_file.read_text(encoding="utf-8")
