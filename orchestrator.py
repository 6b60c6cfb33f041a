"""orchestrator.py — the permanent main agent. It never answers the task; it engineers agents.

`handle_task` reads like the flow diagram: plan → build and run (pipelined: an agent starts the
moment its own code exists and its upstream agents have finished) → merge → council → judge →
revise → library bookkeeping → archive. It owns retry policy (`_run_with_repair`) and scheduling,
reports every notable moment to a TaskEvents object, and never prints.

Concurrency model: generation and execution run on two thread pools of MAX_PARALLEL_AGENTS each,
so building later agents overlaps with running earlier ones; every result is absorbed on the
calling thread, so the run's state is mutated from exactly one place.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import artifacts
import config
import council
import eventlog
import executor
import generator
import judgment
import ledger
import library
import llm
import merger
import models
import planner
import problems
import runlog
import signals
import taskgraph
from agentpool import AgentPool
from attachments import Attached
from broker import AgentUsage, Broker, Channel
from conversation import Conversation
from events import NullEvents, SerialisedEvents, TaskEvents
from kinds import AgentKind, Phase, RunStatus, Spend
from results import AgentRun, AllAgentsFailedError, Failure, PendingAgent, TaskResult
from scratch import RunSpace

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


@dataclass(frozen=True)
class Retry:
    """What a retried run hands the new one: its plan, and the outputs already paid for."""

    run_id: str
    """The run retried; the new run's record links to it."""
    plan: planner.Plan
    outputs: dict[str, str]
    """By agent name: these agents are neither written nor run again."""


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


@dataclass
class _Round:
    """One plan-build-run-merge pass over a (possibly revised) task."""

    complexity: str
    answer: str
    agents: list[AgentRun]
    failures: list[Failure]
    waves: list[list[str]]
    specs: list[planner.AgentSpec] = field(default_factory=list)
    """The plan's agents in build order."""
    outputs: dict[str, str] = field(default_factory=dict)
    """What the agents delivered, kept so a merge that fails cannot lose it (and for revision)."""
    effort: str = ""
    follow_up: bool = False
    """The planner judged the task a follow-up: agents and the merge see the conversation."""
    reasoning: str = ""
    """The planner's reasons for this team."""


