"""A conversation, and runs you can open, replay and retry: through the real `agentgod`.

Every test drives the command as a person or a script would (a pseudo-terminal for the REPL,
`--json` for scripts) against the scripted fake, and asserts on what the fake was asked and on
what the records hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import agentgod, stopped_once_working
from conftest import scripted_env as _env
from fakeapi import FakeMessagesAPI, Reply, Request
from scripted import ECHO_BODY, Factory, agent_spec, plan
from terminal import Terminal


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    return made


def run_json(home: Path, api: FakeMessagesAPI, *args: str, **env: str) -> Any:
    """One --json command; its reply (an object, or a list for history)."""
    done = agentgod(home, api, "--json", "--no-input", "--discard", *args, cwd=None, **env)
    try:
        reply = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout; stderr:\n{done.stderr}") from None
    return reply


# ---- a conversation ------------------------------------------------------------------------


def test_a_follow_up_at_the_prompt_is_planned_with_the_conversation_and_new_forgets_it(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm", COLUMNS="100"))
    for line in ("find the facts about otters", "make it shorter", "/new", "what do owls eat?"):
        terminal.expect("agentgod> ")
        terminal.type(line + "\n")
        if line == "/new":
            terminal.expect("new conversation")
            continue
        terminal.expect("MERGED: fact_finder")
        terminal.expect(r"Keep which\?")
        terminal.type("none\n")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    first, follow_up, fresh = factory.of("plan")
    assert "<conversation>" not in first.prompt
    assert "<conversation>" in follow_up.prompt
    block = follow_up.prompt.split("</conversation>")[0]
    assert "find the facts about otters" in block and "MERGED: fact_finder" in block
    assert "<conversation>" not in fresh.prompt, "/new set the earlier turns aside"


def test_continue_plans_a_one_shot_with_the_last_runs_conversation(
    factory: Factory, isolated_home: Path
) -> None:
    first = run_json(isolated_home, factory.api, "find the facts about otters")
    second = run_json(isolated_home, factory.api, "-c", "now make it much shorter")
    assert second["conversation"] == first["conversation"]
    third = run_json(isolated_home, factory.api, "an unrelated new question about owls")
    assert third["conversation"] != first["conversation"]
    plans = factory.of("plan")
    assert "<conversation>" in plans[1].prompt and "otters" in plans[1].prompt
    assert "<conversation>" not in plans[2].prompt
    resumed = run_json(isolated_home, factory.api, "--resume", str(second["run_id"]), "and why?")
    assert resumed["conversation"] == first["conversation"]
    block = factory.of("plan")[3].prompt.split("</conversation>")[0]
    assert "otters" in block and "much shorter" in block, "both earlier turns, oldest first"
    assert block.index("otters") < block.index("much shorter")
    # --resume RUN continues the conversation as it stood at RUN: later turns are not in it.
    run_json(isolated_home, factory.api, "--resume", str(first["run_id"]), "and where?")
    block = factory.of("plan")[4].prompt.split("</conversation>")[0]
    assert "otters" in block and "much shorter" not in block and "and why?" not in block


# ---- a run recorded whole, opened, replayed ------------------------------------------------


def test_show_json_holds_every_agents_code_output_and_usage_and_code_prints_it_exactly(
    factory: Factory, isolated_home: Path
) -> None:
    factory.plans = [plan(agent_spec("fact_finder"), agent_spec("writer", ["fact_finder"]))]
    answered = run_json(isolated_home, factory.api, "find the facts about otters and write")
    shown = run_json(isolated_home, factory.api, "show")
    assert shown["run_id"] == answered["run_id"] and shown["status"] == "ok"
    agents = {agent["name"]: agent for agent in shown["agents"]}
    assert set(agents) == {"fact_finder", "writer"}
    assert agents["writer"]["inputs"] == ["fact_finder"]
    assert agents["fact_finder"]["output"] == "result from fact_finder"
    assert "def run(task, previous_outputs):" in agents["writer"]["source"]
    assert agents["writer"]["usage"]["llm_calls"] == 1
    assert shown["plan"][1]["depends_on"] == ["fact_finder"]
    calls = shown["calls"]
    assert isinstance(calls, list) and len(calls) == answered["cost"]["llm_calls"]
    assert sum(call["usd"] for call in calls) == pytest.approx(shown["cost"]["usd"], abs=1e-5)
    assert sum(a["usd"] for a in agents.values()) == pytest.approx(
        shown["phases"]["agents"]["usd"],
        abs=1e-5,
    )
    served = {(call["phase"], call["agent"]) for call in calls}
    assert {("generate", "fact_finder"), ("generate", "writer")} <= served
    assert {("agents", "fact_finder"), ("agents", "writer")} <= served
    assert {agent for phase, agent in served if phase not in ("generate", "agents")} == {""}
    for name, agent in agents.items():
        own = [c for c in calls if c["phase"] == "agents" and c["agent"] == name]
        assert sum(c["usd"] for c in own) == pytest.approx(agent["usd"], abs=1e-6)
    assert all(call["seconds"] > 0 for call in calls), "every call was timed"
    code = agentgod(
        isolated_home, factory.api, "show", str(answered["run_id"])[:4], "--code", "writer",
        "--full",
    )  # fmt: skip
    assert code.returncode == 0, code.stderr
    assert code.stdout == agents["writer"]["source"], "exactly the source that ran"
    missing = agentgod(isolated_home, factory.api, "show", "--code", "nobody")
    assert missing.returncode == 1 and "no code for an agent named nobody" in missing.stderr


def test_show_replay_draws_the_run_again_from_its_event_log(
    factory: Factory, isolated_home: Path
) -> None:
    answered = run_json(isolated_home, factory.api, "find the facts about otters")
    log = isolated_home / "runs" / str(answered["run_id"]) / "events.jsonl"
    events = [json.loads(line)["event"] for line in log.read_text(encoding="utf-8").splitlines()]
    assert events[:2] == ["note", "phase_started"], "the task first, then the plan"
    assert "plan_ready" in events and "archived" in events
    replayed = agentgod(isolated_home, factory.api, "show", "--replay", "--plain")
    assert replayed.returncode == 0, replayed.stderr
    shown = replayed.stdout + replayed.stderr
    assert "fact_finder" in shown and "MERGED: fact_finder" in replayed.stdout
    assert len(factory.api.messages()) == answered["cost"]["llm_calls"], "a replay costs nothing"


SLEEPER = """
def run(task, previous_outputs):
    call_llm(f"agent={AGENT_NAME} starting")
    time.sleep(120)
