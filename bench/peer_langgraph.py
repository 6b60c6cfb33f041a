"""A hand-written LangGraph script of AgentGOD's run shape: the peer the command is measured beside.

plan -> the planned agents, wave by wave (each wave's agents at once, each given the outputs of
the agents it depends on) -> merge -> judge: one model call per node, through the plain
`anthropic` SDK inside LangGraph nodes, against whatever ANTHROPIC_BASE_URL names (the
benchmark's fake Messages API). It is what a competent person would write by hand for the same
job with no agent factory: no code is written for the agents, nothing is sandboxed, nothing is
recorded — so its ideal is one call shorter than AgentGOD's (no generation round).

    python bench/peer_langgraph.py "task words"            # prints one JSON object
    python bench/peer_langgraph.py --no-langgraph "task"   # the same graph on plain threads

Every system prompt starts with "peer:" so the benchmark's fake can answer the peer's calls
beside AgentGOD's. `--no-langgraph` (or LangGraph not installed) runs the same graph with a
thread pool instead: the closest honest peer when LangGraph cannot be had, and said so in the
output (`"engine"`).
"""

from __future__ import annotations

import importlib
import json
import operator
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypedDict

import anthropic

MODEL = "claude-sonnet-5-5"
FAST_MODEL = "claude-haiku-5-5"

client = anthropic.Anthropic(max_retries=0)


def ask(kind: str, prompt: str, *, model: str = MODEL, max_tokens: int = 2048) -> str:
    reply = client.messages.create(
        model=model,
        max_tokens=max_tokens,
        system=f"peer:{kind}",
        messages=[{"role": "user", "content": prompt}],
    )
    return "".join(block.text for block in reply.content if block.type == "text")


def waves_of(agents: list[dict[str, Any]]) -> list[list[str]]:
    """The agents grouped by their longest chain of dependencies (the same waves AgentGOD runs)."""
    depth: dict[str, int] = {}
    by_name = {agent["name"]: agent for agent in agents}

    def level(name: str) -> int:
        if name not in depth:
            deps = [d for d in by_name[name].get("depends_on", []) if d in by_name]
            depth[name] = 1 + max((level(d) for d in deps), default=-1)
        return depth[name]

    waves: list[list[str]] = []
    for agent in agents:
        index = level(agent["name"])
        while len(waves) <= index:
            waves.append([])
        waves[index].append(agent["name"])
    return waves


def plan(task: str) -> dict[str, Any]:
    agents = json.loads(ask("plan", f"Plan a team of agents for: {task}"))["agents"]
    return {"agents": agents, "waves": waves_of(agents), "wave": 0}


def run_agent(task: str, agent: dict[str, Any], outputs: dict[str, str]) -> dict[str, str]:
    keys = ",".join(sorted(outputs))
    text = ask("agent", f"agent={agent['name']} keys=[{keys}] task={task}")
    return {agent["name"]: text}


def merge(task: str, outputs: dict[str, str]) -> str:
    parts = "\n\n".join(f"[{name}]\n{text}" for name, text in sorted(outputs.items()))
    return ask("merge", f"Task: {task}\n\nMerge these outputs into one answer:\n{parts}")


def judge(task: str, answer: str) -> dict[str, Any]:
    verdict: dict[str, Any] = json.loads(
        ask("judge", f"Task: {task}\n\nAnswer:\n{answer}", model=FAST_MODEL)
    )
    return verdict


def inputs_for(agent: dict[str, Any], agents: list[dict[str, Any]], outputs: dict[str, str]):
    """The outputs of every agent `agent` depends on, directly or not."""
    by_name = {each["name"]: each for each in agents}
    seen: set[str] = set()
    todo = list(agent.get("depends_on", []))
    while todo:
        name = todo.pop()
        if name in by_name and name not in seen:
            seen.add(name)
            todo.extend(by_name[name].get("depends_on", []))
    return {name: outputs[name] for name in seen if name in outputs}


