"""Whole tasks end to end: real agent subprocesses, the real SDK, the scripted fake model."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from agents import LiveAgents
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI, Reply
from scripted import ECHO_BODY, Factory, agent_keys, agent_spec, plan, runtime_requests

from agentgod import config, ledger, library, orchestrator, problems, results
from agentgod.events import TaskEvents


@pytest.fixture
def factory(fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch) -> Factory:
    monkeypatch.setenv("SANDBOX", "off")
    return Factory(fake_api)


class Recorder(TaskEvents):
    """Keeps every event in order, for assertions about what a watcher would see."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, tuple[object, ...]]] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_") or name == "seen" or not hasattr(TaskEvents, name):
            return object.__getattribute__(self, name)
        return lambda *args: self.seen.append((name, args))

    def names(self) -> list[str]:
        return [name for name, _ in self.seen]


def test_a_simple_task_from_plan_to_archive(factory: Factory, isolated_home: Path) -> None:
    factory.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    events = Recorder()
    result = orchestrator.handle_task("What is 2+2?", settings=config.settings(), events=events)
    assert result.answer == "MERGED: fact_finder"
    assert result.complexity == "simple"
    assert [(a.name, a.ok, a.reused, a.attempts) for a in result.agents] == [
        ("fact_finder", True, False, 1)
    ]
    assert result.failures == []
    assert [p.name for p in result.pending] == ["fact_finder"]
    [path] = result.agent_paths
    assert (path.name, path.parent.parent) == ("fact_finder.py", isolated_home / "generated_agents")
    assert not path.parent.exists(), "the run's own folder goes with the run"
    # 2N + 3 with N = 1: plan, generate, agent, merge, judge.
    kinds = [factory.kind(r) for r in factory.api.messages()]
    assert sorted(kinds) == sorted(["plan", "generate", "agent", "merge", "judge"])
    assert result.cost["llm_calls"] == 5
    assert result.run_file is not None and result.run_file.exists()
    names = events.names()
    assert names.index("plan_ready") < names.index("agent_running") < names.index("merge_started")
    assert names[-2:] == ["archived", "phase_finished"]


