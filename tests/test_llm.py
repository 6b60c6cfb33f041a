"""llm, the one road to the model (over wire, its own HTTP), against the fake Messages API."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI, Reply
from pydantic import BaseModel

from agentgod import config, council, intake, judgment, ledger, llm, planner, problems, wire

MODEL = "claude-sonnet-5-5"


class Verdict(BaseModel):
    missing: str
    done: bool


def test_plain_call_returns_text_and_counts_usage(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("Hello there", thinking=True))
    usage = ledger.Usage()
    text = llm.complete("Say hello", system="Be brief.", usage=usage, model=MODEL, effort="medium")
    assert text == "Hello there"
    [request] = fake_api.messages()
    assert request.body["messages"] == [{"role": "user", "content": "Say hello"}]
    assert request.body["model"] == "claude-sonnet-5-5"
    assert "temperature" not in request.body
    assert request.api_key == TEST_KEY
    assert request.headers["anthropic-version"]
    assert usage.totals().calls == 1
    assert usage.totals().output_tokens > 0


def test_structured_call_is_parsed_into_the_model(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply.json({"missing": "", "done": True}))
    verdict = llm.complete_structured(
        "Judge it", Verdict, system="You judge.", model=MODEL, effort="medium"
    )
    assert verdict == Verdict(missing="", done=True)
    schema = fake_api.messages()[0].schema
    assert schema is not None
    assert list(schema["properties"]) == ["missing", "done"]


def test_structured_call_with_invalid_json_raises_validation_problem(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(Reply("not json at all"))
    with pytest.raises(Exception) as caught:
        llm.complete_structured("Judge it", Verdict, model=MODEL, effort="medium")
    assert problems.explain(caught.value).kind == "invalid_reply"


def test_effort_sent_for_sonnet_5_5_and_omitted_for_haiku_4_5(
    fake_api: FakeMessagesAPI,
) -> None:
    llm.complete("a", model="claude-sonnet-5-5", effort="low")
    llm.complete("b", model="claude-haiku-4-5", effort="low")
    sonnet, haiku = fake_api.messages()
    assert sonnet.body["output_config"] == {"effort": "low"}
    assert "output_config" not in haiku.body


def test_effort_is_clamped_to_what_the_model_accepts(fake_api: FakeMessagesAPI) -> None:
    llm.complete("a", model="claude-sonnet-5-5", effort="max")
    assert fake_api.messages()[0].body["output_config"] == {"effort": "high"}


def test_no_effort_sends_no_output_config(fake_api: FakeMessagesAPI) -> None:
    llm.complete("a", model="claude-sonnet-5-5", effort=None)
    assert "output_config" not in fake_api.messages()[0].body


def test_system_prompt_is_sent_as_a_cached_block(fake_api: FakeMessagesAPI) -> None:
    usage = ledger.Usage()
    for _ in range(2):
        llm.complete(
            "hi", system="A long stable system prompt.", usage=usage, model=MODEL, effort="medium"
        )
    first, second = fake_api.messages()
    assert first.body["system"] == [
        {
            "type": "text",
            "text": "A long stable system prompt.",
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert second.body["system"] == first.body["system"]
    totals = usage.totals()
    assert totals.cache_write_tokens > 0
    assert totals.cache_read_tokens > 0


def test_529_is_retried_then_answered(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply.error(529), Reply("recovered"))
    assert llm.complete("hi", model=MODEL, effort="medium") == "recovered"
    statuses = [r.status for r in fake_api.messages()]
    assert statuses == [529, 200]
    assert fake_api.messages()[1].headers["x-stainless-retry-count"] == "1"


def test_401_becomes_a_problem_naming_the_key_variable(fake_api: FakeMessagesAPI) -> None:
    fake_api.valid_keys = {"sk-ant-some-other-key-000000000000"}
    with pytest.raises(Exception) as caught:
        llm.complete("hi", model=MODEL, effort="medium")
    problem = problems.explain(caught.value)
    assert problem.kind == "authentication"
    assert "ANTHROPIC_API_KEY" in problem.advice
    assert TEST_KEY not in f"{problem.headline}{problem.advice}{problem.technical}"


def test_404_unknown_model_names_the_model(fake_api: FakeMessagesAPI) -> None:
    fake_api.known_models = {"claude-sonnet-5-5"}
    with pytest.raises(Exception) as caught:
        llm.complete("hi", model="claude-nonexistent-9", effort="medium")
    problem = problems.explain(caught.value)
    assert "claude-nonexistent-9" in problem.headline
    assert "--model" in problem.advice


def test_missing_key_raises_before_any_request(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(config.MissingApiKeyError):
        llm.complete("hi", model=MODEL, effort="medium")
    assert fake_api.messages() == []


def test_each_call_carries_its_snapshots_key_over_one_kept_alive_connection(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm.complete("hi", model=MODEL, effort=None)
    other = "sk-ant-another-test-key-0000000000"
    llm.complete(
        "hi", model=MODEL, effort=None, settings=config.settings({"ANTHROPIC_API_KEY": other})
    )
    first, second = fake_api.messages()
    assert (first.api_key, second.api_key) == (TEST_KEY, other)
    # Both went over the same connection, which waits in the pool for the next call.
    assert len(wire._pool._idle[wire.origin(fake_api.base_url)]) == 1


def test_response_text_joins_text_blocks_only() -> None:
    class Block:
        def __init__(self, type: str, text: str = "") -> None:
            self.type, self.text = type, text

    class Message:
        def __init__(self, *blocks: Block) -> None:
            self.content = list(blocks)

    message = Message(
        Block("thinking", "secret plan"), Block("text", "Hello "), Block("text", "you")
    )
    assert llm.response_text(message) == "Hello you"


# ---- streaming ---------------------------------------------------------------------------------


def streamed(**kwargs: Any) -> tuple[llm.Completion, list[str]]:
    """A streamed completion and every call its on_text saw, in order."""
    seen: list[str] = []
    reply = llm.completion("Say it", model=MODEL, effort=None, on_text=seen.append, **kwargs)
    return reply, seen


def test_a_streamed_call_passes_each_piece_in_order_and_returns_the_same_completion(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(
        Reply("Hello there, world.", thinking=True, pieces=["Hel", "lo there", ", world."])
    )
    usage = ledger.Usage()
    reply, seen = streamed(usage=usage)
    assert seen == ["Hel", "lo there", ", world."]
    assert reply == llm.Completion("Hello there, world.", "end_turn")
    [request] = fake_api.messages()
    assert request.body["stream"] is True
    assert "temperature" not in request.body
    sent = request.reply["usage"]  # what message_delta said, as totals
    totals = usage.totals()
    assert totals.calls == 1
    assert (totals.input_tokens, totals.output_tokens) == (
        sent["input_tokens"],
        sent["output_tokens"],
    )


def test_a_streamed_reply_cut_at_the_limit_says_so(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("A long answer that ran out", stop_reason="max_tokens"))
    reply, seen = streamed()
    assert reply.cut
    assert "".join(seen) == reply.text


@pytest.mark.parametrize(
    "failure",
    [
        Reply("Half an ans", stream_error=529, fail_after=2),
        Reply("Half an ans", stream_cut=True, fail_after=2),
    ],
    ids=["error event", "connection cut"],
)
def test_a_stream_that_fails_part_way_is_retried_and_on_text_told_to_start_over(
    fake_api: FakeMessagesAPI, failure: Reply
) -> None:
    fake_api.queue(failure, Reply("The whole answer."))
    usage = ledger.Usage()
    reply, seen = streamed(usage=usage)
    assert seen == ["Half ", "an ", "", "The ", "whole ", "answer."]
    assert reply.text == "The whole answer."
    first, second = fake_api.messages()
    assert first.status == 200  # the failure came after the reply had begun
    assert second.headers["x-stainless-retry-count"] == "1"
    # The broken attempt was billed from its message_start on: it is counted with the reply.
    assert usage.totals().calls == 2
    broken, whole = usage.call_log()
    assert broken.input_tokens == whole.input_tokens > 0, "the input was billed twice"


def test_a_stream_error_not_worth_retrying_is_raised_after_saying_start_over(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(Reply("Some text", stream_error=400, fail_after=1, error_message="bad"))
    seen: list[str] = []
    with pytest.raises(wire.APIStatusError) as caught:
        llm.completion("Say it", model=MODEL, effort=None, on_text=seen.append)
    assert caught.value.type == "invalid_request_error"
    assert seen == ["Some ", ""]
    assert len(fake_api.messages()) == 1


def test_a_stream_held_open_past_the_deadline_is_cut_off(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TIMEOUT_SECONDS", "1")
    gate = threading.Event()  # never set: the fake keeps the stream open after one piece
    fake_api.queue(Reply("First words, then nothing", hold=gate))
    seen: list[str] = []
    with pytest.raises(llm.DeadlineExceeded):
        llm.completion("Say it", model=MODEL, effort=None, max_tokens=256, on_text=seen.append)
    assert seen == ["First ", ""]
    (request,) = fake_api.wait_ended(1)  # the client hung up; no retry fits in the deadline
    assert request.reply["content"][0]["text"] == "First words, then nothing"


def test_a_stream_that_ends_without_message_stop_is_malformed_and_retried(
    fake_api: FakeMessagesAPI,
) -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    }
    body = f"event: message_start\ndata: {json.dumps(start)}\n\n"
    fake_api.queue(
        Reply(body=body, headers={"content-type": "text/event-stream"}), Reply("Complete.")
    )
    reply, seen = streamed()
    assert reply.text == "Complete."
    assert seen == ["Complete."]
    assert len(fake_api.messages()) == 2


def test_a_streamed_call_under_a_budget_holds_its_worst_case_and_gives_it_back(
    fake_api: FakeMessagesAPI,
) -> None:
    """The budget lowers the room each call asks for; a hold never given back would leave the
    second call waiting for money that is not coming."""
    usage = ledger.Usage(budget_usd=0.01)
    finished: list[str] = []

    def twice() -> None:
        for _ in range(2):
            finished.append(streamed(usage=usage, max_tokens=16000)[0].text)

    worker = threading.Thread(target=twice, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert finished == ["ok", "ok"]
    first, second = fake_api.messages()
    for request in (first, second):
        assert ledger.MIN_OUTPUT_TOKENS <= request.body["max_tokens"] < 1000
    assert usage.totals().calls == 2


def test_a_dripping_stream_is_cut_off_at_the_deadline_too(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TIMEOUT_SECONDS", "1")
    fake_api.queue(Reply("Slowly, slowly", drip=0.02))
    seen: list[str] = []
    with pytest.raises(llm.DeadlineExceeded):
        llm.completion("Say it", model=MODEL, effort=None, max_tokens=256, on_text=seen.append)
    (request,) = fake_api.wait_ended(1)
    assert 0 < request.sent < request.length


def test_work_while_waiting_starts_once_the_request_is_out_and_before_its_reply(
    fake_api: FakeMessagesAPI,
) -> None:
    started = threading.Event()
    runs: list[str] = []

    def answer_once_the_work_started(request: object) -> str:
        # The reply waits for the work: if it only ran after the reply, this would time out.
        return "seen" if started.wait(10) else "the work had not started"

    fake_api.route(lambda request: True, answer_once_the_work_started)

    def work() -> None:
        runs.append("ran")
        started.set()

    with llm.while_waiting(work):
        text = llm.complete("Say something", model=MODEL, effort=None)
        llm.complete("Say it again", model=MODEL, effort=None)
    assert text == "seen"
    assert runs == ["ran"], "once, for the first request only"


def test_work_while_waiting_never_runs_without_a_request(fake_api: FakeMessagesAPI) -> None:
    runs: list[str] = []
    with llm.while_waiting(lambda: runs.append("ran")):
        pass
    llm.complete("Outside the block", model=MODEL, effort=None)
    assert runs == []


# ---- structured output's schema ----------------------------------------------------------------


@pytest.mark.parametrize(
    "output_format",
    [
        planner.plan_model(1),
        planner.plan_model(12),
        intake.Screen,
        judgment.Verdict,
        council.Challenge,
        Verdict,
    ],
    ids=lambda kind: kind.__name__,
)
def test_every_output_format_is_sent_as_the_official_client_would_send_it(
    output_format: type[BaseModel],
) -> None:
    """Our road speaks the API's structured-output rules itself (the SDK is not imported at run
    time); the SDK's own transform, where it is installed, is the reference it must match."""
    transform = pytest.importorskip("anthropic.lib._parse._transform")
    expected = transform.transform_schema(output_format.model_json_schema())
    assert wire.strict_schema(output_format.model_json_schema()) == expected