# ---- the graph, in LangGraph -------------------------------------------------------------------


def merge_dicts(left: dict[str, str], right: dict[str, str]) -> dict[str, str]:
    return {**left, **right}


class State(TypedDict, total=False):
    task: str
    agents: list[dict[str, Any]]
    waves: list[list[str]]
    wave: int
    outputs: Annotated[dict[str, str], merge_dicts]
    answer: str
    verdict: dict[str, Any]
    calls: Annotated[int, operator.add]


def with_langgraph(task: str) -> dict[str, Any]:
    # Imported by name: an optional extra (`.[bench]`) the type checker may not have.
    graphs = importlib.import_module("langgraph.graph")
    Send = importlib.import_module("langgraph.types").Send
    END, START, StateGraph = graphs.END, graphs.START, graphs.StateGraph

    def plan_node(state: State) -> dict[str, Any]:
        return plan(state["task"])

    def dispatch(state: State) -> Any:  # Send(...) for each agent of the wave, or "merge"
        if state["wave"] >= len(state["waves"]):
            return "merge"
        by_name = {agent["name"]: agent for agent in state["agents"]}
        outputs = state.get("outputs", {})
        return [
            Send(
                "agent",
                {
                    "task": state["task"],
                    "agent": by_name[name],
                    "inputs": inputs_for(by_name[name], state["agents"], outputs),
                },
            )
            for name in state["waves"][state["wave"]]
        ]

    def agent_node(payload: dict[str, Any]) -> dict[str, Any]:
        return {"outputs": run_agent(payload["task"], payload["agent"], payload["inputs"])}

    def next_wave(state: State) -> dict[str, Any]:
        return {"wave": state["wave"] + 1}

    def merge_node(state: State) -> dict[str, Any]:
        return {"answer": merge(state["task"], state.get("outputs", {}))}

    def judge_node(state: State) -> dict[str, Any]:
        return {"verdict": judge(state["task"], state["answer"])}

    graph = StateGraph(State)
    graph.add_node("plan", plan_node)
    graph.add_node("agent", agent_node)
    graph.add_node("next_wave", next_wave)
    graph.add_node("merge", merge_node)
    graph.add_node("judge", judge_node)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", dispatch, ["agent", "merge"])
    graph.add_edge("agent", "next_wave")
    graph.add_conditional_edges("next_wave", dispatch, ["agent", "merge"])
    graph.add_edge("merge", "judge")
    graph.add_edge("judge", END)
    final = graph.compile().invoke({"task": task, "outputs": {}})
    return {"answer": final["answer"], "verdict": final["verdict"], "outputs": final["outputs"]}


def with_threads(task: str) -> dict[str, Any]:
    """The same graph without LangGraph: each wave's agents on a thread pool."""
    state = plan(task)
    by_name = {agent["name"]: agent for agent in state["agents"]}
    outputs: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(len(w) for w in state["waves"])) as pool:
        for wave in state["waves"]:
            jobs = [
                pool.submit(
                    run_agent,
                    task,
                    by_name[name],
                    inputs_for(by_name[name], state["agents"], outputs),
                )
                for name in wave
            ]
            for job in jobs:
                outputs.update(job.result())
    answer = merge(task, outputs)
    return {"answer": answer, "verdict": judge(task, answer), "outputs": outputs}


def main(argv: list[str]) -> int:
    threads = "--no-langgraph" in argv
    task = " ".join(word for word in argv if word != "--no-langgraph")
    engine = "threads"
    if not threads:
        try:
            importlib.import_module("langgraph")
            engine = "langgraph"
        except ImportError:
            engine = "threads (langgraph is not installed)"
    result = with_langgraph(task) if engine == "langgraph" else with_threads(task)
    print(
        json.dumps({"engine": engine, "answer": result["answer"], "agents": len(result["outputs"])})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
