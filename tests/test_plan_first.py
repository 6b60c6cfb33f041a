"""No wait before the plan: the plan request is a task's first, and the intake runs beside it.

At the fake Messages API, with the real command: the plan request arrives before (or with) the
intake's; small talk closes the plan's stream and counts what it had cost; a question answered
at a terminal comes before any agent is built and has the plan made again with the answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import agentgod, scripted_env
from fakeapi import FakeMessagesAPI
from scripted import Factory, agent_spec, plan
from terminal import Terminal

from agentgod import history


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    return made


def test_a_short_task_sends_its_plan_request_before_the_small_talk_check(
    factory: Factory, isolated_home: Path
) -> None:
    done = agentgod(isolated_home, factory.api, "--json", "--no-input", "capital of Peru?")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"] == "MERGED: fact_finder"
    [planned] = factory.of("plan")
    [screened] = factory.of("intake")
    # The intake's request is sent only once the plan's is written: on a connection opened
    # after the plan's (accepted later), or the fake would have seen it first.
    assert planned.connection < screened.connection


def test_small_talk_closes_the_plan_stream_and_counts_what_it_had_cost(
    factory: Factory, isolated_home: Path
) -> None:
    never = threading.Event()
    factory.plan_hold = never  # the plan is still being written when the check says "chat"
    done = agentgod(isolated_home, factory.api, "--json", "hi")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["answer"], data["complexity"], data["agents"]) == (
        "Hello! Give me a task.",
        "chat",
        [],
    )
    [planned] = factory.of("plan")
    [screened] = factory.of("intake")
    factory.api.wait_ended(2)
    assert not never.is_set() and planned.ended, "the client closed the plan's stream"
    assert factory.of("generate") == []
    # The plan's input, as its message_start said, and the check's whole call: both billed.
    billed = [planned.reply["usage"], screened.reply["usage"]]
    cost = data["cost"]
    assert cost["llm_calls"] == 2
    assert cost["input_tokens"] == sum(u["input_tokens"] for u in billed)
    assert cost["cache_write_tokens"] == sum(u["cache_creation_input_tokens"] for u in billed)
    assert cost["output_tokens"] < sum(u["output_tokens"] for u in billed), "the plan was cut"
    runs = isolated_home / "runs"
    leftovers = [] if not runs.exists() else [p.name for p in runs.iterdir()]
    assert not [name for name in leftovers if not name.startswith("history.db")], (
        "no team, no run file, no log"
    )
    assert history.history() == [], "and no row: small talk is no run"


def test_a_question_at_a_terminal_comes_before_any_agent_and_its_answer_reaches_the_second_plan(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    gate = threading.Event()
    factory.plan_hold = gate  # the first plan is still open while the person answers
    factory.clarifying_question = "Which language should the summary be in?"
    env = scripted_env(isolated_home, factory.api, TERM="xterm")
    terminal = open_terminal(env, "--plain", "--discard", "summarise the otter report")
    terminal.expect("Which language should the summary be in?")
    first = factory.of("plan")[0]
    assert factory.of("generate") == [], "no agent is built before the answer"
    terminal.type("German\n")
    terminal.expect("Planning again with your answer")
    terminal.expect("MERGED: fact_finder")
    assert terminal.close() == 0
    assert not gate.is_set() and first.ended, "the first plan's stream was closed"
    first, second = factory.of("plan")
    assert "Answer: German" not in first.prompt
    assert "Which language should the summary be in?\nAnswer: German" in second.prompt
    assert all(r.arrived > second.arrived for r in factory.of("generate"))
    shown = agentgod(isolated_home, None, "show", "--json")
    assert shown.returncode == 0, shown.stderr
    phases = [call["phase"] for call in json.loads(shown.stdout)["calls"]]
    assert phases.count("plan") == 2, "the first plan's cost is in the run's"
    assert phases.count("intake") == 1


def _imported(home: Path, api: FakeMessagesAPI | None, *args: str) -> set[str]:
    """Every module `python -X importtime -m agentgod ARGS` imported (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agentgod", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=scripted_env(home, api),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and not line.rstrip().endswith("package")
    }


@pytest.mark.parametrize(
    "args", [["--version"], ["--help"], ["history"], ["show"], ["stats"], ["library"]]
)
def test_the_read_only_commands_never_import_the_sdk(
    factory: Factory, isolated_home: Path, args: list[str]
) -> None:
    assert agentgod(isolated_home, factory.api, "--discard", "a task").returncode == 0
    modules = _imported(isolated_home, None, *args)
    assert "agentgod.cli" in modules, "the log is read"
    assert not {name for name in modules if name.split(".")[0] == "anthropic"}


def test_a_whole_run_never_imports_the_sdk(factory: Factory, isolated_home: Path) -> None:
    """The road speaks HTTP itself: nothing stands between start-up and the first request."""
    modules = _imported(isolated_home, factory.api, "--json", "--no-input", "a task")
    assert "agentgod.orchestrator" in modules, "the log covers the whole run"
    assert not {name for name in modules if name.split(".")[0] in ("anthropic", "httpx2")}
