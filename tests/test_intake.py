"""intake: the clarifying question and small-talk triage, through the fake Messages API."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import cached_system
from fakeapi import FakeMessagesAPI, Reply, Request

from agentgod import intake, ledger

pytestmark = pytest.mark.usefixtures("distinct_models")

TASK = "List exactly five uses for a paperclip, as a numbered list, in French."
ANSWER = "1. Crochet\n2. Clé\n3. Ressort"


def only_request(api: FakeMessagesAPI) -> Request:
    [request] = api.messages()
    return request


# --- clarifying_question ----------------------------------------------------------------------


def test_clarifying_question_is_a_cheap_call_on_the_fast_model(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(
        Reply.json({"reason": "Nothing to translate.", "ask": True, "question": " Which text? "})
    )
    usage = ledger.Usage()
    assert intake.clarifying_question("translate this", usage=usage) == "Which text?"
    request = only_request(fake_api)
    assert request.body["model"] == "claude-haiku-5-5"
    assert request.body["output_config"]["effort"] == "low"
    assert request.body["system"] == cached_system(intake.CLARIFY_PROMPT)
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
    assert intake.clarifying_question("Write a poem about autumn.") is None


def test_a_rambling_question_is_cut_to_one_line(fake_api: FakeMessagesAPI) -> None:
    rambling = "Which of the options did you mean,\n" + "and why " * 100
    fake_api.queue(Reply.json({"reason": "Unnamed options.", "ask": True, "question": rambling}))
    question = intake.clarifying_question("Compare the two options.")
    assert question is not None
    assert len(question) <= intake.MAX_QUESTION_CHARS
    assert "\n" not in question
    assert question.startswith("Which of the options did you mean, and why")
    assert question.endswith("…")


# --- triage -----------------------------------------------------------------------------------


def test_small_talk_gets_a_direct_reply(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(
        Reply.json({"reason": "A greeting.", "is_chat": True, "reply": " Hi! Give me a task. "})
    )
    usage = ledger.Usage()
    assert intake.triage("hi", usage=usage) == "Hi! Give me a task."
    request = only_request(fake_api)
    assert request.body["model"] == "claude-haiku-5-5"
    assert request.body["output_config"]["effort"] == "low"
    assert request.body["system"] == cached_system(intake.CHAT_PROMPT)
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
    assert intake.triage("capital of Peru?") is None


def test_the_chat_prompt_describes_the_factory_honestly() -> None:
    assert "builds a team of specialised agents" in intake.CHAT_PROMPT
    assert "can search the web, read the files the user attaches" in intake.CHAT_PROMPT
    assert "request about an earlier answer" in intake.CHAT_PROMPT, "a follow-up is a task"
