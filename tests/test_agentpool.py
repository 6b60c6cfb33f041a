"""agentpool: the run's agent processes — which start, when, how many, and who gets each.

Real processes (no sandbox, for speed; test_orchestrator runs the pool under the full one)
against the fake Messages API. The pool's thread defers to the SDK's import (`llm.client_ready`),
which each test replaces with an event of its own: holding it shut lets a test say what every
agent wants before the pool may start anything, so the order it serves them in is observable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agents import LiveAgents, write_agent
from conftest import OpenDoor
from fakeapi import FakeMessagesAPI

from agentgod import config, executor, generator
from agentgod.agentpool import STANDBY_CAP, AgentPool, Census, Planned, limit_for

NAMED = """
def run(task, previous_outputs):
    return AGENT_NAME + " " + task
"""


@pytest.fixture
def make_pool(
    fake_api: FakeMessagesAPI, door: OpenDoor, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., AgentPool]]:
    """Pools of one test, MAX_PARALLEL_AGENTS as asked, each closed after the test."""
    monkeypatch.setenv("SANDBOX", "off")
    made: list[AgentPool] = []

    def make(parallel: int, *, budgeted: bool = False) -> AgentPool:
        monkeypatch.setenv("MAX_PARALLEL_AGENTS", str(parallel))
        pool = AgentPool(
            config.settings(),
            open_door=door,
            preload=generator.RUNTIME_MODULES,
            budgeted=budgeted,
        )
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.close()


class Watch:
    """The highest census.alive a pool reached while the block ran, read every millisecond."""

    def __init__(self, pool: AgentPool) -> None:
        self.pool = pool
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, self.pool.census().alive)


def until(pool: AgentPool, holds: Callable[[Census], bool], seconds: float = 30) -> Census:
    """The pool's census once `holds` is true of it; fails the test if it never is."""
    deadline = time.monotonic() + seconds
    while not holds(census := pool.census()):
        assert time.monotonic() < deadline, f"never came to pass: {census}"
        time.sleep(0.005)
    return census


def settled(census: Census) -> bool:
    return census.starting == 0


def holds(names: list[str]) -> Callable[[Census], bool]:
    """The pool is done starting, and exactly `names` have a process waiting for them."""
    return lambda census: census.holding == set(names) and settled(census)


def run_agent(pool: AgentPool, name: str, path: Path) -> executor.AgentResult:
    assert pool.take_slot(name)
    try:
        result, _ = pool.run(name, path, "task", {})
    finally:
        pool.free_slot(name)
    return result


def test_the_limit_is_max_parallel_agents_and_as_many_again_at_most_the_cap() -> None:
    assert [limit_for(n) for n in (1, 2, 4)] == [2, 4, 8]
    assert limit_for(32) == 32 + STANDBY_CAP


def test_processes_go_to_the_agents_planned_first_and_never_past_the_limit(
    make_pool: Callable[..., AgentPool],
) -> None:
    """One agent at a time: one at work, one ready to follow; a process that frees up goes to
    the next agent in the plan's order, whoever asked first."""
    pool = make_pool(1)
    names = ["first", "second", "third", "fourth"]
    paths = {name: write_agent(NAMED, name=name) for name in names}
    with Watch(pool) as watch, LiveAgents() as alive:
        pool.begin_round([Planned(name, kept=True) for name in names])
        census = until(pool, lambda c: c.held == 2 and settled(c))
        assert census.holding == frozenset({"first", "second"})
        for name in names:
            pool.ready(name, paths[name], None)
        for index, name in enumerate(names):
            result = run_agent(pool, name, paths[name])
            assert (result.ok, result.output) == (True, f"{name} task"), result.error
            until(pool, holds(names[index + 1 : index + 3]))
    assert watch.peak <= 2
    assert alive.peak <= 2
    assert pool.census().alive == 0


