"""intake: small talk and the clarifying question in one call, through the fake Messages API."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import cached_system
from fakeapi import FakeMessagesAPI, Reply, Request

from agentgod import intake, ledger

pytestmark = pytest.mark.usefixtures("distinct_models")


def only_request(api: FakeMessagesAPI) -> Request:
    [request] = api.messages()
    return request


def decided(**fields: Any) -> Reply:
    """The intake's reply: nothing decided unless said."""
    base = {
        "chat_reason": "scripted",
        "is_chat": False,
        "reply": "",
        "ask_reason": "scripted",
        "ask": False,
        "question": "",
    }
    return Reply.json({**base, **fields})


def test_one_cheap_call_on_the_fast_model_decides_both(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(decided(ask=True, question=" Which text? "))
    usage = ledger.Usage()
    found = intake.screen("translate this", chat=True, ask=True, usage=usage)
    assert found == intake.Screening(question="Which text?")
    request = only_request(fake_api)
    assert request.body["model"] == "claude-haiku-5-5"
    assert request.body["output_config"]["effort"] == "low"
    assert request.body["system"] == cached_system(intake.INTAKE_PROMPT)
    assert "<input>\ntranslate this\n</input>" in request.prompt
    assert request.schema is not None
    assert list(request.schema["properties"]) == [
        "chat_reason",
        "is_chat",
        "reply",
        "ask_reason",
        "ask",
        "question",
    ]
    assert usage.totals().calls == 1


def test_the_prompt_keeps_both_biases_whole() -> None:
    """The small-talk rules and the question rules are the ones each call had on its own."""
    assert intake.CHAT_PROMPT in intake.INTAKE_PROMPT
    assert intake.CLARIFY_PROMPT in intake.INTAKE_PROMPT
    assert "When in doubt it is a task" in intake.CHAT_PROMPT
    assert "When in doubt, do not ask." in intake.CLARIFY_PROMPT


# --- the clarifying question --------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        {"ask": False, "question": ""},
        {"ask": False, "question": "Which tone do you prefer?"},
        {"ask": True, "question": "   "},
    ],
)
def test_no_question_unless_one_is_decided_and_written(
    fake_api: FakeMessagesAPI, reply: dict[str, Any]
) -> None:
    fake_api.queue(decided(**reply))
    assert intake.screen("Write a poem about autumn.", chat=True, ask=True) == intake.Screening()


def test_no_question_for_whoever_cannot_answer_it(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(decided(ask=True, question="Which text?"))
    assert intake.screen("translate this", chat=True, ask=False) == intake.Screening()


def test_a_rambling_question_is_cut_to_one_line(fake_api: FakeMessagesAPI) -> None:
    rambling = "Which of the options did you mean,\n" + "and why " * 100
    fake_api.queue(decided(ask=True, question=rambling))
    question = intake.screen("Compare the two options.", chat=False, ask=True).question
    assert question is not None
    assert len(question) <= intake.MAX_QUESTION_CHARS
    assert "\n" not in question
    assert question.startswith("Which of the options did you mean, and why")
    assert question.endswith("…")


# --- small talk ---------------------------------------------------------------------------------


def test_small_talk_gets_a_direct_reply(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(decided(is_chat=True, reply=" Hi! Give me a task. "))
    assert intake.screen("hi", chat=True, ask=True) == intake.Screening(reply="Hi! Give me a task.")


@pytest.mark.parametrize(
    "reply",
    [
        {"is_chat": False, "reply": ""},
        {"is_chat": False, "reply": "Sure, Lima."},
        {"is_chat": True, "reply": "  "},
    ],
)
def test_anything_else_is_left_to_the_factory(
    fake_api: FakeMessagesAPI, reply: dict[str, Any]
) -> None:
    fake_api.queue(decided(**reply))
    assert intake.screen("capital of Peru?", chat=True, ask=False) == intake.Screening()


def test_input_too_long_for_small_talk_is_never_taken_for_it(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(decided(is_chat=True, reply="Hello!"))
    assert intake.screen("hi there, what can you do?", chat=False, ask=True) == intake.Screening()


def test_the_chat_prompt_describes_the_factory_honestly() -> None:
    assert "builds a team of specialised agents" in intake.CHAT_PROMPT
    assert "can search the web, read the files the user attaches" in intake.CHAT_PROMPT
    assert "request about an earlier answer" in intake.CHAT_PROMPT, "a follow-up is a task"
