"""crew.py — the crew of one run: writes, starts, runs and repairs a round's agents.

The flow (orchestrator) decides *what* happens: which plan, when to merge, judge, revise. The
crew is *how* a round's agents come to exist and run, and it keeps the machinery for that out of
the flow: the broker (each agent's only door to the model), the pool of processes started ahead,
the run's agent folder, the scheduler, and the rerun and repair policy.

Concurrency model: generation and execution run on two thread pools of MAX_PARALLEL_AGENTS each,
so building later agents overlaps with running earlier ones; an agent starts the moment its own
code exists and its upstream agents have finished. Every result is absorbed on the calling
thread, so the crew's state (and the round's) is mutated from exactly one place.

The run's state the flow also touches (settings, usage, events, attachments, artifacts, the stop
and budget flags, warnings) comes in as a `RunState`, so this module never imports the flow.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentgod import (
    agentvenv,
    config,
    executor,
    generator,
    ledger,
    library,
    llm,
    models,
    planner,
    signals,
    taskgraph,
)
from agentgod.agentpool import AgentPool
from agentgod.artifacts import ArtifactStore
from agentgod.attachments import Attached
from agentgod.broker import AgentUsage, Broker, Channel
from agentgod.events import TaskEvents
from agentgod.kinds import AgentKind, Phase, Spend
from agentgod.runrecord import AgentRecord, Failure
from agentgod.scratch import RunSpace

# Failures a rewrite cannot fix: a hang would just hang again (and cost another full timeout),
# an unstartable interpreter is the machine's problem, not the code's, and a spent budget stays
# spent.
_NOT_REPAIRABLE = frozenset({AgentKind.TIMEOUT, AgentKind.UNSTARTABLE, AgentKind.BUDGET})
AGENT_SHARE_TOKENS = 16_384
"""Under a budget, the most tokens one agent run may use (all its calls together)."""
WEB_SHARE_FACTOR = 4
"""A web agent's share is this many times larger: search results and pages it reads are input."""
TRANSIENT_FAILURES = frozenset({"rate_limit", "overloaded", "timeout", "connection", "api_error"})
"""How the API failed an agent's call when running the same code again may well work."""
TRANSIENT_RERUNS = 2
"""Reruns of unchanged code after a transient failure, before it counts as the code's fault."""
RERUN_BACKOFF_SECONDS = 1.0
"""The wait before the first rerun; it doubles for the next."""
DOOR_SETTLE_SECONDS = 2.0
"""After an agent ends, how long its broker channel may take to bill a reply still arriving."""


class RunState(Protocol):
    """What the crew shares with the flow: one run's settings, meters, flags and voice.

    Read at each use, never copied: a flow that swaps its `events` (an interrupted run's display
    gone) is heard by the workers at once.
    """

    @property
    def settings(self) -> config.Settings:
        """The run's one snapshot of the settings."""

    @property
    def usage(self) -> ledger.Usage:
        """The run's meter and budget; the crew bills agents and code generation to it."""

    @property
    def events(self) -> TaskEvents:
        """Where every moment is reported (serialised: workers call it)."""

    @property
    def attached(self) -> Attached:
        """The user's files: every agent may read them, none may write them."""

    @property
    def artifacts(self) -> ArtifactStore:
        """Where the broker writes the files agents hand back."""

    @property
    def stopped(self) -> threading.Event:
        """Set on an interrupt or failure: nothing new is started."""

    @property
    def budget_hit(self) -> threading.Event:
        """Set once the budget stopped model work."""

    def warn(self, text: str) -> None:
        """Something the run survives: shown now, and kept in the run's record."""

    def note_budget(self, needed_usd: float = 0.0) -> None:
        """The budget refused a call (needing up to `needed_usd`): launch nothing more."""

    def recorded(self, agent: AgentRecord) -> None:
        """An agent's record is final for its round (kept as the run goes, in its journal)."""


class Tally(Protocol):
    """The round's record the crew fills in as its agents end (the flow keeps the rest)."""

    agents: list[AgentRecord]
    failures: list[Failure]


@dataclass
class _Built:
    """What a build worker hands back for one agent."""

    path: Path | None
    source: str = ""
    reused: bool = False
    reasons: list[str] = field(default_factory=list)
    warm: executor.AgentProcess | None = None
    """The agent already started and waiting for its input, when it could be."""
    kind: AgentKind = AgentKind.REJECTED
    """Why there is no path: codeguard rejected every attempt, or the budget ran out."""


