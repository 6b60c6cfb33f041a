"""Failures after the agents ran: what was paid for is kept, and every loss is said.

Whole tasks with real agent subprocesses and the real road against the scripted fake; each fault is
injected at the fake (an overloaded merge, a malformed reply, a reply cut at max_tokens, a
refusal, a silent judge), and the assertions count the requests the fake saw.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import agentgod
from fakeapi import FakeMessagesAPI, Reply, Request
from scripted import Factory, agent_spec, plan

from agentgod import (
    config,
    history,
    historydb,
    llm,
    merger,
    orchestrator,
    problems,
    runlog,
    runrecord,
)

TASK = "Compare two options"
MALFORMED = '{"id": "msg_1", "type": "message", "role": "assistant"}'


@pytest.fixture
def factory(fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch) -> Factory:
    monkeypatch.setenv("SANDBOX", "off")
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("pros"), agent_spec("cons"), complexity="simple")]
    return made


def of_kind(factory: Factory, kind: str) -> list[Request]:
    """Every request of one kind the fake saw, routed or not (routes bypass factory.calls)."""
    return [r for r in factory.api.messages() if factory.kind(r) == kind]


def run_file() -> str:
    (path,) = config.settings().runs_dir.glob("*.md")
    return path.read_text(encoding="utf-8")


# --- a merge that fails after the agents were paid ------------------------------------------------


def test_a_merge_that_stays_overloaded_ends_clearly_and_keeps_the_outputs(
    factory: Factory,
) -> None:
    factory.merge_reply = lambda request: Reply.error(529)
    with pytest.raises(merger.MergeFailedError) as caught:
        orchestrator.handle_task(TASK, settings=config.settings())
    assert len(of_kind(factory, "merge")) == 3  # one call and API_RETRIES (2) retries
    assert caught.value.outputs == {"pros": "result from pros", "cons": "result from cons"}
    problem = problems.explain(caught.value)
    assert problem.kind == "merge_failed"
    assert "overloaded" in problem.headline and "2 agents" in problem.headline
    assert "API_RETRIES" in problem.advice and "run file" in problem.advice
    text = run_file()
    assert "## Agent outputs (not merged)" in text
    assert "result from pros" in text and "result from cons" in text
    assert problem.headline in text
    (row,) = history.history()
    assert not row.ok


def test_a_refused_merge_is_a_problem_not_a_silent_fallback(factory: Factory) -> None:
    factory.merge_reply = lambda request: Reply("", stop_reason="refusal")
    with pytest.raises(merger.MergeRefusedError) as caught:
        orchestrator.handle_task(TASK, settings=config.settings())
    assert len(of_kind(factory, "merge")) == 1
    problem = problems.explain(caught.value)
    assert problem.kind == "merge_refused"
    assert "declined" in problem.headline
    assert "result from pros" in run_file()


def test_a_refusal_after_some_text_delivers_it_with_a_warning(factory: Factory) -> None:
    factory.merge_reply = lambda request: Reply("Half an answer", stop_reason="refusal")
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "Half an answer"
    assert any("refusal" in warning for warning in result.warnings)


def test_the_merge_gets_more_room_once_when_the_answer_is_cut(factory: Factory) -> None:
    replies = iter([Reply("The first half", stop_reason="max_tokens"), Reply("The whole answer")])
    factory.merge_reply = lambda request: next(replies)
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "The whole answer"
    first, second = of_kind(factory, "merge")
    assert (first.body["max_tokens"], second.body["max_tokens"]) == (
        merger.MAX_TOKENS,
        merger.MORE_ROOM_TOKENS,
    )
    assert result.warnings == []


def test_an_answer_cut_twice_is_delivered_with_a_warning(factory: Factory) -> None:
    replies = iter(
        [
            Reply("Short cut", stop_reason="max_tokens"),
            Reply("Longer cut", stop_reason="max_tokens"),
        ]
    )
    factory.merge_reply = lambda request: next(replies)
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "Longer cut"
    assert len(of_kind(factory, "merge")) == 2
    assert any("cut off" in warning for warning in result.warnings)


def test_one_huge_output_is_cut_to_fit_the_merge(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("merged"))
    huge = "x" * 2_000_000
    merged = merger.merge_outputs(TASK, {"big": huge, "small": "a short finding"})
    (request,) = fake_api.messages()
    assert len(request.prompt.encode()) < merger.INPUT_BYTES + 5_000
    assert "a short finding" in request.prompt  # the small output kept whole
    assert "[cut to fit" in request.prompt and "cut to fit, each where it says so: big" in (
        request.prompt
    )
    assert merged.answer == "merged"
    assert merged.warnings == ["big's output was too long to merge whole; its first part was used"]


def test_outputs_within_the_cap_are_untouched() -> None:
    outputs = {"a": "one", "b": "two " * 10}
    assert merger.capped(outputs) == ({"a": "one", "b": ("two " * 10).strip()}, [])


def test_the_cap_shares_what_short_outputs_leave() -> None:
    kept, cut = merger.capped({"short": "s" * 10, "long_a": "a" * 100, "long_b": "b" * 100}, 110)
    assert kept["short"] == "s" * 10
    assert kept["long_a"].startswith("a" * 50) and "a" * 51 not in kept["long_a"]
    assert cut == ["long_a", "long_b"]


# --- one agent's malformed generation reply -------------------------------------------------------


def writes(name: str) -> Callable[[Request], bool]:
    """Matches the requests that write agent `name`'s code."""
    return lambda request: (
        Factory.kind(request) == "generate" and f"Agent name: {name}\n" in (request.prompt)
    )


