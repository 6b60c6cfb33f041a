"""judgment through the real SDK against the fake Messages API: judge, revision, clarify, triage."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import cached_system
from fakeapi import FakeMessagesAPI, Reply, Request

import judgment
import ledger
from judgment import Verdict

pytestmark = pytest.mark.usefixtures("distinct_models")

TASK = "List exactly five uses for a paperclip, as a numbered list, in French."
ANSWER = "1. Crochet\n2. Clé\n3. Ressort"


def only_request(api: FakeMessagesAPI) -> Request:
    [request] = api.messages()
    return request


# --- judge ------------------------------------------------------------------------------------


def test_judge_asks_the_fast_model_with_the_task_and_answer(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(
        Reply.json({"missing": "Give five uses; the answer gives three.", "done": False})
    )
    usage = ledger.Usage()
    verdict = judgment.judge(TASK, ANSWER, usage=usage, effort="high")
    assert verdict == Verdict(missing="Give five uses; the answer gives three.", done=False)
    request = only_request(fake_api)
    assert request.body["model"] == "claude-haiku-5-5"
    assert request.body["system"] == cached_system(judgment.JUDGE_PROMPT)
    assert request.body["output_config"]["effort"] == "high"
    assert f"<task>\n{TASK}\n</task>" in request.prompt
    assert f"<answer>\n{ANSWER}\n</answer>" in request.prompt
    assert usage.snapshot()["claude-haiku-5-5"].calls == 1


def test_the_verdict_schema_examines_before_it_rules(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply.json({"missing": "", "done": True}))
    judgment.judge(TASK, ANSWER)
    schema = only_request(fake_api).schema
    assert schema is not None
    assert list(schema["properties"]) == ["missing", "done"]
    assert all(field["description"] for field in schema["properties"].values())


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({"missing": "  ", "done": True}, Verdict(missing="", done=True)),
        ({"missing": "Also cover cost.", "done": True}, Verdict(missing="", done=True)),
        ({"missing": "", "done": False}, Verdict(missing="", done=True)),
        ({"missing": " \n ", "done": False}, Verdict(missing="", done=True)),
        (
            {"missing": "  Answer in French. ", "done": False},
            Verdict(missing="Answer in French.", done=False),
        ),
    ],
)
def test_verdicts_are_normalised(
    fake_api: FakeMessagesAPI, reply: dict[str, Any], expected: Verdict
) -> None:
    fake_api.queue(Reply.json(reply))
    verdict = judgment.judge(TASK, ANSWER)
    assert (verdict.missing, verdict.done) == (expected.missing, expected.done)


def test_a_verdict_built_directly_is_normalised_too() -> None:
    assert Verdict(missing="", done=False).done is True
    assert Verdict(missing="Add a sixth item.", done=True).missing == ""


# --- revision_task ----------------------------------------------------------------------------


def test_revision_keeps_the_original_wording_and_appends_the_gap() -> None:
    task = "  Summarise this:\n\n  line one\n  line two  "
    revised = judgment.revision_task(task, "  Keep it under 50 words.\n")
    assert revised.startswith(task)
    assert revised == f"{task}\n\n---\n{judgment.REVISION_NOTE} Keep it under 50 words."


def test_revision_without_a_gap_leaves_the_task_untouched() -> None:
    assert judgment.revision_task(TASK, " \n") == TASK


# --- clarifying_question ----------------------------------------------------------------------


def test_clarifying_question_is_a_cheap_call_on_the_fast_model(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(
        Reply.json({"reason": "Nothing to translate.", "ask": True, "question": " Which text? "})
    )
    usage = ledger.Usage()
    assert judgment.clarifying_question("translate this", usage=usage) == "Which text?"
    request = only_request(fake_api)
    assert request.body["model"] == "claude-haiku-5-5"
    assert request.body["output_config"]["effort"] == "low"
    assert request.body["system"] == cached_system(judgment.CLARIFY_PROMPT)
    assert "<task>\ntranslate this\n</task>" in request.prompt
    assert request.schema is not None
    assert list(request.schema["properties"]) == ["reason", "ask", "question"]
    assert usage.totals().calls == 1


@pytest.mark.parametrize(
    "reply",
    [
        {"reason": "Clear enough.", "ask": False, "question": ""},
        {"reason": "Clear enough.", "ask": False, "question": "Which tone do you prefer?"},
        {"reason": "Unclear.", "ask": True, "question": "   "},
    ],
)
def test_no_question_unless_one_is_decided_and_written(
    fake_api: FakeMessagesAPI, reply: dict[str, Any]
) -> None:
    fake_api.queue(Reply.json(reply))
    assert judgment.clarifying_question("Write a poem about autumn.") is None


def test_a_rambling_question_is_cut_to_one_line(fake_api: FakeMessagesAPI) -> None:
    rambling = "Which of the options did you mean,\n" + "and why " * 100
    fake_api.queue(Reply.json({"reason": "Unnamed options.", "ask": True, "question": rambling}))
    question = judgment.clarifying_question("Compare the two options.")
    assert question is not None
    assert len(question) <= judgment.MAX_QUESTION_CHARS
    assert "\n" not in question
    assert question.startswith("Which of the options did you mean, and why")
    assert question.endswith("…")


# --- triage -----------------------------------------------------------------------------------


def test_small_talk_gets_a_direct_reply(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(
        Reply.json({"reason": "A greeting.", "is_chat": True, "reply": " Hi! Give me a task. "})
    )
    usage = ledger.Usage()
    assert judgment.triage("hi", usage=usage) == "Hi! Give me a task."
    request = only_request(fake_api)
    assert request.body["model"] == "claude-haiku-5-5"
    assert request.body["output_config"]["effort"] == "low"
    assert request.body["system"] == cached_system(judgment.CHAT_PROMPT)
    assert "<input>\nhi\n</input>" in request.prompt
    assert request.schema is not None
    assert list(request.schema["properties"]) == ["reason", "is_chat", "reply"]
    assert usage.totals().calls == 1


@pytest.mark.parametrize(
    "reply",
    [
        {"reason": "Asks for work.", "is_chat": False, "reply": ""},
        {"reason": "Asks for work.", "is_chat": False, "reply": "Sure, Lima."},
        {"reason": "A greeting.", "is_chat": True, "reply": "  "},
    ],
)
def test_anything_else_is_left_to_the_factory(
    fake_api: FakeMessagesAPI, reply: dict[str, Any]
) -> None:
    fake_api.queue(Reply.json(reply))
    assert judgment.triage("capital of Peru?") is None


def test_the_chat_prompt_describes_the_factory_honestly() -> None:
    assert "builds a team of specialised agents" in judgment.CHAT_PROMPT
    assert "cannot browse the web" in judgment.CHAT_PROMPT
