"""Small helpers to build real agent files for tests: the trusted runtime plus a tiny body."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import executor
import generator


def spec(name: str, role: str = "test agent", **fields: object) -> SimpleNamespace:
    """Anything with the AgentSpec attributes the generator reads."""
    defaults = {"instructions": "do the thing", "depends_on": [], "dependencies": []}
    return SimpleNamespace(name=name, role=role, **{**defaults, **fields})


def agent_source(body: str, name: str = "test_agent") -> str:
    """A complete agent program around `body` (dedented)."""
    return generator.assemble_agent(textwrap.dedent(body), spec(name))


def write_agent(body: str, name: str = "test_agent") -> Path:
    """Assemble and save an agent into the isolated AGENTGOD_HOME."""
    return executor.save_agent_file(name, agent_source(body, name))


def write_raw(source: str, name: str = "raw_agent") -> Path:
    """Save arbitrary source as an agent, bypassing the runtime and codeguard (escape tests)."""
    return executor.save_agent_file(name, textwrap.dedent(source))
