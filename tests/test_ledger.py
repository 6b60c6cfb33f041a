"""ledger: token totals, prices and their thread safety."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgod import ledger, models
from agentgod.kinds import Spend


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


def test_an_unknown_model_is_never_priced_as_another_it_counts_nothing_and_is_named() -> None:
    usage = ledger.Usage()
    usage.add("claude-mystery-1", input_tokens=1_000_000)
    assert usage.cost_usd() == 0.0, "no guessed Claude price"
    assert usage.is_estimate is True
    summary = usage.cost_summary()
    assert summary["estimate"] is True and summary["unpriced"] == ["claude-mystery-1"]


def test_the_price_a_run_is_told_counts_for_its_views_and_its_merges() -> None:
    """The road tells the run's ledger each model's price (its profile's): a local model is
    free and known to be, a models.toml price counts, and both survive a merge."""
    run = ledger.Usage()
    run.set_price("qwen3:8b", models.FREE)
    run.set_price("my-model", models.Price(1.0, 2.0, 0.1))
    run.phase("plan").record("qwen3:8b", {"input_tokens": 1_000_000, "output_tokens": 10})
    run.phase("agents").record(
        "my-model", {"input_tokens": 1_000_000}, asked="claude-sonnet-5-5", agent="a"
    )
    assert run.cost_usd() == pytest.approx(1.0)
    assert run.unpriced() == [] and not run.is_estimate
    fallback = run.call_log()[-1]
    assert (fallback.asked, fallback.model, fallback.usd) == ("claude-sonnet-5-5", "my-model", 1.0)
    assert fallback.fell_back and not run.call_log()[0].fell_back
    session = ledger.Usage()
    session.merge(run)
    assert session.cost_usd() == pytest.approx(1.0) and session.unpriced() == []


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


# ---- the call log ------------------------------------------------------------------------------


def test_every_recorded_call_is_logged_with_its_phase_model_counts_and_price() -> None:
    run = ledger.Usage()
    run.record("claude-haiku-4-5", {"input_tokens": 10, "output_tokens": 2})
    run.phase(Spend.PLAN).record(
        "claude-sonnet-5-5",
        {
            "input_tokens": 1_000_000,
            "output_tokens": 100,
            "cache_creation_input_tokens": 3,
            "cache_read_input_tokens": 4,
            "server_tool_use": {"web_search_requests": 2},
        },
    )
    run.phase(Spend.MERGE).record("claude-sonnet-5-5", {"output_tokens": 1_000_000})
    small_talk, plan, merge = run.call_log()
    assert (small_talk.phase, small_talk.model) == (ledger.OTHER_PHASE, "claude-haiku-4-5")
    assert (plan.phase, merge.phase) == ("plan", "merge")
    assert (
        plan.input_tokens,
        plan.output_tokens,
        plan.cache_write_tokens,
        plan.cache_read_tokens,
        plan.web_searches,
    ) == (1_000_000, 100, 3, 4, 2)
    assert merge.usd == pytest.approx(10.0)
    assert small_talk.at <= plan.at <= merge.at
    assert plan.at.tzinfo is not None
    assert sum(call.usd for call in run.call_log()) == pytest.approx(run.cost_usd())
    assert run.phase(Spend.PLAN).call_log() == [plan], "a phase view logs its own calls"


def test_a_call_says_whom_it_served_how_long_it_took_and_what_it_fetched() -> None:
    run = ledger.Usage(budget_usd=1.0)
    generate = run.phase(Spend.GENERATE)
    writer = generate.for_agent("writer")
    hold = writer.hold("claude-sonnet-5-5", input_tokens=10, max_tokens=100)
    assert run._held_usd > 0, "an agent's view holds against the run's budget"
    writer.record("claude-sonnet-5-5", {"input_tokens": 10}, seconds=1.5)
    writer.release(hold)
    run.phase(Spend.AGENTS).record(
        "claude-sonnet-5-5",
        {"output_tokens": 3, "server_tool_use": {"web_fetch_requests": 2}},
        agent="reader",
        seconds=-1.0,
    )
    run.record("claude-haiku-4-5", {"input_tokens": 1})
    built, ran, main = run.call_log()
    assert (built.phase, built.agent, built.seconds, built.web_fetches) == (
        "generate",
        "writer",
        1.5,
        0,
    )
    assert (ran.phase, ran.agent, ran.seconds, ran.web_fetches) == ("agents", "reader", 0.0, 2)
    assert (main.agent, main.seconds) == ("", 0.0)
    assert generate.call_log() == [built], "the phase counts its agents' calls"
    assert run.phases()["generate"]["input_tokens"] == 10
    assert run.totals().calls == 3
    assert ran.to_json()["agent"] == "reader" and ran.to_json()["web_fetches"] == 2


def test_a_merge_carries_the_calls_made_before_the_run_in_time_order() -> None:
    before = ledger.Usage()
    before.record("claude-haiku-4-5", {"input_tokens": 5})  # the small-talk check
    before.record("claude-haiku-4-5", {"input_tokens": 6})  # the clarifying question
    run = ledger.Usage()
    run.phase(Spend.PLAN).record("claude-sonnet-5-5", {"input_tokens": 7})
    run.merge(before)
    assert [call.input_tokens for call in run.call_log()] == [5, 6, 7]
    assert [call.phase for call in run.call_log()] == ["other", "other", "plan"]
    assert run.totals().calls == len(run.call_log()) == 3
    session = ledger.Usage()
    session.merge(run)
    assert session.call_log() == run.call_log(), "phases and times are kept"


def test_a_plain_add_counts_without_logging_a_call() -> None:
    usage = ledger.Usage()
    usage.add("claude-sonnet-5-5", input_tokens=3)
    assert usage.totals().calls == 1
    assert usage.call_log() == []


def test_the_call_log_is_whole_and_ordered_under_many_threads() -> None:
    run = ledger.Usage()
    phases = [run.phase(name) for name in (Spend.GENERATE, Spend.AGENTS, Spend.JUDGE)]
    start = threading.Barrier(6)

    def work(view: ledger.Usage) -> None:
        start.wait()
        for count in range(300):
            view.record("claude-haiku-4-5", {"input_tokens": count, "output_tokens": 1})

    threads = [threading.Thread(target=work, args=(view,)) for view in (*phases, *phases)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log = run.call_log()
    assert len(log) == run.totals().calls == 1800
    assert [call.at for call in log] == sorted(call.at for call in log)
    for view in phases:
        assert len(view.call_log()) == 600
        assert {call.phase for call in view.call_log()} == {view.phase_name}
    assert sum(call.input_tokens for call in log) == run.totals().input_tokens


@given(
    st.lists(
        st.tuples(
            st.sampled_from([None, *Spend]),
            st.sampled_from(["claude-haiku-4-5", "claude-sonnet-5-5", "claude-mystery-1"]),
            st.integers(0, 10**7),
            st.integers(0, 10**6),
            st.integers(0, 10),
        ),
        max_size=20,
    )
)
def test_the_calls_always_add_up_to_the_totals(
    calls: list[tuple[Spend | None, str, int, int, int]],
) -> None:
    run = ledger.Usage()
    for phase, model, tokens, output, searches in calls:
        target = run if phase is None else run.phase(phase)
        target.record(
            model,
            {
                "input_tokens": tokens,
                "output_tokens": output,
                "server_tool_use": {"web_search_requests": searches},
            },
        )
    log = run.call_log()
    totals = run.totals()
    assert len(log) == totals.calls
    assert sum(call.input_tokens for call in log) == totals.input_tokens
    assert sum(call.web_searches for call in log) == totals.searches
    assert sum(call.usd for call in log) == pytest.approx(run.cost_usd())
    assert [call.phase for call in log] == [
        ledger.OTHER_PHASE if phase is None else phase for phase, *_ in calls
    ]
