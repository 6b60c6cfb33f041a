"""Nothing lost, third pass: a run killed outright, a stop during the judge or the archive, every
billed token, a full disk — each through the real command, judged by what is left on disk, in the
history and at the fake API.
"""

from __future__ import annotations

import contextlib
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
from conftest import agentgod_command, scripted_env
from fakeapi import FakeMessagesAPI, Reply, Request
from scripted import Factory, agent_spec, plan

from agentgod import config, historydb, orchestrator
from agentgod.kinds import RunStatus

TASK = "find the facts about sea otters, then check each of them, then sum them all up for me"


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    made = Factory(fake_api)
    made.plans = [
        plan(
            agent_spec("fact_finder"),
            agent_spec("source_reader"),
            agent_spec("checker", ["fact_finder", "source_reader"]),
        )
    ]
    return made


@pytest.fixture
def scratch_root(tmp_path: Path) -> Path:
    """The TMPDIR the product's runs make their agents' scratch directories in."""
    made = tmp_path / "tmp"
    made.mkdir()
    return made


@pytest.fixture
def launch(
    factory: Factory, isolated_home: Path, scratch_root: Path
) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start the real command against the scripted fake; whatever is left running is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [*agentgod_command(), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=scripted_env(isolated_home, factory.api, TMPDIR=str(scratch_root)),
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def command(home: Path, api: FakeMessagesAPI, scratch_root: Path, *args: str) -> Any:
    """One more command, as a person would type it next; its --json reply."""
    done = subprocess.run(
        [*agentgod_command(), "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=scripted_env(home, api, TMPDIR=str(scratch_root)),
    )
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON from {args}: {done.stderr}") from None


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def kill_outright(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(30)


def leftovers(home: Path, scratch_root: Path) -> list[str]:
    """What runs left in generated_agents/ and in TMPDIR."""
    agents = home / "generated_agents"
    found = [str(path) for path in agents.iterdir()] if agents.is_dir() else []
    return found + [str(path) for path in scratch_root.glob("agentgod-*")]


# ---- a run killed outright is still a run -------------------------------------------------------


def test_a_run_killed_in_wave_two_is_in_history_with_its_spend_and_retry_carries_wave_one(
    factory: Factory,
    isolated_home: Path,
    scratch_root: Path,
    launch: Callable[..., subprocess.Popen[str]],
) -> None:
    in_wave_two = threading.Event()

    def agent_reply(name: str, request: Request) -> Reply | str:
        if name == "checker":
            in_wave_two.set()
            return Reply(f"result from {name}", latency=30)  # still thinking when the kill comes
        return f"result from {name}"

    factory.agent_reply = agent_reply
    process = launch("--json", "--no-input", "--discard", TASK)
    assert in_wave_two.wait(60), "the run never reached wave 2"
    paid = [r for r in factory.api.messages() if r.status == 200 and r.ended]
    assert len(paid) == 6, "the plan, three code generations and wave 1's two agents"
    wait_for(lambda: _recorded(isolated_home) == (6, 2), "the journal to hold what was paid")
    assert leftovers(isolated_home, scratch_root), "the run has folders while it runs"
    kill_outright(process)

    rows = command(isolated_home, factory.api, scratch_root, "history")
    [row] = rows
    assert row["status"] == RunStatus.CRASHED
    billed = sum(r.billed.get("output_tokens", 0) for r in paid)
    stored = command(isolated_home, factory.api, scratch_root, "show", row["run_id"])
    assert stored["status"] == RunStatus.CRASHED
    assert stored["cost"]["llm_calls"] == 6
    assert stored["cost"]["output_tokens"] == billed
    assert {a["name"] for a in stored["agents"] if a["ok"]} == {"fact_finder", "source_reader"}
    assert stored["plan"], "the plan was recorded before any agent ran"
    stats = command(isolated_home, factory.api, scratch_root, "stats")
    assert stats["runs"] == 1 and stats["llm_calls"] == 6
    assert leftovers(isolated_home, scratch_root) == [], "the dead run's folders are swept"

    factory.agent_reply = lambda name, request: f"result from {name}"
    before = len(factory.api.messages())
    retried = command(
        isolated_home, factory.api, scratch_root, "--no-input", "retry", row["run_id"]
    )
    assert retried["ok"], retried
    assert sorted(retried["carried"]) == ["fact_finder", "source_reader"]
    new = [factory.kind(r) for r in factory.api.messages()[before:]]
    assert "plan" not in new, "the plan it paid for is reused"
    assert new.count("generate") == 1 and new.count("agent") == 1, "only the checker is redone"


def test_a_run_killed_before_its_plan_is_a_crashed_run_with_nothing_to_retry(
    factory: Factory,
    isolated_home: Path,
    scratch_root: Path,
    launch: Callable[..., subprocess.Popen[str]],
) -> None:
    planning = threading.Event()
    plan_reply = factory.plans[0]

    def slow_plan(request: Request) -> Reply:
        planning.set()
        return Reply.json(plan_reply, latency=30)

    factory.api.route(lambda r: factory.kind(r) == "plan", slow_plan)
    process = launch("--json", "--no-input", TASK)
    assert planning.wait(60)
    wait_for(lambda: bool(_running_rows(isolated_home)), "the run's row in the history")
    kill_outright(process)
    [row] = command(isolated_home, factory.api, scratch_root, "history")
    assert row["status"] == RunStatus.CRASHED
    done = subprocess.run(
        [*agentgod_command(), "--no-input", "retry", row["run_id"]],
        capture_output=True,
        text=True,
        timeout=60,
        env=scripted_env(isolated_home, factory.api, TMPDIR=str(scratch_root)),
    )
    assert done.returncode != 0
    assert "before it had a plan" in done.stderr


def test_a_live_run_is_never_swept_by_another_command(
    factory: Factory,
    isolated_home: Path,
    scratch_root: Path,
    launch: Callable[..., subprocess.Popen[str]],
) -> None:
    gate = threading.Event()
    working = threading.Event()

    def held(name: str, request: Request) -> str:
        working.set()
        gate.wait(60)  # the agents' calls are answered only when the test says so
        return f"result from {name}"

    factory.agent_reply = held
    process = launch("--json", "--no-input", "--discard", TASK)
    assert working.wait(60)
    folders = leftovers(isolated_home, scratch_root)
    [row] = command(isolated_home, factory.api, scratch_root, "history")
    assert row["status"] == RunStatus.RUNNING
    assert leftovers(isolated_home, scratch_root) == folders, "a live run's folders stay"
    gate.set()
    stdout, _ = process.communicate(timeout=120)
    assert json.loads(stdout)["ok"]
    [row] = command(isolated_home, factory.api, scratch_root, "history")
    assert row["status"] == RunStatus.OK


def _recorded(home: Path) -> tuple[int, int]:
    """The calls and the agents the history holds for its one run so far."""
    path = home / "runs" / historydb.DB_NAME
    if not path.is_file():
        return (0, 0)
    try:
        with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as db:
            calls = db.execute("SELECT COUNT(*) FROM run_calls").fetchone()[0]
            agents = db.execute("SELECT COUNT(*) FROM run_agents").fetchone()[0]
    except sqlite3.OperationalError:  # being created by the run right now
        return (0, 0)
    return int(calls), int(agents)


def _running_rows(home: Path) -> list[str]:
    path = home / "runs" / historydb.DB_NAME
    if not path.is_file():
        return []
    try:
        with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as db:
            return [r[0] for r in db.execute("SELECT run_id FROM runs WHERE status = 'running'")]
    except sqlite3.OperationalError:  # being created by the run right now
        return []


# ---- a stop during the judge keeps the answer --------------------------------------------------


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_while_the_judge_reads_keeps_the_merged_answer_and_shows_it(
    factory: Factory,
    isolated_home: Path,
    scratch_root: Path,
    launch: Callable[..., subprocess.Popen[str]],
    stop: int,
) -> None:
    judging = threading.Event()

    def slow_verdict(request: Request) -> Reply:
        judging.set()
        return Reply.json({"missing": "", "done": True}, latency=30)

    factory.api.route(lambda r: factory.kind(r) == "judge", slow_verdict)
    process = launch("--no-input", "--discard", TASK)
    assert judging.wait(60)
    process.send_signal(stop)
    stdout, stderr = process.communicate(timeout=60)
    merged = "MERGED: checker, fact_finder, source_reader"
    assert merged in stdout, "the person sees the answer that was paid for"
    assert "not judged" in stderr
    [row] = command(isolated_home, factory.api, scratch_root, "history")
    stored = command(isolated_home, factory.api, scratch_root, "show", row["run_id"])
    assert stored["status"] == RunStatus.INTERRUPTED
    assert stored["answer"] == merged
    assert any("not judged" in warning for warning in stored["warnings"])
    run_file = Path(stored["run_file"])
    assert merged in run_file.read_text(encoding="utf-8")


def test_a_stopped_run_with_json_carries_the_unjudged_answer(
    factory: Factory, launch: Callable[..., subprocess.Popen[str]]
) -> None:
    judging = threading.Event()

    def slow_verdict(request: Request) -> Reply:
        judging.set()
        return Reply.json({"missing": "", "done": True}, latency=30)

    factory.api.route(lambda r: factory.kind(r) == "judge", slow_verdict)
    process = launch("--json", "--no-input", "--discard", TASK)
    assert judging.wait(60)
    process.send_signal(signal.SIGTERM)
    stdout, _ = process.communicate(timeout=60)
    reply = json.loads(stdout)
    assert reply["ok"] is False and reply["unjudged"] is True
    assert reply["answer"] == "MERGED: checker, fact_finder, source_reader"


# ---- a stop while the archive waits on a locked history ---------------------------------------


def test_a_stop_while_the_history_is_locked_is_prompt_and_writes_one_run_file(
    factory: Factory,
    isolated_home: Path,
    launch: Callable[..., subprocess.Popen[str]],
) -> None:
    database = isolated_home / "runs" / historydb.DB_NAME
    locker: list[sqlite3.Connection] = []

    def verdict(request: Request) -> Reply:
        # The run's own row exists by now; another program takes the history's write lock.
        db = sqlite3.connect(database, timeout=5, check_same_thread=False)
        db.execute("BEGIN IMMEDIATE")
        locker.append(db)
        return Reply.json({"missing": "", "done": True})

    factory.api.route(lambda r: factory.kind(r) == "judge", verdict)
    process = launch("--no-input", "--discard", TASK)
    runs = isolated_home / "runs"
    wait_for(lambda: bool(list(runs.glob("*.md"))), "the run file (written before the row)")
    process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=8)  # while the lock is still held: the stop does not wait
    finally:
        for db in locker:
            db.rollback()
            db.close()
    assert process.returncode == 143
    assert len(list(runs.glob("*.md"))) == 1, "one run, one run file"


# ---- every billed token is counted -------------------------------------------------------------


def test_a_merge_stream_cut_after_message_start_is_counted(
    factory: Factory, isolated_home: Path
) -> None:
    merges = iter([Reply("Half of it", stream_cut=True, fail_after=1)])
    factory.merge_reply = lambda request: next(merges, Reply("MERGED: the whole answer"))
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "MERGED: the whole answer"
    billed = [r.billed for r in factory.api.messages()]
    cut, _ = [r for r in factory.api.messages() if factory.kind(r) == "merge"]
    assert cut.billed["input_tokens"] > 0, "the fake billed the broken attempt's input"
    assert result.cost["input_tokens"] == sum(b.get("input_tokens", 0) for b in billed)
    assert result.cost["llm_calls"] == len(billed)
    assert not result.cost["estimate"]


AFTERTHOUGHT = """
import threading
import time

def run(task, previous_outputs):
    threading.Thread(target=call_llm, args=("agent=late one more thought",), daemon=True).start()
    time.sleep(1)  # long enough for the call to be on its way: then the agent ends without it
    return "done already"
"""


def test_an_agent_call_still_in_flight_when_the_agent_ends_is_counted(
    factory: Factory, isolated_home: Path
) -> None:
    factory.plans = [plan(agent_spec("late"), complexity="simple")]
    factory.bodies = {"late": [AFTERTHOUGHT]}
    factory.agent_reply = lambda name, request: Reply("a late thought", latency=3)
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.ok
    [call] = factory.of("agent")
    wait_for(lambda: bool(call.ended), "the fake's late reply")
    billed = [r.billed for r in factory.api.messages()]
    assert result.cost["llm_calls"] == len(billed)
    assert result.cost["output_tokens"] == sum(b.get("output_tokens", 0) for b in billed)
    assert [c.phase for c in result.calls].count("agents") == 1


def test_a_call_that_never_gets_a_reply_is_counted_at_its_worst_case(
    factory: Factory, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    factory.plans = [plan(agent_spec("late"), complexity="simple")]
    factory.bodies = {"late": [AFTERTHOUGHT]}
    factory.agent_reply = lambda name, request: Reply("too late", latency=60)
    monkeypatch.setattr(orchestrator, "SETTLE_SECONDS", 0.5)
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.cost["estimate"] and result.cost.get("unfinished") == 1
    assert any("had no reply yet" in warning for warning in result.warnings)
    [late] = [c for c in result.calls if c.phase == "agents"]
    assert late.output_tokens > 0 and late.usd > 0, "counted at the most it may cost"


# ---- a full disk is said, and said before spending ---------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MB tmpfs of our own (CI runs as root; elsewhere mounting may be impossible)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave_bytes: int) -> None:
    """Fill `disk` until only about `leave_bytes` are free."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with (disk / "ballast").open("wb") as ballast:
        ballast.truncate(0)
        ballast.write(b"\0" * max(0, free - leave_bytes))


def fill_up(disk: Path) -> None:
    """Take every byte `disk` has left (a file that cannot even be made means it is full)."""
    with contextlib.suppress(OSError), (disk / f"ballast-{time.monotonic_ns()}").open("wb") as fat:
        for size in (2**20, 4096):
            with contextlib.suppress(OSError):
                while True:
                    fat.write(b"\0" * size)
                    fat.flush()


def test_a_full_disk_is_said_before_anything_is_spent(
    factory: Factory, small_disk: Path, scratch_root: Path
) -> None:
    home = small_disk / "home"
    home.mkdir()
    fill(small_disk, 1 * 2**20)
    done = subprocess.run(
        [*agentgod_command(), "--no-input", TASK],
        capture_output=True,
        text=True,
        timeout=60,
        env=scripted_env(home, factory.api, TMPDIR=str(scratch_root)),
    )
    assert done.returncode == 1
    assert f"The disk holding {home} is full." in done.stderr
    assert "AGENTGOD_HOME" in done.stderr
    assert "Something went wrong" not in done.stderr
    assert factory.api.messages() == [], "nothing was spent"


def test_a_disk_that_fills_during_the_run_is_named_and_loses_nothing_paid(
    factory: Factory, small_disk: Path, scratch_root: Path
) -> None:
    home = small_disk / "home"
    home.mkdir()
    planned = threading.Event()

    def fill_then_answer(request: Request) -> Reply | str:
        """Once the plan is asked for, another program keeps the disk full (whatever the run
        frees meanwhile is taken again before each answer)."""
        if factory.kind(request) == "plan":
            planned.set()
        if planned.is_set():
            fill_up(small_disk)
        return factory.handle(request)

    factory.api.route(lambda request: True, fill_then_answer)
    done = subprocess.run(
        [*agentgod_command(), "--no-input", TASK],
        capture_output=True,
        text=True,
        timeout=120,
        env=scripted_env(home, factory.api, TMPDIR=str(scratch_root)),
    )
    assert done.returncode == 1
    assert "The disk holding" in done.stderr and "is full" in done.stderr
    assert "Something went wrong" not in done.stderr
