"""ledger: token totals, prices and their thread safety."""

from __future__ import annotations

import threading

import pytest

import ledger
import models


def test_usage_cost_includes_cache_prices() -> None:
    usage = ledger.Usage()
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
    usage = ledger.Usage()
    usage.add("claude-mystery-1", input_tokens=1_000_000)
    assert usage.cost_usd() == pytest.approx(2.0)
    assert usage.is_estimate is True
    assert usage.cost_summary()["estimate"] is True


def test_dated_model_ids_use_the_base_price() -> None:
    usage = ledger.Usage()
    usage.add("claude-haiku-4-5-20251001", output_tokens=1_000_000)
    assert usage.cost_usd() == pytest.approx(5.0)
    assert not usage.is_estimate


def test_usage_record_and_merge() -> None:
    main = ledger.Usage()
    main.record("claude-sonnet-5-5", {"input_tokens": 10, "output_tokens": 5})
    agent = ledger.Usage()
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
    usage = ledger.Usage()

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


def test_searches_are_counted_from_usage_and_priced() -> None:
    """The reply's own count (an SDK object or a dict), $10 per 1,000, into phases and merges."""
    from types import SimpleNamespace

    run = ledger.Usage()
    agents = run.phase("agents")
    agents.record("claude-sonnet-5-5", {"server_tool_use": {"web_search_requests": 3}})
    sdk_like = SimpleNamespace(
        input_tokens=1_000_000, server_tool_use=SimpleNamespace(web_search_requests=2)
    )
    agents.record("claude-sonnet-5-5", sdk_like)
    agents.record("claude-sonnet-5-5", {"server_tool_use": {"web_search_requests": None}})
    agents.record("claude-sonnet-5-5", {"server_tool_use": None})
    assert agents.totals().searches == 5
    assert run.totals().searches == 5, "a phase counts into the run"
    assert agents.cost_usd() == pytest.approx(2.0 + 5 * models.WEB_SEARCH_USD_PER_1000 / 1000)
    session = ledger.Usage()
    session.merge(run)
    assert session.snapshot()["claude-sonnet-5-5"].searches == 5
    assert session.cost_usd() == pytest.approx(run.cost_usd())


def test_a_hold_includes_every_search_the_call_may_make() -> None:
    budget = ledger.Usage(budget_usd=0.10)
    plain = budget.hold("claude-sonnet-5-5", input_tokens=1000, max_tokens=1000)
    budget.release(plain)
    searching = budget.hold("claude-sonnet-5-5", input_tokens=1000, max_tokens=1000, searches=5)
    assert searching.usd == pytest.approx(plain.usd + 5 * models.WEB_SEARCH_USD_PER_1000 / 1000)
    budget.release(searching)
    # $0.10 pays for 10 searches and nothing else: the eleventh cannot be held.
    with pytest.raises(ledger.BudgetExhaustedError) as caught:
        budget.hold("claude-sonnet-5-5", input_tokens=0, max_tokens=1000, searches=10)
    assert caught.value.needed_usd > 0.10
    phase_hold = budget.phase("agents").hold(
        "claude-sonnet-5-5", input_tokens=0, max_tokens=5000, searches=8
    )
    assert 1900 < phase_hold.tokens <= 2000, "eight searches leave $0.02, 2,000 tokens of output"
    budget.phase("agents").release(phase_hold)
