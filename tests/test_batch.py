"""`agentgod batch`: many tasks, each a whole run, behind one key-holding gateway.

Every test runs the real command against the fake Messages API, answered by the scripted model;
each task's run is a real `agentgod --json --no-input` (forked by the batch's fork server), so
what the fake sees is what the API would: the runs' calls, through the gateway, with the key.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY, agentgod, agentgod_command, scripted_env
from fakeapi import FakeMessagesAPI, Reply, Request
from scripted import Factory, agent_spec, plan

from agentgod import batch, batchrecord, history, ledger
from agentgod.kinds import TASK_MAX_CHARS, TaskStatus

TASK = re.compile(r"TASK-(\w+)")
"""Every test task names itself, so the fake can tell the runs apart."""
SETTINGS = {"COUNCIL": "off", "TASK_REVISIONS": "1", "AGENT_REPAIR_ATTEMPTS": "0"}


def run_batch(home: Path, api: FakeMessagesAPI | None, *args: str, stdin: str = "") -> Any:
    """The command, to completion, with the test settings."""
    return agentgod(
        home, api, *args, stdin=stdin, COUNCIL="off", TASK_REVISIONS="1", AGENT_REPAIR_ATTEMPTS="0"
    )


def line(tag: str, **extra: Any) -> str:
    """A task line; the words make it long enough that no small-talk check is made for it."""
    task = f"TASK-{tag}: write a careful and complete summary of the topic named in this task"
    return json.dumps({"id": tag, "task": task, **extra})


def tag_of(request: Request) -> str | None:
    found = TASK.search(json.dumps(request.body))
    return found.group(1) if found else None


class Runs:
    """The scripted model, counting each task's calls and the runs at work at once (from its
    plan request to its judge's reply)."""

    def __init__(self, api: FakeMessagesAPI, agent_latency: float = 0.0, together: int = 0) -> None:
        """`together`: the first that many runs' plan calls are answered only once all of
        them have arrived (a barrier that fails the test if they never run at once)."""
        self.factory = Factory(api)
        self.factory.plans = [plan(agent_spec("solver"), complexity="simple")]
        self.factory.bodies["crasher"] = [
            "def run(task, previous_outputs):\n    raise RuntimeError('boom')\n"
        ]
        self.factory.agent_latency = agent_latency
        self.lock = threading.Lock()
        self.active: set[str] = set()
        self.most = 0
        self.calls: dict[str, list[str]] = {}
        self.hold: dict[tuple[str, str], threading.Event] = {}
        """(task, kind of call): the fake answers that call only once the event is set."""
        self.reached: dict[tuple[str, str], threading.Event] = {}
        self.together = threading.Barrier(together) if together else None
        self.plans = 0
        self.plans_for: dict[str, dict[str, Any]] = {}
        """A task's own plan, by its tag (the others get the factory's)."""
        api.handler = self.handle

    def handle(self, request: Request) -> Reply | str:
        kind = Factory.kind(request)
        tag = tag_of(request) or "?"
        first = False
        if kind == "generate" and "Agent name: crasher" in request.prompt:
            tag = "CRASH1"  # code is written without the task: the crashing agent names its run
        with self.lock:
            self.calls.setdefault(tag, []).append(kind)
            if kind == "plan":
                self.active.add(tag)
                self.most = max(self.most, len(self.active))
                self.plans += 1
                first = self.together is not None and self.plans <= self.together.parties
        if kind == "plan" and first and self.together is not None:
            self.together.wait(60)  # BrokenBarrierError: they did not run at once
        if kind == "plan" and "CRASH" in tag:
            self.factory.calls.setdefault("plan", []).append(request)
            return Reply.json(plan(agent_spec("crasher"), complexity="simple"))
        if kind == "plan" and tag in self.plans_for:
            self.factory.calls.setdefault("plan", []).append(request)
            return Reply.json(self.plans_for[tag])
        if (tag, kind) in self.hold:
            self.reached.setdefault((tag, kind), threading.Event()).set()
            self.hold[tag, kind].wait(60)
        reply = self.factory.handle(request)
        # A run is at work from its plan to its last call: the judge's (a crash's: its code).
        if kind == "judge" or (kind == "generate" and "CRASH" in tag):
            with self.lock:
                self.active.discard(tag)
        return reply

    def count(self, tag: str, kind: str) -> int:
        with self.lock:
            return self.calls.get(tag, []).count(kind)


def feed(process: subprocess.Popen[str], text: str) -> None:
    """Write the tasks and close stdin (communicate then has nothing left to send)."""
    assert process.stdin is not None
    process.stdin.write(text)
    process.stdin.close()
    process.stdin = None