class _Schedule:
    """Which agents of a round have code, have started and are done; who may start next."""

    def __init__(self, agents: list[planner.AgentSpec]) -> None:
        self.agents = agents
        self.code: dict[str, Path] = {}
        """Each agent's saved file, once it exists."""
        self._started: set[str] = set()
        self._finished: set[str] = set()

    def ready(self) -> list[planner.AgentSpec]:
        """Not started, its code exists, and every agent it depends on is done."""
        return [
            a
            for a in self.agents
            if a.name in self.code
            and a.name not in self._started
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


class _Conductor:
    """The state of one handle_task call; each method is one box of the flow diagram."""

    def __init__(
        self,
        task: str,
        events: TaskEvents | None,
        usage: ledger.Usage | None,
        space: RunSpace,
        attached: Attached | None = None,
        conversation: Conversation | None = None,
        retry: Retry | None = None,
    ) -> None:
        self.task = task
        self.retry = retry
        """The earlier run this one retries: its plan, and the outputs its agents delivered."""
        self.conversation = conversation
        """The session's earlier tasks and answers, when this task may follow up on them."""
        self.context = conversation.context() if conversation else ""
        self.space = space
        """This run's own agent folder and scratch dirs; no other run sees them."""
        self.settings = config.settings()
        self.attached = attached or Attached(task, (), ())
        """The files the user attached: every agent may read them, none may write them."""
        self.artifacts = artifacts.ArtifactStore(
            self.settings.runs_dir / space.id / "artifacts", self.settings.artifacts_max_bytes
        )
        """The files agents hand back; the broker writes them, on an agent's behalf."""
        self.usage = usage or ledger.Usage()
        self.log = eventlog.EventLog(eventlog.run_log(self.settings.runs_dir, space.id))
        """Every moment of the run as a JSON line, for `agentgod show RUN --replay`."""
        # The log first: a moment is on disk before the display draws it.
        self.events = SerialisedEvents(eventlog.Tee(self.log, events or NullEvents()))
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC)
        self.stopped = threading.Event()
        self.rounds: list[_Round] = []
        self.paths: dict[str, Path] = {}
        self.new_sources: dict[str, tuple[str, str]] = {}
        self.library_outcomes: dict[str, bool] = {}
        self.evolved: dict[str, tuple[str, str]] = {}
        self.layers: set[str] = set()
        self.council_improved = False
        self.revisions = 0
        """Times the judge sent the answer back (each a re-merge, and a new round if need be)."""
        if self.usage.budget_usd is None:
            self.usage.budget_usd = self.settings.budget_usd
        self.budget_hit = threading.Event()
        self.budget_needed = 0.0
        """The largest worst case of a call the budget refused: what the next step needed."""
        self.warnings: list[str] = []
        self.warnings_lock = threading.Lock()
        self.unreadable: dict[str, BaseException] = {}
        """Agents whose code could not be written because the API's reply could not be read."""
        self.ahead = self.usage.budget_usd is None
        """Start agents' processes ahead of need (never under a budget: see agentpool)."""
        self.share_tokens = AGENT_SHARE_TOKENS if self.usage.budget_usd is not None else None
        """Under a budget, what one agent's calls may use together (the broker enforces it)."""
        self.broker = Broker(
            llm.forward,
            self.usage.phase(Spend.AGENTS),
            price=lambda model: models.price_of(model)[0],
            effort_for_model=models.effort_for_model,
            budget_error=ledger.BudgetExhaustedError,
            web=self.settings.web,
            known_urls=self.attached.texts(),
            save_artifact=self.artifacts.save,
        )
        self.pool = AgentPool(
            timeout=self.settings.agent_timeout_seconds,
            model=self.settings.model,
            preload=generator.RUNTIME_MODULES,
            open_door=self.open_door,
            space=space,
            inputs=self.attached.inputs(),
            read_only=self.attached.mounts,
        )

    # ---- the flow ------------------------------------------------------------------------------

    def run(self) -> TaskResult:
        executor.check_confinement()
        answer = self.round(self.task)
        for revision in range(1, self.settings.task_revisions + 1):
            verdict = self.judge(answer)
            if verdict is None or verdict.done:
                break
            self.events.revision_started(revision, verdict.missing)
            self.revisions = revision
            revised = judgment.revision_task(self.task, verdict.missing)
            # Tier one: the outputs already paid for, merged again with the gap in view.
            answer = self.remerge(revised)
            verdict = self.judge(answer)
            if verdict is None or verdict.done:
                break
            # Tier two: a new plan for the gap; agents that already succeeded are not rebuilt.
            try:
                answer = self.round(revised, carried=self.successes())
            except AllAgentsFailedError:
                break  # keep the answer we have rather than lose it to a failed retry
            except ledger.BudgetExhaustedError as error:
                self.note_budget(error.needed_usd)
                break
            except Exception as error:  # the first answer is paid for: a failed retry keeps it
                headline = problems.explain(error).headline
                self.warn(f"the revision failed ({headline}); the answer is the one before it")
                break
        self.bookkeep_library()
        self.log.note("answer", answer)
        if self.log.failed:
            self.warn(f"the run's event log stopped: {self.log.failed}")
        result = self.result(answer)
        result.run_file = self.archive(result)
        result.warnings = list(self.warnings)  # the archive's own, when it could not write
        return result

    def successes(self) -> dict[str, str]:
        """Every output an agent of an earlier round produced, by agent name (latest wins)."""
        return {name: text for done in self.rounds for name, text in done.outputs.items()}

    def remerge(self, task_text: str) -> str:
        """The last round's outputs merged again for the revised task: one call, no agents."""
        last = self.rounds[-1]
        last.answer = self.merge(task_text, last.outputs, last.specs, last, last.effort)
        return last.answer

    def round(self, task_text: str, carried: dict[str, str] | None = None) -> str:
        """Plan, build, run, merge (and the council): one pass over `task_text`.

        `carried` outputs (an earlier round's) stand for the planned agents of the same name:
        those are neither written nor run again.
        """
        if self.ahead:
            # As many as a plan may hold: the planner's thinking time is CPU no one else uses,
            # and every process started now is one not started while earlier agents run.
            self.pool.start_standby(self.settings.max_agents)
        self.events.phase_started(Phase.PLAN)
        phase = time.monotonic()
        if self.retry is not None and not self.rounds:
            # A retry's plan is the one it retries, and what that run's agents delivered stands.
            plan = self.retry.plan
            carried = {**self.retry.outputs, **(carried or {})}
        else:
            plan = planner.plan_agents(
                task_text,
                usage=self.usage.phase(Spend.PLAN),
                library_hint=library.describe_for_planner(),
                effort=self.settings.effort,
                settings=self.settings,
                attachments=self.attached.describe(),
                conversation=self.context,
            )
        if not self.settings.web:  # whatever the planner said: the broker would refuse anyway
            plan.agents = [a.model_copy(update={"web": False}) for a in plan.agents]
        if plan.trimmed:
            self.warn(
                f"the plan held more than MAX_AGENTS={self.settings.max_agents} agents; "
                f"left out: {', '.join(plan.trimmed)}"
            )
        effort = models.effort_for(plan.complexity, self.settings.effort)
        ordered = taskgraph.topological_order(plan.agents)
        waves = [[a.name for a in wave] for wave in taskgraph.waves(ordered)]
        kept = {a.name: self.reusable(a.name) for a in ordered}
        self.events.plan_ready(
            plan.complexity,
            [
                {
                    "name": a.name,
                    "role": a.role,
                    "depends_on": list(a.depends_on),
                    "reused": kept[a.name] is not None or a.name in (carried or {}),
                }
                for a in ordered
            ],
            waves,
        )
        self.events.phase_finished(Phase.PLAN, time.monotonic() - phase)
        this_round = _Round(
            plan.complexity,
            "",
            [],
            [],
            waves,
            ordered,
            {},
            effort,
            follow_up=plan.follow_up,
            reasoning=plan.reasoning,
        )
        self.rounds.append(this_round)
        # A follow-up's agents work from the earlier answers too: they see only the task text.
        agent_task = f"{self.context}\n\n{task_text}" if plan.follow_up else task_text
        outputs = self.build_and_run(ordered, kept, agent_task, effort, this_round, carried or {})
        this_round.outputs = outputs
        if not outputs and self.budget_hit.is_set():
            raise ledger.BudgetExhaustedError(
                self.usage.cost_usd(), self.usage.budget_usd or 0.0, self.budget_needed
            )
        causes = [self.unreadable[f.name] for f in this_round.failures if f.name in self.unreadable]
        if not outputs and causes and len(causes) == len(this_round.failures):
            raise causes[0]  # no agent could even be written: the API's failure, not theirs
        if not outputs:
            raise AllAgentsFailedError(this_round.failures, self.settings.agent_timeout_seconds)
        this_round.answer = self.merge(task_text, outputs, ordered, this_round, effort)
        if self.convenes(plan.complexity):
            this_round.answer = self.convene_council(task_text, this_round.answer, effort)
        return this_round.answer

    def warn(self, text: str) -> None:
        """Something the run survives: shown now, and kept in the run's record."""
        with self.warnings_lock:
            self.warnings.append(text)
        self.events.warn(text)

    def convenes(self, complexity: str) -> bool:
        """The council sits for this grade under COUNCIL, unless the budget is already spent."""
        mode = self.settings.council
        return council.should_convene(complexity, mode) and not self.budget_hit.is_set()

    def note_budget(self, needed_usd: float = 0.0) -> None:
        """The budget stopped model work: say so once, and launch nothing more.

        `needed_usd` is the worst case of the call that could not be made, when one was refused
        here (an agent refused at the broker reports none): it tells the user how much more the
        next step would have taken.
        """
        self.budget_needed = max(self.budget_needed, needed_usd)
        if not self.budget_hit.is_set():
            self.budget_hit.set()
            spent, cap = self.usage.cost_usd(), self.usage.budget_usd or 0.0
            self.events.budget_exhausted(spent, cap)
            needs = f"; the next call needed up to ${needed_usd:.4f}" if needed_usd else ""
            self.warn(f"the budget stopped the run: ${spent:.4f} of ${cap:.4f} spent{needs}")

    # ---- build and run -------------------------------------------------------------------------

    def build_and_run(
        self,
        agents: list[planner.AgentSpec],
        kept: dict[str, str | None],
        task_text: str,
        effort: str,
        this_round: _Round,
        carried: dict[str, str],
    ) -> dict[str, str]:
        """Write and run the agents, each as early as its own code and its upstream allow.

        The scheduler: every agent's build is submitted at once; whenever anything finishes,
        each agent whose code exists and whose dependencies are done is started. Results are
        absorbed here, on the calling thread, so the round's state changes in one place. An
        agent with a `carried` output is done before the round starts.
        """
        closures = {a.name: taskgraph.dependency_closure(agents, a.name) for a in agents}
        schedule = _Schedule(agents)
        outputs = {a.name: carried[a.name] for a in agents if a.name in carried}
        for name in outputs:
            schedule.finish(name)
        fresh = [a for a in agents if a.name not in carried]
        records = {
            a.name: AgentRun(a.name, a.role, reused=False, inputs=list(closures[a.name]))
            for a in fresh
        }
        this_round.agents = list(records.values())
        self.events.phase_started(Phase.BUILD)
        self.events.phase_started(Phase.RUN)
        phase = time.monotonic()
        if not fresh:
            self.events.phase_finished(Phase.BUILD, 0.0)
        with self.worker_pools() as (builders, runners):
            work: dict[Future[Any], planner.AgentSpec] = {
                builders.submit(self.build, a, kept[a.name], closures[a.name], effort): a
                for a in fresh
            }
            building = len(fresh)
            while not schedule.done():
                if self.budget_hit.is_set():
                    for spec in schedule.unstarted():
                        self.skip(records[spec.name], this_round)
                        schedule.finish(spec.name)
                    if schedule.done():
                        break
                for spec in schedule.ready():
                    schedule.start(spec.name)
                    upstream = {k: outputs[k] for k in closures[spec.name] if k in outputs}
                    run = runners.submit(
                        self.run_with_repair,
                        spec,
                        schedule.code[spec.name],
                        task_text,
                        upstream,
                        closures[spec.name],
                        effort,
                    )
                    work[run] = spec
                finished, _ = wait(work, return_when=FIRST_COMPLETED)
                for future in finished:
                    spec, outcome = work.pop(future), future.result()
                    if isinstance(outcome, _Built):
                        self.absorb_built(records[spec.name], outcome, schedule, this_round)
                        building -= 1
                        if not building:
                            self.events.phase_finished(Phase.BUILD, time.monotonic() - phase)
                    else:
                        self.absorb(records[spec.name], outcome, outputs, this_round)
                        schedule.finish(spec.name)
            for future in work:  # still being written when the budget ran out
                self.absorb_built(records[work[future].name], future.result(), schedule, None)
        self.pool.discard_warm()
        self.events.phase_finished(Phase.RUN, time.monotonic() - phase)
        return outputs

    @contextlib.contextmanager
    def worker_pools(self) -> Iterator[tuple[ThreadPoolExecutor, ThreadPoolExecutor]]:
        """One pool writes agents, one runs them; an interrupt or failure stops both at once."""
        width = self.settings.max_parallel_agents
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
            self.stop(*pools)
            raise
        for pool in pools:
            pool.shutdown()

    def absorb_built(
        self, record: AgentRun, built: _Built, schedule: _Schedule, this_round: _Round | None
    ) -> None:
        """Caller's thread: one agent's code exists (or never will); make it runnable.

        `this_round` is None for a build that ended after the round stopped scheduling.
        """
        record.reused = built.reused
        if built.path is not None:
            self.paths[record.name] = built.path
        scheduling = this_round is not None and not schedule.is_finished(record.name)
        if built.path is not None and scheduling:
            schedule.code[record.name] = built.path
            if built.warm is not None:
                self.pool.hold(record.name, built.warm)
            return
        if built.warm is not None:
            built.warm.discard()
        if this_round is not None and scheduling:
            self.reject(record, built, this_round)
            schedule.finish(record.name)

    def reusable(self, name: str) -> str | None:
        """A library agent's source when it is reliable and still passes the guard untouched."""
        if not library.reliable(name):
            return None
        source = library.lookup(name)
        if source is None or generator.check_assembled(source):
            return None
        return source

    def build(
        self, spec: planner.AgentSpec, kept: str | None, upstream: list[str], effort: str
    ) -> _Built:
        """Worker: take the library's copy, or write the agent; then save the scratch copy.

        The agent's process is started first, so its start-up overlaps the writing of its code.
        """
        warm = self.pool.take(spec.name) if self.ahead else None
        try:
            built = self.write(spec, kept, upstream, effort)
        except BaseException:
            if warm is not None:
                warm.discard()
            raise
        if built.path is not None and not self.stopped.is_set():
            built.warm = warm
        elif warm is not None:
            warm.discard()
        return built

    def write(
        self, spec: planner.AgentSpec, kept: str | None, upstream: list[str], effort: str
    ) -> _Built:
        """The agent's source, from the library or the generator, saved as a scratch copy."""
        source = kept
        self.events.agent_building(spec.name, source is not None)
        if spec.dependencies:
            report = executor.install_dependencies(spec.dependencies)
            self.events.packages(spec.name, report.installed, report.refused, report.failed)
            if report.refused:
                refused = ", ".join(report.refused)
                self.warn(f"{spec.name}: not a vetted package, so not installed: {refused}")
            if report.detail:
                self.warn(f"{spec.name}: packages not installed: {_one_line(report.detail)}")
        if spec.pins:
            pins = ", ".join(spec.pins)
            self.warn(f"{spec.name}: {pins}: version pins are not honoured; the vetted one is used")
        if source is None:
            try:
                source = generator.generate_agent_code(
                    spec,
                    upstream,
                    usage=self.usage.phase(Spend.GENERATE),
                    effort=effort,
                    settings=self.settings,
                    attachments=self.attached.describe(),
                )
            except generator.GenerationError as error:
                if error.cause is not None:
                    self.unreadable[spec.name] = error.cause
                return _Built(None, reasons=error.reasons)
            except ledger.BudgetExhaustedError as error:
                self.note_budget(error.needed_usd)
                return _Built(
                    None,
                    reasons=["the budget ran out before it was written"],
                    kind=AgentKind.BUDGET,
                )
            self.events.agent_generated(spec.name)
            built = _Built(None, source)
        else:
            built = _Built(None, source, reused=True)
        if not self.stopped.is_set():
            built.path = executor.save_agent_file(spec.name, source, self.space.folder)
        return built

    def close(self) -> None:
        """The run is over: no process started ahead of need may outlive it, nor any door."""
        self.pool.close()
        self.broker.close(timeout=0)
        self.log.close()

    def run_with_repair(
        self,
        spec: planner.AgentSpec,
        path: Path,
        task_text: str,
        upstream: dict[str, str],
        upstream_names: list[str],
        effort: str,
    ) -> _Ran:
        """Worker: run the agent; a failure is rewritten from its own source and stderr."""
        warm = self.pool.claim(spec.name)
        original = source = path.read_text(encoding="utf-8")
        seconds = 0.0
        attempt = 0
        spent = AgentUsage()
        reruns = 0
        while True:
            attempt += 1
            self.events.agent_running(spec.name, attempt)
            result, door = self.execute(spec, path, task_text, upstream, effort, warm)
            warm = None
            seconds += result.seconds
            transient = False
            if door is not None:
                door.wait_ended(DOOR_SETTLE_SECONDS)  # its last reply is billed before we read
                billed = door.usage
                spent.merge(billed)
                if not result.ok and billed.refusals.get("budget"):
                    result.kind = AgentKind.BUDGET
                    self.note_budget(self.broker.budget_needed)
                transient = not result.ok and bool(TRANSIENT_FAILURES & set(billed.failures))
            if transient and reruns < TRANSIENT_RERUNS and result.kind == AgentKind.CRASH:
                # A rewrite cannot fix the network: run the same code again, after a pause.
                if self.stopped.wait(RERUN_BACKOFF_SECONDS * 2**reruns) or self.budget_hit.is_set():
                    break
                reruns += 1
                continue
            out_of_tries = attempt - 1 - reruns >= self.settings.agent_repair_attempts
            if result.ok or out_of_tries or result.kind in _NOT_REPAIRABLE:
                break
            if self.stopped.is_set() or self.budget_hit.is_set():
                break
            self.events.agent_repairing(spec.name, attempt, result.error)
            try:
                source = generator.generate_agent_code(
                    spec,
                    upstream_names,
                    repair=generator.Repair(source, result.error),
                    usage=self.usage.phase(Spend.GENERATE),
                    effort=effort,
                    settings=self.settings,
                    attachments=self.attached.describe(),
                )
            except generator.GenerationError:
                break
            except ledger.BudgetExhaustedError as error:
                self.note_budget(error.needed_usd)
                break
            if self.stopped.is_set():
                break
            path = executor.save_agent_file(spec.name, source, self.space.folder)
        return _Ran(result, attempt, seconds, source, source != original, spent)

    def execute(
        self,
        spec: planner.AgentSpec,
        path: Path,
        task_text: str,
        upstream: dict[str, str],
        effort: str,
        warm: executor.AgentProcess | None,
    ) -> tuple[executor.AgentResult, Channel | None]:
        """One attempt: the warm process if there is one, else a fresh one with its own door."""
        if warm is not None:
            if warm.door is not None:
                warm.door.name = spec.name
                warm.door.update_grant(
                    effort=effort,
                    share_tokens=self.share_for(spec),
                    web_allowed=spec.web,
                    max_searches=self.searches_for(spec),
                )
            return warm.run(task_text, upstream, path=path), warm.door
        door = self.open_door(spec.name, effort, spec)
        result = executor.execute_agent(
            path,
            task_text,
            upstream,
            timeout=self.settings.agent_timeout_seconds,
            model=self.settings.model,
            door=door,
            space=self.space,
            inputs=self.attached.inputs(),
            read_only=self.attached.mounts,
        )
        return result, door

    def open_door(
        self, name: str, effort: str | None = None, spec: planner.AgentSpec | None = None
    ) -> Channel:
        """A broker channel for one agent process: its only way to the model, metered.

        A process started ahead of its plan gets no web until it knows which agent it is.
        """
        return self.broker.open_channel(
            name,
            model=self.settings.model,
            effort=effort,
            share_tokens=self.share_for(spec),
            web_allowed=spec is not None and spec.web,
            max_searches=self.searches_for(spec),
            files=self.attached.inputs(),
        )

    def share_for(self, spec: planner.AgentSpec | None) -> int | None:
        """The tokens this agent's calls may use together under a budget (None: no share)."""
        if self.share_tokens is None or not self.searches_for(spec):
            return self.share_tokens
        return self.share_tokens * WEB_SHARE_FACTOR

    def searches_for(self, spec: planner.AgentSpec | None) -> int:
        """The web searches this agent may make: MAX_SEARCHES_PER_AGENT if it is marked web."""
        web = spec is not None and spec.web and self.settings.web
        return self.settings.max_searches_per_agent if web else 0

    def absorb(
        self, record: AgentRun, ran: _Ran, outputs: dict[str, str], this_round: _Round
    ) -> None:
        """Caller's thread: fold one finished agent into the round."""
        result = ran.result
        self.layers.update(result.layers)
        record.ok, record.kind, record.attempts, record.seconds = (
            result.ok,
            result.kind,
            ran.attempts,
            ran.seconds,
        )
        record.usage.merge(ran.usage)
        record.source = ran.source
        if result.ok:
            record.output = result.output
            outputs[record.name] = result.output
        else:
            record.error = result.error
            this_round.failures.append(Failure(record.name, _one_line(result.error), result.kind))
        if record.reused:
            if ran.repaired and result.ok:
                self.evolved[record.name] = (record.role, ran.source)
            else:
                self.library_outcomes[record.name] = result.ok
        elif result.ok:
            self.new_sources[record.name] = (record.role, ran.source)
        self.events.agent_finished(
            record.name, result.ok, ran.seconds, result.kind, record.error, ran.attempts
        )

    def reject(self, record: AgentRun, built: _Built, this_round: _Round) -> None:
        record.kind = built.kind
        record.error = "; ".join(built.reasons)
        this_round.failures.append(Failure(record.name, _one_line(record.error), built.kind))
        if built.kind == AgentKind.REJECTED:
            self.events.agent_rejected(record.name, built.reasons)
        self.events.agent_finished(record.name, False, 0.0, built.kind, record.error, 0)

    def skip(self, record: AgentRun, this_round: _Round) -> None:
        """The budget is spent: an agent that has not started never will."""
        built = _Built(None, reasons=["skipped: the budget ran out"], kind=AgentKind.BUDGET)
        self.reject(record, built, this_round)

    def stop(self, *pools: ThreadPoolExecutor) -> None:
        """Interrupt or failure: kill agent processes and stop scheduling new work."""
        self.stopped.set()
        executor.stop_all()
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        self.pool.discard_warm()

    # ---- after the agents ----------------------------------------------------------------------

    def merge(
        self,
        task_text: str,
        outputs: dict[str, str],
        agents: list[planner.AgentSpec],
        this_round: _Round,
        effort: str,
    ) -> str:
        self.events.phase_started(Phase.MERGE)
        phase = time.monotonic()
        self.events.merge_started(len(outputs))
        ordered = {a.name: outputs[a.name] for a in agents if a.name in outputs}
        try:
            merged = merger.merge_outputs(
                task_text,
                ordered,
                roles={a.name: a.role for a in agents},
                failed=[f.name for f in this_round.failures],
                usage=self.usage.phase(Spend.MERGE),
                effort=effort,
                settings=self.settings,
                artifacts={item.name: item.agent for item in self.artifacts.list()},
                conversation=self.context if this_round.follow_up else "",
            )
        except ledger.BudgetExhaustedError as error:
            self.note_budget(error.needed_usd)
            merged = merger.Merged(merger.fallback_answer(ordered))  # the agents' work, unmerged
        finally:
            self.events.phase_finished(Phase.MERGE, time.monotonic() - phase)
        for warning in merged.warnings:
            self.warn(warning)
        return merged.answer

    def convene_council(self, task_text: str, answer: str, effort: str) -> str:
        """The adversarial review; if it cannot be had, the answer stands as merged."""
        self.events.phase_started(Phase.COUNCIL)
        phase = time.monotonic()
        self.events.council_started()
        try:
            verdict = council.review(
                task_text,
                answer,
                usage=self.usage.phase(Spend.COUNCIL),
                effort=effort,
                settings=self.settings,
            )
        except ledger.BudgetExhaustedError as error:
            self.note_budget(error.needed_usd)
            verdict = council.CouncilVerdict(answer, improved=False)
        except Exception as error:  # the answer is paid for; a failed review must not lose it
            headline = problems.explain(error).headline
            self.warn(f"the council could not review the answer ({headline}); it stands as merged")
            verdict = council.CouncilVerdict(answer, improved=False)
        for warning in verdict.warnings:
            self.warn(warning)
        self.council_improved = self.council_improved or verdict.improved
        self.events.council_finished(verdict.weaknesses, verdict.improved)
        self.events.phase_finished(Phase.COUNCIL, time.monotonic() - phase)
        return verdict.answer

    def judge(self, answer: str) -> judgment.Verdict | None:
        """Always against the user's own wording, never against a revised task.

        None when no verdict can be had — the budget leaves no room, or the judge's call failed
        — and the answer then stands: it is already paid for.
        """
        if self.budget_hit.is_set():
            return None
        self.events.phase_started(Phase.JUDGE)
        phase = time.monotonic()
        effort = models.effort_for(self.rounds[-1].complexity, self.settings.effort)
        try:
            verdict = judgment.judge(
                self.task,
                answer,
                usage=self.usage.phase(Spend.JUDGE),
                effort=effort,
                settings=self.settings,
            )
        except ledger.BudgetExhaustedError as error:
            self.note_budget(error.needed_usd)
            return None
        except Exception as error:
            headline = problems.explain(error).headline
            self.warn(f"the judge could not rule ({headline}); the answer is delivered unjudged")
            return None
        finally:
            self.events.phase_finished(Phase.JUDGE, time.monotonic() - phase)
        self.events.judged(verdict.done, verdict.missing)
        return verdict

    def bookkeep_library(self) -> None:
        """Wins and losses for reused agents; a repaired kept agent evolves without asking.

        The answer is paid for by now: a library that cannot be written is a warning, never the
        end of the run.
        """
        try:
            for name, won in self.library_outcomes.items():
                library.record_outcome(name, won)
            for name, (role, source) in self.evolved.items():
                library.remember(name, role, source, evolved=True)
        except Exception as error:
            self.warn(f"the library could not be updated: {problems.explain(error).technical}")

    def result(self, answer: str) -> TaskResult:
        last = self.rounds[-1]
        agents = [a for r in self.rounds for a in r.agents]
        return TaskResult(
            task=self.task,
            answer=answer,
            complexity=last.complexity,
            agents=agents,
            failures=[f for r in self.rounds for f in r.failures],
            revisions=self.revisions,
            council_improved=self.council_improved,
            pending=[
                PendingAgent(name, role, source)
                for name, (role, source) in self.new_sources.items()
            ],
            agent_paths=sorted(set(self.paths.values())),
            usage=self.usage,
            duration_seconds=time.monotonic() - self.started,
            run_file=None,
            waves=last.waves,
            sandbox=sorted(self.layers),
            budget_usd=self.usage.budget_usd,
            budget_exhausted=self.budget_hit.is_set(),
            warnings=list(self.warnings),
            artifacts=self.artifacts.list(),
            run_id=self.space.id,
            conversation=self.conversation.id if self.conversation else None,
            retry_of=self.retry.run_id if self.retry else None,
            carried=sorted(self.retry.outputs) if self.retry else [],
        )

    # ---- archive -------------------------------------------------------------------------------

    def archive(self, result: TaskResult | None, error: BaseException | None = None) -> Path | None:
        """Write the run to runs/ (success or failure); never raises."""
        self.events.phase_started(Phase.ARCHIVE)
        last = self.rounds[-1] if self.rounds else None
        agents = [a for r in self.rounds for a in r.agents]
        record = runlog.RunRecord(
            task=self.task,
            ok=result is not None,
            answer=result.answer if result else "",
            error=problems.explain(error).headline if error else "",
            complexity=last.complexity if last else None,
            waves=last.waves if last else [],
            agents=[
                runlog.AgentRecord(
                    a.name,
                    a.role,
                    a.reused,
                    a.ok,
                    a.attempts,
                    a.seconds,
                    a.kind,
                    a.error,
                    a.usage.usd,
                    source=a.source,
                    inputs=list(a.inputs),
                    output=a.output,
                    usage=a.reply()["usage"],
                )
                for a in agents
            ],
            failures=[(f.name, f.reason) for r in self.rounds for f in r.failures],
            revisions=self.revisions,
            council_improved=self.council_improved,
            cost=self.usage.cost_summary(),
            duration_seconds=time.monotonic() - self.started,
            started_at=self.started_at,
            sandbox=sorted(self.layers),
            budget_exhausted=self.budget_hit.is_set(),
            warnings=list(self.warnings),
            phases=self.usage.phases(),
            run_id=self.space.id,
            status=_status(result, error),
            conversation_id=self.conversation.id if self.conversation else None,
            retry_of=self.retry.run_id if self.retry else None,
            model=self.settings.model,
            effort=last.effort if last else None,
            reasoning=last.reasoning if last else "",
            plan=[spec.model_dump() for spec in last.specs] if last else [],
            calls=self.usage.call_log(),
            outputs=last.outputs if last and result is None else {},
            attachments=[item.reply() for item in self.attached.files],
            artifacts=[item.reply() for item in self.artifacts.list()],
        )
        path = runlog.archive(record, warn=self.warn)
        self.events.archived(str(path) if path else None)
        self.events.phase_finished(Phase.ARCHIVE, 0.0)
        return path