def test_no_more_agents_run_at_once_than_max_parallel_agents(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six agents that wait for none, two at a time: an agent handed its input by the worker
    that wrote it still counts, so a wide first wave never exceeds the limit (rate limits)."""
    monkeypatch.setenv("MAX_PARALLEL_AGENTS", "2")
    names = [f"angle_{n}" for n in "abcdef"]
    factory.plans = [{**plan(*(agent_spec(name) for name in names)), "independent": True}]
    factory.agent_latency = 0.3
    result = orchestrator.handle_task("Compare six angles", settings=config.settings())
    assert all(a.ok for a in result.agents)
    calls = [runtime_requests(factory)[name] for name in names]
    moments = sorted([(r.arrived, 1) for r in calls] + [(r.replied, -1) for r in calls])
    in_flight = peak = 0
    for _, step in moments:
        in_flight += step
        peak = max(peak, in_flight)
    assert peak == 2, f"{peak} agent calls were in flight at once"


@pytest.mark.parametrize(
    ("parallel", "widths"),
    [(1, (8,)), (2, (8,)), (2, (2, 2, 2))],
    ids=["8-at-once-one-at-a-time", "8-at-once-two-at-a-time", "3-waves-two-at-a-time"],
)
def test_no_more_agent_processes_alive_than_max_parallel_agents_and_a_standby_margin(
    factory: Factory, monkeypatch: pytest.MonkeyPatch, parallel: int, widths: tuple[int, ...]
) -> None:
    """However many agents a plan holds, no more processes live than those at work and one
    ready to follow each (each is ~20 MB); and the run still gets every agent done."""
    monkeypatch.setenv("MAX_PARALLEL_AGENTS", str(parallel))
    monkeypatch.setenv("MAX_AGENTS", "8")
    waves = [[f"w{k}_agent_{i}" for i in range(width)] for k, width in enumerate(widths)]
    specs = [
        agent_spec(name, waves[k - 1] if k else []) for k, wave in enumerate(waves) for name in wave
    ]
    factory.plans = [{**plan(*specs), "independent": True}]
    factory.agent_latency = 0.2
    with LiveAgents() as alive:
        result = orchestrator.handle_task("Many angles", settings=config.settings())
    assert [a.ok for a in result.agents] == [True] * len(specs)
    assert result.waves == waves
    assert alive.samples > 0 and alive.peak >= parallel, "the count saw the agents at work"
    assert alive.peak <= parallel + min(parallel, 4), f"{alive.peak} agent processes at once"


def test_four_independent_agents_overlap(factory: Factory) -> None:
    independent = [agent_spec(f"angle_{n}") for n in "abcd"]
    factory.plans = [plan(*independent, agent_spec("synthesis", [f"angle_{n}" for n in "abcd"]))]
    factory.agent_latency = 0.5
    result = orchestrator.handle_task("Compare four angles", settings=config.settings())
    assert all(a.ok for a in result.agents)
    first_wave = [runtime_requests(factory)[f"angle_{n}"] for n in "abcd"]
    # Overlap, read off the server's clock: every one of the four had arrived before any of them
    # was answered, so all four model calls were in flight together.
    assert max(r.arrived for r in first_wave) < min(r.replied for r in first_wave)
    synthesis = runtime_requests(factory)["synthesis"]
    assert synthesis.arrived > max(r.replied for r in first_wave)
    assert result.waves == [["angle_a", "angle_b", "angle_c", "angle_d"], ["synthesis"]]


def _agent_processes() -> int:
    """Agent processes of this test: their command line names this test's generated_agents/."""
    marker = str(config.settings().agents_dir)
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_text():
                count += 1
        except OSError:
            continue
    return count


def _wait_for_agent_processes(count: int) -> bool:
    deadline = time.monotonic() + 10
    while _agent_processes() < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return _agent_processes() >= count


@pytest.mark.parametrize("parallel", [4, 1])
def test_an_agent_is_started_before_its_inputs_are_ready(
    factory: Factory, monkeypatch: pytest.MonkeyPatch, parallel: int
) -> None:
    """Warm start: the downstream agent's process is up while its upstream agent still works,
    even when only one agent may work at a time (the standby margin is for exactly this)."""
    monkeypatch.setenv("MAX_PARALLEL_AGENTS", str(parallel))
    factory.plans = [plan(agent_spec("upstream"), agent_spec("downstream", ["upstream"]))]
    seen: list[bool] = []

    def upstream_reply(name: str, request: object) -> str:
        if name == "upstream":
            seen.append(_wait_for_agent_processes(2))  # the one working, the one waiting
        return f"result from {name}"

    factory.agent_reply = upstream_reply
    result = orchestrator.handle_task("t", settings=config.settings())
    assert all(a.ok for a in result.agents)
    assert seen == [True]
    assert agent_keys(runtime_requests(factory)["downstream"]) == ["upstream"]


def test_an_agent_process_is_started_before_its_code_is_written(factory: Factory) -> None:
    """Its generation call finds an agent process already up, waiting for code and input."""
    factory.plans = [plan(agent_spec("solo_agent"), complexity="simple")]
    seen: list[bool] = []

    def generation(request: object) -> str:
        seen.append(_wait_for_agent_processes(1))
        return ECHO_BODY

    factory.api.route(lambda request: factory.kind(request) == "generate", generation)
    result = orchestrator.handle_task("t", settings=config.settings())
    assert result.agents[0].ok
    assert seen == [True]
    assert "result from solo_agent" in factory.of("merge")[0].prompt


def test_no_process_started_ahead_outlives_the_run(factory: Factory) -> None:
    """Standby processes the plan did not need are discarded with their scratch."""
    factory.plans = [plan(agent_spec("only_agent"), complexity="simple")]
    orchestrator.handle_task("t", settings=config.settings())
    deadline = time.monotonic() + 10
    while _agent_processes() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _agent_processes() == 0


def test_each_agent_receives_exactly_its_closure_diamond(factory: Factory) -> None:
    factory.plans = [
        plan(
            agent_spec("source_reader"),
            agent_spec("left_branch", ["source_reader"]),
            agent_spec("right_branch", ["source_reader"]),
            agent_spec("joiner", ["left_branch", "right_branch"]),
            agent_spec("loner", ["left_branch"]),
        )
    ]
    orchestrator.handle_task("diamond", settings=config.settings())
    seen = {name: agent_keys(r) for name, r in runtime_requests(factory).items()}
    assert seen == {
        "source_reader": [],
        "left_branch": ["source_reader"],
        "right_branch": ["source_reader"],
        "joiner": ["left_branch", "right_branch", "source_reader"],
        "loner": ["left_branch", "source_reader"],
    }


def test_a_plan_without_dependencies_runs_as_a_chain(factory: Factory) -> None:
    factory.plans = [plan(agent_spec("first_step"), agent_spec("second_step"), agent_spec("third"))]
    result = orchestrator.handle_task("chain", settings=config.settings())
    seen = {name: agent_keys(r) for name, r in runtime_requests(factory).items()}
    assert seen == {
        "first_step": [],
        "second_step": ["first_step"],
        "third": ["first_step", "second_step"],
    }
    assert result.waves == [["first_step"], ["second_step"], ["third"]]


def test_generation_prompts_name_the_closure_keys(factory: Factory) -> None:
    factory.plans = [plan(agent_spec("reader"), agent_spec("writer", ["reader"]))]
    orchestrator.handle_task("t", settings=config.settings())
    prompts = {r.prompt.split("\n")[0]: r.prompt for r in factory.of("generate")}
    assert "previous_outputs keys this agent receives: 'reader'" in prompts["Agent name: writer"]


def test_a_rejected_generation_is_retried_with_the_complaint(factory: Factory) -> None:
    factory.plans = [plan(agent_spec("careful_agent"), complexity="simple")]
    factory.bodies["careful_agent"] = [
        "import subprocess\ndef run(task, previous_outputs):\n    return subprocess.run(task)\n",
        "def run(task, previous_outputs):\n    return call_llm('agent=careful_agent keys=[]')\n",
    ]
    result = orchestrator.handle_task("t", settings=config.settings())
    assert result.agents[0].ok
    first, second = factory.of("generate")
    assert "REJECTED" not in first.prompt
    assert "subprocess" in second.prompt.split("REJECTED", 1)[1]


def test_a_crash_is_repaired_from_its_stderr_and_the_repair_is_merged(factory: Factory) -> None:
    factory.plans = [plan(agent_spec("fragile"), complexity="simple")]
    factory.bodies["fragile"] = [
        "def run(task, previous_outputs):\n    raise RuntimeError('disk of tea is full')\n",
        "def run(task, previous_outputs):\n    return call_llm('agent=fragile keys=[]')\n",
    ]
    events = Recorder()
    result = orchestrator.handle_task("t", settings=config.settings(), events=events)
    repair = factory.of("generate")[1]
    assert "REPAIR" in repair.prompt
    assert "RuntimeError: disk of tea is full" in repair.prompt
    assert result.agents[0].ok and result.agents[0].attempts == 2
    assert "result from fragile" in factory.of("merge")[0].prompt
    assert "agent_repairing" in events.names()


def test_a_timeout_is_excluded_and_the_rest_still_merge(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_TIMEOUT_SECONDS", "2")
    factory.plans = [plan(agent_spec("quick"), agent_spec("sleepy"), agent_spec("end", ["quick"]))]
    factory.bodies["sleepy"] = ["def run(task, previous_outputs):\n    time.sleep(60)\n"]
    result = orchestrator.handle_task("t", settings=config.settings())
    assert [(f.name, f.kind) for f in result.failures] == [("sleepy", "timeout")]
    merge_prompt = factory.of("merge")[0].prompt
    assert "result from quick" in merge_prompt and "result from end" in merge_prompt
    assert "time.sleep" not in merge_prompt
    assert len(factory.of("generate")) == 3, "a timeout is not repaired"


def test_every_agent_failing_is_one_story(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_TIMEOUT_SECONDS", "1")
    names = ("slow_a", "slow_b", "slow_c")
    factory.plans = [
        plan(agent_spec("slow_a"), agent_spec("slow_b"), agent_spec("slow_c", ["slow_a"]))
    ]
    factory.bodies = {
        name: ["def run(task, previous_outputs):\n    time.sleep(60)\n"] for name in names
    }
    with pytest.raises(results.AllAgentsFailedError) as caught:
        orchestrator.handle_task("t", settings=config.settings())
    problem = problems.explain(caught.value)
    assert problem.headline == "3 agents timed out after 1 s."
    assert "AGENT_TIMEOUT_SECONDS" in problem.advice
    assert factory.of("merge") == []


def test_stderr_of_a_failed_agent_never_reaches_downstream_or_the_merger(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_REPAIR_ATTEMPTS", "0")
    factory.plans = [plan(agent_spec("broken"), agent_spec("after", ["broken"]))]
    factory.bodies["broken"] = [
        "def run(task, previous_outputs):\n    raise ValueError('SECRETSAUCE')\n"
    ]
    result = orchestrator.handle_task("t", settings=config.settings())
    assert agent_keys(runtime_requests(factory)["after"]) == []
    merge_prompt = factory.of("merge")[0].prompt
    assert "SECRETSAUCE" not in merge_prompt
    assert "broken" in merge_prompt, "the merger is told which agent failed, by name only"
    assert result.failures[0].reason == "ValueError: SECRETSAUCE"


def test_one_judge_miss_is_first_merged_again_with_the_gap(factory: Factory) -> None:
    """Tier one: the paid-for outputs, merged again; nothing is planned, written or run again."""
    factory.plans = [plan(agent_spec("drafter"), complexity="simple")]
    factory.verdicts = [
        {"missing": "Include a worked example.", "done": False},
        {"missing": "", "done": True},
    ]
    result = orchestrator.handle_task(
        "Explain recursion in three sentences.", settings=config.settings()
    )
    assert result.revisions == 1
    counts = {kind: len(factory.of(kind)) for kind in ("plan", "generate", "agent", "merge")}
    assert counts == {"plan": 1, "generate": 1, "agent": 1, "merge": 2}
    assert len(factory.of("judge")) == 2, "the re-merge is judged again"
    second_merge = factory.of("merge")[1]
    assert "Explain recursion in three sentences." in second_merge.prompt
    assert "Include a worked example." in second_merge.prompt
    for judged in factory.of("judge"):
        assert "Explain recursion in three sentences." in judged.prompt
        assert "Include a worked example." not in judged.prompt, "judged against the user's words"


def test_still_short_after_the_remerge_plans_again_and_reuses_what_worked(
    factory: Factory,
) -> None:
    """Tier two: a new plan; an agent that already succeeded is neither rewritten nor rerun."""
    factory.plans = [
        plan(agent_spec("drafter"), complexity="simple"),
        plan(
            agent_spec("drafter"),
            agent_spec("example_finder"),
            agent_spec("combiner", ["drafter", "example_finder"]),
            complexity="simple",
        ),
    ]
    miss = {"missing": "Include a worked example.", "done": False}
    factory.verdicts = [miss, miss]
    result = orchestrator.handle_task(
        "Explain recursion in three sentences.", settings=config.settings()
    )
    assert result.revisions == 1
    second_plan = factory.of("plan")[1]
    assert "Include a worked example." in second_plan.prompt
    generated = sorted(name for name in runtime_requests(factory))
    assert generated == ["combiner", "drafter", "example_finder"]
    assert len(factory.of("generate")) == 3, "drafter once; the two new agents once each"
    assert len([r for r in factory.of("agent") if "agent=drafter" in r.prompt]) == 1
    assert "result from drafter" in factory.of("merge")[-1].prompt
    assert len(factory.of("judge")) == 2, "the last round is not judged again (TASK_REVISIONS=1)"


def test_no_judge_when_revisions_are_off(factory: Factory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASK_REVISIONS", "0")
    factory.plans = [plan(agent_spec("drafter"), complexity="simple")]
    orchestrator.handle_task("t", settings=config.settings())
    assert factory.of("judge") == []


def test_a_deep_task_convenes_the_council(factory: Factory) -> None:
    factory.plans = [plan(agent_spec("analyst"), complexity="deep")]
    factory.challenges = [{"weaknesses": ["The claim X is unsupported."], "flawed": True}]
    events = Recorder()
    result = orchestrator.handle_task(
        "Should we migrate?", settings=config.settings(), events=events
    )
    assert result.answer == "REFINED ANSWER"
    assert result.council_improved
    assert len(factory.of("critic")) == len(factory.of("refine")) == 1
    assert "The claim X is unsupported." in factory.of("refine")[0].prompt
    assert "council_finished" in events.names()
    # deep raises the effort of every call after the plan
    assert factory.of("merge")[0].body["output_config"] == {"effort": "high"}


def test_council_off_means_no_council(factory: Factory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNCIL", "off")
    factory.plans = [plan(agent_spec("analyst"), complexity="deep")]
    result = orchestrator.handle_task("Should we migrate?", settings=config.settings())
    assert factory.of("critic") == factory.of("refine") == []
    assert not result.council_improved


def test_a_kept_agent_is_reused_and_three_losses_retire_it(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    factory.plans = [plan(agent_spec("summariser"), complexity="simple")]
    first = orchestrator.handle_task("first task", settings=config.settings())
    [pending] = first.pending
    library.remember(pending.name, pending.role, pending.source)

    second = orchestrator.handle_task("second task", settings=config.settings())
    assert len(factory.of("generate")) == 1, "zero generation calls for a reused agent"
    assert second.agents[0].reused and second.agents[0].ok
    assert second.pending == []
    assert "summariser" in factory.of("plan")[1].prompt, "the planner is told about the library"

    monkeypatch.setenv("AGENT_REPAIR_ATTEMPTS", "0")
    factory.agent_reply = lambda name, request: Reply.error(400, "bad request")
    for _ in range(3):
        with pytest.raises(results.AllAgentsFailedError):
            orchestrator.handle_task("failing task", settings=config.settings())
    assert not library.reliable("summariser")
    assert "summariser" not in library.describe_for_planner()

    factory.agent_reply = lambda name, request: f"result from {name}"
    generated_before = len(factory.of("generate"))
    rebuilt = orchestrator.handle_task("after retirement", settings=config.settings())
    assert len(factory.of("generate")) == generated_before + 1, "a retired agent is rebuilt"
    assert not rebuilt.agents[0].reused
    assert [p.name for p in rebuilt.pending] == ["summariser"]


def test_out_of_500_kept_agents_the_planner_is_offered_the_one_that_matches_and_reuses_it(
    factory: Factory, isolated_home: Path
) -> None:
    """A year of keeping agents: the plan request carries a bounded view of the library, and the
    kept agent whose role matches the task is in it, so it is reused rather than rebuilt."""
    role = "Checks that the line items of an invoice add up to its stated total"
    factory.plans = [plan(agent_spec("invoice_total_checker", role=role), complexity="simple")]
    first = orchestrator.handle_task("check my invoice", settings=config.settings())
    [pending] = first.pending
    library.remember(pending.name, pending.role, pending.source)
    folder = config.settings().inventory_dir / "agents"
    for n in range(499):  # kept by hand: the files are the library, their records rebuilt
        name = f"helper_{n:03d}_agent"
        role_n = f"Handles chore number {n} of kind {n % 37} for reports and notes"
        (folder / f"{name}.py").write_text(
            f"AGENT_NAME = {name!r}\nAGENT_ROLE = {role_n!r}\n", encoding="utf-8"
        )
    assert len(library.entries()) == 500

    task = "Do the line items on this invoice add up to the total?"
    second = orchestrator.handle_task(task, settings=config.settings())
    prompt = factory.of("plan")[1].prompt
    hint = prompt.split("<agent_library>\n", 1)[1].split("\n</agent_library>", 1)[0]
    assert f"- invoice_total_checker: {role} (used 0 times" in hint
    assert len(hint) <= library.HINT_MAX_CHARS, "about 1,000 tokens, whatever the library's size"
    assert len(factory.of("generate")) == 1, "the kept agent is reused, not written again"
    assert second.agents[0].reused and second.agents[0].ok


def test_a_repaired_library_agent_evolves_without_asking(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    factory.plans = [plan(agent_spec("summariser"), complexity="simple")]
    factory.bodies["summariser"] = [ECHO_BODY, ECHO_BODY + "\n# repaired\n"]
    first = orchestrator.handle_task("first", settings=config.settings())
    library.remember("summariser", first.pending[0].role, first.pending[0].source)
    generation = library.entries()[0].generation
    calls = {"n": 0}

    def flaky(name: str, request: object) -> Reply | str:
        calls["n"] += 1
        return Reply.error(400, "bad") if calls["n"] == 1 else f"result from {name}"

    factory.agent_reply = flaky
    result = orchestrator.handle_task("second", settings=config.settings())
    assert result.agents[0].reused and result.agents[0].attempts == 2
    entry = library.entries()[0]
    assert entry.generation == generation + 1
    assert entry.evolved


def test_run_file_and_history_row_with_secrets_redacted(
    factory: Factory, isolated_home: Path
) -> None:
    planted = "sk-ant-api03-" + "Q" * 40
    factory.plans = [plan(agent_spec("leaky"), complexity="simple")]
    factory.agent_reply = lambda name, request: f"result from {name} key={planted}"
    factory.merge_reply = lambda request: f"The answer. Also {planted}"
    result = orchestrator.handle_task("find the key", settings=config.settings())
    assert result.run_file is not None
    text = result.run_file.read_text()
    assert planted not in text
    assert "find the key" in text
    db = sqlite3.connect(isolated_home / "runs" / "history.db")
    rows = db.execute("SELECT task, answer, ok FROM runs").fetchall()
    assert rows == [("find the key", rows[0][1], 1)]
    assert planted not in rows[0][1]
    assert "[redacted]" in rows[0][1]


def test_an_agent_started_ahead_loads_its_code_while_its_upstream_agent_still_works(
    factory: Factory, isolated_home: Path
) -> None:
    """Its code is given when it is written, not when its inputs are ready: the downstream
    agent's top level has run (it saved an artifact) before its upstream agent is answered."""
    factory.plans = [plan(agent_spec("upstream"), agent_spec("downstream", ["upstream"]))]
    factory.bodies["downstream"] = ["save_artifact('loaded.txt', 'early')\n" + ECHO_BODY]
    seen: list[bool] = []

    def upstream_reply(name: str, request: object) -> str:
        if name == "upstream":
            deadline = time.monotonic() + 10
            while not list(isolated_home.glob("runs/*/artifacts/loaded.txt")):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            seen.append(bool(list(isolated_home.glob("runs/*/artifacts/loaded.txt"))))
        return f"result from {name}"

    factory.agent_reply = upstream_reply
    result = orchestrator.handle_task("t", settings=config.settings())
    assert all(a.ok for a in result.agents)
    assert seen == [True]
    assert agent_keys(runtime_requests(factory)["downstream"]) == ["upstream"]


def test_a_run_reads_its_settings_once_so_a_home_changed_midway_does_not_split_it(
    factory: Factory, isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's snapshot is passed down: its record goes where the run began, whatever the
    environment says by the time it is archived."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def merge_and_move(request: object) -> str:
        monkeypatch.setenv("AGENTGOD_HOME", str(elsewhere))
        return "MERGED"

    factory.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    factory.merge_reply = merge_and_move
    result = orchestrator.handle_task("where does the record go?", settings=config.settings())
    assert result.answer == "MERGED"
    assert result.run_file is not None and result.run_file.parent == isolated_home / "runs"
    db = sqlite3.connect(isolated_home / "runs" / "history.db")
    assert db.execute("SELECT task FROM runs").fetchall() == [("where does the record go?",)]
    assert not (elsewhere / "runs").exists()


def test_a_failed_run_is_archived_too(
    factory: Factory, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_REPAIR_ATTEMPTS", "0")
    factory.plans = [plan(agent_spec("doomed"), complexity="simple")]
    factory.bodies["doomed"] = ["def run(task, previous_outputs):\n    raise ValueError('no')\n"]
    written: list[Path] = []
    with pytest.raises(results.AllAgentsFailedError):
        orchestrator.handle_task("doomed task", settings=config.settings(), written=written)
    [path] = written
    assert (path.name, path.parent.parent) == ("doomed.py", isolated_home / "generated_agents")
    db = sqlite3.connect(isolated_home / "runs" / "history.db")
    assert db.execute("SELECT task, ok FROM runs").fetchall() == [("doomed task", 0)]


def test_a_planner_failure_raises_a_translatable_error(fake_api: FakeMessagesAPI) -> None:
    fake_api.valid_keys = {"another-key"}
    with pytest.raises(Exception) as caught:
        orchestrator.handle_task("t", settings=config.settings())
    assert problems.explain(caught.value).kind == "authentication"


# ---- the budget ------------------------------------------------------------------------------


def test_a_tight_budget_stops_the_run_between_waves(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUDGET_USD", "0.15")
    factory.plans = [plan(agent_spec("first_wave"), agent_spec("second_wave", ["first_wave"]))]
    greedy = (
        "def run(task, previous_outputs):\n"
        "    return call_llm('agent=first_wave', max_tokens=16000)\n"
    )
    # Its code arrives last, so no other call holds money when it takes its share of the budget.
    factory.api.route(
        lambda request: "Agent name: first_wave\n" in request.prompt,
        Reply(greedy, latency=0.5),
    )
    # The first agent's model uses every token it is allowed: its whole share of the budget.
    factory.agent_reply = lambda name, request: Reply(
        f"result from {name}",
        usage={"input_tokens": 5, "output_tokens": request.body["max_tokens"]},
    )
    events = Recorder()
    result = orchestrator.handle_task("t", settings=config.settings(), events=events)
    assert result.budget_exhausted
    assert result.budget_usd == 0.15
    assert result.usage.cost_usd() <= 0.15
    assert set(runtime_requests(factory)) == {"first_wave"}, "wave two never ran"
    assert factory.of("merge") == factory.of("judge") == [], "no call after the cap"
    assert "result from first_wave" in result.answer, "what was done is still the answer"
    assert [(f.name, f.kind) for f in result.failures] == [("second_wave", "budget")]
    assert "budget_exhausted" in events.names()


def test_a_budget_too_small_for_the_plan_makes_no_call(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUDGET_USD", "0.001")
    with pytest.raises(ledger.BudgetExhaustedError) as caught:
        orchestrator.handle_task("t", settings=config.settings())
    assert fake_api.messages() == []
    problem = problems.explain(caught.value)
    assert problem.kind == "budget"
    assert "--budget" in problem.advice


def test_parallel_calls_share_a_budget_without_overspending(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holds queue instead of failing while other calls may still give money back."""
    monkeypatch.setenv("BUDGET_USD", "0.5")
    factory.plans = [
        plan(*(agent_spec(f"part_{n}") for n in "abcd"), agent_spec("end", ["part_a"]))
    ]
    result = orchestrator.handle_task("t", settings=config.settings())
    assert not result.budget_exhausted
    assert all(a.ok for a in result.agents)
    assert result.usage.cost_usd() <= 0.5


def test_a_judge_that_cannot_answer_does_not_cost_the_answer(factory: Factory) -> None:
    factory.plans = [plan(agent_spec("drafter"), complexity="simple")]
    factory.api.route(lambda request: factory.kind(request) == "judge", Reply.error(400, "no"))
    events = Recorder()
    result = orchestrator.handle_task("t", settings=config.settings(), events=events)
    assert result.answer == "MERGED: drafter"
    assert result.revisions == 0
    warnings = [args[0] for name, args in events.seen if name == "warn"]
    assert warnings == [
        "the judge could not rule (The Anthropic API refused the request.); "
        "the answer is delivered unjudged"
    ]


def test_a_council_that_cannot_sit_leaves_the_merged_answer(factory: Factory) -> None:
    factory.plans = [plan(agent_spec("analyst"), complexity="deep")]
    factory.api.route(lambda request: factory.kind(request) == "critic", Reply.error(400, "no"))
    result = orchestrator.handle_task("t", settings=config.settings())
    assert result.answer == "MERGED: analyst"
    assert not result.council_improved


def test_agents_started_ahead_survive_in_the_full_sandbox(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under bubblewrap an agent dies with the thread that started it: standby must outlive use."""
    monkeypatch.setenv("SANDBOX", "auto")
    monkeypatch.setenv("AGENT_REPAIR_ATTEMPTS", "0")  # a repair would hide a killed agent
    factory.api.latency = 0.3  # planning takes long enough for the standby processes to start
    parts = [agent_spec(f"part_{n}") for n in "abc"]
    factory.plans = [plan(*parts, agent_spec("joiner", ["part_a", "part_b", "part_c"]))]
    result = orchestrator.handle_task("t", settings=config.settings())
    assert [(a.name, a.ok, a.kind, a.attempts) for a in result.agents] == [
        ("part_a", True, "ok", 1),
        ("part_b", True, "ok", 1),
        ("part_c", True, "ok", 1),
        ("joiner", True, "ok", 1),
    ]
    assert {"landlock", "seccomp"} <= set(result.sandbox)


# ---- the broker: agents ask, the parent meters -----------------------------------------------

HOARDER = """\
def run(task, previous_outputs):
    answers = []
    for _ in range(40):
        try:
            answers.append(call_llm("agent=hoarder " + task, max_tokens=16000))
        except LLMError as error:
            answers.append(f"stopped: {error.kind}")
            break
    return " | ".join(answers)
"""

FORGER = """\
def run(task, previous_outputs):
    forged = json.dumps({"input_tokens": 10**9, "output_tokens": 10**9})
    for _ in range(3):
        sys.stderr.write("__AGENT_USAGE__ " + forged + "\\n")
    return call_llm("agent=forger " + task)
"""


def test_a_hoarding_agent_cannot_spend_past_the_budget(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call an agent makes is held and billed at the broker: the cap is exact."""
    monkeypatch.setenv("BUDGET_USD", "0.5")
    factory.plans = [plan(agent_spec("hoarder"), complexity="simple")]
    factory.bodies = {"hoarder": [HOARDER]}
    factory.agent_reply = lambda name, request: Reply(
        "spent", usage={"input_tokens": 50, "output_tokens": request.body["max_tokens"]}
    )
    result = orchestrator.handle_task("t", settings=config.settings())
    assert result.usage.cost_usd() <= 0.5
    calls = factory.of("agent")
    assert 0 < len(calls) < 40, "the broker refused the calls the share could not pay for"
    [hoarder] = result.agents
    assert hoarder.usage["llm_calls"] == len(calls)
    assert hoarder.refusals == {"budget": 1}
    assert hoarder.ok, "a refused call is the agent's to handle; this one stops and reports"
    [merge] = factory.of("merge")
    assert "stopped: budget" in merge.prompt


def test_usage_an_agent_prints_about_itself_changes_nothing(factory: Factory) -> None:
    factory.plans = [plan(agent_spec("forger"), complexity="simple")]
    factory.bodies = {"forger": [FORGER]}
    factory.agent_reply = lambda name, request: Reply(
        "honest", usage={"input_tokens": 7, "output_tokens": 3}
    )
    result = orchestrator.handle_task("t", settings=config.settings())
    [forger] = result.agents
    assert forger.ok
    usage = forger.usage
    assert (usage["llm_calls"], usage["input_tokens"], usage["output_tokens"]) == (1, 7, 3)
    assert result.usage.totals().input_tokens < 10**6, "the forged lines were not billed"
    phases = result.usage.phases()
    assert phases["agents"]["input_tokens"] == 7
    assert sum(p["usd"] for p in phases.values()) == pytest.approx(
        result.usage.cost_usd(), abs=1e-5
    )


def test_no_agent_process_holds_the_key(factory: Factory) -> None:
    peek = (
        "def run(task, previous_outputs):\n"
        "    return call_llm('agent=peek ' + json.dumps(sorted(os.environ)))\n"
    )
    factory.plans = [plan(agent_spec("peek"), complexity="simple")]
    factory.bodies = {"peek": [peek]}
    orchestrator.handle_task("t", settings=config.settings())
    [request] = factory.of("agent")
    assert "ANTHROPIC_API_KEY" not in request.prompt
    assert "AGENTGOD_BROKER_FD" in request.prompt
    assert TEST_KEY not in request.prompt


def test_a_transient_api_failure_reruns_the_same_code_instead_of_rewriting_it(
    factory: Factory,
) -> None:
    factory.plans = [plan(agent_spec("steady"), complexity="simple")]
    overloaded = iter([True] * 3)  # the SDK's own retries in the parent: 3 tries, then it gives up
    factory.agent_reply = lambda name, request: (
        Reply.error(529, "Overloaded") if next(overloaded, False) else f"result from {name}"
    )
    result = orchestrator.handle_task("t", settings=config.settings())
    [steady] = result.agents
    assert steady.ok
    assert steady.attempts == 2, "one failed run, then the same code again"
    assert len(factory.of("generate")) == 1, "no rewrite: the code was not at fault"
    assert steady.failed_calls == {"overloaded": 1}


def test_a_plan_that_says_independent_runs_its_agents_at_once(factory: Factory) -> None:
    factory.plans = [{**plan(*(agent_spec(f"angle_{n}") for n in "abcd")), "independent": True}]
    factory.agent_latency = 0.5
    result = orchestrator.handle_task("Four angles, nothing shared", settings=config.settings())
    assert all(a.ok for a in result.agents)
    calls = [runtime_requests(factory)[f"angle_{n}"] for n in "abcd"]
    assert max(r.arrived for r in calls) < min(r.replied for r in calls), "all four in flight"
    assert result.waves == [["angle_a", "angle_b", "angle_c", "angle_d"]]


def test_a_plan_without_dependencies_and_without_independent_is_still_a_chain(
    factory: Factory,
) -> None:
    factory.plans = [plan(*(agent_spec(f"step_{n}") for n in "abc"))]
    result = orchestrator.handle_task("t", settings=config.settings())
    assert result.waves == [["step_a"], ["step_b"], ["step_c"]]


def test_an_oversized_plan_is_trimmed_with_a_warning_not_a_dead_task(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_AGENTS", "2")
    factory.plans = [
        plan(*(agent_spec(f"part_{n}", role=f"Part {n}") for n in "abcd"), complexity="simple")
    ]
    events = Recorder()
    result = orchestrator.handle_task("t", settings=config.settings(), events=events)
    assert [a.name for a in result.agents] == ["part_a", "part_d"], "the chain's end combines"
    warnings = [args[0] for name, args in events.seen if name == "warn"]
    assert warnings == ["the plan held more than MAX_AGENTS=2 agents; left out: part_b, part_c"]
    assert result.warnings == warnings


def test_a_budget_of_one_and_a_half_times_the_true_cost_completes_the_run(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holds reserve each call's worst case but give it back once billed: no 3x headroom."""
    factory.plans = [plan(agent_spec("a"), agent_spec("b"), agent_spec("c", ["a", "b"]))]
    true_cost = orchestrator.handle_task("t", settings=config.settings()).usage.cost_usd()
    factory.api.forget_cache()
    monkeypatch.setenv("BUDGET_USD", f"{true_cost * 1.5:.6f}")
    result = orchestrator.handle_task("t", settings=config.settings())
    assert not result.budget_exhausted
    assert all(agent.ok for agent in result.agents)
    assert result.usage.cost_usd() <= true_cost * 1.5


def test_a_run_stopped_by_the_budget_says_what_the_next_call_needed(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUDGET_USD", "0.01")
    factory.plans = [plan(agent_spec("first"), agent_spec("second", ["first"]))]
    with pytest.raises(ledger.BudgetExhaustedError) as caught:
        orchestrator.handle_task("t", settings=config.settings())
    assert caught.value.needed_usd > 0
    headline = problems.explain(caught.value).headline
    assert re.search(r"the next call needed up to \$0\.\d{4}", headline), headline
    assert caught.value.spent_usd <= 0.01