def output(stdout: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = [json.loads(text) for text in stdout.splitlines() if text.strip()]
    assert rows and rows[-1]["type"] == "summary", stdout[-2000:]
    return [row for row in rows if row["type"] == "task"], rows[-1]


def billed(api: FakeMessagesAPI) -> float:
    """What the fake's replies cost, at the price table: what the API would have charged."""
    spent = ledger.Usage()
    for request in api.messages():
        if request.status == 200 and isinstance(request.reply, dict):
            spent.record(request.body["model"], request.reply["usage"])
    return spent.cost_usd()


def test_twelve_tasks_four_at_a_time_one_crash_and_bad_lines_by_number(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path
) -> None:
    runs = Runs(fake_api, agent_latency=0.3, together=4)
    (tmp_path / "notes.txt").write_text("some notes\n")
    lines = [line(f"t{n}") for n in range(11)]
    lines.insert(3, line("CRASH1"))
    lines.insert(5, "this is not json")
    lines.insert(7, json.dumps({"id": "nothing"}))
    lines.insert(9, line("secret", files=["../.env"]))
    lines.append(line("withfile", files=["notes.txt"]))
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-abc\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    done = run_batch(isolated_home, fake_api, "batch", str(tasks), "--parallel", "4")
    assert done.returncode == 1, done.stderr  # one task failed, three lines were bad
    rows, summary = output(done.stdout)
    by_id = {row["id"]: row for row in rows if row["id"]}
    ran = [f"t{n}" for n in range(11)] + ["withfile"]
    assert all(by_id[tag]["ok"] and by_id[tag]["status"] == "ok" for tag in ran)
    assert all(by_id[tag]["result"]["answer"] == "MERGED: solver" for tag in ran)
    assert by_id["withfile"]["result"]["attachments"][0]["name"] == "notes.txt"
    assert by_id["CRASH1"]["status"] == "failed" and not by_id["CRASH1"]["ok"]
    assert by_id["CRASH1"]["result"]["error"]["type"] == "all_agents_failed"
    bad = {row["line"]: row for row in rows if row["status"] == "invalid"}
    assert sorted(bad) == [6, 8, 10]
    assert "not JSON" in bad[6]["error"]["headline"]
    assert "no task" in bad[8]["error"]["headline"]
    assert "attachment refused" in bad[10]["error"]["headline"]
    for number in (6, 8, 10):
        assert f"Line {number} is not a task" in done.stderr
    assert summary["done"] == 12 and summary["failed"] == 1 and summary["invalid"] == 3
    assert summary["status"] == "done" and summary["unfinished"] == 0
    assert runs.most == 4, "four runs at work at once, never more"
    # Every run is in the history, linked from its task in the batch's record.
    record = batchrecord.load(summary["batch_id"])
    assert record is not None and len(record.tasks) == 16
    # The runs' capabilities allow the models runs call (main and fast; deep is main) only.
    assert record.options["models"] == ["claude-haiku-5-5", "claude-sonnet-5-5"]
    for row in rows:
        if row["run_id"]:
            stored = history.load(row["run_id"])
            assert stored is not None and stored.task.startswith(f"TASK-{row['id']}")
    shown = agentgod(isolated_home, None, "batch", "show", summary["batch_id"], "--json")
    assert json.loads(shown.stdout)["counts"]["ok"] == 12


def test_the_real_key_stays_in_the_batch(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path
) -> None:
    """The runs' calls reach the API with the real key, through the gateway; no run's
    environment, file or event log holds it."""
    runs = Runs(fake_api)
    held = runs.hold["k1", "agent"] = threading.Event()
    tasks = "".join(line(tag) + "\n" for tag in ("k1", "k2"))
    process = subprocess.Popen(
        [*agentgod_command(), "batch", "-", "--parallel", "2", "--out", str(tmp_path / "out")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=scripted_env(isolated_home, fake_api, **SETTINGS),
    )
    try:
        feed(process, tasks)
        assert runs.reached.setdefault(("k1", "agent"), threading.Event()).wait(60)
        descendants = _descendants(process.pid)
        assert len(descendants) >= 2  # the fork server and the run at least
        for pid in descendants:
            try:
                with open(f"/proc/{pid}/environ", "rb") as environ:
                    seen = environ.read()
            except OSError:  # ProcessLookupError, FileNotFoundError: it ended meanwhile
                continue
            assert TEST_KEY.encode() not in seen
        held.set()
        stdout, stderr = process.communicate(timeout=120)
    finally:
        held.set()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    rows, _ = output(stdout)
    assert all(row["ok"] for row in rows)
    keys = {request.api_key for request in fake_api.messages()}
    assert keys == {TEST_KEY}, "every call reached the API with the real key"
    for path in [*isolated_home.rglob("*"), *(tmp_path / "out").rglob("*")]:
        if path.is_file():
            assert TEST_KEY.encode() not in path.read_bytes(), path
    assert TEST_KEY not in stdout and TEST_KEY not in stderr
    logs = list((isolated_home / "runs").glob("*/events.jsonl"))
    assert len(logs) == 2


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def test_resume_after_ctrl_c_runs_only_what_was_unfinished_and_pays_nothing_twice(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    runs = Runs(fake_api)
    tags = [f"r{n}" for n in range(6)]
    # The third task is stopped while its merge is with the model: its agent has delivered.
    held = runs.hold["r2", "merge"] = threading.Event()
    process = subprocess.Popen(
        [*agentgod_command(), "batch", "-", "--parallel", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=scripted_env(isolated_home, fake_api, **SETTINGS),
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        feed(process, "".join(line(tag) + "\n" for tag in tags))
        assert runs.reached.setdefault(("r2", "merge"), threading.Event()).wait(90)
        process.send_signal(signal.SIGINT)
        for text in process.stdout:  # the stopped run reports before its held call ends
            lines.append(text)
            if '"r2"' in text:
                break
        held.set()
        rest, stderr = process.communicate(timeout=120)
    finally:
        held.set()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    rows, summary = output("".join(lines) + rest)
    assert summary["status"] == "interrupted"
    assert [row["id"] for row in rows if row["ok"]] == ["r0", "r1"]
    record = batchrecord.load(summary["batch_id"])
    assert record is not None
    states = {task.task_id: task.status for task in record.tasks}
    assert states["r0"] is states["r1"] is TaskStatus.OK
    assert states["r2"] is TaskStatus.INTERRUPTED
    assert all(states[tag] is TaskStatus.PENDING for tag in ("r3", "r4", "r5"))
    assert all(not t.runs for t in record.tasks if t.task_id in ("r3", "r4", "r5")), "no run"
    before = {tag: list(runs.calls.get(tag, [])) for tag in tags}

    resumed = run_batch(isolated_home, fake_api, "batch", "resume", summary["batch_id"])
    assert resumed.returncode == 0, resumed.stderr
    again, last = output(resumed.stdout)
    assert sorted(row["id"] for row in again) == ["r2", "r3", "r4", "r5"]
    assert all(row["ok"] for row in again)
    assert last["done"] == 6 and last["unfinished"] == 0 and last["status"] == "done"
    for tag in ("r0", "r1"):
        assert runs.calls[tag] == before[tag], f"{tag} had finished: not one more call"
    # The stopped run is retried on what it had paid for: its plan, its agent's code and answer.
    for kind in ("plan", "agent"):
        assert runs.count("r2", kind) == 1, kind
    generated = len(runs.factory.of("generate"))  # code is written without its task's words
    assert generated == len(tags), "one agent written per task: r2's was not written again"
    assert runs.count("r2", "merge") == 2, "the merge cut off by Ctrl-C, and the retry's"
    for tag in ("r3", "r4", "r5"):
        assert runs.count(tag, "plan") == 1 and runs.count(tag, "judge") == 1
    task = next(
        t for t in (batchrecord.load(summary["batch_id"]) or record).tasks if t.task_id == "r2"
    )
    assert len(task.runs) == 2
    retried = history.load(task.runs[1])
    assert retried is not None and retried.retry_of == task.runs[0]


def _runs_of(batch_pid: int) -> list[int]:
    """The batch's runs at work: the children of its fork server."""
    for pid in _descendants(batch_pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"agentgod.forkserver" in command:
            return [child for child in _descendants(pid) if _parent(child) == pid]
    return []


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _start_batch(home: Path, api: FakeMessagesAPI, tags: list[str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*agentgod_command(), "batch", "-", "--parallel", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=scripted_env(home, api, **SETTINGS),
    )
    feed(process, "".join(line(tag) + "\n" for tag in tags))
    return process


def test_a_run_killed_outright_is_crashed_and_resume_retries_it_on_what_it_paid_for(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """kill -9 of one run while its merge is with the model: its task is crashed (unfinished,
    not failed), its record is finished as a crashed run, and resume retries it keeping its
    plan and the agent that had delivered."""
    runs = Runs(fake_api)
    held = runs.hold["c1", "merge"] = threading.Event()
    process = _start_batch(isolated_home, fake_api, ["c0", "c1", "c2"])
    try:
        assert runs.reached.setdefault(("c1", "merge"), threading.Event()).wait(90)
        [run] = _runs_of(process.pid)
        os.kill(run, signal.SIGKILL)
        held.set()
        stdout, stderr = process.communicate(timeout=120)
    finally:
        held.set()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, stderr
    rows, summary = output(stdout)
    by_id = {row["id"]: row for row in rows}
    assert (
        by_id["c1"]["status"] == "crashed"
        and "killed (signal 9)" in by_id["c1"]["error"]["headline"]
    )
    assert by_id["c0"]["ok"] and by_id["c2"]["ok"]
    assert summary["unfinished"] == 1 and summary["failed"] == 0

    resumed = run_batch(isolated_home, fake_api, "batch", "resume", summary["batch_id"])
    assert resumed.returncode == 0, resumed.stderr
    again, last = output(resumed.stdout)
    assert [row["id"] for row in again] == ["c1"] and again[0]["ok"]
    assert last["done"] == 3 and last["unfinished"] == 0
    for kind in ("plan", "agent"):
        assert runs.count("c1", kind) == 1, kind
    assert runs.count("c1", "merge") == 2
    record = batchrecord.load(summary["batch_id"])
    assert record is not None
    [task] = [task for task in record.tasks if task.task_id == "c1"]
    first = history.load(task.runs[0])
    retried = history.load(task.runs[1])
    assert first is not None and first.status.value == "crashed"
    assert retried is not None and retried.retry_of == task.runs[0]


def test_a_batch_killed_outright_stops_its_runs_and_resume_retries_them(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """kill -9 of the batch itself while a run's merge is with the model: the run, which has
    lost its gateway, is stopped by the fork server (archived as interrupted, not left to fail
    on a gateway that is gone), and resume retries it on what it paid for."""
    runs = Runs(fake_api)
    held = runs.hold["k1", "merge"] = threading.Event()
    process = _start_batch(isolated_home, fake_api, ["k0", "k1"])
    try:
        assert runs.reached.setdefault(("k1", "merge"), threading.Event()).wait(90)
        [run] = _runs_of(process.pid)
        process.kill()
        process.communicate(timeout=30)
        assert _wait_gone(run, 30), "the run was stopped once its batch was gone"
    finally:
        held.set()
        if process.poll() is None:
            process.kill()
    record = batchrecord.load()
    assert record is not None
    [task] = [task for task in record.tasks if task.task_id == "k1"]
    stopped = history.load(task.runs[0])
    assert stopped is not None and stopped.status.value == "interrupted"

    resumed = run_batch(isolated_home, fake_api, "batch", "resume", record.batch_id)
    assert resumed.returncode == 0, resumed.stderr
    again, last = output(resumed.stdout)
    assert [row["id"] for row in again if row["ok"]] == ["k1"]
    assert last["done"] == 2 and last["unfinished"] == 0
    for kind in ("plan", "agent"):
        assert runs.count("k1", kind) == 1, kind


def _wait_gone(pid: int, seconds: float) -> bool:
    """Whether process `pid` ends (or is a zombie) within `seconds`."""
    ended = threading.Event()

    def gone() -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        return state in ("Z", "X")

    for _ in range(int(seconds * 20)):
        if gone():
            return True
        ended.wait(0.05)
    return gone()


def test_a_batch_budget_stops_the_batch_with_no_call_past_it(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    runs = Runs(fake_api)
    fake_api.honour_max_tokens = True  # as the API: never more output than the call held
    # A run costs about $0.003 at the fake's replies, but its plan first holds its worst case
    # (about $0.015: the planner's prompt at the cache-write price, and room to answer), so
    # a few runs fit and then no further one can start.
    budget = 0.02
    tasks = "".join(line(f"b{n}") + "\n" for n in range(8))
    done = run_batch(
        isolated_home,
        fake_api,
        "batch",
        "-",
        "--parallel",
        "2",
        "--budget",
        str(budget),
        stdin=tasks,
    )
    assert done.returncode == 1, done.stderr
    rows, summary = output(done.stdout)
    assert summary["status"] == "budget"
    assert summary["usd"] <= budget
    assert billed(fake_api) <= budget + 1e-9, "no call was sent that would pass the budget"
    assert summary["unfinished"] >= 1, "the budget stopped the batch before the end"
    assert any(row["ok"] for row in rows), "what the budget allowed, it ran"
    record = batchrecord.load(summary["batch_id"])
    assert record is not None
    assert any(task.status is TaskStatus.BUDGET for task in record.tasks)
    assert runs.most <= 2


def test_the_home_s_budget_binds_the_batch_and_is_no_run_s_own_cap(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """BUDGET_USD in the home's .env is the batch's budget (a flag overrides it), never each
    run's own cap: a run reads the home's .env too, and must not take it for its line's."""
    Runs(fake_api)
    (isolated_home / ".env").write_text("BUDGET_USD=0.0001\n")
    done = run_batch(
        isolated_home, fake_api, "batch", "-", "--budget", "5", stdin=line("home") + "\n"
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [row], summary = output(done.stdout)
    assert row["status"] == "ok" and row["result"]["budget_usd"] is None, row["result"]
    assert summary["done"] == 1


SPENDER = (
    "def run(task, previous_outputs):\n"
    "    return call_llm(f'agent={AGENT_NAME}', max_tokens=16000)\n"
)
"""An agent whose model is asked for all it may say: the fake then bills every token allowed."""


def spends_all(runs: Runs, tag: str) -> None:
    """Task `tag` plans two agents in two waves; the first (`spender`) uses every output token
    the budget binding its run lets it have, so the second (`finisher`) has none left."""
    runs.plans_for[tag] = plan(
        agent_spec("spender"), agent_spec("finisher", ["spender"]), complexity="simple"
    )
    runs.factory.bodies["spender"] = [SPENDER]

    def reply(name: str, request: Request) -> Reply | str:
        if name != "spender":
            return f"result from {name}"
        usage = {"input_tokens": 5, "output_tokens": request.body["max_tokens"]}
        return Reply(f"result from {name}", usage=usage)

    runs.factory.agent_reply = reply


def test_a_line_its_own_budget_stopped_is_capped_and_resume_pays_nothing_for_it(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """A line's `budget` is that run's cap: a run it stops is finished (`capped`), its partial
    answer and the way on in its line, and `batch resume` sends not one request for it (it used
    to run it again with a fresh cap, spending up to twice what the line allowed)."""
    runs = Runs(fake_api)
    spends_all(runs, "cap")
    tasks = line("cap", budget=0.15) + "\n" + line("free") + "\n"
    done = run_batch(isolated_home, fake_api, "batch", "-", "--parallel", "1", stdin=tasks)
    assert done.returncode == 1, done.stderr
    rows, summary = output(done.stdout)
    by_id = {row["id"]: row for row in rows}
    capped = by_id["cap"]
    assert (capped["status"], capped["ok"]) == ("capped", False), capped
    result = capped["result"]
    assert (result["status"], result["partial"]) == ("budget", True)
    assert "result from spender" in result["answer"], "what the cap paid for is in its line"
    assert result["error"]["type"] == "budget" and result["error"]["budget_of"] == "run"
    assert "1 of 2 agents had no budget left to run" in result["error"]["headline"]
    assert capped["error"]["type"] == "capped"
    assert f"`agentgod retry {capped['run_id']} --budget 0.15`" in capped["error"]["advice"]
    assert capped["usd"] <= 0.15 + 1e-9
    assert by_id["free"]["ok"]
    assert summary["status"] == "done"
    assert (summary["done"], summary["capped"], summary["failed"]) == (1, 1, 0)
    assert summary["unfinished"] == 0
    record = batchrecord.load(summary["batch_id"])
    assert record is not None
    [task] = [task for task in record.tasks if task.task_id == "cap"]
    assert task.status is TaskStatus.CAPPED and task.status.finished
    assert record.to_json()["counts"]["capped"] == 1
    shown = agentgod(isolated_home, None, "batch", "show", summary["batch_id"])
    assert "1 capped" in shown.stdout and "capped" in shown.stdout
    assert f"agentgod retry {capped['run_id']} --budget 0.15" in shown.stdout

    calls = len(fake_api.messages())
    resumed = run_batch(isolated_home, fake_api, "batch", "resume", summary["batch_id"])
    assert len(fake_api.messages()) == calls, "resume sent nothing for the capped line"
    assert resumed.returncode == 0, resumed.stderr
    last = json.loads(resumed.stdout.splitlines()[-1])
    assert (last["capped"], last["unfinished"]) == (1, 0)
    again = batchrecord.load(summary["batch_id"])
    assert again is not None
    assert [len(t.runs) for t in again.tasks if t.task_id == "cap"] == [1], "never run again"


def test_a_run_the_batch_budget_stopped_stays_budget_and_resume_finishes_it(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """The batch's budget stops a run partway (its gateway refuses the run's next call): that
    is the batch's stop, not the line's, so the task stays `budget` and resume, given more,
    runs it again on what it paid for."""
    runs = Runs(fake_api)
    fake_api.honour_max_tokens = True
    spends_all(runs, "big")
    done = run_batch(
        isolated_home, fake_api, "batch", "-", "--budget", "0.15", stdin=line("big") + "\n"
    )
    assert done.returncode == 1, done.stderr
    [row], summary = output(done.stdout)
    assert (row["status"], row["ok"]) == ("budget", False), row
    assert row["result"]["error"]["type"] == "budget"
    assert row["result"]["error"]["budget_of"] == "batch"
    assert "batch's budget" in row["result"]["error"]["headline"]
    assert "result from spender" in row["result"]["answer"]
    assert (summary["status"], summary["unfinished"], summary["capped"]) == ("budget", 1, 0)
    assert billed(fake_api) <= 0.15 + 1e-9

    calls = len(fake_api.messages())
    resumed = run_batch(
        isolated_home, fake_api, "batch", "resume", summary["batch_id"], "--budget", "5"
    )
    assert resumed.returncode == 0, resumed.stderr
    [again], last = output(resumed.stdout)
    assert (again["id"], again["status"], again["ok"]) == ("big", "ok", True)
    assert len(fake_api.messages()) > calls, "resume ran it"
    assert (last["done"], last["unfinished"]) == (1, 0)
    assert runs.count("big", "plan") == 1, "its plan was kept"
    spender = [r for r in runs.factory.of("agent") if "agent=spender" in r.prompt]
    assert len(spender) == 1, "the agent that delivered was not run again"
    assert again["result"]["retry_of"] == row["run_id"], "retried on what it had paid for"


def test_a_batch_recorded_before_capped_existed_still_loads_as_it_was(isolated_home: Path) -> None:
    """The statuses an older agentgod wrote into the history's batch tables read back as they
    were, resume would run the same tasks, and the counts gain a `capped` of 0."""
    import sqlite3

    from agentgod import historydb

    old = ["pending", "ok", "failed", "interrupted", "budget", "crashed", "invalid"]
    rows = batch.read_lines([line(f"o{n}") for n in range(len(old))], base=isolated_home)
    made = batch.start(rows, "-", {"parallel": 1})
    with sqlite3.connect(isolated_home / "runs" / historydb.DB_NAME) as db:
        for seq, status in enumerate(old):
            db.execute(
                "UPDATE batch_tasks SET status = ? WHERE batch_id = ? AND seq = ?",
                (status, made.batch_id, seq),
            )
        db.execute("UPDATE batches SET status = 'budget' WHERE batch_id = ?", (made.batch_id,))
    loaded = batchrecord.load(made.batch_id)
    assert loaded is not None
    assert [task.status.value for task in loaded.tasks] == old
    assert [t.status.value for t in loaded.unfinished()] == [
        "pending",
        "interrupted",
        "budget",
        "crashed",
    ]
    counts = loaded.to_json()["counts"]
    assert counts["capped"] == 0 and counts["budget"] == 1
    summed = batch.summary(loaded)
    assert (summed["status"], summed["capped"], summed["unfinished"]) == ("budget", 0, 4)
    shown = agentgod(isolated_home, None, "batch", "show", made.batch_id)
    assert shown.returncode == 0 and "budget" in shown.stdout


def test_resume_of_a_finished_batch_runs_nothing(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    Runs(fake_api)
    done = run_batch(isolated_home, fake_api, "batch", "-", stdin=line("only") + "\n")
    assert done.returncode == 0, done.stderr
    _, summary = output(done.stdout)
    calls = len(fake_api.messages())
    again = agentgod(isolated_home, fake_api, "batch", "resume", summary["batch_id"])
    assert again.returncode == 0
    assert json.loads(again.stdout.splitlines()[-1])["done"] == 1
    assert len(fake_api.messages()) == calls


def test_each_run_is_given_the_batch_s_fallbacks_and_the_gateway_lets_them_answer(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """--fallback reaches every run, and the capability allows the fallback's model: a model
    the runs call only when MODEL is overloaded is no model the gateway may refuse."""
    runs = Runs(fake_api)
    main, fallback = "claude-sonnet-5-5", "claude-opus-4-5"
    fake_api.route(lambda r: r.body.get("model") == main, Reply.error(529))
    done = run_batch(
        isolated_home, fake_api, "batch", "-", "--fallback", fallback, stdin=line("over") + "\n"
    )
    assert done.returncode == 0, done.stderr
    [task], summary = output(done.stdout)
    assert task["status"] == "ok", task
    assert task["result"]["fallbacks"][0]["answered"] == fallback
    assert runs.count("over", "judge") == 1
    answered = [r for r in fake_api.messages() if r.status == 200]
    assert answered and {r.body["model"] for r in answered} == {fallback, "claude-haiku-5-5"}
    assert summary["usd"] == pytest.approx(billed(fake_api), abs=1e-6), "priced as what answered"


def test_batch_show_and_its_errors(isolated_home: Path) -> None:
    missing = agentgod(isolated_home, None, "batch", "show", "abcd1234")
    assert missing.returncode == 1 and "There is no batch abcd1234" in missing.stderr
    empty = agentgod(isolated_home, None, "batch", "-", stdin="\n\n")
    assert empty.returncode in (1, 2)
    usage = agentgod(isolated_home, None, "batch")
    assert usage.returncode == 2 and "batch needs a FILE" in usage.stderr
    flags = agentgod(isolated_home, None, "--parallel", "3", "do", "a", "thing")
    assert flags.returncode == 2 and "belong to 'agentgod batch'" in flags.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("batch", "resume", "ffff0000"), "There is no batch ffff0000"),
        (("eval", "resume", "ffff0000"), "There is no eval ffff0000"),
        (("batch", "nosuch.jsonl"), "cannot read the tasks from nosuch.jsonl"),
        (("eval", "nosuch.jsonl"), "there is no suite file nosuch.jsonl"),
    ],
)
def test_a_wrong_id_or_file_is_said_before_any_key_is_asked_for(
    isolated_home: Path, args: tuple[str, ...], said: str
) -> None:
    done = agentgod(isolated_home, None, *args)
    assert done.returncode in (1, 2)
    assert said in done.stderr and "API key" not in done.stderr, done.stderr
    answered = agentgod(isolated_home, None, *args, "--json")
    reply = json.loads(answered.stdout)  # --json: one object, the error in its usual shape
    assert reply["ok"] is False and said in reply["error"]["headline"], reply


@pytest.mark.parametrize("verb", ["batch", "eval"])
def test_show_of_nothing_is_the_usual_error_object(isolated_home: Path, verb: str) -> None:
    for args in ((verb, "show", "--json"), (verb, "show", "ffff0000", "--json")):
        done = agentgod(isolated_home, None, *args)
        assert done.returncode == 1
        error = json.loads(done.stdout)["error"]
        assert error["type"] == "not_found" and error["headline"].startswith("There is no")


def test_reading_lines_keeps_bad_ones_with_their_reason(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("x,y\n1,2\n")
    rows = batch.read_lines(
        [
            '{"task": "one"}',
            "",
            '{"id": "x", "task": "two", "files": ["a.csv"], "budget": 0.5}',
            '{"id": "x", "task": "three"}',
            '{"task": "four", "budgte": 1}',
            '{"task": "five", "files": ["missing.txt"]}',
            '["task"]',
            '{"id": "../up", "task": "six"}',
            '{"task": "seven", "budget": -1}',
            json.dumps({"task": "x" * (TASK_MAX_CHARS + 1)}),
            json.dumps({"task": "y" * TASK_MAX_CHARS}),
            '{"task": "twelve", "budget": 1e9}',
        ],
        base=tmp_path,
    )
    assert [row.line for row in rows] == [1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert rows[0].status is TaskStatus.PENDING and rows[0].task_id is None
    assert rows[1].files == [str(tmp_path / "a.csv")] and rows[1].budget_usd == 0.5
    reasons = {row.line: row.error for row in rows if row.status is TaskStatus.INVALID}
    assert "already line 3's" in reasons[4]
    assert "unknown field 'budgte'" in reasons[5]
    assert "attachment refused" in reasons[6]
    assert "not a JSON object" in reasons[7]
    assert "letters, digits" in reasons[8]
    assert "positive number" in reasons[9]
    assert "over the 50,000 sent whole into every model call" in reasons[10]
    assert 11 not in reasons, "a task of the limit itself is a task"
    assert "at most 1,000,000" in reasons[12], "a budget --budget would refuse is a bad line"
    assert os.sep not in (rows[1].task_id or "")


@pytest.mark.parametrize("plain", [False, True], ids=["rich", "plain"])
def test_at_a_terminal_the_progress_is_shown_and_the_lines_still_printed(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path, open_terminal: Any, plain: bool
) -> None:
    Runs(fake_api, agent_latency=0.2)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(line(f"p{n}") + "\n" for n in range(3)))
    env = scripted_env(isolated_home, fake_api, COUNCIL="off", TERM="xterm-256color")
    terminal = open_terminal(env, "batch", str(tasks), "--parallel", "2", *(["--plain"] * plain))
    if plain:
        terminal.expect(
            r"\[batch\] +\d/3 finished: \d done, \d running, \d failed, \$[0-9.]+ so far"
        )
    else:
        terminal.expect(r"\S+ \d/3 · \d done · \d running · \d failed · \$[0-9.]+")
    terminal.expect(r"batch \w{8} done: 3 done, 0 failed")
    assert terminal.close() == 0
    # The live line is redrawn in place, so a JSON line may follow its last frame on the
    # captured screen: each object is read from where it starts.
    decoder = json.JSONDecoder()
    starts = [found.start() for found in re.finditer(r'\{"type": "(task|summary)"', terminal.text)]
    shown = [decoder.raw_decode(terminal.text, at)[0] for at in starts]
    assert sorted(row["id"] for row in shown if row["type"] == "task") == ["p0", "p1", "p2"]
    assert shown[-1]["type"] == "summary"


def test_in_a_pipe_only_the_lines(fake_api: FakeMessagesAPI, isolated_home: Path) -> None:
    Runs(fake_api)
    done = run_batch(isolated_home, fake_api, "batch", "-", stdin=line("q") + "\n")
    assert done.returncode == 0
    assert "so far" not in done.stderr and "so far" not in done.stdout
    assert all(json.loads(text)["type"] in ("task", "summary") for text in done.stdout.splitlines())


def test_a_history_from_before_batches_is_migrated_in_place(isolated_home: Path) -> None:
    """A version-4 history (no batch tables) gains them on first use (version 5), every run
    row kept."""
    import sqlite3

    from agentgod import historydb

    path = isolated_home / "runs" / historydb.DB_NAME
    path.parent.mkdir()
    historydb.open_for_writing(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE batch_tasks")
        db.execute("DROP TABLE batches")
        db.execute(OLD_RUN)
        db.execute("PRAGMA user_version = 4")
    rows = batch.read_lines(['{"task": "new"}'], base=isolated_home)
    made = batch.start(rows, "-", {"parallel": 1})
    assert batchrecord.load(made.batch_id) is not None
    assert history.load("0123abcd") is not None
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == historydb.SCHEMA_VERSION


OLD_RUN = (
    "INSERT INTO runs (run_id, started_at, task, ok, answer, error, revisions,"
    " council_improved, llm_calls, input_tokens, output_tokens, cache_write_tokens,"
    " cache_read_tokens, usd, duration_seconds, budget_exhausted)"
    " VALUES ('0123abcd', '2026-01-01T00:00:00+00:00', 'old', 1, 'a', '', 0, 0, 1, 1, 1,"
    " 0, 0, 0.1, 1.0, 0)"
)


def test_a_history_this_branch_wrote_before_its_merge_gains_the_columns_it_missed(
    isolated_home: Path,
) -> None:
    """Before it was merged, this feature numbered its batch tables version 3, the number the
    history's own version 3 (the runs' owner) and 4 (the calls' columns) came to have: such a
    history has the batch tables and lacks those columns, and is brought up to date whole."""
    import sqlite3

    from agentgod import historydb

    path = isolated_home / "runs" / historydb.DB_NAME
    path.parent.mkdir()
    historydb.open_for_writing(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP INDEX runs_by_status")
        db.execute("ALTER TABLE runs DROP COLUMN owner")
        for column in ("agent", "seconds", "web_fetches"):
            db.execute(f"ALTER TABLE run_calls DROP COLUMN {column}")
        db.execute(OLD_RUN)
        db.execute("PRAGMA user_version = 3")
    assert history.load("0123abcd") is not None
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == historydb.SCHEMA_VERSION
        columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
        calls = {row[1] for row in db.execute("PRAGMA table_info(run_calls)")}
        indexes = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "owner" in columns and {"agent", "seconds", "web_fetches"} <= calls
    assert "runs_by_status" in indexes
    assert history.running() == []


def test_the_batch_command_lines() -> None:
    from agentgod import cli

    assert cli.parse(["batch", "t.jsonl", "--parallel", "3"]).verb_arg == "t.jsonl"
    assert cli.parse(["batch", "-"]).verb == "run"
    shown = cli.parse(["batch", "show"])
    assert (shown.mode, shown.verb, shown.verb_arg) == ("batch", "show", None)
    assert cli.parse(["batch", "resume", "3f9a", "--budget", "2"]).budget == 2.0
    assert cli.parse(["gateway", "--listen", "127.0.0.1:8787"]).mode == "gateway"
    assert cli.listen_address("[::1]:80") == ("::1", 80)
    assert cli.parse(["--task", "batch", "these", "reports"]).mode == "task"
    for wrong in (
        ["batch"],
        ["batch", "resume"],
        ["batch", "show", "nothex!"],
        ["batch", "these", "reports"],  # a word more is a usage error, never a paid task
        ["gateway", "now"],
        ["summarise", "it", "--parallel", "2"],
        ["batch", "t.jsonl", "--parallel", "0"],
        ["batch", "t.jsonl", "--engine", "dask"],
        ["gateway", "--listen", "nowhere"],
        ["batch", "t", "--gateway-url", "ftp://x"],
        ["--run-id", "12", "a", "task"],
        ["batch", "t.jsonl", "--html"],
        ["batch", "show", "3f9a", "--trace", "t.json"],
        ["gateway", "--port", "8080"],
        ["--run-id", "0a1b2c3d", "history"],
        ["--run-id", "0a1b2c3d", "ui"],
    ):
        with pytest.raises(cli.UsageError):
            cli.parse(wrong)
    with pytest.raises(cli.UsageError, match="--run-id names one run"):
        cli.parse(["--run-id", "0a1b2c3d"], stdin_is_tty=True)  # the prompt runs many
    assert cli.parse(["--run-id", "0a1b2c3d"], stdin_is_tty=False).mode == "stdin"
    assert cli.parse(["--run-id", "0a1b2c3d", "retry", "3f9a"]).verb == "retry"
    assert cli.parse(["--run-id", "0a1b2c3d", "a", "task"]).run_id == "0a1b2c3d"
    assert "batch" in cli.completion_script("bash")


def test_a_run_that_ended_after_its_batch_died_is_not_run_again(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """The batch was killed after starting the run and before writing down its end: resume
    finds the run's own record and settles the task from it, paying nothing again."""
    Runs(fake_api)
    text = json.loads(line("late"))["task"]
    alone = run_batch(isolated_home, fake_api, "--json", "--no-input", "--run-id", "0a1b2c3d", text)
    assert alone.returncode == 0, alone.stderr
    rows = batch.read_lines([line("late"), line("never")], base=isolated_home)
    made = batch.start(rows, "-", {"parallel": 1})
    made.tasks[0].runs = ["0a1b2c3d"]
    made.tasks[0].run_id = "0a1b2c3d"
    batchrecord.update_task(made.batch_id, made.tasks[0])
    calls = len(fake_api.messages())
    resumed = run_batch(isolated_home, fake_api, "batch", "resume", made.batch_id)
    assert resumed.returncode == 0, resumed.stderr
    rows_out, summary = output(resumed.stdout)
    assert {row["id"]: row["status"] for row in rows_out} == {"late": "ok", "never": "ok"}
    assert summary["done"] == 2
    late_calls = [r for r in fake_api.messages()[calls:] if tag_of(r) == "late"]
    assert late_calls == [], "the finished run was not paid for again"