def _status(result: TaskResult | None, error: BaseException | None) -> RunStatus:
    """How the run ended, for its record."""
    if result is not None:
        return RunStatus.OK
    if isinstance(error, KeyboardInterrupt):
        return RunStatus.INTERRUPTED
    if isinstance(error, ledger.BudgetExhaustedError):
        return RunStatus.BUDGET
    return RunStatus.FAILED


def _one_line(error: str) -> str:
    """The most telling line of an error: the last non-empty one (a traceback's exception)."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "failed")[:300]


def handle_task(
    task: str,
    *,
    events: TaskEvents | None = None,
    usage: ledger.Usage | None = None,
    written: list[Path] | None = None,
    space: RunSpace | None = None,
    attached: Attached | None = None,
    conversation: Conversation | None = None,
    retry: Retry | None = None,
) -> TaskResult:
    """Run one task headless and return its TaskResult.

    `attached` are the files the user attached (attachments.gather): read-only for every agent.
    `conversation` holds the session's earlier turns: the planner decides whether the task
    follows up on them, and then the agents and the merge see them too. `retry` reruns an
    earlier run: no plan call, and only its agents that delivered nothing are built and run.

    Raises on planner or code-generation failures (bad key, network, an invalid plan) and when
    every agent failed; a failed run is still archived so `history` and `stats` see it. So is an
    interrupted one (Ctrl-C, SIGTERM, SIGHUP: a KeyboardInterrupt), with what it had done and
    spent, and a warning naming the signal. When it raises, `written` (if given) receives the
    scratch files written so far, for cleanup.

    `space` is the run's own scratch; the caller closes it (after asking what to keep). Without
    one, the run makes its own and removes it before returning.
    """
    own = space is None
    space = space or RunSpace()
    conductor = _Conductor(task, events, usage, space, attached, conversation, retry)
    try:
        return conductor.run()
    except BaseException as error:
        conductor.stopped.set()
        executor.stop_all()
        if written is not None:
            written.extend(sorted(set(conductor.paths.values())))
        if isinstance(error, KeyboardInterrupt):
            _archive_interrupted(conductor, error)
        else:
            conductor.bookkeep_library()
            conductor.archive(None, error)
        raise
    finally:
        conductor.close()
        if own:
            space.close()


def _archive_interrupted(conductor: _Conductor, error: KeyboardInterrupt) -> None:
    """Keep the record of a stopped run: what it had done and spent is paid for.

    The library is left alone: a run cut short is no verdict on its agents. A renderer that
    fails here (the terminal that sent SIGHUP is gone) must not cost the record.
    """
    shown = conductor.events
    conductor.log.note("interrupted", signals.signal_name(error))
    with contextlib.suppress(Exception):
        conductor.warn(f"interrupted by {signals.signal_name(error)} before the run finished")
    conductor.events = SerialisedEvents(conductor.log)  # the log still hears; the display not
    path = conductor.archive(None, error)
    conductor.events = shown
    with contextlib.suppress(Exception):
        shown.archived(str(path) if path else None)