@dataclass
class _Ran:
    """What a run worker hands back for one agent."""

    result: executor.AgentResult
    attempts: int
    seconds: float
    source: str
    repaired: bool
    """A repair replaced the code it started with."""
    usage: AgentUsage
    """What its calls cost, every attempt together, as the broker billed them."""


class _Schedule:
    """Which agents of a round have code, have started and are done; who may start next."""

    def __init__(self, agents: list[planner.AgentSpec]) -> None:
        self.agents = agents
        self.code: dict[str, Path] = {}
        """Each agent's saved file, once it exists."""
        self._started: set[str] = set()
        self._finished: set[str] = set()

    def ready(self) -> list[planner.AgentSpec]:
        """Not started nor finished (an agent the budget skipped is finished, code or not), its
        code exists, and every agent it depends on is done."""
        return [
            a
            for a in self.agents
            if a.name in self.code
            and a.name not in self._started
            and a.name not in self._finished
            and all(dep in self._finished for dep in a.depends_on)
        ]

    def unstarted(self) -> list[planner.AgentSpec]:
        return [a for a in self.agents if a.name not in self._started | self._finished]

    def start(self, name: str) -> None:
        self._started.add(name)

    def finish(self, name: str) -> None:
        self._finished.add(name)

    def is_finished(self, name: str) -> bool:
        return name in self._finished

    def done(self) -> bool:
        return len(self._finished) == len(self.agents)


