"""Tests for taskgraph: each sanitising rule by example, then properties over random graphs.

The property tests check the results against naive reference implementations written here, so a
bug in taskgraph cannot hide behind itself.
"""

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agentgod.taskgraph import dependency_closure, sanitise, topological_order, waves


@dataclass
class Node:
    name: str
    depends_on: list[str] = field(default_factory=list)


def graph(**deps: list[str]) -> list[Node]:
    """Build a plan in keyword order: ``graph(a=[], b=["a"])``."""
    return [Node(name, list(d)) for name, d in deps.items()]


def edges(agents: list[Node]) -> dict[str, list[str]]:
    return {agent.name: list(agent.depends_on) for agent in agents}


def names(agents: list[Node]) -> list[str]:
    return [agent.name for agent in agents]


# --- sanitise, rule by rule -------------------------------------------------------------------


def test_self_reference_is_dropped() -> None:
    result = sanitise(graph(a=[], b=["b", "a"]))
    assert edges(result) == {"a": [], "b": ["a"]}


def test_unknown_reference_is_dropped() -> None:
    result = sanitise(graph(a=[], b=["ghost", "a"]))
    assert edges(result) == {"a": [], "b": ["a"]}


def test_duplicate_references_keep_first_occurrence_order() -> None:
    result = sanitise(graph(a=[], b=[], c=["b", "a", "b", "a"]))
    assert edges(result)["c"] == ["b", "a"]


def test_two_cycle_drops_the_later_edge() -> None:
    result = sanitise(graph(a=["b"], b=["a"]))
    assert edges(result) == {"a": ["b"], "b": []}


def test_three_cycle_drops_only_the_closing_edge() -> None:
    result = sanitise(graph(a=["b"], b=["c"], c=["a"]))
    assert edges(result) == {"a": ["b"], "b": ["c"], "c": []}


def test_cycle_breaking_keeps_edges_that_close_nothing() -> None:
    result = sanitise(graph(a=["c"], b=["a"], c=["b", "d"], d=[]))
    assert edges(result) == {"a": ["c"], "b": ["a"], "c": ["d"], "d": []}


def test_no_declared_dependency_falls_back_to_the_chain() -> None:
    result = sanitise(graph(a=[], b=[], c=[]))
    assert edges(result) == {"a": [], "b": ["a"], "c": ["b"]}


def test_only_invalid_dependencies_also_fall_back_to_the_chain() -> None:
    result = sanitise(graph(a=["a", "ghost"], b=["b"], c=[]))
    assert edges(result) == {"a": [], "b": ["a"], "c": ["b"]}


def test_one_valid_dependency_prevents_the_chain() -> None:
    result = sanitise(graph(a=[], b=[], c=["a"]))
    assert edges(result) == {"a": [], "b": [], "c": ["a"]}


def test_single_agent_has_no_dependencies() -> None:
    assert edges(sanitise(graph(solo=["solo", "ghost"]))) == {"solo": []}


def test_empty_plan_stays_empty() -> None:
    assert sanitise([]) == []
    assert topological_order([]) == []
    assert waves([]) == []


def test_sanitise_returns_copies_and_leaves_input_alone() -> None:
    original = graph(a=["a"], b=["ghost"])
    result = sanitise(original)
    assert edges(original) == {"a": ["a"], "b": ["ghost"]}
    assert all(new is not old for new, old in zip(result, original, strict=True))


def test_sanitise_copies_pydantic_models_with_model_copy() -> None:
    class Spec(BaseModel):
        name: str
        role: str
        depends_on: list[str]

    result = sanitise(
        [Spec(name="a", role="r1", depends_on=["a"]), Spec(name="b", role="r2", depends_on=[])]
    )
    assert [type(spec) for spec in result] == [Spec, Spec]
    assert [(spec.role, spec.depends_on) for spec in result] == [("r1", []), ("r2", ["a"])]


@pytest.mark.parametrize("function", [sanitise, topological_order, waves])
def test_duplicate_agent_names_are_rejected(function: Callable[[list[Node]], object]) -> None:
    with pytest.raises(ValueError, match="duplicate"):
        function(graph(a=[]) + graph(a=[]))


# --- ordering, waves and closures -------------------------------------------------------------


def diamond() -> list[Node]:
    return graph(top=[], left=["top"], right=["top"], bottom=["left", "right"])


def test_diamond_order_waves_and_closure() -> None:
    plan = diamond()
    assert names(topological_order(plan)) == ["top", "left", "right", "bottom"]
    assert [names(wave) for wave in waves(plan)] == [["top"], ["left", "right"], ["bottom"]]
    assert dependency_closure(plan, "bottom") == ["top", "left", "right"]
    assert dependency_closure(plan, "left") == ["top"]
    assert dependency_closure(plan, "top") == []


def test_topological_order_breaks_ties_by_list_order() -> None:
    plan = graph(x=["z"], y=[], z=[])
    assert names(topological_order(plan)) == ["y", "z", "x"]


def test_topological_order_keeps_an_already_valid_order() -> None:
    plan = graph(a=[], b=[], c=["a"], d=["b", "c"])
    assert names(topological_order(plan)) == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    "plan",
    [graph(a=["b"], b=["a"]), graph(a=["a"]), graph(a=[], b=["c"], c=["d"], d=["b"])],
)
def test_cycles_raise_instead_of_hanging(plan: list[Node]) -> None:
    with pytest.raises(ValueError, match="cycle"):
        topological_order(plan)
    with pytest.raises(ValueError, match="cycle"):
        waves(plan)


def test_unknown_dependency_in_unsanitised_input_raises() -> None:
    with pytest.raises(ValueError, match="ghost"):
        topological_order(graph(a=["ghost"]))


