"""`agentgod batch --engine ray`: a local Ray instance runs the batch's runs as Ray tasks.

Needs the optional extra (`pip install -e ".[ray]"`, which .ci/run installs). The Ray workers run
each task's `agentgod` in a home of their own, with the run's capability as their key against
the batch's gateway; what they leave comes back into the submitting home's history.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import TEST_KEY, agentgod_command, scripted_env
from fakeapi import FakeMessagesAPI, Request
from scripted import Factory, agent_spec, plan

from agentgod import batchrecord, history

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
