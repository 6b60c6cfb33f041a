"""agentpool.py — one run's agent processes: when they start, how many live, which agent gets each.

The crew says only what it needs: a plan is coming (`expect_plan`); these are the round's agents,
in the order they will run (`begin_round`); this one's code is being written (`writing`); it is
written, and here is its input if it waits for no other agent (`ready`); it may work now
(`take_slot`); run it (`run`); it never will (`forget`); the round is over (`end_round`). What
follows from that for processes is decided here, and only here:

- **Ahead of need.** Starting an agent — interpreter, sandbox walls, the runtime's imports and
  its compiled code — costs tens of milliseconds; done ahead, it is never on the critical path.
  While the planner thinks, *standby* processes start (as many as the first builds take at once:
  MAX_PARALLEL_AGENTS, at most MAX_AGENTS) that block on stdin knowing neither their agent nor
  its effort. Once the plan is known a kept agent's process is wanted at once (its code needs no
  model call), the others' once the round's first generation request is out
  (`llm.while_waiting`: the model's time is idle CPU), not while the plan's reply is being read.
  Each agent whose code is being written is given a process if one is free. The moment its code
  exists, the process gets the agent's grant and one line naming its file (`give_code`), so the
  agent compiles and loads its part while its upstream agents still run; one that waits for no
  other agent gets its input at once (`give_input`), without a trip through the scheduler.
- **Bounded.** No more processes alive than `limit_for(MAX_PARALLEL_AGENTS)`: the agents at work
  (at most MAX_PARALLEL_AGENTS: the slots) and a standby margin of as many again, at most
  STANDBY_CAP — one process ready for each agent that can start next, so the next wave waits for
  no start-up, and no more (each holds ~20 MB). Processes go to the agents that will run soonest
  (the round's order); when an agent ends, the next one in that order gets the room, once the
  agents just set to work have sent their model requests. An agent that must work when none is
  ready for it and the limit is reached takes the process of the agent planned last (or, if that
  one has loaded its code, has it killed and started again later).
- **Not under a budget.** An agent's share of the budget is fixed when its process starts, and
  should reflect what is left when it runs: under a budget, every process starts when its agent
  goes to work.
- **One thread starts them.** Under bubblewrap an agent dies with the *thread* that started it
  (--die-with-parent follows the thread, not the process), so processes started ahead come from
  one thread that lives as long as the pool; one started for work, from the thread that runs it.
- **Nothing outlives its use.** Whatever is never used — more standby than agents, an agent
  skipped, a run stopped — is killed, with its scratch, when the round or the run ends.

The processes wait in the run's own folder (scratch.RunSpace), so they can read only this run's
agents, never another run's in the same home. The user's attachments are known before the plan,
so every process is started with them (their names in its environment, their paths mounted
read-only).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgod import config, executor, llm
from agentgod.broker import Channel
from agentgod.scratch import RunSpace
from agentgod.signals import shield_from_signals

CLOSE_WAIT_SECONDS = 5.0
"""How long closing waits for a process the pool's thread is starting (it is then killed)."""
STANDBY_CAP = 4
"""The standby margin is MAX_PARALLEL_AGENTS processes, but never more than this many."""
QUIET_SECONDS = 0.02
"""After an agent goes to work or ends, starting a process waits at least this long (time for
the scheduler to hand the freed slot on)."""
SETTLE_SECONDS = 0.1
"""...and at most this long while an agent that went to work has not sent its model request yet
(`calling`): the agents starting now reach the model first, without a fork and an interpreter's
start-up competing with them for the CPU."""
MAX_DEFER_SECONDS = 0.5
"""However busy the agents, a process wanted is started within this long."""


def limit_for(parallel: int) -> int:
    """Most agent processes one run may have alive: `parallel` at work, and as many ready to
    follow them (at most STANDBY_CAP)."""
    return parallel + min(parallel, STANDBY_CAP)


@dataclass(frozen=True)
class Planned:
    """One agent of a round, as the crew describes it to the pool."""

    name: str
    grant: Mapping[str, Any] = field(default_factory=dict)
    """What its door allows once the process is this agent's (`Channel.update_grant`'s fields)."""
    kept: bool = False
    """Its code comes from the library, with no model call to wait for: its process is wanted
    as soon as the round begins."""


@dataclass(frozen=True)
class Census:
    """The pool's processes at one moment, by what they wait for."""

    standby: int
    """Started ahead, no agent yet."""
    held: int
    """Given to an agent: waiting for its code, or (with it) for its input."""
    starting: int
    """Being started by the pool's thread."""
    busy: int
    """At work: given their input, or being run."""
    holding: frozenset[str] = frozenset()
    """The agents that have a process waiting for them, or given their input ahead."""

    @property
    def alive(self) -> int:
        return self.standby + self.held + self.starting + self.busy