def test_constraints_the_api_does_not_enforce_are_said_in_words() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
            "count": {"type": "integer", "minimum": 1, "description": "How many."},
            "when": {"type": "string", "format": "date"},
            "site": {"type": "string", "format": "idn-hostname"},
        },
        "required": ["items"],
    }
    strict = wire.strict_schema(schema)
    assert strict["additionalProperties"] is False
    props = strict["properties"]
    assert props["items"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "{maxItems: 4, minItems: 2}",
    }
    assert props["count"] == {"type": "integer", "description": "How many.\n\n{minimum: 1}"}
    assert props["when"] == {"type": "string", "format": "date"}
    assert props["site"] == {"type": "string", "description": "{format: idn-hostname}"}


# ---- the connection, and stopping a call -------------------------------------------------------


def test_a_connection_the_server_closed_is_replaced_without_a_retry(
    fake_api: FakeMessagesAPI,
) -> None:
    """The fake closes the connection after a streamed reply; the next call still leaves once."""
    seen: list[str] = []
    llm.completion("first", model=MODEL, effort=None, on_text=seen.append)
    assert llm.complete("second", model=MODEL, effort=None) == "ok"
    assert [r.headers["x-stainless-retry-count"] for r in fake_api.messages()] == ["0", "0"]


def test_a_stream_is_read_to_its_last_chunk_so_its_connection_carries_the_next_call_once(
    fake_api: FakeMessagesAPI,
) -> None:
    """The API keeps a streamed reply's connection alive. A stream read only to message_stop
    left its last chunk unread, so the next call on that connection was sent, answered and
    billed, and then failed before its reply was read (ResponseNotReady), and was sent again."""
    fake_api.keep_streams_alive = True
    for _ in range(3):
        seen: list[str] = []
        llm.completion("first", model=MODEL, effort=None, on_text=seen.append)
        assert llm.complete("second", model=MODEL, effort=None) == "ok"
    sent = fake_api.messages()
    assert [r.headers["x-stainless-retry-count"] for r in sent] == ["0"] * 6, "each sent once"
    assert len({r.connection for r in sent}) == 1, "one connection carried all six"