def test_a_malformed_generation_reply_fails_only_that_agent(factory: Factory) -> None:
    factory.api.route(writes("cons"), Reply(body=MALFORMED))
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "MERGED: pros"
    cons_writes = [r for r in of_kind(factory, "generate") if "Agent name: cons\n" in r.prompt]
    assert len(cons_writes) == 3  # llm's own retries, and no generation attempts on top
    (failure,) = result.failures
    assert failure.name == "cons" and "could not be read" in failure.reason


def test_when_no_agent_can_be_written_the_api_is_named(factory: Factory) -> None:
    factory.api.route(lambda r: factory.kind(r) == "generate", Reply(body="<html>oops</html>"))
    with pytest.raises(llm.MalformedReplyError) as caught:
        orchestrator.handle_task(TASK, settings=config.settings())
    assert problems.explain(caught.value).kind == "malformed_reply"
    assert of_kind(factory, "merge") == []


# --- a hung judge or council never holds the answer ----------------------------------------------


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_TIMEOUT_SECONDS", "1")


@pytest.mark.parametrize("fault", [Reply(silent=True), Reply(drip=0.05)], ids=["silent", "drip"])
def test_a_hung_judge_delivers_the_answer_with_a_warning(
    factory: Factory, short_deadline: None, fault: Reply
) -> None:
    factory.api.route(lambda r: factory.kind(r) == "judge", fault)
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "MERGED: cons, pros"
    assert len(of_kind(factory, "judge")) == 1
    factory.api.wait_ended(len(factory.api.messages()))  # the judge's connection was closed
    (warning,) = result.warnings
    assert "judge" in warning and "within 1 s" in warning and "unjudged" in warning


def test_a_hung_council_delivers_the_merged_answer_with_a_warning(
    factory: Factory, short_deadline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COUNCIL", "always")
    monkeypatch.setenv("TASK_REVISIONS", "0")
    factory.api.route(lambda r: factory.kind(r) == "critic", Reply(silent=True))
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "MERGED: cons, pros"
    assert len(of_kind(factory, "critic")) == 1
    assert of_kind(factory, "refine") == []
    assert any("council" in w and "stands as merged" in w for w in result.warnings)


@pytest.mark.parametrize("stop_reason", ["max_tokens", "refusal"])
def test_a_cut_or_refused_refinement_leaves_the_answer(
    factory: Factory, monkeypatch: pytest.MonkeyPatch, stop_reason: str
) -> None:
    monkeypatch.setenv("COUNCIL", "always")
    monkeypatch.setenv("TASK_REVISIONS", "0")
    factory.challenges = [{"weaknesses": ["An unsupported claim."], "flawed": True}]
    factory.api.route(
        lambda r: factory.kind(r) == "refine", Reply("A half rewrite", stop_reason=stop_reason)
    )
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "MERGED: cons, pros"
    assert not result.council_improved
    assert len(of_kind(factory, "refine")) == 1
    assert any("council" in w or "revise" in w for w in result.warnings)


def test_a_failed_revision_keeps_the_answer_before_it(factory: Factory) -> None:
    factory.verdicts = [{"missing": "Add a third option.", "done": False}]
    factory.api.route(  # the first plan is answered; every later one is overloaded
        lambda r: factory.kind(r) == "plan" and len(of_kind(factory, "plan")) > 1,
        Reply.error(529),
    )
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "MERGED: cons, pros"
    assert len(of_kind(factory, "plan")) == 1 + 3  # the revision's plan, tried three times
    assert any("revision failed" in w and "overloaded" in w for w in result.warnings)


# --- a history that cannot be written -------------------------------------------------------------


def test_a_database_that_cannot_be_written_is_a_warning(factory: Factory) -> None:
    runs = config.settings().runs_dir
    (runs / historydb.DB_NAME).mkdir(parents=True)  # a directory where the database should be
    result = orchestrator.handle_task(TASK, settings=config.settings())
    assert result.answer == "MERGED: cons, pros"
    assert result.run_file is not None and result.run_file.exists()
    (warning,) = result.warnings
    assert "history" in warning and historydb.DB_NAME in warning


def test_a_locked_database_is_a_warning_after_the_busy_wait(isolated_home: Path) -> None:
    warnings: list[str] = []
    runs = config.settings().runs_dir
    runs.mkdir(parents=True)
    holder = sqlite3.connect(runs / historydb.DB_NAME, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        record = runrecord.RunRecord(
            task="t",
            ok=True,
            answer="a",
            error="",
            complexity="simple",
            waves=[],
            agents=[],
            failures=[],
            revisions=0,
            council_improved=False,
            cost={
                "llm_calls": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_write_tokens": 0,
                "cache_read_tokens": 0,
                "web_searches": 0,
                "usd": 0.0,
                "estimate": False,
            },
            duration_seconds=1.0,
            started_at=datetime.now(UTC),
        )
        path = runlog.archive(record, warn=warnings.append)
    finally:
        holder.close()
    assert path is not None and path.exists()
    (warning,) = warnings
    assert "locked" in warning and "history" in warning


def test_the_warning_reaches_json(factory: Factory, isolated_home: Path) -> None:
    (isolated_home / "runs" / historydb.DB_NAME).mkdir(parents=True)
    done = agentgod(isolated_home, factory.api, "--json", TASK)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert any("history" in warning for warning in data["warnings"])
    assert "history" in done.stderr
