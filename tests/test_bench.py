"""The benchmark suite's pure parts. The benchmarks themselves never run here: they take minutes
and measure the machine, so they would make the suite slow and flaky; `python -m bench` runs them.
"""

from __future__ import annotations

import pytest

from agentgod import planner, taskgraph
from bench import calls, cli_start, harness, overhead
from bench.__main__ import BENCHMARKS, parse


def test_every_benchmark_is_registered_and_callable() -> None:
    assert list(BENCHMARKS) == [
        "overhead",
        "command",
        "coldstart",
        "cli",
        "first_request",
        "calls",
        "memory",
        "processes",
        "batch",
        "history",
        "library",
        "attachments",
        "eval",
    ]
    assert all(callable(run) for run in BENCHMARKS.values())


def test_an_evals_ideal_packs_every_runs_and_single_calls_work_into_the_slots() -> None:
    """20 runs of 5 calls and 20 single calls in 4 slots: 120 calls of work, 30 L."""
    from bench import evalrun

    assert evalrun.ideal_seconds(20, 4, 0.5) == pytest.approx(15.0)
    assert evalrun.ideal_seconds(1, 4, 0.5) == pytest.approx(2.5), "never below one run"


def test_the_ideal_is_the_critical_path_of_model_calls() -> None:
    # plan + one generation round + one call per wave + merge + judge
    assert overhead.critical_path_calls(1) == 5
    assert overhead.critical_path_calls(3) == 7
    assert overhead.ideal_seconds(3, 0.5) == pytest.approx(3.5)
    assert overhead.ideal_seconds(4, 0.25) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        overhead.critical_path_calls(0)


def test_the_ideal_ignores_plan_width() -> None:
    """Pipelining makes the ideal depend on waves only, never on how many agents share one."""
    narrow, wide = overhead.Shape("narrow", (1, 1, 1)), overhead.Shape("wide", (4, 4, 4))
    assert overhead.ideal_seconds(narrow.waves, 1.0) == overhead.ideal_seconds(wide.waves, 1.0)


@pytest.mark.parametrize("shape", overhead.SHAPES, ids=lambda shape: shape.label)
def test_every_benchmark_plan_has_exactly_its_waves(
    shape: overhead.Shape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the planner's own validation, so the chain fallback is applied as in a real run."""
    monkeypatch.setenv("MAX_AGENTS", "12")
    validated = planner.Plan.model_validate(overhead.plan_for(shape, prefix="x_"))
    ordered = taskgraph.topological_order(validated.agents)
    widths = tuple(len(wave) for wave in taskgraph.waves(ordered))
    assert widths == shape.widths
    assert [[a.name for a in wave] for wave in taskgraph.waves(ordered)] == overhead.wave_names(
        shape, "x_"
    )


def test_the_call_formula() -> None:
    assert [calls.formula(n) for n in (1, 4, 8)] == [5, 11, 19]
    assert [calls.formula(n, reused=True) for n in (1, 4, 8)] == [4, 7, 11]


def test_heaviest_imports_sums_own_time_by_package() -> None:
    log = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        100 |   pydantic.fields",
            "import time:      2000 |       2600 | anthropic",
            "import time:       500 |        500 |     anthropic.types",
            "import time:       400 |       1000 | pydantic",
            "[phase] plan started",
            "import time:        50 |         50 | json",
        ]
    )
    assert cli_start.heaviest_imports(log) == [
        ("anthropic", 2.5, 2),
        ("pydantic", 0.5, 2),
        ("json", 0.05, 1),
    ]
    assert cli_start.heaviest_imports(log, top=1) == [("anthropic", 2.5, 2)]


def test_a_figure_passes_at_its_bound_and_misses_above_it() -> None:
    assert harness.Figure("x", 60.0, "ms", 60.0).verdict == "PASS"
    assert harness.Figure("x", 60.1, "ms", 60.0).verdict == "MISS"
    assert harness.Figure("x", None, "ms", 60.0).verdict == "MISS"
    assert harness.Figure("x", 11, "", 11, exact=True).verdict == "PASS"
    assert harness.Figure("x", 10, "", 11, exact=True).verdict == "MISS"
    assert harness.Figure("x", 10, "").verdict == ""


def test_the_command_line() -> None:
    options, selected, as_json = parse(["--quick", "--json", "--only", "calls,memory"])
    assert options.quick and as_json
    assert selected == ("calls", "memory")
    assert options.repetitions(full=5, quick=1) == 1
    assert parse(["--runs", "4"])[0].repetitions(full=5, quick=1) == 4
    with pytest.raises(SystemExit):
        parse(["--only", "nonsense"])
    with pytest.raises(SystemExit):
        parse(["--sandbox", "sometimes"])


def test_the_batch_ideal_and_the_memory_slope() -> None:
    from bench import batchrun

    assert batchrun.ideal_seconds(12, 4, 0.5) == pytest.approx(7.5)
    assert batchrun.ideal_seconds(13, 4, 0.5) == pytest.approx(10.0)
    flat = [(n, 90_000 + (n % 3)) for n in range(1, 101)]
    growing = [(n, 90_000 + 50 * n) for n in range(1, 101)]
    assert abs(batchrun._slope(flat)) < 0.1
    assert batchrun._slope(growing) == pytest.approx(50.0)


def test_the_peer_script_runs_the_same_waves_as_the_product() -> None:
    """The LangGraph peer groups the benchmark's plan into exactly the product's waves."""
    from bench import peer_langgraph

    shape = overhead.Shape(overhead.TARGET_SHAPE, (4, 4, 4))
    agents = overhead.plan_for(shape)["agents"]
    assert peer_langgraph.waves_of(agents) == overhead.wave_names(shape)
    first = next(a for a in agents if a["name"] == "w3_agent_1")
    assert set(peer_langgraph.inputs_for(first, agents, {a["name"]: "x" for a in agents})) == {
        name for wave in overhead.wave_names(shape)[:2] for name in wave
    }
