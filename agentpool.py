"""agentpool.py — agent processes started ahead of need, so start-up is never on the critical path.

While the planner thinks, a background thread starts *standby* processes (interpreter, sandbox
walls, the runtime's imports and its compiled code) that block on stdin, knowing neither their agent
nor its effort; each build worker then takes one, or starts one named for its agent, before it asks
for the agent's code. They wait in the run's own folder (scratch.RunSpace), so they can read only
this run's agents, never those of another run in the same home. A process held here is *warm*: its
code exists and it waits for its inputs. The user's attachments are known before the plan, so every
process is started with them (their names in its environment, their paths mounted read-only).
Whatever is never used — more standby than agents, an agent skipped, a run stopped — is killed,
with its scratch, when the pool closes. Not under a budget: an agent's share of the budget is
fixed when its process starts, and should be measured against what is left when it runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from agentgod import config, executor, llm
from agentgod.broker import Channel
from agentgod.scratch import RunSpace
from agentgod.signals import shield_from_signals

SDK_WAIT_SECONDS = 30.0
"""How long standby start-up defers to the SDK's import before it goes ahead anyway."""


class AgentPool:
    """The processes one run started ahead: standby ones, and warm ones by agent name."""

    def __init__(
        self,
        *,
        timeout: float,
        model: str,
        preload: tuple[str, ...],
        open_door: Callable[[str], Channel],
        space: RunSpace | None = None,
        inputs: Mapping[str, Path] = {},
        read_only: Sequence[Path] = (),
        identities: Mapping[Path, tuple[int, int, int]] = {},
        settings: config.Settings | None = None,
    ) -> None:
        self.timeout = timeout
        self.model = model
        self.preload = preload
        """Modules a process imports while it waits (the runtime's), named by the generator."""
        self.open_door = open_door
        """A broker channel for a process, by the agent's name ("standby" until it has one)."""
        self.space = space
        """The run's own scratch: its processes wait in its folder, with its scratch dirs."""
        self.inputs = dict(inputs)
        """The user's attachments by name: known before the plan, so given at start."""
        self.read_only = tuple(read_only)
        """The files and folders mounted read-only for them (executor.start_agent's)."""
        self.identities = dict(identities)
        """What each attached file was when it was vetted (executor.start_agent's)."""
        self.settings = settings
        """The run's snapshot, so starting a process never reads the settings again."""
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._standby: list[executor.AgentProcess] = []
        self._warm: dict[str, executor.AgentProcess] = {}
        self._wanted = 0
        """Processes asked of the background thread and not started yet."""
        self._more = threading.Condition(self._lock)
        self._spawner: threading.Thread | None = None

    def start_standby(self, count: int) -> None:
        """Start `count` more processes on the pool's background thread; nobody is kept waiting.

        One thread starts them all, one after the other, and lives until the pool closes: under
        bubblewrap an agent dies with the thread that started it (--die-with-parent follows the
        thread, not the process).
        """
        with self._lock:
            if count < 1 or self.closed.is_set():
                return
            self._wanted += count
            self._more.notify()
            if self._spawner is None:
                self._spawner = threading.Thread(
                    target=self._spawn, name="agentgod-standby", daemon=True
                )
                self._spawner.start()

    def _spawn(self) -> None:
        shield_from_signals()
        # Starting interpreters costs CPU; never compete with the SDK's import, which stands
        # between a fresh process and its first request.
        llm.client_ready.wait(timeout=SDK_WAIT_SECONDS)
        while True:
            with self._lock:
                while not self._wanted and not self.closed.is_set():
                    self._more.wait()
                if self.closed.is_set():
                    return
                self._wanted -= 1
            started = executor.start_agent(
                None,
                timeout=self.timeout,
                model=self.model,
                door=self.open_door("standby"),
                preload=self.preload,
                space=self.space,
                inputs=self.inputs,
                read_only=self.read_only,
                identities=self.identities,
                settings=self.settings,
            )
            with self._lock:
                if not isinstance(started, executor.AgentProcess):
                    self._wanted = 0  # it cannot start one: builds start theirs and fail properly
                    continue
                if self.closed.is_set():
                    started.discard()
                    return
                self._standby.append(started)

    def take(self, name: str) -> executor.AgentProcess | None:
        """A process for `name`: a standby one, or one started now; None if none can be had.

        None is not a failure: the agent is started again, and fails properly, when its turn
        comes.
        """
        with self._lock:
            if self._standby:
                return self._standby.pop()
        if self.closed.is_set():
            return None
        started = executor.start_agent(
            None,
            name=name,
            timeout=self.timeout,
            model=self.model,
            door=self.open_door(name),
            preload=self.preload,
            space=self.space,
            inputs=self.inputs,
            read_only=self.read_only,
            identities=self.identities,
            settings=self.settings,
        )
        if not isinstance(started, executor.AgentProcess):
            return None
        if self.closed.is_set():
            started.discard()
            return None
        return started

    def hold(self, name: str, agent: executor.AgentProcess) -> None:
        """Keep `agent`, whose code now exists, until `name` is ready to run."""
        with self._lock:
            if not self.closed.is_set():
                self._warm[name] = agent
                return
        agent.discard()

    def claim(self, name: str) -> executor.AgentProcess | None:
        """The warm process held for `name`, if any; it is the caller's to run now."""
        with self._lock:
            return self._warm.pop(name, None)

    def discard_warm(self) -> None:
        """Processes that will never get their input (their agents were skipped)."""
        with self._lock:
            leftovers = list(self._warm.values())
            self._warm.clear()
        for agent in leftovers:
            agent.discard()

    def close(self) -> None:
        """The run is over: no process started ahead of need may outlive it."""
        with self._lock:
            self.closed.set()
            self._more.notify_all()
            leftovers = [*self._standby, *self._warm.values()]
            self._standby.clear()
            self._warm.clear()
        for agent in leftovers:
            agent.discard()
