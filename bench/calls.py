"""Benchmark 5 — model calls and tokens per task, against the seed's 2N + 3.

A task with N agents costs plan + N generations + N agent calls + merge + judge = 2N + 3 calls
(no council, no repair, a judge satisfied at once). After every agent is kept in the library
(library.remember, what --keep does) the same task must skip the generator: N + 3. A judge that
finds the answer short once costs one more merge and one more judge, nothing else (the outputs
already paid for are merged again with the gap): 2N + 5. Calls are counted twice: by the fake
API, per kind, and by the run's own ledger (TaskResult.usage), which sees the agents' calls
through the broker; the two must agree.

Prompt caching: the fake API caches system blocks marked cache_control, so the first call of a
kind writes its system prompt and the second reads it. One server serves every run here, so the
second plan, merge and judge calls are the next task's. The fake has no minimum cacheable length;
the real API does (1,024 to 4,096 tokens depending on the model), which the table lists next to
each prompt's size.
"""

from __future__ import annotations

from typing import Any

from scripted import Factory

from agentgod import config, library, orchestrator
from bench import harness
from bench.overhead import Shape, plan_for

SIZES = {1: Shape("1", (1,)), 4: Shape("3 + 1", (3, 1)), 8: Shape("4 + 4", (4, 4))}
KINDS = ("plan", "generate", "agent", "merge", "judge")
REAL_MINIMUM_CACHEABLE = 1024
"""The smallest minimum cacheable prompt among current models (Sonnet 4.5 class)."""


def formula(agents: int, *, reused: bool = False) -> int:
    """Calls per task: the seed's 2N + 3, or N + 3 when every agent comes from the library."""
    return agents + 3 if reused else 2 * agents + 3


def _task(factory: Factory, agents: int) -> dict[str, Any]:
    """One handle_task; calls by kind as the fake API saw them, and the run's own ledger."""
    before = {kind: len(factory.of(kind)) for kind in KINDS}
    seen = len(factory.api.messages())
    result = orchestrator.handle_task(
        f"benchmark task with {agents} agents", settings=config.settings()
    )
    if not all(agent.ok for agent in result.agents):
        raise harness.BenchError(f"N={agents}: {[f.reason for f in result.failures]}")
    return {
        "by_kind": {kind: len(factory.of(kind)) - before[kind] for kind in KINDS},
        "api_calls": len(factory.api.messages()) - seen,
        "ledger": result.cost,
        "pending": result.pending,
    }


def _cache_rows(factory: Factory) -> list[list[Any]]:
    usage_of = factory.api.usage_of  # type: ignore[attr-defined]
    rows: list[list[Any]] = []
    for kind in KINDS:
        requests = factory.of(kind)
        if len(requests) < 2 or not requests[0].system:
            rows.append([kind, "-", "-", "-", "no cached system prompt"])
            continue
        first, second = (usage_of[id(request)] for request in requests[:2])
        size = len(requests[0].system) // 4 + 1
        if size < REAL_MINIMUM_CACHEABLE:
            remark = "below every real model's minimum: never cached there"
        elif size < 2 * REAL_MINIMUM_CACHEABLE:
            remark = "cached only by models with the 1,024-token minimum"
        else:
            remark = ""
        rows.append(
            [
                kind,
                size,
                first["cache_creation_input_tokens"],
                second["cache_read_input_tokens"],
                remark,
            ]
        )
    return rows


