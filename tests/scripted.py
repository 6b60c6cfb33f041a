"""A scripted fake model for whole-task tests: one handler that answers every kind of call.

It tells the calls apart the way the real API would see them: the main agent's calls carry one of
the product's stable system prompts; every other call is a generated agent's, which reaches the
API through the broker (so it too comes through llm.forward, but with the agent's own prompt). Each
kind of call has a default answer that a test can override, so a test states only what it is
about.
"""

from __future__ import annotations

import re
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fakeapi import FakeMessagesAPI, Reply, Request

from agentgod import council, generator, intake, judgment, merger, planner

# The default agent: one model call whose prompt names the agent and the exact upstream keys it
# received, so tests can read each agent's closure straight off the recorded requests.
ECHO_BODY = """
def run(task, previous_outputs):
    keys = ",".join(sorted(previous_outputs))
    return call_llm(f"agent={AGENT_NAME} keys=[{keys}] task={task}")
"""


def agent_spec(
    name: str, depends_on: list[str] | None = None, role: str = "", *, web: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "role": role or f"Does the {name.replace('_', ' ')} part of any task",
        "instructions": f"Do the {name} work on the task.",
        "depends_on": depends_on or [],
        "web": web,
        "dependencies": [],
    }


def plan(*agents: dict[str, Any], complexity: str = "standard") -> dict[str, Any]:
    return {"complexity": complexity, "agents": list(agents), "reasoning": "scripted plan"}


@dataclass
class Factory:
    """The scripted model. Replace any field to change one kind of answer."""

    api: FakeMessagesAPI
    plans: list[dict[str, Any]] = field(default_factory=list)
    """Plans to hand out in order; the last one repeats."""
    bodies: dict[str, list[str]] = field(default_factory=dict)
    """Per agent, the code replies to hand out in order; the last repeats (default ECHO_BODY)."""
    agent_reply: Callable[[str, Request], Reply | str] = lambda name, request: f"result from {name}"
    merge_reply: Callable[[Request], Reply | str] = lambda request: (
        "MERGED: " + ", ".join(sorted(set(re.findall(r"result from (\w+)", request.prompt))))
    )
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    """Judge verdicts in order; default done."""
    challenges: list[dict[str, Any]] = field(default_factory=list)
    refinement: str = "REFINED ANSWER"
    chat_reply: Callable[[str], str | None] = lambda text: (
        "Hello! Give me a task." if text.strip().lower() in ("hi", "hello") else None
    )
    """Small talk: the reply for conversational input, None for a task."""
    clarifying_question: str = ""
    """The question asked before a run at a terminal; empty means none is worth asking."""
    agent_latency: float = 0.0
    plan_hold: threading.Event | None = None
    """When given, the first plan's (streamed) reply holds after its first piece until this is
    set (or the client leaves)."""
    calls: dict[str, list[Request]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.api.handler = self.handle

    def of(self, kind: str) -> list[Request]:
        """Recorded requests of one kind: plan, generate, agent, merge, judge, critic, refine or
        intake (the small-talk check and the clarifying question, one call)."""
        return self.calls.get(kind, [])

    def handle(self, request: Request) -> Reply | str:
        kind = self.kind(request)
        self.calls.setdefault(kind, []).append(request)
        count = len(self.calls[kind])
        if kind == "plan":
            held = {"hold": self.plan_hold} if self.plan_hold is not None and count == 1 else {}
            return Reply.json(self.plans[min(count, len(self.plans)) - 1], **held)
        if kind == "generate":
            name = re.search(r"Agent name: (\w+)", request.prompt).group(1)  # type: ignore[union-attr]
            replies = self.bodies.get(name, [ECHO_BODY])
            done = sum(1 for r in self.of("generate") if f"Agent name: {name}\n" in r.prompt)
            return textwrap.dedent(replies[min(done, len(replies)) - 1])
        if kind == "agent":
            name = re.search(r"agent=(\w+)", request.prompt)
            reply = self.agent_reply(name.group(1) if name else "?", request)
            if isinstance(reply, str):
                reply = Reply(reply)
            reply.latency += self.agent_latency
            return reply
        if kind == "merge":
            return self.merge_reply(request)
        if kind == "judge":
            verdicts = self.verdicts or [{"missing": "", "done": True}]
            return Reply.json(verdicts[min(count, len(verdicts)) - 1])
        if kind == "critic":
            challenges = self.challenges or [{"weaknesses": [], "flawed": False}]
            return Reply.json(challenges[min(count, len(challenges)) - 1])
        if kind == "refine":
            return self.refinement
        if kind == "intake":
            said = re.search(r"<input>\n(.*)\n</input>", request.prompt, re.DOTALL)
            chat = self.chat_reply(said.group(1) if said else request.prompt)
            question = self.clarifying_question if chat is None else ""
            return Reply.json(
                {
                    "chat_reason": "scripted",
                    "is_chat": chat is not None,
                    "reply": chat or "",
                    "ask_reason": "scripted",
                    "ask": bool(question),
                    "question": question,
                }
            )
        raise AssertionError(f"unexpected request: {request.system[:80]!r}")

    @staticmethod
    def kind(request: Request) -> str:
        system = request.system
        prompts = {
            "generate": generator.GENERATOR_PROMPT,
            "merge": merger.MERGER_PROMPT,
            "judge": judgment.JUDGE_PROMPT,
            "critic": council.CRITIC_PROMPT,
            "refine": council.REFINE_PROMPT,
            "intake": intake.INTAKE_PROMPT,
        }
        for kind, prompt in prompts.items():
            if system == prompt:
                return kind
        if system.startswith(planner.PLANNER_PROMPT[:60]):
            return "plan"
        return "agent"


def agent_keys(request: Request) -> list[str]:
    """The upstream keys an ECHO_BODY agent reported in its runtime request."""
    match = re.search(r"keys=\[([^\]]*)\]", request.prompt)
    assert match, request.prompt
    return [key for key in match.group(1).split(",") if key]


def runtime_requests(factory: Factory) -> dict[str, Request]:
    """The agents' runtime requests by agent name (the last one per agent)."""
    found: dict[str, Request] = {}
    for request in factory.of("agent"):
        match = re.search(r"agent=(\w+)", request.prompt)
        if match:
            found[match.group(1)] = request
    return found
