"""Every model call has one deadline and a bounded number of retries, tested at the fake API.

The fake's faults (a server that never answers, a reply that drips a byte at a time, a 200 that is
not a message, a retry-after longer than the call may take) are behaviour; the assertions are on
what the fake saw: how many requests arrived, and whether the client hung up before the end.
"""

from __future__ import annotations

from typing import Any

import pytest
from fakeapi import FakeMessagesAPI, Reply
from pydantic import BaseModel

from agentgod import broker, config, llm, problems, wire

MODEL = "claude-sonnet-5-5"


@pytest.fixture
def one_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortest deadline a setting allows, so a hung call costs a test one second."""
    monkeypatch.setenv("API_TIMEOUT_SECONDS", "1")


def ask(max_tokens: int = 256) -> str:
    return llm.complete("hi", model=MODEL, effort=None, max_tokens=max_tokens)


# --- the deadline --------------------------------------------------------------------------------


def test_the_deadline_scales_with_the_room_a_call_asks_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert config.settings().api_timeout_seconds == 30
    assert llm.deadline_seconds(256) == 30
    assert llm.deadline_seconds(llm.DEADLINE_TOKENS) == 30
    assert llm.deadline_seconds(4 * llm.DEADLINE_TOKENS) == 120
    monkeypatch.setenv("API_TIMEOUT_SECONDS", "5")
    assert llm.deadline_seconds(2 * llm.DEADLINE_TOKENS) == 10


@pytest.mark.parametrize("value", ["0", "soon", "3601"])
def test_a_bad_api_timeout_names_the_setting(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("API_TIMEOUT_SECONDS", value)
    with pytest.raises(config.ConfigError, match="API_TIMEOUT_SECONDS"):
        config.settings()


def test_a_silent_server_is_given_up_on_at_the_deadline(
    fake_api: FakeMessagesAPI, one_second: None
) -> None:
    fake_api.handler = lambda request: Reply(silent=True)
    with pytest.raises(llm.DeadlineExceeded) as caught:
        ask()
    # One attempt, and the connection closed: a retry could only have started past the deadline.
    fake_api.wait_ended(1)
    assert len(fake_api.messages()) == 1
    problem = problems.explain(caught.value)
    assert problem.kind == "timeout"
    assert "within 1 s" in problem.headline
    assert "API_TIMEOUT_SECONDS" in problem.advice


@pytest.mark.parametrize("interval", [0.05, 0.3])
def test_a_dripping_reply_is_cut_off_at_the_deadline(
    fake_api: FakeMessagesAPI, one_second: None, interval: float
) -> None:
    """Each byte comes well within any read timeout; only a whole-call deadline ends it."""
    fake_api.handler = lambda request: Reply(drip=interval)
    with pytest.raises(llm.DeadlineExceeded):
        ask()
    (request,) = fake_api.wait_ended(1)
    assert 0 < request.sent < request.length  # the status line had begun: the cut was mid-reply
    assert len(fake_api.messages()) == 1


def test_a_fast_reply_is_untouched_by_the_deadline(
    fake_api: FakeMessagesAPI, one_second: None
) -> None:
    fake_api.queue(Reply("quick"))
    assert ask() == "quick"
    assert float(fake_api.messages()[0].headers["x-stainless-timeout"]) <= 1


def test_a_large_call_needs_no_streaming_under_its_own_deadline(fake_api: FakeMessagesAPI) -> None:
    """The SDK refuses a non-streaming call above ~21k max_tokens unless given a timeout."""
    fake_api.queue(Reply("long"))
    assert ask(max_tokens=32_000) == "long"
    assert fake_api.messages()[0].body["max_tokens"] == 32_000


# --- retries -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("retries", "attempts"), [("0", 1), ("1", 2), (None, 3)])
def test_retries_are_bounded_by_the_setting(
    fake_api: FakeMessagesAPI,
    monkeypatch: pytest.MonkeyPatch,
    retries: str | None,
    attempts: int,
) -> None:
    if retries is not None:
        monkeypatch.setenv("API_RETRIES", retries)
    fake_api.handler = lambda request: Reply.error(529)
    with pytest.raises(wire.OverloadedError):
        ask()
    assert len(fake_api.messages()) == attempts
    counts = [r.headers["x-stainless-retry-count"] for r in fake_api.messages()]
    assert counts == [str(n) for n in range(attempts)]


def test_a_retry_after_beyond_the_deadline_is_not_waited_for(
    fake_api: FakeMessagesAPI, one_second: None
) -> None:
    """The SDK would sleep the whole minute; the call gives up now with the API's own error."""
    fake_api.handler = lambda request: Reply.error(529, headers={"retry-after-ms": "60000"})
    with pytest.raises(wire.OverloadedError) as caught:
        ask()
    assert len(fake_api.messages()) == 1
    assert problems.explain(caught.value).kind == "overloaded"


