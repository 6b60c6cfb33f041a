"""config through the real SDK against the fake Messages API."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI, Reply
from pydantic import BaseModel

import config
import problems


class Verdict(BaseModel):
    missing: str
    done: bool


def test_plain_call_returns_text_and_counts_usage(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("Hello there", thinking=True))
    usage = config.Usage()
    text = config.complete("Say hello", system="Be brief.", usage=usage)
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
    verdict = config.complete_structured("Judge it", Verdict, system="You judge.")
    assert verdict == Verdict(missing="", done=True)
    schema = fake_api.messages()[0].schema
    assert schema is not None
    assert list(schema["properties"]) == ["missing", "done"]


def test_structured_call_with_invalid_json_raises_validation_problem(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(Reply("not json at all"))
    with pytest.raises(Exception) as caught:
        config.complete_structured("Judge it", Verdict)
    assert problems.explain(caught.value).kind == "invalid_reply"


def test_effort_sent_for_sonnet_5_5_and_omitted_for_haiku_4_5(
    fake_api: FakeMessagesAPI,
) -> None:
    config.complete("a", model="claude-sonnet-5-5", effort="low")
    config.complete("b", model="claude-haiku-4-5", effort="low")
    sonnet, haiku = fake_api.messages()
    assert sonnet.body["output_config"] == {"effort": "low"}
    assert "output_config" not in haiku.body


def test_effort_is_clamped_to_what_the_model_accepts(fake_api: FakeMessagesAPI) -> None:
    config.complete("a", model="claude-sonnet-5-5", effort="max")
    assert fake_api.messages()[0].body["output_config"] == {"effort": "high"}


def test_configured_effort_is_the_default(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_EFFORT", "low")
    config.complete("a")
    assert fake_api.messages()[0].body["output_config"] == {"effort": "low"}


def test_system_prompt_is_sent_as_a_cached_block(fake_api: FakeMessagesAPI) -> None:
    usage = config.Usage()
    for _ in range(2):
        config.complete("hi", system="A long stable system prompt.", usage=usage)
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
    assert config.complete("hi") == "recovered"
    statuses = [r.status for r in fake_api.messages()]
    assert statuses == [529, 200]
    assert fake_api.messages()[1].headers["x-stainless-retry-count"] == "1"


def test_401_becomes_a_problem_naming_the_key_variable(fake_api: FakeMessagesAPI) -> None:
    fake_api.valid_keys = {"sk-ant-some-other-key-000000000000"}
    with pytest.raises(Exception) as caught:
        config.complete("hi")
    problem = problems.explain(caught.value)
    assert problem.kind == "authentication"
    assert "ANTHROPIC_API_KEY" in problem.advice
    assert TEST_KEY not in f"{problem.headline}{problem.advice}{problem.technical}"


def test_404_unknown_model_names_the_model(fake_api: FakeMessagesAPI) -> None:
    fake_api.known_models = {"claude-sonnet-5-5"}
    with pytest.raises(Exception) as caught:
        config.complete("hi", model="claude-nonexistent-9")
    problem = problems.explain(caught.value)
    assert "claude-nonexistent-9" in problem.headline
    assert "--model" in problem.advice


def test_missing_key_raises_before_any_request(fake_api: FakeMessagesAPI, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(config.MissingApiKeyError):
        config.complete("hi")
    assert fake_api.messages() == []


def test_client_is_cached_per_key_and_base_url(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = config.get_client()
    assert config.get_client() is first
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-another-test-key-0000000000")
    assert config.get_client() is not first


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
    assert config.response_text(message) == "Hello you"


# ---- settings ------------------------------------------------------------------------------


def test_defaults() -> None:
    s = config.settings()
    assert (s.model, s.fast_model, s.deep_model) == (
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-sonnet-5-5",
    )
    assert (s.effort, s.max_agents, s.max_parallel_agents) == ("medium", 6, 4)
    assert (s.agent_timeout_seconds, s.agent_repair_attempts, s.generation_attempts) == (300, 2, 3)
    assert (s.task_revisions, s.council, s.sandbox, s.budget_usd) == (1, "auto", "auto", None)


def test_deep_model_defaults_to_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL", "claude-opus-5-5")
    assert config.settings().deep_model == "claude-opus-5-5"


def test_settings_are_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.settings().max_agents == 6
    monkeypatch.setenv("MAX_AGENTS", "3")
    assert config.settings().max_agents == 3


def test_dotenv_is_read_and_the_real_environment_wins(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated_home / ".env").write_text("MAX_AGENTS=2\nCOUNCIL=off\n")
    assert config.settings().max_agents == 2
    assert config.settings().council == "off"
    monkeypatch.setenv("MAX_AGENTS", "5")
    assert config.settings().max_agents == 5


def test_home_directories_follow_agentgod_home(isolated_home: Path) -> None:
    s = config.settings()
    assert s.home == isolated_home.resolve()
    assert s.agents_dir == isolated_home / "generated_agents"
    assert s.runs_dir == isolated_home / "runs"
    assert s.venv_dir == isolated_home / ".agent_venv"


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("MAX_AGENTS", "abc", "whole number"),
        ("MAX_AGENTS", "0", "from 1 to 12"),
        ("MAX_PARALLEL_AGENTS", "-1", "whole number"),
        ("LLM_EFFORT", "huge", "low, medium, high, xhigh, max"),
        ("COUNCIL", "sometimes", "auto, always, off"),
        ("SANDBOX", "maybe", "auto, strict, off"),
        ("AGENT_TIMEOUT_SECONDS", "soon", "number"),
        ("AGENT_TIMEOUT_SECONDS", "0", "from 1 to 3600"),
        ("TASK_REVISIONS", "1.5", "whole number"),
        ("BUDGET_USD", "-3", "from"),
        ("BUDGET_USD", "nan", "from"),
        ("MODEL", "bad model name!", "model id"),
    ],
)
def test_bad_values_raise_config_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, allowed: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(config.ConfigError) as caught:
        config.settings()
    message = str(caught.value)
    assert name in message
    assert allowed in message
    assert repr(value) in message


@pytest.mark.parametrize(
    ("complexity", "configured", "expected"),
    [
        ("simple", "high", "low"),
        ("standard", "medium", "medium"),
        ("standard", "xhigh", "xhigh"),
        ("deep", "low", "high"),
        ("deep", "max", "max"),
    ],
)
def test_effort_for_complexity(
    monkeypatch: pytest.MonkeyPatch, complexity: str, configured: str, expected: str
) -> None:
    monkeypatch.setenv("LLM_EFFORT", configured)
    assert config.effort_for(complexity) == expected


@pytest.mark.parametrize(
    ("model", "accepts"),
    [
        ("claude-sonnet-5-5", True),
        ("claude-haiku-5-5", True),
        ("claude-opus-4-7", True),
        ("claude-haiku-4-5", False),
        ("claude-sonnet-4-5", False),
        ("claude-sonnet-4-5-20250929", False),
        ("claude-3-5-sonnet-20241022", False),
        ("claude-opus-4-1", False),
    ],
)
def test_which_models_accept_effort(model: str, accepts: bool) -> None:
    assert bool(config.supported_efforts(model)) is accepts


# ---- usage ---------------------------------------------------------------------------------


def test_usage_cost_includes_cache_prices() -> None:
    usage = config.Usage()
    usage.add(
        "claude-sonnet-5-5",
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_write_tokens=1_000_000,
        cache_read_tokens=1_000_000,
    )
    # 2 input + 10 output + 2.5 cache write (1.25x) + 0.10 cache read
    assert usage.cost_usd() == pytest.approx(14.60)
    assert usage.is_estimate is False


def test_unknown_model_is_priced_as_default_and_flagged() -> None:
    usage = config.Usage()
    usage.add("claude-mystery-1", input_tokens=1_000_000)
    assert usage.cost_usd() == pytest.approx(2.0)
    assert usage.is_estimate is True
    assert usage.cost_summary()["estimate"] is True


def test_dated_model_ids_use_the_base_price() -> None:
    usage = config.Usage()
    usage.add("claude-haiku-4-5-20251001", output_tokens=1_000_000)
    assert usage.cost_usd() == pytest.approx(5.0)
    assert not usage.is_estimate


def test_usage_record_and_merge() -> None:
    main = config.Usage()
    main.record("claude-sonnet-5-5", {"input_tokens": 10, "output_tokens": 5})
    agent = config.Usage()
    agent.record(
        "claude-haiku-5-5",
        {"input_tokens": 7, "output_tokens": "3", "cache_read_input_tokens": 2, "junk": 1},
    )
    agent.record("claude-haiku-5-5", {"input_tokens": None, "output_tokens": -4})
    main.merge(agent)
    summary = main.cost_summary()
    assert summary["llm_calls"] == 3
    assert summary["input_tokens"] == 17
    assert summary["output_tokens"] == 8
    assert summary["cache_read_tokens"] == 2
    assert set(main.snapshot()) == {"claude-sonnet-5-5", "claude-haiku-5-5"}


def test_usage_is_thread_safe() -> None:
    usage = config.Usage()

    def work() -> None:
        for _ in range(2000):
            usage.add("claude-sonnet-5-5", input_tokens=1, output_tokens=2)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    totals = usage.totals()
    assert (totals.calls, totals.input_tokens, totals.output_tokens) == (16000, 16000, 32000)
