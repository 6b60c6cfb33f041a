"""ledger: token totals, prices and their thread safety."""

from __future__ import annotations

import threading

import pytest

import ledger


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