"""


def test_retry_builds_and_runs_only_the_agent_that_failed(
    factory: Factory, isolated_home: Path
) -> None:
    factory.plans = [
        plan(
            agent_spec("fact_finder"),
            agent_spec("slow_one"),
            agent_spec("writer", ["fact_finder", "slow_one"]),
        )
    ]
    factory.bodies["slow_one"] = [
        SLEEPER,
        "def run(task, previous_outputs):\n    return call_llm(f'agent={AGENT_NAME} keys=[]')\n",
    ]
    first = agentgod(
        isolated_home,
        factory.api,
        "--json",
        "--no-input",
        "--discard",
        "three parts",
        AGENT_TIMEOUT_SECONDS="3",
    )
    assert first.returncode == 0, first.stderr
    before = {
        kind: len(factory.of(kind)) for kind in ("plan", "generate", "agent", "merge", "judge")
    }
    ran = json.loads(first.stdout)
    assert [f["name"] for f in ran["failures"]] == ["slow_one"]
    retried = run_json(isolated_home, factory.api, "retry", str(ran["run_id"]))
    assert retried["ok"] is True and retried["retry_of"] == ran["run_id"]
    assert retried["carried"] == ["fact_finder", "writer"]
    after = {kind: len(factory.of(kind)) - before[kind] for kind in before}
    assert after == {"plan": 0, "generate": 1, "agent": 1, "merge": 1, "judge": 1}
    assert "Agent name: slow_one" in factory.of("generate")[-1].prompt
    history_rows = run_json(isolated_home, factory.api, "history")
    assert [row["run_id"] for row in history_rows][:2] == [retried["run_id"], ran["run_id"]]
    again = agentgod(isolated_home, factory.api, "retry", str(retried["run_id"]))
    assert again.returncode == 1 and "nothing to retry" in again.stderr


def test_an_interrupted_run_is_recorded_with_its_cost_and_its_log_ends_with_the_stop(
    factory: Factory, isolated_home: Path
) -> None:
    factory.bodies["fact_finder"] = [SLEEPER, ECHO_BODY]
    assert stopped_once_working(isolated_home, factory, "a long task").returncode == 130
    [row] = run_json(isolated_home, factory.api, "history")
    assert row["status"] == "interrupted" and row["usd"] > 0
    log = isolated_home / "runs" / row["run_id"] / "events.jsonl"
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    notes = [line["args"] for line in lines if line["event"] == "note"]
    assert notes[-1] == {"kind": "interrupted", "text": "SIGINT"}
    retried = run_json(isolated_home, factory.api, "retry")
    assert retried["retry_of"] == row["run_id"]


def test_a_merge_that_kept_failing_is_finished_by_retry_without_running_an_agent_again(
    factory: Factory, isolated_home: Path
) -> None:
    """The agents' outputs were paid for: the failed run keeps them, and retry only merges."""
    factory.plans = [plan(agent_spec("fact_finder"), agent_spec("writer", ["fact_finder"]))]
    merge_fails = [True]
    merged = factory.merge_reply

    def merge_reply(request: Request) -> Reply | str:
        return Reply.error(529) if merge_fails[0] else merged(request)

    factory.merge_reply = merge_reply
    failed = run_json(isolated_home, factory.api, "facts then a summary", API_RETRIES="0")
    assert failed["ok"] is False
    [row] = run_json(isolated_home, factory.api, "history")
    assert row["status"] == "failed"
    before = {kind: len(factory.of(kind)) for kind in ("plan", "generate", "agent", "merge")}
    merge_fails[0] = False
    retried = run_json(isolated_home, factory.api, "retry")
    assert retried["ok"] is True and retried["answer"] == "MERGED: fact_finder, writer"
    assert retried["retry_of"] == row["run_id"] and retried["carried"] == ["fact_finder", "writer"]
    after = {kind: len(factory.of(kind)) - before[kind] for kind in before}
    assert after == {"plan": 0, "generate": 0, "agent": 0, "merge": 1}


def test_the_runs_last_line_names_its_id(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(
        isolated_home, factory.api, "--plain", "--discard", "find the facts about otters"
    )
    assert done.returncode == 0, done.stderr
    [row] = run_json(isolated_home, factory.api, "history")
    last = [line for line in done.stderr.splitlines() if line.startswith("[run]")][-1]
    assert f"run {row['run_id']} (agentgod show {row['run_id']})" in last