def run(options: harness.Options) -> harness.Report:
    rows: list[list[Any]] = []
    figures: list[harness.Figure] = []
    data: dict[str, Any] = {}
    settings = {**harness.TASK_SETTINGS, "SANDBOX": "off", "MAX_PARALLEL_AGENTS": "4"}
    with harness.environment(**settings), harness.scripted_model() as factory:
        for agents, shape in SIZES.items():
            factory.plans = [plan_for(shape, prefix=f"n{agents}_")]
            fresh = _task(factory, agents)
            for pending in fresh.pop("pending"):
                library.remember(pending.name, pending.role, pending.source)
            reused = _task(factory, agents)
            reused.pop("pending")
            data[f"N={agents}"] = {"fresh": fresh, "library_hit": reused}
            for label, outcome, from_library in (
                ("fresh", fresh, False),
                ("library hit", reused, True),
            ):
                expected = formula(agents, reused=from_library)
                calls = harness.Figure(
                    f"calls N={agents} {label}", outcome["api_calls"], "", expected, exact=True
                )
                ledger = harness.Figure(
                    f"ledger calls N={agents} {label}",
                    outcome["ledger"]["llm_calls"],
                    "",
                    outcome["api_calls"],
                    exact=True,
                )
                figures += [calls, ledger]
                if from_library:
                    generated = outcome["by_kind"]["generate"]
                    figures.append(
                        harness.Figure(
                            f"generation calls N={agents} library hit", generated, "", 0, exact=True
                        )
                    )
                cost = outcome["ledger"]
                rows.append(
                    [
                        agents,
                        label,
                        *(outcome["by_kind"][kind] for kind in KINDS),
                        outcome["api_calls"],
                        expected,
                        cost["llm_calls"],
                        cost["input_tokens"],
                        cost["output_tokens"],
                        cost["cache_write_tokens"],
                        cost["cache_read_tokens"],
                        f"{cost['usd']:.4f}",
                        "PASS" if calls.verdict == ledger.verdict == "PASS" else "MISS",
                    ]
                )
        cache_rows = _cache_rows(factory)
    with harness.environment(**settings), harness.scripted_model() as factory:
        factory.plans = [plan_for(SIZES[4], prefix="miss_")]
        factory.verdicts = [
            {"missing": "One more point.", "done": False},
            {"missing": "", "done": True},
        ]
        missed = _task(factory, 4)
        missed.pop("pending")
        data["N=4 one judge miss"] = missed
        expected = formula(4) + 2
        calls = harness.Figure(
            "calls N=4 one judge miss", missed["api_calls"], "", expected, exact=True
        )
        figures.append(calls)
        cost = missed["ledger"]
        rows.append(
            [
                4,
                "one miss",
                *(missed["by_kind"][kind] for kind in KINDS),
                missed["api_calls"],
                expected,
                cost["llm_calls"],
                cost["input_tokens"],
                cost["output_tokens"],
                cost["cache_write_tokens"],
                cost["cache_read_tokens"],
                f"{cost['usd']:.4f}",
                calls.verdict,
            ]
        )
    table = harness.Table(
        "5. Calls and tokens per task (fake API; formula 2N + 3, N + 3 with every agent reused, "
        "2N + 5 after one judge miss)",
        [
            "N",
            "run",
            *KINDS,
            "calls",
            "formula",
            "ledger",
            "input",
            "output",
            "cache wr",
            "cache rd",
            "USD",
            "",
        ],
        rows,
        [
            "calls = requests the fake API answered; "
            "ledger = TaskResult.cost_summary()['llm_calls']",
            "USD at the default model's list price, from the fake API's token counts (len/4)",
        ],
    )
    cache = harness.Table(
        "5b. Prompt caching: cache-write tokens on the 1st call of each kind, "
        "cache-read on the 2nd",
        ["kind", "system ~tokens", "1st: write", "2nd: read", ""],
        cache_rows,
        [
            "the real API caches a prefix only from 1,024 tokens (Sonnet 4.5), 2,048 (Sonnet 4.6) "
            "or 4,096 (Haiku 4.5, Opus 4.5+); the fake API caches any length",
            "parallel first calls (a wave's generations) all miss on the real API: an entry is "
            "readable only once the first response has begun",
        ],
    )
    data["cache"] = [dict(zip(cache.columns, row, strict=True)) for row in cache_rows]
    return harness.Report("calls", [table, cache], figures, data)