@pytest.mark.parametrize("loaded", [False, True], ids=["still-empty", "code-loaded"])
def test_an_agent_that_must_work_at_the_limit_takes_the_process_of_the_agent_planned_last(
    make_pool: Callable[..., AgentPool], loaded: bool
) -> None:
    """At the limit, the agent that works now comes first: the agent planned last gives up its
    process (taken as it is while it waits for code, killed if it loaded its own), and gets
    another once there is room."""
    pool = make_pool(1)
    paths = {name: write_agent(NAMED, name=name) for name in ("now", "next", "last")}
    pool.begin_round([Planned("now"), Planned("next", kept=True), Planned("last", kept=True)])
    until(pool, holds(["next", "last"]))
    pool.ready("next", paths["next"], None)
    if loaded:
        pool.ready("last", paths["last"], None)
    pool.ready("now", paths["now"], None)  # its builder got no process: none was free
    with Watch(pool) as watch, LiveAgents() as alive:
        result = run_agent(pool, "now", paths["now"])
        assert (result.ok, result.output) == (True, "now task"), result.error
        until(pool, holds(["next", "last"]))
    assert watch.peak <= 2
    assert alive.peak <= 2
    for name in ("next", "last"):
        pool.ready(name, paths[name], None)
        result = run_agent(pool, name, paths[name])
        assert (result.ok, result.output) == (True, f"{name} task"), result.error


def test_an_agent_with_no_upstream_is_at_work_as_soon_as_its_code_is_ready(
    make_pool: Callable[..., AgentPool],
) -> None:
    """Its input goes with its code, from the thread that wrote it; it holds a slot from then
    on, so the scheduler's turn only collects it. Another may not work while it does."""
    pool = make_pool(1)
    paths = {name: write_agent(NAMED, name=name) for name in ("solo", "other")}
    pool.begin_round([Planned("solo", kept=True), Planned("other", kept=True)])
    until(pool, holds(["solo", "other"]))
    pool.ready("solo", paths["solo"], ("given ahead", {}))
    pool.ready("other", paths["other"], ("given ahead", {}))
    census = pool.census()
    assert (census.busy, census.held) == (1, 1), "only one at work: one slot"
    assert not pool.take_slot("other")
    assert pool.take_slot("solo"), "it holds its slot already"
    result, _ = pool.run("solo", paths["solo"], "given ahead", {})
    assert (result.ok, result.output) == (True, "solo given ahead"), result.error


def test_under_a_budget_nothing_starts_ahead(make_pool: Callable[..., AgentPool]) -> None:
    """An agent's share is fixed when its process starts: each starts when it goes to work."""
    pool = make_pool(2, budgeted=True)
    path = write_agent(NAMED, name="frugal")
    with Watch(pool) as watch:
        pool.expect_plan()
        pool.begin_round([Planned("frugal", kept=True)])
        with pool.writing("frugal"):
            pool.ready("frugal", path, None)
        assert pool.census().alive == 0
        result = run_agent(pool, "frugal", path)
    assert (result.ok, result.output) == (True, "frugal task"), result.error
    assert watch.peak == 1, "the one at work, and nothing ahead"


def test_a_process_never_used_does_not_outlive_the_round_or_the_pool(
    make_pool: Callable[..., AgentPool],
) -> None:
    """Standby processes more than agents, an agent held but never run, one forgotten: the
    round's go when it ends, the rest when the pool closes; their scratch with them."""
    pool = make_pool(2)
    pool.expect_plan()
    until(pool, lambda c: c.standby == 2 and settled(c))
    pool.begin_round([Planned("kept_waiting"), Planned("skipped")])
    with pool.writing("kept_waiting"), pool.writing("skipped"):
        pass
    until(pool, holds(["kept_waiting", "skipped"]))
    pool.forget("skipped")
    assert pool.census().holding == {"kept_waiting"}
    pool.end_round()
    census = until(pool, settled)
    assert census.held == census.busy == 0
    pool.close()
    assert pool.census().alive == 0
    with LiveAgents() as alive:
        assert alive.count() == 0