class Plan(BaseModel):
    steps: list[str]


def test_a_call_cancelled_before_its_request_leaves_costs_nothing(
    fake_api: FakeMessagesAPI,
) -> None:
    cancel = llm.Cancel()
    cancel()
    usage = ledger.Usage()
    with pytest.raises(llm.Cancelled):
        llm.complete_structured("plan", Plan, model=MODEL, effort=None, usage=usage, cancel=cancel)
    assert fake_api.messages() == []
    assert usage.totals().calls == 0


def test_a_cancelled_stream_is_closed_and_what_it_cost_is_counted(
    fake_api: FakeMessagesAPI,
) -> None:
    never = threading.Event()
    fake_api.queue(Reply.json({"steps": ["a", "b"]}, hold=never))
    cancel = llm.Cancel()
    usage = ledger.Usage()
    call = llm.Ahead(
        lambda: llm.complete_structured(
            "plan", Plan, model=MODEL, effort=None, usage=usage, cancel=cancel
        )
    )
    assert call.sent.wait(10)
    cancel()
    with pytest.raises(llm.Cancelled):
        call.result()
    [request] = fake_api.wait_ended(1)
    assert not never.is_set() and request.body["stream"] is True
    billed = request.reply["usage"]
    totals = usage.totals()
    assert (totals.calls, totals.input_tokens, totals.cache_write_tokens) == (
        1,
        billed["input_tokens"],
        billed["cache_creation_input_tokens"],
    )
    assert totals.output_tokens < billed["output_tokens"]


def test_the_api_version_we_name_is_the_official_clients() -> None:
    """No SDK carries the version for us at run time: it must follow the official client's."""
    constants = pytest.importorskip("anthropic._constants")
    assert constants.ANTHROPIC_API_VERSION == wire.API_VERSION