def test_waves_use_the_longest_path() -> None:
    plan = graph(c=[], b=["c"], a=["b", "c"])
    assert [names(wave) for wave in waves(plan)] == [["c"], ["b"], ["a"]]


def test_independent_agents_share_the_first_wave_in_list_order() -> None:
    plan = graph(q=[], p=[], r=["p"])
    assert [names(wave) for wave in waves(plan)] == [["q", "p"], ["r"]]


def test_closure_excludes_unrelated_agents_and_itself() -> None:
    plan = graph(a=[], b=["a"], c=[], d=["b"])
    assert dependency_closure(plan, "d") == ["a", "b"]


def test_closure_of_unknown_name_raises_key_error() -> None:
    with pytest.raises(KeyError):
        dependency_closure(diamond(), "nobody")


# --- properties over random graphs ------------------------------------------------------------

NAME_POOL = ["a", "b", "c", "d", "e", "f", "g", "h"]
JUNK = st.sampled_from(["", "ghost", "A", "a ", "zz", "../a"])


@st.composite
def random_plans(draw: st.DrawFn) -> list[Node]:
    """Plans with arbitrary references: real names (so cycles and self-loops), junk and repeats."""
    pool = draw(st.lists(st.sampled_from(NAME_POOL), unique=True, max_size=len(NAME_POOL)))
    reference = st.one_of(st.sampled_from(pool), JUNK) if pool else JUNK
    return [Node(name, draw(st.lists(reference, max_size=6))) for name in pool]


def valid_edges(plan: list[Node]) -> set[tuple[str, str]]:
    known = set(names(plan))
    return {(a.name, d) for a in plan for d in a.depends_on if d in known and d != a.name}


def edge_set(plan: list[Node]) -> set[tuple[str, str]]:
    return {(a.name, d) for a in plan for d in a.depends_on}


def reference_ancestors(plan: list[Node], name: str) -> set[str]:
    deps = edges(plan)
    found: set[str] = set()
    frontier = list(deps[name])
    while frontier:
        current = frontier.pop(0)
        if current not in found:
            found.add(current)
            frontier.extend(deps[current])
    return found


def has_cycle(edge_list: set[tuple[str, str]], nodes: list[str]) -> bool:
    deps: dict[str, list[str]] = {n: [] for n in nodes}
    for source, target in edge_list:
        deps[source].append(target)
    state: dict[str, str] = {}

    def visit(node: str) -> bool:
        state[node] = "open"
        for dep in deps[node]:
            if state.get(dep) == "open" or (dep not in state and visit(dep)):
                return True
        state[node] = "done"
        return False

    return any(node not in state and visit(node) for node in nodes)


def reference_order(plan: list[Node]) -> list[str]:
    """Quadratic stable topological sort: repeatedly take the first agent whose deps are placed."""
    placed: list[str] = []
    remaining = list(plan)
    while remaining:
        agent = next(a for a in remaining if set(a.depends_on) <= set(placed))
        placed.append(agent.name)
        remaining.remove(agent)
    return placed


@settings(max_examples=300)
@given(random_plans())
def test_sanitised_graph_is_a_dag_with_consistent_waves(plan: list[Node]) -> None:
    clean = sanitise(plan)
    assert names(clean) == names(plan)
    assert not has_cycle(edge_set(clean), names(clean))

    rounds = waves(clean)
    wave_of: dict[str, int] = {}
    for number, wave in enumerate(rounds):
        assert all(wave), "no empty waves"
        for agent in wave:
            assert agent.name not in wave_of, "an agent appears in two waves"
            wave_of[agent.name] = number
        assert [names(clean).index(a.name) for a in wave] == sorted(
            names(clean).index(a.name) for a in wave
        )
    assert set(wave_of) == set(names(clean))
    for agent in clean:
        for dep in agent.depends_on:
            assert wave_of[dep] < wave_of[agent.name]
        if agent.depends_on:
            assert wave_of[agent.name] == 1 + max(wave_of[dep] for dep in agent.depends_on)


@settings(max_examples=300)
@given(random_plans())
def test_order_and_closure_match_naive_references(plan: list[Node]) -> None:
    clean = sanitise(plan)
    order = names(topological_order(clean))
    assert order == reference_order(clean)
    for agent in clean:
        closure = dependency_closure(clean, agent.name)
        assert set(closure) == reference_ancestors(clean, agent.name)
        assert len(closure) == len(set(closure))
        assert closure == [name for name in order if name in closure]


@settings(max_examples=300)
@given(random_plans())
def test_sanitise_keeps_only_declared_edges_and_drops_only_cycle_closers(plan: list[Node]) -> None:
    clean = sanitise(plan)
    declared = valid_edges(plan)
    kept = edge_set(clean)
    if declared:
        assert kept <= declared
        for dropped in declared - kept:
            assert has_cycle(kept | {dropped}, names(clean)), f"{dropped} was dropped needlessly"
    else:
        chain = {(later.name, earlier.name) for earlier, later in itertools.pairwise(plan)}
        assert kept == chain


@settings(max_examples=300)
@given(random_plans())
def test_results_are_deterministic_idempotent_and_input_is_untouched(plan: list[Node]) -> None:
    before = copy.deepcopy(plan)
    clean = sanitise(plan)
    assert plan == before
    assert sanitise(copy.deepcopy(plan)) == clean
    assert sanitise(clean) == clean
    assert topological_order(clean) == topological_order(copy.deepcopy(clean))
    assert waves(clean) == waves(copy.deepcopy(clean))
    for agent in clean:
        assert dependency_closure(clean, agent.name) == dependency_closure(
            copy.deepcopy(clean), agent.name
        )