class AgentPool:
    """The processes of one run: started ahead, given to agents, run, and never outliving it."""

    def __init__(
        self,
        settings: config.Settings,
        *,
        open_door: Callable[[str], Channel],
        preload: tuple[str, ...] = (),
        space: RunSpace | None = None,
        inputs: Mapping[str, Path] = {},
        read_only: Sequence[Path] = (),
        identities: Mapping[Path, tuple[int, int, int]] = {},
        budgeted: bool = False,
    ) -> None:
        self.settings = settings
        """The run's snapshot, so starting a process never reads the settings again."""
        self.open_door = open_door
        """A broker channel for a process, by the agent's name ("standby" until it has one)."""
        self.preload = preload
        """Modules a process started ahead imports while it waits (the runtime's)."""
        self.space = space
        """The run's own scratch: its processes wait in its folder, with its scratch dirs."""
        self.inputs = dict(inputs)
        """The user's attachments by name: known before the plan, so given at start."""
        self.read_only = tuple(read_only)
        """The files and folders mounted read-only for them (executor.start_agent's)."""
        self.identities = dict(identities)
        """What each attached file was when it was vetted (executor.start_agent's)."""
        self.ahead = not budgeted
        """Whether processes start ahead of need (never under a budget)."""
        self.parallel = settings.max_parallel_agents
        self.limit = limit_for(self.parallel)
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        """Notified whenever the pool's thread may have something to start."""
        self._standby: list[executor.AgentProcess] = []
        self._standby_wanted = 0
        """Before a plan: how many standby processes to have."""
        self._held: dict[str, executor.AgentProcess] = {}
        self._given: dict[str, executor.AgentProcess] = {}
        """Processes given their input ahead, which `run` collects (counted in `_busy`)."""
        self._starting = 0
        self._busy = 0
        self._slots: set[str] = set()
        self._round: dict[str, Planned] = {}
        self._order: dict[str, int] = {}
        self._code: dict[str, Path] = {}
        self._wanting: set[str] = set()
        """Agents of the round that want a process and have none."""
        self._gone: set[str] = set()
        """Agents that went to work, or never will: they want no waiting process any more."""
        self._topped_up = False
        self._moved = 0.0
        """When an agent last went to work or ended (time.monotonic)."""
        self._unsettled = 0
        """Agents that went to work and have not been seen sending a model request yet."""
        self._deferred: float | None = None
        """Since when the pool's thread has held back a start for agents that just moved."""
        self._spawner: threading.Thread | None = None

    # ---- what the crew says --------------------------------------------------------------------

    def expect_plan(self) -> None:
        """A plan is coming: have processes ready for the first agents it will hold.

        As many as the first builds take at once (MAX_PARALLEL_AGENTS, at most MAX_AGENTS):
        each costs tens of milliseconds of CPU, and more would still be starting when the plan
        arrives, competing with its reply.
        """
        if not self.ahead:
            return
        with self._lock:
            self._standby_wanted = min(self.settings.max_agents, self.parallel, self.limit)
            self._wake()

    def begin_round(self, agents: Sequence[Planned]) -> None:
        """The round's agents that will run, in the order they will run."""
        with self._lock:
            self._round = {agent.name: agent for agent in agents}
            self._order = {agent.name: index for index, agent in enumerate(agents)}
            self._code.clear()
            self._slots.clear()
            self._gone.clear()
            self._standby_wanted = 0
            self._topped_up = False
            self._wanting = {agent.name for agent in agents if agent.kept} if self.ahead else set()
            self._wake()

    @contextlib.contextmanager
    def writing(self, name: str) -> Iterator[None]:
        """Around the writing of `name`'s code: a process is wanted for it now, and the rest of
        the round's are wanted once this thread's first request to the model is out."""
        with self._lock:
            self._want(name)
        with llm.while_waiting(self._want_all):
            yield

    def ready(self, name: str, path: Path, first_input: tuple[str, dict[str, str]] | None) -> None:
        """`name`'s code is written to `path`: its process, when it has one, loads it now.

        `first_input` is its input when it waits for no other agent: given at once if a slot is
        free (the agent is then at work, and `take_slot` says so).
        """
        with self._lock:
            if name not in self._round or self.closed.is_set():
                return
            self._code[name] = path
            process = self._held.get(name)
            if process is None:
                return  # a process that comes later loads it when it comes
            if process.awaiting_code:
                self._arm(name, process, path)
            if first_input is not None and self._take_slot(name):
                del self._held[name]
                self._given[name] = process
                self._busy += 1
                self._gone.add(name)
                self._moved = time.monotonic()
                self._unsettled += 1
                process.give_input(*first_input)

    def calling(self) -> None:
        """An agent's model request is out (the crew's broker says so, not knowing whose): one
        agent less is starting up, and the model's time is idle CPU for starting processes."""
        with self._lock:
            if self._unsettled:
                self._unsettled -= 1
                if not self._unsettled:
                    self._changed.notify()

    def take_slot(self, name: str) -> bool:
        """Whether `name` may be at work now (it holds one of MAX_PARALLEL_AGENTS slots if so);
        one given its input by `ready` already does."""
        with self._lock:
            return self._take_slot(name)

    def free_slot(self, name: str) -> None:
        """`name` is done: its slot goes to the next agent."""
        with self._lock:
            self._slots.discard(name)

    def run(
        self, name: str, path: Path, task: str, upstream: dict[str, str]
    ) -> tuple[executor.AgentResult, Channel | None]:
        """One attempt of `name` (which holds a slot): its own process if one is ready, else a
        standby one, else one started now. Returns the outcome and the agent's door."""
        doomed: list[executor.AgentProcess] = []
        with self._lock:
            planned = self._round[name]
            self._wanting.discard(name)
            self._gone.add(name)
            self._moved = time.monotonic()
            process = self._given.pop(name, None)
            if process is None:
                self._unsettled += 1  # (one given its input ahead was counted then)
                process = self._held.pop(name, None)
                if process is None and self._standby:
                    process = self._standby.pop()
                if process is None and self.ahead and self._census().alive >= self.limit:
                    process = self._yield_to(name, doomed)
                self._busy += 1
        try:
            self._discard(doomed)
            if process is not None and process.awaiting_code:
                try:
                    self._arm(name, process, path)  # it is this thread's alone now
                except BaseException:
                    process.discard()
                    raise
            if process is None:
                door = self.open_door(name)
                door.update_grant(**planned.grant)
                started = executor.start_agent(
                    path,
                    timeout=self.settings.agent_timeout_seconds,
                    model=self.settings.model,
                    door=door,
                    space=self.space,
                    inputs=self.inputs,
                    read_only=self.read_only,
                    identities=self.identities,
                    settings=self.settings,
                )
                if isinstance(started, executor.AgentResult):
                    return started, door
                process = started
            return process.run(task, upstream, path=path), process.door
        finally:
            with self._lock:
                self._busy -= 1
                self._unsettled = min(self._unsettled, self._busy)
                self._moved = time.monotonic()
                self._wake()

    def forget(self, name: str) -> None:
        """`name` will never run (no code, or skipped): its process goes, and its slot."""
        with self._lock:
            self._gone.add(name)
            self._wanting.discard(name)
            self._slots.discard(name)
            doomed = []
            held = self._held.pop(name, None)
            if held is not None:
                doomed.append(held)
            given = self._given.pop(name, None)
            if given is not None:
                doomed.append(given)
                self._busy -= 1
                self._unsettled = min(self._unsettled, self._busy)
            self._wake()
        self._discard(doomed)

    def end_round(self) -> None:
        """The round is over: processes held for its agents will never get their input.

        Standby processes stay for a later round (a revision) until the pool closes.
        """
        with self._lock:
            doomed = [*self._held.values(), *self._given.values()]
            self._busy -= len(self._given)
            self._unsettled = min(self._unsettled, self._busy)
            self._held.clear()
            self._given.clear()
            self._wanting.clear()
            self._slots.clear()
            self._gone.update(self._round)
            self._wake()
        self._discard(doomed)

    def close(self) -> None:
        """The run is over: no process started ahead of need may outlive it — one being
        started at this moment is waited for (a few tenths of a second at most), then killed."""
        with self._lock:
            self.closed.set()
            doomed = [*self._standby, *self._held.values(), *self._given.values()]
            self._busy -= len(self._given)
            self._standby.clear()
            self._held.clear()
            self._given.clear()
            self._wanting.clear()
            self._changed.notify_all()
            spawner = self._spawner
        self._discard(doomed)
        if spawner is not None and spawner is not threading.current_thread():
            spawner.join(CLOSE_WAIT_SECONDS)

    def census(self) -> Census:
        """How many processes the pool has, and what they wait for."""
        with self._lock:
            return self._census()

    # ---- inside (the lock held) ----------------------------------------------------------------

    def _census(self) -> Census:
        holding = frozenset(self._held) | frozenset(self._given)
        return Census(len(self._standby), len(self._held), self._starting, self._busy, holding)

    def _take_slot(self, name: str) -> bool:
        if name in self._slots:
            return True
        if len(self._slots) >= self.parallel:
            return False
        self._slots.add(name)
        return True

    def _want(self, name: str) -> None:
        """`name` wants a process: a standby one at once if there is one, else the next started."""
        if not self.ahead or name in self._held or name in self._gone or name not in self._round:
            return
        if self._standby:
            self._held[name] = self._standby.pop()
            self._wanting.discard(name)
            if name in self._code:
                self._arm(name, self._held[name], self._code[name])
        else:
            self._wanting.add(name)
        self._wake()

    def _want_all(self) -> None:
        """A generation request is out: every agent of the round wants its process now.

        Once per round, by whichever build gets there first; called inside the read of the
        reply, so it only takes note and wakes the pool's thread.
        """
        with self._lock:
            if self._topped_up or not self.ahead:
                return
            self._topped_up = True
            for name in self._round:
                self._want(name)

    def _arm(self, name: str, process: executor.AgentProcess, path: Path) -> None:
        """The agent's grant, then its code: it loads while its upstream agents still run."""
        if process.door is not None:
            process.door.name = name
            process.door.update_grant(**self._round[name].grant)
        process.give_code(path)

    def _yield_to(
        self, name: str, doomed: list[executor.AgentProcess]
    ) -> executor.AgentProcess | None:
        """At the limit, `name` must work: the agent planned last gives up its process — to
        `name` if it has not loaded its code yet, else to be killed (and started again later)."""
        held = [other for other in self._held if other != name]
        if not held:
            return None
        last = max(held, key=lambda other: self._order.get(other, len(self._order)))
        process = self._held.pop(last)
        self._wanting.add(last)
        if process.awaiting_code:
            return process
        doomed.append(process)
        return None

    def _settling(self) -> float:
        """Seconds to hold a start back while agents are starting work (QUIET_SECONDS), 0: start."""
        now = time.monotonic()
        if self._deferred is None:
            self._deferred = now
        settle = SETTLE_SECONDS if self._unsettled else QUIET_SECONDS
        left = min(self._moved + settle, self._deferred + MAX_DEFER_SECONDS) - now
        if left <= 0:
            self._deferred = None
        return max(left, 0.0)

    def _should_start(self) -> bool:
        if self.closed.is_set() or not self.ahead or self._census().alive >= self.limit:
            return False
        wanted = len(self._wanting) + max(0, self._standby_wanted - len(self._standby))
        return wanted > self._starting

    def _wake(self) -> None:
        """Something changed that may let the pool's thread start a process (started lazily)."""
        if not self.ahead or self.closed.is_set():
            return
        if self._spawner is None:
            self._spawner = threading.Thread(
                target=self._spawn, name="agentgod-standby", daemon=True
            )
            self._spawner.start()
        self._changed.notify()

    def _place(self, process: executor.AgentProcess) -> None:
        """A process just started goes to the agent that will run soonest, else to standby."""
        if self._wanting:
            name = min(self._wanting, key=lambda wanted: self._order[wanted])
            self._wanting.discard(name)
            self._held[name] = process
            if name in self._code:
                self._arm(name, process, self._code[name])
        else:
            self._standby.append(process)

    # ---- the pool's thread ---------------------------------------------------------------------

    def _spawn(self) -> None:
        """Start processes one after the other, whenever one is wanted and the limit allows."""
        shield_from_signals()
        while True:
            with self._lock:
                while True:
                    if self.closed.is_set():
                        return
                    if not self._should_start():
                        self._deferred = None
                        self._changed.wait()
                    elif (settling := self._settling()) > 0:
                        self._changed.wait(settling)
                    else:
                        break
                self._starting += 1
            started = self._start_one()
            with self._lock:
                self._starting -= 1
                if not isinstance(started, executor.AgentProcess):
                    # It cannot start one: agents start theirs when they work, and fail properly.
                    self.ahead = False
                    self._wanting.clear()
                elif not self.closed.is_set():
                    self._place(started)
                    continue
            if isinstance(started, executor.AgentProcess):
                started.discard()  # the run ended while it was starting
            return

    def _start_one(self) -> executor.AgentProcess | executor.AgentResult | None:
        try:
            door = self.open_door("standby")
        except RuntimeError:  # the run's broker is closed: the run is over
            return None
        return executor.start_agent(
            None,
            timeout=self.settings.agent_timeout_seconds,
            model=self.settings.model,
            door=door,
            preload=self.preload,
            space=self.space,
            inputs=self.inputs,
            read_only=self.read_only,
            identities=self.identities,
            settings=self.settings,
        )

    @staticmethod
    def _discard(processes: list[executor.AgentProcess]) -> None:
        for process in processes:
            process.discard()
