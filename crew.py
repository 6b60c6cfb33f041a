"""crew.py — the crew of one run: writes, starts, runs and repairs a round's agents.

The flow (orchestrator) decides *what* happens: which plan, when to merge, judge, revise. The
crew is *how* a round's agents come to exist and run, and it keeps the machinery for that out of
the flow: the broker (each agent's only door to the model), the agent pool (told what the agents
need, it decides their processes: agentpool), the run's agent folder, the scheduler, and the rerun
and repair policy.

Concurrency model: generation and execution run on two thread pools of MAX_PARALLEL_AGENTS each,
so building later agents overlaps with running earlier ones; an agent starts the moment its own
code exists and its upstream agents have finished. Every result is absorbed on the calling
thread, so the crew's state (and the round's) is mutated from exactly one place.

The run's state the flow also touches (settings, usage, events, attachments, artifacts, the stop
and budget flags, warnings) comes in as a `RunState`, so this module never imports the flow.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Collection, Iterator
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
    planner,
    signals,
    taskgraph,
)
from agentgod.agentpool import AgentPool, Planned
from agentgod.artifacts import ArtifactStore
from agentgod.attachments import Attached
from agentgod.broker import AgentUsage, Broker, Channel
from agentgod.events import TaskEvents
from agentgod.kinds import AgentKind, BudgetOwner, Phase, Spend
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

    def note_budget(self, needed_usd: float, owners: Collection[BudgetOwner]) -> None:
        """The budget refused a call (needing up to `needed_usd`; `owners`: whose budgets, the
        run's own or its batch's): launch nothing more."""

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
        self._share_tokens = AGENT_SHARE_TOKENS if usage.budget_usd is not None else None
        """Under a budget, what one agent's calls may use together (the broker enforces it)."""
        for ref in settings.models_in_use():  # what the agents' calls are billed at
            usage.set_price(ref.model, settings.price_of(ref.model))
        self._broker = Broker(
            self._forward,
            usage.phase(Spend.AGENTS),
            price=settings.price_of,
            effort_for_model=settings.effort_for,
            profile=settings.profile,
            budget_error=ledger.BudgetExhaustedError,
            web=settings.web,
            known_urls=attached.texts(),
            artifacts=run.artifacts,
        )
        self._pool = AgentPool(
            settings,
            open_door=self._open_door,
            preload=generator.RUNTIME_MODULES,
            space=space,
            inputs=attached.inputs(),
            read_only=attached.mounts,
            identities=attached.identities(),
            budgeted=usage.budget_usd is not None,
        )
        """The run's agent processes: when they start, how many live, and which agent gets
        each (agentpool decides; the crew says what its agents need)."""

    def start_ahead(self) -> None:
        """Before the plan: the pool may start processes for the agents it will hold."""
        self._pool.expect_plan()

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
        self._pool.begin_round(
            [Planned(a.name, self._grant(a, effort), kept[a.name] is not None) for a in fresh]
        )
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
                    # Under a budget the pool starts nothing ahead, so no agent skipped here
                    # was given its input by its builder.
                    for spec in schedule.unstarted():
                        self._skip(records[spec.name], tally)
                        schedule.finish(spec.name)
                    if schedule.done():
                        break
                for spec in schedule.ready():
                    if not self._pool.take_slot(spec.name):
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
                        self._pool.free_slot(spec.name)
                        self._absorb(records[spec.name], outcome, outputs, tally)
                        schedule.finish(spec.name)
            for future in work:  # still being written (or run) when the budget ran out
                spec, outcome = work[future], future.result()
                if isinstance(outcome, _Built):
                    self._absorb_built(records[spec.name], outcome, schedule, None)
                else:  # paid for: its output counts like any other's
                    self._pool.free_slot(spec.name)
                    self._absorb(records[spec.name], outcome, outputs, tally)
        self._pool.end_round()
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
        self._pool.end_round()

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
            return
        self._pool.forget(record.name)  # it will never run: whatever it holds goes
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

        The pool is told first, so the agent's process can start while its code is written;
        one that waits for no other agent is handed its input with its code, and starts work
        at once (the pool decides whether it may).
        """
        with self._pool.writing(spec.name):
            built = self._write(spec, kept, upstream, effort)
        if built.path is not None and not self._run.stopped.is_set():
            self._pool.ready(spec.name, built.path, None if upstream else (task_text, {}))
        return built

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
                run.note_budget(error.needed_usd, {error.owner})
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
        original = source = path.read_text(encoding="utf-8")
        seconds = 0.0
        attempt = 0
        spent = AgentUsage()
        reruns = 0
        while True:
            attempt += 1
            run.events.agent_running(spec.name, attempt)
            result, door = self._pool.run(spec.name, path, task_text, upstream)
            seconds += result.seconds
            transient = False
            if door is not None:
                door.wait_ended(DOOR_SETTLE_SECONDS)  # its last reply is billed before we read
                billed = door.usage
                spent.merge(billed)
                if not result.ok and billed.refusals.get("budget"):
                    result.kind = AgentKind.BUDGET
                    run.note_budget(self._broker.budget_needed, self._broker.budget_owners())
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
                run.note_budget(error.needed_usd, {error.owner})
                break
            if run.stopped.is_set():
                break
            path = executor.save_agent_file(
                spec.name, source, self.space.folder, settings=run.settings
            )
        return _Ran(result, attempt, seconds, source, source != original, spent)

    # ---- the door ------------------------------------------------------------------------------

    def _forward(self, request: dict[str, Any]) -> dict[str, Any]:
        """The broker's road to the model (llm.forward), telling the pool the moment an agent's
        request is out: that agent's start is over, and the model's time is idle CPU."""
        # Under a budget a call is held at its model's price: no dearer fallback then.
        dearer = self._run.usage.budget_usd is None
        with llm.while_waiting(self._pool.calling):
            return llm.forward(request, settings=self._run.settings, dearer=dearer)

    def _open_door(self, name: str) -> Channel:
        """A broker channel for one agent process: its only way to the model, metered.

        It allows what any agent of the run may: the pool widens it to its agent's `_grant`
        when the process becomes that agent's, so a process started ahead of its plan gets no
        effort and no web until it knows which agent it is.
        """
        return self._broker.open_channel(
            name,
            model=self._run.settings.model,
            share_tokens=self._share_for(None),
            files=self._run.attached.inputs(),
            file_ids=self._run.attached.identities(),
        )

    def _grant(self, spec: planner.AgentSpec, effort: str) -> dict[str, Any]:
        """What `spec`'s door allows (Channel.update_grant's fields): the round's effort, its
        share of a budget, the web if it is marked for it."""
        return {
            "effort": effort,
            "share_tokens": self._share_for(spec),
            "web_allowed": spec.web,
            "max_searches": self._searches_for(spec),
        }

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
