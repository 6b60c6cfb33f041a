"""Small helpers to build real agent files for tests: the trusted runtime plus a tiny body."""

from __future__ import annotations

import textwrap
from pathlib import Path

from agentgod import executor, generator
from agentgod.planner import AgentSpec


def spec(name: str, role: str = "test agent", dependencies: list[str] | None = None) -> AgentSpec:
    """A validated AgentSpec with no upstream agents (and no packages unless given), as the
    planner makes one."""
    return AgentSpec(
        name=name,
        role=role,
        instructions="do the thing",
        depends_on=[],
        dependencies=dependencies or [],
    )


def agent_source(body: str, name: str = "test_agent") -> str:
    """A complete agent program around `body` (dedented)."""
    return generator.assemble_agent(textwrap.dedent(body), spec(name))


def write_agent(body: str, name: str = "test_agent") -> Path:
    """Assemble and save an agent into the isolated AGENTGOD_HOME."""
    return executor.save_agent_file(name, agent_source(body, name))


def write_raw(source: str, name: str = "raw_agent") -> Path:
    """Save arbitrary source as an agent, bypassing the runtime and codeguard (escape tests)."""
    return executor.save_agent_file(name, textwrap.dedent(source))
