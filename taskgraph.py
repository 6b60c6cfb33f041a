"""The shape of a plan: dependency sanitising, ordering, waves and closures.

Pure functions over anything with ``.name`` and ``.depends_on`` - pydantic AgentSpecs in production,
small dataclasses in tests. No model calls and no I/O, so every scheduling decision the orchestrator
makes can be tested exhaustively.

The dependency graph is written by an LLM, so it is untrusted: self and unknown references are
dropped, cycles are broken rather than obeyed, and a plan that declares no dependency at all runs as
the sequential chain every plan had before dependencies existed - an empty graph means the planner
never thought about it, not that the agents are independent.
"""

import dataclasses
import heapq
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar


class Node(Protocol):
    """Anything the graph functions can schedule."""

    @property
    def name(self) -> str: ...

    @property
    def depends_on(self) -> Sequence[str]: ...


N = TypeVar("N", bound=Node)


def _index(agents: Sequence[Node]) -> dict[str, int]:
    """Map each name to its list position; a repeated name would make every lookup ambiguous."""
    index: dict[str, int] = {}
    for position, agent in enumerate(agents):
        if agent.name in index:
            raise ValueError(f"duplicate agent name {agent.name!r}")
        index[agent.name] = position
    return index


def _with_depends_on(agent: N, depends_on: list[str]) -> N:
    """A copy of ``agent`` with new dependencies; the caller's objects are never mutated."""
    model_copy = getattr(agent, "model_copy", None)
    if model_copy is not None:
        copied: N = model_copy(update={"depends_on": depends_on})
        return copied
    replaced: N = dataclasses.replace(agent, depends_on=depends_on)  # type: ignore[type-var]
    return replaced


def _reaches(edges: dict[str, list[str]], start: str, target: str) -> bool:
    """Whether ``target`` is reachable from ``start`` by following dependency edges."""
    stack, seen = [start], {start}
    while stack:
        current = stack.pop()
        if current == target:
            return True
        for dep in edges[current]:
            if dep not in seen:
                seen.add(dep)
                stack.append(dep)
    return False


def sanitise(
    agents: Sequence[N],
    *,
    independent: bool = False,
    implied: Mapping[str, Sequence[str]] | None = None,
) -> list[N]:
    """Copies of ``agents`` whose dependencies form a clean DAG.

    Self, unknown and repeated references are dropped (first occurrence wins). Edges are then
    accepted in list order, agent by agent and dependency by dependency, and an edge that would
    close a cycle among those already accepted is dropped - so the result is deterministic and the
    edge a cycle loses is always the latest one declared. If no valid dependency was declared at
    all, agent i depends on agent i-1 - an empty graph means the order was never thought about -
    unless the plan said `independent`, when they stay unconnected and run at once.
    `implied` edges (name -> the names it needs, though it did not declare them) are accepted
    after every declared one, each only where it closes no cycle, so a declared edge always wins.
    """
    index = _index(agents)
    declared: list[list[str]] = []
    for agent in agents:
        declared.append(
            [dep for dep in dict.fromkeys(agent.depends_on) if dep in index and dep != agent.name]
        )

    inferred = [
        [dep for dep in (implied or {}).get(agent.name, ()) if dep in index and dep != agent.name]
        for agent in agents
    ]
    if not any(declared) and not any(inferred) and not independent:
        return [
            _with_depends_on(agent, [agents[position - 1].name] if position else [])
            for position, agent in enumerate(agents)
        ]

    accepted: dict[str, list[str]] = {agent.name: [] for agent in agents}
    for edges in (declared, inferred):
        for agent, deps in zip(agents, edges, strict=True):
            for dep in deps:
                # agent -> dep closes a cycle exactly when dep already (transitively) needs agent.
                if dep not in accepted[agent.name] and not _reaches(accepted, dep, agent.name):
                    accepted[agent.name].append(dep)
    return [_with_depends_on(agent, accepted[agent.name]) for agent in agents]


def topological_order(agents: Sequence[N]) -> list[N]:
    """Agents ordered so each follows its dependencies; among ready agents, list order wins.

    Stability is the point: a plan the planner already listed in a valid order comes back
    unchanged, so list order and graph order agree. Raises ValueError on an unknown dependency or
    a cycle (input is expected to be sanitised) instead of looping or silently dropping agents.
    """
    index = _index(agents)
    dependants: list[list[int]] = [[] for _ in agents]
    waiting: list[int] = []
    for position, agent in enumerate(agents):
        deps = dict.fromkeys(agent.depends_on)
        for dep in deps:
            if dep not in index:
                raise ValueError(f"{agent.name!r} depends on unknown agent {dep!r}")
            dependants[index[dep]].append(position)
        waiting.append(len(deps))

    ready = [position for position, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[N] = []
    while ready:
        position = heapq.heappop(ready)
        order.append(agents[position])
        for dependant in dependants[position]:
            waiting[dependant] -= 1
            if waiting[dependant] == 0:
                heapq.heappush(ready, dependant)

    if len(order) < len(agents):
        stuck = sorted(agent.name for agent, count in zip(agents, waiting, strict=True) if count)
        raise ValueError(f"dependency cycle among {stuck}")
    return order


def waves(agents: Sequence[N]) -> list[list[N]]:
    """Rounds of agents that may run in parallel; each wave keeps list order.

    Wave k holds the agents whose longest dependency path has length k, so every agent runs as
    early as its inputs allow and every dependency lives in a strictly earlier wave.
    """
    depth: dict[str, int] = {}
    for agent in topological_order(agents):
        depth[agent.name] = 1 + max((depth[dep] for dep in agent.depends_on), default=-1)

    rounds: list[list[N]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for agent in agents:
        rounds[depth[agent.name]].append(agent)
    return rounds


def dependency_closure(agents: Sequence[Node], name: str) -> list[str]:
    """Names of every agent ``name`` transitively depends on (not itself), in topological order.

    This is exactly what the agent receives as previous_outputs - never "whatever finished first",
    which would make a parallel run unrepeatable. Raises KeyError for an unknown ``name``.
    """
    order = topological_order(agents)
    by_name = {agent.name: agent for agent in agents}
    if name not in by_name:
        raise KeyError(name)

    ancestors: set[str] = set()
    stack = list(by_name[name].depends_on)
    while stack:
        dep = stack.pop()
        if dep not in ancestors:
            ancestors.add(dep)
            stack.extend(by_name[dep].depends_on)
    return [agent.name for agent in order if agent.name in ancestors]