class Crew:
    """One run's agent machinery, across all its rounds; `close` it when the run ends.

    What the flow reads back, once rounds have run: `paths` (every agent file written),
    `new_sources` (new agents that succeeded, to offer the library), `library_outcomes` and
    `evolved` (kept agents' wins and losses, repaired ones' new code), `layers` (the sandbox
    walls seen) and `unreadable` (agents not written because the API's reply was unreadable).
    """

    def __init__(self, run: RunState, space: RunSpace) -> None:
        self._run = run
        self.space = space
        """This run's own agent folder and scratch dirs; no other run sees them."""
        self.paths: dict[str, Path] = {}
        self.new_sources: dict[str, tuple[str, str]] = {}
        """By agent name: (role, source) of each new agent that succeeded."""
        self.library_outcomes: dict[str, bool] = {}
        """By agent name: whether a kept agent succeeded (a repaired success is `evolved`)."""
        self.evolved: dict[str, tuple[str, str]] = {}
        """By agent name: (role, source) of each kept agent a repair made succeed."""
        self.layers: set[str] = set()
        self.unreadable: dict[str, BaseException] = {}
        """Agents whose code could not be written because the API's reply could not be read."""
        settings, usage, attached = run.settings, run.usage, run.attached
        self._ahead = usage.budget_usd is None
        """Start agents' processes ahead of need (never under a budget: see agentpool)."""
        self._share_tokens = AGENT_SHARE_TOKENS if usage.budget_usd is not None else None
        """Under a budget, what one agent's calls may use together (the broker enforces it)."""
        self._broker = Broker(
            functools.partial(llm.forward, settings=settings),
            usage.phase(Spend.AGENTS),
            price=lambda model: models.price_of(model)[0],
            effort_for_model=models.effort_for_model,
            budget_error=ledger.BudgetExhaustedError,
            web=settings.web,
            known_urls=attached.texts(),
            artifacts=run.artifacts,
        )
        self._started_ahead = 0
        """Processes start_ahead asked for this round, before its plan."""
        self._more_needed = 0
        """What the round's agents need beyond those (and beyond its kept agents, started as
        soon as the plan is known): asked for by the first generation request (_top_up)."""
        self._top_up_lock = threading.Lock()
        self._slots_lock = threading.Lock()
        self._running: set[str] = set()
        """This round's agents at work (given their input, or handed to a runner): never more
        than MAX_PARALLEL_AGENTS, so no runner ever waits and the API sees no more at once."""
        self._pool = AgentPool(
            timeout=settings.agent_timeout_seconds,
            model=settings.model,
            preload=generator.RUNTIME_MODULES,
            open_door=self._open_door,
            space=space,
            inputs=attached.inputs(),
            read_only=attached.mounts,
            identities=attached.identities(),
            settings=settings,
        )

    def start_ahead(self) -> None:
        """Before the plan: start processes for the first agents it will hold (none under a
        budget).

        As many as the first builds take at once (MAX_PARALLEL_AGENTS, at most MAX_AGENTS):
        each costs tens of milliseconds of CPU, and more would still be starting when the plan
        arrives, competing with its reply. The rest are started once the round's first
        generation request is out (`_top_up`), while the model writes code.
        """
        if self._ahead:
            settings = self._run.settings
            self._started_ahead = min(settings.max_agents, settings.max_parallel_agents)
            self._pool.start_standby(self._started_ahead)

    def reusable(self, name: str) -> str | None:
        """A library agent's source, as the pipeline runs it, when it is reliable and still
        passes the guard untouched."""
        settings = self._run.settings
        if not library.reliable(name, settings=settings):
            return None
        source = library.lookup(name, settings=settings)
        if source is None or generator.check_assembled(source):
            return None
        return generator.for_run(source)  # without the library copy's standalone road

    def close(self) -> None:
        """The run is over: no process started ahead of need may outlive it, nor any door."""
        self._pool.close()
        self._broker.close(timeout=0)

    # ---- the scheduler -------------------------------------------------------------------------

    def run_round(
        self,
        agents: list[planner.AgentSpec],
        kept: dict[str, str | None],
        task_text: str,
        effort: str,
        tally: Tally,
        carried: dict[str, str],
    ) -> dict[str, str]:
        """Write and run the agents, each as early as its own code and its upstream allow.

        `kept` is each agent's library source (None: write it). Every agent's build is submitted
        at once; whenever anything finishes, each agent whose code exists and whose dependencies
        are done is started. An agent with a `carried` output is done before the round starts.
        Returns what the agents delivered, by name; `tally` gets every record and failure.
        """
        run = self._run
        closures = {a.name: taskgraph.dependency_closure(agents, a.name) for a in agents}
        schedule = _Schedule(agents)
        outputs = {a.name: carried[a.name] for a in agents if a.name in carried}
        for name in outputs:
            schedule.finish(name)
        fresh = [a for a in agents if a.name not in carried]
        records = {
            a.name: AgentRecord(a.name, a.role, reused=False, inputs=list(closures[a.name]))
            for a in fresh
        }
        tally.agents = list(records.values())
        with self._slots_lock:
            self._running.clear()
        with self._top_up_lock:
            more = len(fresh) - self._started_ahead if self._ahead else 0
            self._started_ahead = 0
            # A kept agent is built at once, with no model call to wait for: its process now.
            now = max(0, min(more, sum(kept[a.name] is not None for a in fresh)))
            self._more_needed = more - now
        self._pool.start_standby(now)
        run.events.phase_started(Phase.BUILD)
        run.events.phase_started(Phase.RUN)
        phase = time.monotonic()
        if not fresh:
            run.events.phase_finished(Phase.BUILD, 0.0)
        with self._worker_pools() as (builders, runners):
            work: dict[Future[Any], planner.AgentSpec] = {
                builders.submit(
                    self._build, a, kept[a.name], closures[a.name], effort, task_text
                ): a
                for a in fresh
            }
            building = len(fresh)
            while not schedule.done():
                if run.budget_hit.is_set():
                    for spec in schedule.unstarted():
                        self._skip(records[spec.name], tally)
                        schedule.finish(spec.name)
                    if schedule.done():
                        break
                for spec in schedule.ready():
                    if not self._take_slot(spec.name):
                        continue  # all at work: it starts when one of them is done
                    schedule.start(spec.name)
                    upstream = {k: outputs[k] for k in closures[spec.name] if k in outputs}
                    started = runners.submit(
                        self._run_with_repair,
                        spec,
                        schedule.code[spec.name],
                        task_text,
                        upstream,
                        closures[spec.name],
                        effort,
                    )
                    work[started] = spec
                finished, _ = wait(work, return_when=FIRST_COMPLETED)
                for future in finished:
                    spec, outcome = work.pop(future), future.result()
                    if isinstance(outcome, _Built):
                        self._absorb_built(records[spec.name], outcome, schedule, tally)
                        building -= 1
                        if not building:
                            run.events.phase_finished(Phase.BUILD, time.monotonic() - phase)
                    else:
                        self._free_slot(spec.name)
                        self._absorb(records[spec.name], outcome, outputs, tally)
                        schedule.finish(spec.name)
            for future in work:  # still being written (or run) when the budget ran out
                spec, outcome = work[future], future.result()
                if isinstance(outcome, _Built):
                    self._absorb_built(records[spec.name], outcome, schedule, None)
                else:  # paid for: its output counts like any other's
                    self._free_slot(spec.name)
                    self._absorb(records[spec.name], outcome, outputs, tally)
        self._pool.discard_warm()
        run.events.phase_finished(Phase.RUN, time.monotonic() - phase)
        return outputs

    @contextlib.contextmanager
    def _worker_pools(self) -> Iterator[tuple[ThreadPoolExecutor, ThreadPoolExecutor]]:
        """One pool writes agents, one runs them; an interrupt or failure stops both at once."""
        width = self._run.settings.max_parallel_agents
        pools = tuple(
            ThreadPoolExecutor(
                width,
                thread_name_prefix=f"agentgod-{role}",
                initializer=signals.shield_from_signals,
            )
            for role in ("build", "run")
        )
        try:
            yield pools[0], pools[1]
        except BaseException:
            self._stop(*pools)
            raise
        for pool in pools:
            pool.shutdown()

    def _stop(self, *pools: ThreadPoolExecutor) -> None:
        """Interrupt or failure: kill agent processes and stop scheduling new work."""
        self._run.stopped.set()
        executor.stop_all()
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        self._pool.discard_warm()

    # ---- the caller's thread: results folded in ------------------------------------------------

    def _absorb_built(
        self, record: AgentRecord, built: _Built, schedule: _Schedule, tally: Tally | None
    ) -> None:
        """One agent's code exists (or never will); make it runnable.

        `tally` is None for a build that ended after the round stopped scheduling.
        """
        record.reused = built.reused
        if built.path is not None:
            self.paths[record.name] = built.path
        scheduling = tally is not None and not schedule.is_finished(record.name)
        if built.path is not None and scheduling:
            schedule.code[record.name] = built.path
            if built.warm is not None:
                self._pool.hold(record.name, built.warm)
            return
        if built.warm is not None:
            built.warm.discard()
            self._free_slot(record.name)
        if tally is not None and scheduling:
            self._reject(record, built, tally)
            schedule.finish(record.name)

    def _absorb(
        self, record: AgentRecord, ran: _Ran, outputs: dict[str, str], tally: Tally
    ) -> None:
        """Fold one finished agent into the round."""
        result = ran.result
        self.layers.update(result.layers)
        record.ok, record.kind, record.attempts, record.seconds = (
            result.ok,
            result.kind,
            ran.attempts,
            ran.seconds,
        )
        record.usage, record.usd = ran.usage.reply(), ran.usage.usd
        record.refusals, record.failed_calls = dict(ran.usage.refusals), dict(ran.usage.failures)
        record.source = ran.source
        if result.ok:
            record.output = result.output
            outputs[record.name] = result.output
        else:
            record.error = result.error
            tally.failures.append(Failure(record.name, _one_line(result.error), result.kind))
        if record.reused:
            if ran.repaired and result.ok:
                self.evolved[record.name] = (record.role, ran.source)
            else:
                self.library_outcomes[record.name] = result.ok
        elif result.ok:
            self.new_sources[record.name] = (record.role, ran.source)
        self._run.recorded(record)
        self._run.events.agent_finished(
            record.name, result.ok, ran.seconds, result.kind, record.error, ran.attempts
        )

    def _reject(self, record: AgentRecord, built: _Built, tally: Tally) -> None:
        record.kind = built.kind
        record.error = "; ".join(built.reasons)
        tally.failures.append(Failure(record.name, _one_line(record.error), built.kind))
        if built.kind == AgentKind.REJECTED:
            self._run.events.agent_rejected(record.name, built.reasons)
        self._run.recorded(record)
        self._run.events.agent_finished(record.name, False, 0.0, built.kind, record.error, 0)

    def _skip(self, record: AgentRecord, tally: Tally) -> None:
        """The budget is spent: an agent that has not started never will."""
        built = _Built(None, reasons=["skipped: the budget ran out"], kind=AgentKind.BUDGET)
        self._reject(record, built, tally)

    # ---- build workers -------------------------------------------------------------------------

    def _build(
        self,
        spec: planner.AgentSpec,
        kept: str | None,
        upstream: list[str],
        effort: str,
        task_text: str,
    ) -> _Built:
        """Worker: take the library's copy, or write the agent; then save the scratch copy.

        The agent's process is started first, so its start-up overlaps the writing of its code;
        one that waits for no other agent gets its input here too, and starts work at once.
        """
        warm = self._pool.take(spec.name) if self._ahead else None
        try:
            with llm.while_waiting(self._top_up):
                built = self._write(spec, kept, upstream, effort)
        except BaseException:
            if warm is not None:
                warm.discard()
            raise
        if built.path is not None and not self._run.stopped.is_set():
            built.warm = warm
            if warm is not None:
                self._arm(warm, spec, built.path, effort)
                # No process starts ahead under a budget, so none given its input is skipped.
                if not upstream and self._take_slot(spec.name):
                    warm.give_input(task_text, {})
        elif warm is not None:
            warm.discard()
        return built

    def _arm(
        self, warm: executor.AgentProcess, spec: planner.AgentSpec, path: Path, effort: str
    ) -> None:
        """The agent's grant, then its code: it loads while its upstream agents still run."""
        if warm.door is not None:
            warm.door.name = spec.name
            warm.door.update_grant(
                effort=effort,
                share_tokens=self._share_for(spec),
                web_allowed=spec.web,
                max_searches=self._searches_for(spec),
            )
        warm.give_code(path)

    def _take_slot(self, name: str) -> bool:
        """Whether `name` may be at work now (it is counted if so); one its build worker
        started already is. A worker that may not start it leaves it to the scheduler."""
        with self._slots_lock:
            if name in self._running:
                return True
            if len(self._running) >= self._run.settings.max_parallel_agents:
                return False
            self._running.add(name)
            return True

    def _free_slot(self, name: str) -> None:
        with self._slots_lock:
            self._running.discard(name)

    def _top_up(self) -> None:
        """A generation request is out: start the processes the rest of the round will take.

        Once per round, by whichever build gets there first: the model's time is idle time.
        """
        with self._top_up_lock:
            more, self._more_needed = self._more_needed, 0
        if more > 0:
            self._pool.start_standby(more)

    def _write(
        self, spec: planner.AgentSpec, kept: str | None, upstream: list[str], effort: str
    ) -> _Built:
        """The agent's source, from the library or the generator, saved as a scratch copy."""
        run = self._run
        source = kept
        run.events.agent_building(spec.name, source is not None)
        if spec.dependencies:
            report = agentvenv.install_dependencies(spec.dependencies, run.settings)
            run.events.packages(spec.name, report.installed, report.refused, report.failed)
            if report.refused:
                refused = ", ".join(report.refused)
                run.warn(f"{spec.name}: not a vetted package, so not installed: {refused}")
            if report.detail:
                run.warn(f"{spec.name}: packages not installed: {_one_line(report.detail)}")
        if spec.pins:
            pins = ", ".join(spec.pins)
            run.warn(f"{spec.name}: {pins}: version pins are not honoured; the vetted one is used")
        if source is None:
            try:
                source = generator.generate_agent_code(
                    spec,
                    upstream,
                    usage=run.usage.phase(Spend.GENERATE).for_agent(spec.name),
                    effort=effort,
                    settings=run.settings,
                    attachments=run.attached.describe(),
                )
            except generator.GenerationError as error:
                if error.cause is not None:
                    self.unreadable[spec.name] = error.cause
                return _Built(None, reasons=error.reasons)
            except ledger.BudgetExhaustedError as error:
                run.note_budget(error.needed_usd)
                return _Built(
                    None,
                    reasons=["the budget ran out before it was written"],
                    kind=AgentKind.BUDGET,
                )
            run.events.agent_generated(spec.name)
            built = _Built(None, source)
        else:
            built = _Built(None, source, reused=True)
        if not run.stopped.is_set():
            built.path = executor.save_agent_file(
                spec.name, source, self.space.folder, settings=run.settings
            )
        return built

    # ---- run workers ---------------------------------------------------------------------------

    def _run_with_repair(
        self,
        spec: planner.AgentSpec,
        path: Path,
        task_text: str,
        upstream: dict[str, str],
        upstream_names: list[str],
        effort: str,
    ) -> _Ran:
        """Worker: run the agent; a failure is rewritten from its own source and stderr.

        A transient API failure reruns the same code (TRANSIENT_RERUNS times, with backoff);
        a crash is rewritten (AGENT_REPAIR_ATTEMPTS times); _NOT_REPAIRABLE kinds are final.
        """
        run = self._run
        warm = self._pool.claim(spec.name)
        original = source = path.read_text(encoding="utf-8")
        seconds = 0.0
        attempt = 0
        spent = AgentUsage()
        reruns = 0
        while True:
            attempt += 1
            run.events.agent_running(spec.name, attempt)
            result, door = self._execute(spec, path, task_text, upstream, effort, warm)
            warm = None
            seconds += result.seconds
            transient = False
            if door is not None:
                door.wait_ended(DOOR_SETTLE_SECONDS)  # its last reply is billed before we read
                billed = door.usage
                spent.merge(billed)
                if not result.ok and billed.refusals.get("budget"):
                    result.kind = AgentKind.BUDGET
                    run.note_budget(self._broker.budget_needed)
                transient = not result.ok and bool(TRANSIENT_FAILURES & set(billed.failures))
            if transient and reruns < TRANSIENT_RERUNS and result.kind == AgentKind.CRASH:
                # A rewrite cannot fix the network: run the same code again, after a pause.
                if run.stopped.wait(RERUN_BACKOFF_SECONDS * 2**reruns) or run.budget_hit.is_set():
                    break
                reruns += 1
                continue
            out_of_tries = attempt - 1 - reruns >= run.settings.agent_repair_attempts
            if result.ok or out_of_tries or result.kind in _NOT_REPAIRABLE:
                break
            if run.stopped.is_set() or run.budget_hit.is_set():
                break
            run.events.agent_repairing(spec.name, attempt, result.error)
            try:
                source = generator.generate_agent_code(
                    spec,
                    upstream_names,
                    repair=generator.Repair(source, result.error),
                    usage=run.usage.phase(Spend.GENERATE).for_agent(spec.name),
                    effort=effort,
                    settings=run.settings,
                    attachments=run.attached.describe(),
                )
            except generator.GenerationError:
                break
            except ledger.BudgetExhaustedError as error:
                run.note_budget(error.needed_usd)
                break
            if run.stopped.is_set():
                break
            path = executor.save_agent_file(
                spec.name, source, self.space.folder, settings=run.settings
            )
        return _Ran(result, attempt, seconds, source, source != original, spent)

    def _execute(
        self,
        spec: planner.AgentSpec,
        path: Path,
        task_text: str,
        upstream: dict[str, str],
        effort: str,
        warm: executor.AgentProcess | None,
    ) -> tuple[executor.AgentResult, Channel | None]:
        """One attempt: the warm process if there is one, else a fresh one with its own door."""
        if warm is not None:  # armed with its grant and code when it was built
            return warm.run(task_text, upstream, path=path), warm.door
        door = self._open_door(spec.name, effort, spec)
        settings, attached = self._run.settings, self._run.attached
        result = executor.execute_agent(
            path,
            task_text,
            upstream,
            timeout=settings.agent_timeout_seconds,
            model=settings.model,
            door=door,
            space=self.space,
            inputs=attached.inputs(),
            read_only=attached.mounts,
            identities=attached.identities(),
            settings=settings,
        )
        return result, door

    # ---- the door ------------------------------------------------------------------------------

    def _open_door(
        self, name: str, effort: str | None = None, spec: planner.AgentSpec | None = None
    ) -> Channel:
        """A broker channel for one agent process: its only way to the model, metered.

        A process started ahead of its plan gets no web until it knows which agent it is.
        """
        return self._broker.open_channel(
            name,
            model=self._run.settings.model,
            effort=effort,
            share_tokens=self._share_for(spec),
            web_allowed=spec is not None and spec.web,
            max_searches=self._searches_for(spec),
            files=self._run.attached.inputs(),
            file_ids=self._run.attached.identities(),
        )

    def _share_for(self, spec: planner.AgentSpec | None) -> int | None:
        """The tokens this agent's calls may use together under a budget (None: no share)."""
        if self._share_tokens is None or not self._searches_for(spec):
            return self._share_tokens
        return self._share_tokens * WEB_SHARE_FACTOR

    def _searches_for(self, spec: planner.AgentSpec | None) -> int:
        """The web searches this agent may make: MAX_SEARCHES_PER_AGENT if it is marked web."""
        settings = self._run.settings
        web = spec is not None and spec.web and settings.web
        return settings.max_searches_per_agent if web else 0


def _one_line(error: str) -> str:
    """The most telling line of an error: the last non-empty one (a traceback's exception)."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "failed")[:300]
