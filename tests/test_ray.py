"""`agentgod batch --engine ray`: a local Ray instance runs the batch's runs as Ray tasks.

Needs the optional extra (`pip install -e ".[ray]"`, which .ci/run installs). The Ray workers run
each task's `agentgod` in a home of their own, with the run's capability as their key against
the batch's gateway; what they leave comes back into the submitting home's history.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import IMPORT_ROOT, TEST_KEY, agentgod, agentgod_command, scripted_env
from fakeapi import FakeMessagesAPI, Request
from scripted import Factory, agent_spec, plan

from agentgod import batchrecord, history, ledger, rayengine
from agentgod.childrun import Job, RunLost
from agentgod.journal import Owner

ray = pytest.importorskip("ray")


def test_a_batch_on_ray_lands_in_the_submitting_home(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path
) -> None:
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("solver"), complexity="simple")]
    factory.bodies["solver"] = [
        "def run(task, previous_outputs):\n"
        "    save_artifact('note.txt', 'made on a worker')\n"
        "    return call_llm(f'agent={AGENT_NAME} keys=[] task={task}')\n"
    ]
    tasks = "".join(
        json.dumps({"id": f"ray{n}", "task": f"task {n}: summarise the topic named here in a page"})
        + "\n"
        for n in range(3)
    )
    working, go_on = threading.Event(), threading.Event()

    def agent_reply(name: str, request: Request) -> str:
        working.set()
        go_on.wait(120)
        return f"result from {name}"

    factory.agent_reply = agent_reply
    out = str(tmp_path / "out")
    process = subprocess.Popen(
        [*agentgod_command(), "batch", "-", "--engine", "ray", "--parallel", "3", "--out", out],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=scripted_env(isolated_home, fake_api, COUNCIL="off", RAY_ADDRESS=""),
    )
    try:
        assert process.stdin is not None
        process.stdin.write(tasks)
        process.stdin.close()
        process.stdin = None
        assert working.wait(180), "no run reached the model"
        # Ray's own processes and its workers, and the runs they started, hold no key.
        ray_processes = [pid for pid in _processes() if _is_ray(_read(pid, "cmdline"))]
        assert ray_processes, "a local Ray instance is up"
        for pid in ray_processes:
            assert TEST_KEY.encode() not in _read(pid, "environ"), _read(pid, "cmdline")[:200]
        go_on.set()
        stdout, stderr = process.communicate(timeout=300)
    finally:
        go_on.set()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    rows = [json.loads(text) for text in stdout.splitlines()]
    summary = rows[-1]
    assert summary["type"] == "summary" and summary["done"] == 3
    for row in rows[:-1]:
        assert row["ok"], row
        stored = history.load(row["run_id"])
        assert stored is not None, "the run is in the submitting home's history"
        assert stored.task.startswith(f"task {row['id'][3:]}:")
        assert stored.answer == "MERGED: solver"
        assert stored.run_file is not None and stored.run_file.is_file()
        assert stored.run_file.parent == isolated_home / "runs"
        made = isolated_home / "runs" / row["run_id"] / "artifacts" / "note.txt"
        assert made.read_text() == "made on a worker"
        assert (tmp_path / "out" / row["id"] / "note.txt").read_text() == "made on a worker"
        assert (isolated_home / "runs" / row["run_id"] / "events.jsonl").is_file()
    record = batchrecord.load(summary["batch_id"])
    assert record is not None and record.options["engine"] == "ray"
    assert {request.api_key for request in fake_api.messages()} == {TEST_KEY}
    assert len(history.history(10)) == 3


class HeldBatch:
    """`agentgod batch - --engine ray` with one task, whose first run's agent call is held at
    the fake until `go_on` (`reached` once it is): a run on a Ray worker caught mid-work, its
    plan and code answered and billed."""

    def __init__(self, api: FakeMessagesAPI, home: Path, task_id: str) -> None:
        self.factory = Factory(api)
        self.factory.plans = [plan(agent_spec("solver"), complexity="simple")]
        self.factory.agent_reply = self._agent_reply
        self.reached, self.go_on = threading.Event(), threading.Event()
        task = f"summarise the history of the lighthouse keepers of coast {task_id} in a page"
        self.process = subprocess.Popen(
            [*agentgod_command(), "batch", "-", "--engine", "ray"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=scripted_env(home, api, COUNCIL="off", RAY_ADDRESS=""),
        )
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"id": task_id, "task": task}) + "\n")
        self.process.stdin.close()
        self.process.stdin = None

    def _agent_reply(self, name: str, request: Request) -> str:
        if not self.go_on.is_set():  # the first run's agent waits
            self.reached.set()
            self.go_on.wait(120)
        return f"result from {name}"


def test_a_run_whose_ray_worker_is_killed_is_crashed_recorded_and_run_again(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """kill -9 of the Ray worker running a run, while its agent's call is with the model: the
    run dies with it, the task is crashed (not failed), the submitting home records a crashed
    run with what the gateway billed, `retry` says there is no plan to reuse, and resume runs the
    task afresh, sweeping the dead worker's leftover home first."""
    held = HeldBatch(fake_api, isolated_home, "lost1")
    factory, process = held.factory, held.process
    try:
        assert held.reached.wait(180), "the run's agent never reached the model"
        spent = _billed(fake_api)  # the plan and the agent's code: answered, so billed
        answered = len([each for each in fake_api.messages() if each.status == 200])
        assert spent > 0 and answered >= 2
        record = batchrecord.load()
        assert record is not None
        run_id = record.tasks[0].runs[-1]
        flag = b"\0--run-id\0" + run_id.encode() + b"\0"
        [run] = [pid for pid in _processes() if flag in _read(pid, "cmdline")]
        leftover = Path(_environ(run)["AGENTGOD_HOME"]).parent
        worker = _parent(run)
        assert b"ray::" in _read(worker, "cmdline"), _read(worker, "cmdline")
        os.kill(worker, signal.SIGKILL)
        assert _wait_gone(run, 60), "the run died with its worker"
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        held.go_on.set()
    assert process.returncode == 1, stderr[-3000:]
    rows = [json.loads(text) for text in stdout.splitlines()]
    [row], summary = rows[:-1], rows[-1]
    assert row["status"] == "crashed" and row["run_id"] == run_id
    assert "Ray worker" in row["error"]["headline"]
    assert "WorkerCrashedError" in row["error"]["headline"]
    assert row["usd"] == pytest.approx(spent, abs=1e-6)
    assert summary["unfinished"] == 1 and summary["failed"] == 0
    [kept] = batchrecord.load(summary["batch_id"]).tasks  # type: ignore[union-attr]
    assert kept.status.value == "crashed" and kept.usd == pytest.approx(spent, abs=1e-6)

    lost = history.load(run_id)
    assert lost is not None, "the run is in the submitting home's history"
    assert lost.status.value == "crashed" and not lost.ok and not lost.plan
    assert lost.cost["usd"] == pytest.approx(spent, abs=1e-6)
    assert lost.cost["llm_calls"] == answered
    assert any("lost with the worker" in warning for warning in lost.warnings)
    assert [each.run_id for each in history.history(10)] == [run_id]
    assert history.stats().usd == pytest.approx(spent, abs=1e-6)
    assert (leftover / rayengine.OWNER_FILE).is_file(), "the dead worker's home was left"
    retried = agentgod(isolated_home, fake_api, "retry", run_id)
    assert retried.returncode == 1 and "before it had a plan" in retried.stderr

    plans = len(factory.of("plan"))
    resumed = agentgod(
        isolated_home,
        fake_api,
        "batch",
        "resume",
        summary["batch_id"],
        COUNCIL="off",
        RAY_ADDRESS="",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = [json.loads(text) for text in resumed.stdout.splitlines()]
    assert again[0]["ok"] and again[0]["id"] == "lost1" and again[-1]["done"] == 1
    assert len(factory.of("plan")) == plans + 1, "run afresh: no plan to retry on"
    fresh = history.load(again[0]["run_id"])
    assert fresh is not None and fresh.retry_of is None and fresh.status.value == "ok"
    assert not leftover.exists(), "the next run on the node swept the dead worker's home"


def test_ctrl_c_stops_a_run_on_ray_as_at_home_and_resume_retries_it_on_what_it_paid_for(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """Ctrl-C while a run's agent waits on the model, on a Ray worker: the run is told to stop
    (through the gateway, which its worker asks), archives itself as interrupted, and comes
    back into the submitting home with its plan and code; the task is interrupted, and resume
    retries the run on what it paid for (no second plan)."""
    held = HeldBatch(fake_api, isolated_home, "stop1")
    factory, process = held.factory, held.process
    try:
        assert held.reached.wait(180), "the run's agent never reached the model"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        held.go_on.set()
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr[-3000:]
    rows = [json.loads(text) for text in stdout.splitlines()]
    assert len(rows) == 2, (stdout, stderr[-3000:])
    [row], summary = rows[:-1], rows[-1]
    assert row["status"] == "interrupted", row
    assert summary["status"] == "interrupted" and summary["unfinished"] == 1
    stopped = history.load(row["run_id"])
    assert stopped is not None, "the run came back into the submitting home"
    assert stopped.status.value == "interrupted" and stopped.plan, "with its plan"

    plans = len(factory.of("plan"))
    resumed = agentgod(
        isolated_home, fake_api, "batch", "resume", summary["batch_id"], COUNCIL="off",
        RAY_ADDRESS="",
    )  # fmt: skip
    again = [json.loads(text) for text in resumed.stdout.splitlines()]
    assert resumed.returncode == 0, (json.dumps(again[0])[:3000], resumed.stderr[-3000:])
    assert again[0]["ok"] and again[-1]["done"] == 1
    assert len(factory.of("plan")) == plans, "retried on its plan, not planned again"
    retried = history.load(again[0]["run_id"])
    assert retried is not None and retried.retry_of == row["run_id"]


def test_a_stopped_run_whose_worker_never_hears_is_cancelled_after_the_grace_as_interrupted(
    fake_api: FakeMessagesAPI, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that cannot ask a gateway (this one's URL is the fake API's, which knows no
    stop) never stops its run: once the grace has passed, the batch cancels the task by force,
    and the run is lost as an interrupted one, not a failed one."""
    arrived, held = threading.Event(), threading.Event()

    def hold(request: Request) -> str:
        arrived.set()
        held.wait(120)
        return "never"

    fake_api.handler = hold
    monkeypatch.setattr(rayengine, "STOP_GRACE_SECONDS", 0.5)
    monkeypatch.setenv("PYTHONPATH", str(IMPORT_ROOT))  # the workers import this checkout
    engine = rayengine.RayEngine(parallel=1)
    try:
        env = scripted_env(isolated_home, fake_api)
        job = Job(
            "0a1b2c3d",
            ("--json", "--no-input", "--run-id", "0a1b2c3d", "--task", "a task that waits"),
            {name: env[name] for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "SANDBOX")},
            str(isolated_home),
        )
        outcome: list[BaseException] = []

        def run() -> None:
            try:
                engine.run(job)
            except BaseException as error:
                outcome.append(error)

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        assert arrived.wait(120), f"the run never called the model: {outcome}"
        engine.interrupt()
        runner.join(120)
        assert not runner.is_alive(), "the task was not cancelled after the grace"
    finally:
        held.set()
        engine.close()
    [error] = outcome
    assert isinstance(error, RunLost) and error.interrupted, error
    assert "did not hand its record back" in str(error)


def test_a_run_started_to_die_with_its_parent_does_not_outlive_it(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """What `work` relies on wherever it runs (Ray's own kill of a dead worker's process group
    aside): kill -9 of the process that started a run with die_with_parent, while the run's
    agent is with the model (the run silent, so no write to a broken pipe ends it), and the
    kernel ends the run too; nothing goes on spending."""
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("solver"), complexity="simple")]
    reached, go_on = threading.Event(), threading.Event()

    def held(name: str, request: Request) -> str:
        reached.set()
        go_on.wait(60)
        return f"result from {name}"

    factory.agent_reply = held
    task = "summarise the history of the lighthouse keepers of the northern coast in a page"
    starter = (
        "import os, sys\n"
        "from agentgod.childrun import Job, Spawner\n"
        "job = Job('r1', ('--json', '--no-input', '--task', sys.argv[1]), {}, os.getcwd())\n"
        "Spawner(dict(os.environ), die_with_parent=True).run(job)\n"
    )
    env = scripted_env(isolated_home, fake_api, COUNCIL="off")
    parent = subprocess.Popen([sys.executable, "-c", starter, task], env=env)
    try:
        assert reached.wait(120), "the run never reached the model"
        [run] = [pid for pid in _processes() if _parent(pid) == parent.pid]
        parent.kill()
        parent.wait(30)
        assert _wait_gone(run, 60), "the run outlived the process that started it"
    finally:
        go_on.set()
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_what_ray_raises_tells_a_dead_worker_from_a_failure() -> None:
    """A worker or node that died (or took the result with it) is a crash; whatever `work`
    raised, wrapped by Ray, and Ray's other errors are not."""
    from ray import exceptions

    died = [
        exceptions.WorkerCrashedError(),
        exceptions.NodeDiedError("node 10.0.0.7 is gone"),
        exceptions.LocalRayletDiedError(),
        exceptions.OutOfMemoryError("the memory monitor killed the worker"),
        exceptions.ObjectReconstructionFailedError("00ff"),
    ]
    wrapped = exceptions.RayTaskError("work", "Traceback ...", ValueError("a bug"))
    not_died = [
        wrapped.as_instanceof_cause(),
        exceptions.RayTaskError("work", "Traceback ...", exceptions.WorkerCrashedError()),
        exceptions.TaskCancelledError(),
        exceptions.ObjectFreedError("00ff", None, ""),
        exceptions.RuntimeEnvSetupError("no such package"),
        RuntimeError("not Ray's"),
    ]
    assert all(rayengine.worker_died(error) for error in died)
    assert not any(rayengine.worker_died(error) for error in not_died)


def test_a_dead_workers_leftover_home_is_swept_and_nothing_else(tmp_path: Path) -> None:
    """Only a folder whose owner is named and gone goes; a live owner's, another host's, one
    that names none (just made), and one that is not of `work`'s, stay."""
    me = Owner.this_process()
    gone = Owner(me.host, me.boot, me.pid, me.since + 1)  # this pid, as another process had it
    elsewhere = Owner("another-" + socket.gethostname(), me.boot, 1, 1)
    folders = {}
    for name, owner in [("dead", gone), ("live", me), ("far", elsewhere), ("new", None)]:
        folder = tmp_path / f"{rayengine.FOLDER_PREFIX}{name}"
        (folder / "home" / "runs").mkdir(parents=True)
        if owner is not None:
            (folder / rayengine.OWNER_FILE).write_text(owner.to_json())
        folders[name] = folder
    other = tmp_path / "agentgod-batch-x"
    other.mkdir()
    (other / rayengine.OWNER_FILE).write_text(gone.to_json())
    assert rayengine.sweep_leftovers(tmp_path) == [folders["dead"]]
    assert not folders["dead"].exists()
    assert all(folders[name].is_dir() for name in ("live", "far", "new")) and other.is_dir()


def _billed(api: FakeMessagesAPI) -> float:
    """What the fake's answered calls cost at the price table: what the gateway billed."""
    spent = ledger.Usage()
    for request in api.messages():
        if request.status == 200 and isinstance(request.reply, dict):
            spent.record(request.body["model"], request.reply["usage"])
    return spent.cost_usd()


def _environ(pid: int) -> dict[str, str]:
    pairs = [item.split(b"=", 1) for item in _read(pid, "environ").split(b"\0") if b"=" in item]
    return {name.decode(): value.decode() for name, value in pairs}


def _parent(pid: int) -> int:
    """Its parent's pid; 0 when it is gone."""
    stat = _read(pid, "stat").decode()
    return int(stat[stat.rfind(")") + 2 :].split()[1]) if stat else 0


def _wait_gone(pid: int, seconds: float) -> bool:
    """Whether process `pid` ends (or is a zombie) within `seconds`."""
    ended = threading.Event()

    def gone() -> bool:
        stat = _read(pid, "stat").decode()
        return not stat or stat[stat.rfind(")") + 2 :].split()[0] in ("Z", "X")

    for _ in range(int(seconds * 20)):
        if gone():
            return True
        ended.wait(0.05)
    return gone()


def _processes() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _read(pid: int, what: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{what}", "rb") as source:
            return source.read()
    except OSError:
        return b""


def _is_ray(cmdline: bytes) -> bool:
    """One of Ray's own processes (gcs_server, raylet, its workers and helpers)."""
    return any(mark in cmdline for mark in (b"/ray/", b"raylet", b"gcs_server", b"ray::"))
