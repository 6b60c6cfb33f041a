"""llm, the one road to the model, through the real SDK against the fake Messages API."""

from __future__ import annotations

import pytest
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI, Reply
from pydantic import BaseModel

import config
import ledger
import llm
import problems

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


def test_client_is_cached_per_key_and_base_url(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = llm.get_client()
    assert llm.get_client() is first
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-another-test-key-0000000000")
    assert llm.get_client() is not first


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
