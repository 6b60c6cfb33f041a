"""Small helpers to build real agent files for tests: the trusted runtime plus a tiny body."""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path

from agentgod import config, executor, generator
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


class LiveAgents:
    """Counts this test process's live agent processes on a thread, every millisecond or so,
    until the block ends: its children (from any of its threads) whose command line names the
    home's generated_agents/ — one per agent, the interpreter or bubblewrap around it."""

    def __init__(self) -> None:
        self.marker = str(config.settings().agents_dir).encode()
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> LiveAgents:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def count(self) -> int:
        alive = 0
        for task in Path("/proc/self/task").iterdir():
            try:
                children = (task / "children").read_text(encoding="ascii").split()
            except OSError:
                continue
            for pid in children:
                try:
                    alive += self.marker in Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
        return alive

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, self.count())
            self.samples += 1
