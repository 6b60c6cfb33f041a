"""The first hour, third pass (issue 31), through the real `agentgod` command.

Each test drives the product as a person or a script would — a subprocess with pipes, or a
pseudo-terminal — against the fake Messages API, and counts the requests where money is at stake:
nothing spent by mistake, nothing reported wrong, nothing mangled.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import agentgod
from fakeapi import FakeMessagesAPI
from scripted import Factory, agent_spec, plan

from agentgod import eventlog


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    return made


def _reply(done: object) -> dict:
    stdout = getattr(done, "stdout", "")
    assert stdout.strip(), getattr(done, "stderr", "")
    return json.loads(stdout)


# ---- 8. redaction never mangles ordinary text ----------------------------------------------------

ORDINARY = "ask-me-anything-2024-edition and disk-usage-report-for-the-team"


def test_ordinary_words_reach_every_record_and_the_follow_up_unmangled(
    factory: Factory, isolated_home: Path
) -> None:
    factory.merge_reply = lambda request: f"The answer on {ORDINARY}."
    task = f"summarise {ORDINARY}"
    reply = _reply(agentgod(isolated_home, factory.api, "--json", task))
    assert reply["ok"] and reply["task"] == task
    run_id = reply["run_id"]
    [row] = _reply(agentgod(isolated_home, None, "--json", "history"))
    assert row["task"] == task
    run_file = Path(reply["run_file"]).read_text(encoding="utf-8")
    assert run_file.count(ORDINARY) >= 2, "the task and the answer"
    logged = eventlog.run_log(isolated_home / "runs", run_id).read_text(encoding="utf-8")
    assert ORDINARY in logged and "[redacted]" not in logged
    last = _reply(agentgod(isolated_home, None, "--json", "last"))
    assert last["answer"] == f"The answer on {ORDINARY}."
    followed = agentgod(isolated_home, factory.api, "--json", "--continue", "now in French")
    assert followed.returncode == 0, followed.stderr
    planned = factory.of("plan")[-1].prompt
    assert task in planned and f"The answer on {ORDINARY}." in planned
    assert "[redacted]" not in planned