def test_a_bad_request_is_never_retried(fake_api: FakeMessagesAPI) -> None:
    fake_api.handler = lambda request: Reply.error(400, "max_tokens: too large")
    with pytest.raises(wire.BadRequestError):
        ask()
    assert len(fake_api.messages()) == 1


# --- malformed replies ---------------------------------------------------------------------------

MALFORMED = [
    '{"id": "msg_1", "type": "message", "role": "assistant"}',
    '{"content": null, "usage": {}}',
    '{"content": [{"text": "no type"}], "usage": {}}',
    '{"content": [], "stop_reason": "end_turn"}',
    "<html>502 Bad Gateway</html>",
    "[]",
]


@pytest.mark.parametrize("body", MALFORMED)
def test_a_malformed_200_is_retried_like_a_5xx(fake_api: FakeMessagesAPI, body: str) -> None:
    fake_api.queue(Reply(body=body), Reply("recovered"))
    assert ask() == "recovered"
    assert [r.status for r in fake_api.messages()] == [200, 200]


def test_a_malformed_200_that_stays_is_a_problem_of_its_own(fake_api: FakeMessagesAPI) -> None:
    fake_api.handler = lambda request: Reply(body=MALFORMED[0])
    with pytest.raises(llm.MalformedReplyError) as caught:
        ask()
    assert len(fake_api.messages()) == 3
    problem = problems.explain(caught.value)
    assert problem.kind == "malformed_reply"
    assert "API_RETRIES" in problem.advice


def test_a_structured_call_retries_a_malformed_200_too(fake_api: FakeMessagesAPI) -> None:
    class Answer(BaseModel):
        value: int

    fake_api.queue(Reply(body=MALFORMED[0]), Reply.json({"value": 4}))
    parsed = llm.complete_structured("2+2?", Answer, model=MODEL, effort=None)
    assert parsed.value == 4
    assert len(fake_api.messages()) == 2


# --- stop_reason ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_reason", "cut", "refused"),
    [("end_turn", False, False), ("max_tokens", True, False), ("refusal", False, True)],
)
def test_a_completion_says_why_the_model_stopped(
    fake_api: FakeMessagesAPI, stop_reason: str, cut: bool, refused: bool
) -> None:
    fake_api.queue(Reply("text", stop_reason=stop_reason))
    reply = llm.completion("hi", model=MODEL, effort=None)
    assert (reply.text, reply.stop_reason, reply.cut, reply.refused) == (
        "text",
        stop_reason,
        cut,
        refused,
    )


# --- the broker's road ---------------------------------------------------------------------------


def agent_request() -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 256, "messages": [{"role": "user", "content": "hi"}]}


def test_an_agent_call_through_the_broker_has_the_same_deadline(
    fake_api: FakeMessagesAPI, one_second: None
) -> None:
    fake_api.handler = lambda request: Reply(drip=0.05)
    with pytest.raises(llm.DeadlineExceeded) as caught:
        llm.forward(agent_request())
    fake_api.wait_ended(1)
    assert len(fake_api.messages()) == 1
    # The agent is told it timed out, which the orchestrator reruns as a transient failure.
    assert broker._failure(caught.value)[0] == "timeout"


def test_an_agent_call_retries_a_malformed_200(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply(body=MALFORMED[1]), Reply("fine"))
    reply = llm.forward(agent_request())
    assert [block["text"] for block in reply["content"]] == ["fine"]
    assert len(fake_api.messages()) == 2
