"""orchestrator.py — the permanent main agent's flow. It never answers; it engineers agents.

One job: decide what happens next in a run, and keep the run's record. `_Conductor.run` reads
like the flow diagram, so a whole run can be followed here in one sitting:

    round:  plan (planner) → build and run (crew.Crew.run_round) → merge → council
    judge → revise: re-merge with the gap in view, judged again; still short → a new round
            that carries every output already paid for
    library bookkeeping → result → archive (runlog; a failed or interrupted run too)

How agents are written, started, run and repaired is the crew's job (crew.py), kept apart so
neither drowns the other in detail. The flow holds the run's state both share (settings, usage,
events, attachments, artifacts, warnings, the stop and budget flags) and hands itself to the
crew as a `crew.RunState`. It reports every notable moment to a TaskEvents object, and never
prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentgod import (
    artifacts,
    config,
    council,
    eventlog,
    executor,
    generator,
    historydb,
    journal,
    judgment,
    ledger,
    library,
    llm,
    merger,
    models,
    planner,
    problems,
    runlog,
    signals,
    taskgraph,
)
from agentgod.attachments import Attached
from agentgod.conversation import Conversation
from agentgod.crew import Crew
from agentgod.events import NullEvents, SerialisedEvents, TaskEvents, answer_stream
from agentgod.kinds import AgentKind, BudgetOwner, Phase, RunStatus, Spend
from agentgod.results import AllAgentsFailedError, PendingAgent, TaskResult
from agentgod.runrecord import AgentRecord, Failure, RunRecord
from agentgod.scratch import RunSpace
from agentgod.text import dollars


class Withdrawn(Exception):
    """The caller took the run back at its gate, before anything was shown, planned or built
    (the input was small talk): the run leaves no record, and its plan is cancelled."""


Gate = Callable[[], "planner.Planning | None"]
"""Called once, on the run's thread, when its first processes are starting and before anything
is shown: None goes on with the plan asked for; a Planning replaces it (a task the person
clarified: its `task` becomes the run's); Withdrawn ends the run without a record."""


@dataclass(frozen=True)
class Retry:
    """What a retried run hands the new one: its plan, and the outputs already paid for."""

    run_id: str
    """The run retried; the new run's record links to it."""
    plan: planner.Plan
    outputs: dict[str, str]
    """By agent name: these agents are neither written nor run again."""


@dataclass
class _Round:
    """One plan-build-run-merge pass over a (possibly revised) task.

    The crew fills in `agents` and `failures` as they end (a `crew.Tally`), so a round cut short
    still has them for the record.
    """

    complexity: str
    answer: str
    agents: list[AgentRecord]
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
    trimmed: list[str] = field(default_factory=list)
    """Agents the plan held beyond MAX_AGENTS, left out."""
    ran: bool = False
    """Its agents are done: `outputs` is what they delivered, so an agent's inputs are only
    those of its upstream agents that delivered (a failed one gave it nothing)."""


class _Conductor:
    """The state of one handle_task call; each method is one box of the flow diagram."""

    def __init__(
        self,
        task: str,
        settings: config.Settings,
        events: TaskEvents | None,
        usage: ledger.Usage | None,
        space: RunSpace,
        attached: Attached | None = None,
        conversation: Conversation | None = None,
        retry: Retry | None = None,
        planning: planner.Planning | None = None,
        gate: Gate | None = None,
        started: float | None = None,
    ) -> None:
        self.task = task
        self.retry = retry
        self.planning = planning
        """The first round's plan, already asked for by the session (planner.Planning)."""
        self.gate = gate
        """The caller's say before anything is shown or built (see Gate)."""
        """The earlier run this one retries: its plan, and the outputs its agents delivered."""
        self.conversation = conversation
        """The session's earlier tasks and answers, when this task may follow up on them."""
        self.context = conversation.context() if conversation else ""
        self.shelf: library.Shelf | None = None
        """The library as this run read it, once, at its first plan."""
        self.space = space
        """This run's scratch: its id names the run's record, event log and artifacts."""
        self.settings = settings
        """The run's snapshot, read once by the caller: nothing in the run reads them again."""
        self.attached = attached or Attached(task, (), ())
        """The files the user attached: every agent may read them, none may write them."""
        self.artifacts = artifacts.ArtifactStore(
            self.settings.runs_dir / space.id / "artifacts", self.settings.artifacts_max_bytes
        )
        """The files agents hand back; the broker writes them, on an agent's behalf."""
        self.usage = usage or ledger.Usage()
        self.log = eventlog.EventLog(eventlog.run_log(self.settings.runs_dir, space.id))
        """Every moment of the run as a JSON line, for `agentgod show RUN --replay`."""
        self.log.note("task", task)  # what a viewer of the run in progress names it by
        # The log first: a moment is in the log's queue before the display draws it.
        self.events = SerialisedEvents(eventlog.Tee(self.log, events or NullEvents()))
        now = time.monotonic()
        self.started = now if started is None else min(started, now)
        """When the person began to wait (the caller's clock: Enter, or the command's launch),
        so the run's duration counts the intake and start-up too."""
        self.started_at = datetime.now(UTC) - timedelta(seconds=now - self.started)
        self.stopped = threading.Event()
        self.rounds: list[_Round] = []
        self.council_improved = False
        self.revisions = 0
        """Times the judge sent the answer back (each a re-merge, and a new round if need be)."""
        if self.usage.budget_usd is None:
            self.usage.budget_usd = self.settings.budget_usd
        self.budget_hit = threading.Event()
        self.budget_needed = 0.0
        """The largest worst case of a call the budget refused: what the next step needed."""
        self.budget_owners: set[BudgetOwner] = set()
        """Whose budgets refused the run's calls (the run's own, a batch's): ledger.stopped_by
        says which stopped it, for its reply (a batch resumes only what its own budget cut)."""
        self.budget_lock = threading.Lock()
        self.warnings: list[str] = []
        self.warnings_lock = threading.Lock()
        self.crew = Crew(self, space)
        """Who writes, starts, runs and repairs the agents, round after round."""
        self.redactions = runlog.Redactions()
        """The record's texts redacted while the model is busy, not after it (see archive)."""
        self.answer: str | None = None
        """The latest answer paid for (merged, refined or revised), judged or not: a run stopped
        before it ends keeps it."""
        self.run_file: Path | None = None
        """The run file once the archive wrote it: archiving again rewrites that one file."""
        self.archiving = False
        """The archive has begun once: a second one replaces what the first wrote."""
        self.journal = journal.RunJournal(self.settings.runs_dir / historydb.DB_NAME)
        """The run in the history from its first moment (see journal.py): once no gate can
        withdraw it any more."""
        self.usage.listen(self.journal.calls)
        self.fallen_back: set[tuple[str, str]] = set()
        """(asked, answered) of each fallback the run has said so about."""
        if self.gate is None:
            self.journal.start(self.head())
            self.usage.listen(self.fell_back)
        self.finished: TaskResult | None = None
        """What the run returns, once it has it (a trace not exported is a warning there too)."""
        self.unmerged = False
        """The budget could not pay for the merge: the answer is the agents' outputs as they are."""
        self.judged: str | None = None
        """The last answer the judge ruled on: a budget stop before it rules leaves it unjudged."""

    # ---- the flow ------------------------------------------------------------------------------

    def run(self) -> TaskResult:
        executor.check_confinement(self.settings)
        answer = self.round(self.task)
        for revision in range(1, self.settings.task_revisions + 1):
            verdict = self.judge(answer)
            if verdict is None or verdict.done:
                break
            self.events.answer_replaced("the judge found a gap, so the answer is being revised")
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
                self.note_budget(error.needed_usd, {error.owner})
                break
            except Exception as error:  # the first answer is paid for: a failed retry keeps it
                headline = problems.explain(error).headline
                self.warn(f"the revision failed ({headline}); the answer is the one before it")
                break
        self.bookkeep_library()
        self.log.note("answer", answer)
        self.log.flush()
        if self.log.failed:
            self.warn(self.log.failed)  # it says what stopped, and where
        self.settle(SETTLE_SECONDS)
        result = self.result(answer)
        result.run_file = self.archive(result)
        result.warnings = list(self.warnings)  # the archive's own, when it could not write
        self.finished = result
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
        self.crew.start_ahead()
        if self.gate is not None and not self.rounds:
            gate, self.gate = self.gate, None
            replanned = gate()  # the processes start meanwhile; nothing is shown before it
            if replanned is not None:
                self.planning = replanned
                self.task = task_text = replanned.task
            self.journal.start(self.head())
            self.usage.listen(self.fell_back)
        self.events.phase_started(Phase.PLAN)
        phase = time.monotonic()
        if self.retry is not None and not self.rounds:
            # A retry's plan is the one it retries, and what that run's agents delivered stands.
            plan = self.retry.plan
            carried = {**self.retry.outputs, **(carried or {})}
        elif self.planning is not None and not self.rounds:
            plan = self.planning.result()  # asked for before the run began: no wait for it here
        else:
            if self.shelf is None:
                self.shelf = library.read(settings=self.settings)
            plan = planner.plan_agents(
                task_text,
                usage=self.usage.phase(Spend.PLAN),
                library_hint=self.shelf.describe_for_planner(task_text),
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
        kept = {a.name: self.crew.reusable(a.name) for a in ordered}
        self.events.plan_ready(
            plan.complexity,
            [
                {
                    "name": a.name,
                    "role": a.role,
                    "depends_on": list(a.depends_on),
                    "reused": kept[a.name] is not None and a.name not in (carried or {}),
                    "carried": a.name in (carried or {}),
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
            trimmed=plan.trimmed,
        )
        self.rounds.append(this_round)
        self.journal.update(self.record(None))  # the plan, in the history before any agent runs
        # A follow-up's agents work from the earlier answers too: they see only the task text.
        agent_task = f"{self.context}\n\n{task_text}" if plan.follow_up else task_text
        outputs = self.crew.run_round(ordered, kept, agent_task, effort, this_round, carried or {})
        this_round.outputs, this_round.ran = outputs, True
        if not outputs and self.budget_hit.is_set():
            raise ledger.BudgetExhaustedError(
                self.usage.cost_usd(),
                self.usage.budget_usd or 0.0,
                self.budget_needed,
                self.budget_owner or BudgetOwner.RUN,
            )
        unreadable = self.crew.unreadable
        causes = [unreadable[f.name] for f in this_round.failures if f.name in unreadable]
        if not outputs and causes and len(causes) == len(this_round.failures):
            raise causes[0]  # no agent could even be written: the API's failure, not theirs
        if not outputs:
            raise AllAgentsFailedError(this_round.failures, self.settings.agent_timeout_seconds)
        # The agents' record is final: it is redacted while the model writes the merge.
        final = [text for a in this_round.agents for text in (a.source, a.output, a.error)]
        with llm.while_waiting(functools.partial(self.redactions.ahead, final)):
            this_round.answer = self.merge(task_text, outputs, ordered, this_round, effort)
        if self.convenes(plan.complexity):
            this_round.answer = self.convene_council(task_text, this_round.answer, effort)
        return this_round.answer

    def fell_back(self, calls: list[ledger.Call]) -> None:
        """Say so, once per pair, when another model answered calls made for the one asked
        (MODEL_FALLBACKS): the run goes on, on the fallback, while the other is set aside."""
        for call in calls:
            pair = (call.asked, call.model)
            with self.warnings_lock:
                new = call.fell_back and pair not in self.fallen_back
                self.fallen_back.add(pair)
            if new:
                why = llm.set_aside(call.asked, self.settings.endpoint_of(call.asked))
                self.warn(
                    f"{call.asked} did not answer{f' ({why})' if why else ''}: {call.model}, a "
                    "fallback, answered instead (and is priced as itself)"
                )

    def warn(self, text: str) -> None:
        """Something the run survives: shown now, and kept in the run's record."""
        with self.warnings_lock:
            self.warnings.append(text)
        self.events.warn(text)

    def convenes(self, complexity: str) -> bool:
        """The council sits for this grade under COUNCIL, unless the budget is already spent."""
        mode = self.settings.council
        return council.should_convene(complexity, mode) and not self.budget_hit.is_set()

    def note_budget(self, needed_usd: float, owners: Collection[BudgetOwner]) -> None:
        """The budget stopped model work: say so once, and launch nothing more.

        `needed_usd` is the worst case of the call that could not be made, when one was refused
        here (an agent refused at the broker reports none): it tells the user how much more the
        next step would have taken. `owners` are whose budgets refused (the run's own, or its
        batch's at the gateway; none named: the run's own).
        """
        with self.budget_lock:
            self.budget_needed = max(self.budget_needed, needed_usd)
            self.budget_owners.update(owners or {BudgetOwner.RUN})
        if not self.budget_hit.is_set():
            self.budget_hit.set()
            spent, cap = self.usage.cost_usd(), self.usage.budget_usd or 0.0
            self.events.budget_exhausted(spent, cap)
            needs = f"; the next call needed up to {dollars(needed_usd)}" if needed_usd else ""
            if self.budget_owner is BudgetOwner.BATCH:
                self.warn(
                    f"the batch's budget stopped the run: its gateway refused the next call "
                    f"({dollars(spent)} spent by this run{needs})"
                )
            else:
                self.warn(
                    f"the budget stopped the run: {dollars(spent)} of {dollars(cap)} spent{needs}"
                )

    @property
    def budget_owner(self) -> BudgetOwner | None:
        """Whose budget stopped the run (ledger.stopped_by); None while none has."""
        with self.budget_lock:
            return ledger.stopped_by(self.budget_owners)

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
                on_text=answer_stream(self.events),
                conversation=self.context if this_round.follow_up else "",
            )
        except ledger.BudgetExhaustedError as error:
            self.note_budget(error.needed_usd, {error.owner})
            merged = merger.Merged(merger.fallback_answer(ordered))  # the agents' work, unmerged
            self.unmerged = True
        finally:
            self.events.phase_finished(Phase.MERGE, time.monotonic() - phase)
        for warning in merged.warnings:
            self.warn(warning)
        self.answer = merged.answer
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
            self.note_budget(error.needed_usd, {error.owner})
            verdict = council.CouncilVerdict(answer, improved=False)
        except Exception as error:  # the answer is paid for; a failed review must not lose it
            headline = problems.explain(error).headline
            self.warn(f"the council could not review the answer ({headline}); it stands as merged")
            verdict = council.CouncilVerdict(answer, improved=False)
        for warning in verdict.warnings:
            self.warn(warning)
        self.council_improved = self.council_improved or verdict.improved
        if verdict.improved:
            self.events.answer_replaced("the council refined the answer")
        self.events.council_finished(verdict.weaknesses, verdict.improved)
        self.events.phase_finished(Phase.COUNCIL, time.monotonic() - phase)
        self.answer = verdict.answer
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
            with llm.while_waiting(functools.partial(self.redactions.ahead, [answer])):
                verdict = judgment.judge(
                    self.task,
                    answer,
                    usage=self.usage.phase(Spend.JUDGE),
                    effort=effort,
                    settings=self.settings,
                )
        except ledger.BudgetExhaustedError as error:
            self.note_budget(error.needed_usd, {error.owner})
            return None
        except Exception as error:
            headline = problems.explain(error).headline
            self.warn(f"the judge could not rule ({headline}); the answer is delivered unjudged")
            return None
        finally:
            self.events.phase_finished(Phase.JUDGE, time.monotonic() - phase)
        self.events.judged(verdict.done, verdict.missing)
        self.judged = answer
        return verdict

    def bookkeep_library(self) -> None:
        """Wins and losses for reused agents; a repaired kept agent evolves without asking.

        The answer is paid for by now: a library that cannot be written is a warning, never the
        end of the run.
        """
        try:
            for name, won in self.crew.library_outcomes.items():
                library.record_outcome(name, won, settings=self.settings)
            for name, (role, source) in self.crew.evolved.items():
                kept = generator.for_library(source)  # the library's copy runs by hand too
                library.remember(name, role, kept, evolved=True, settings=self.settings)
        except Exception as error:
            self.warn(f"the library could not be updated: {problems.explain(error).technical}")

    def head(self) -> RunRecord:
        """The run's row as it starts: what is known, status running."""
        return dataclasses.replace(self.record(None), status=RunStatus.RUNNING)

    def record(self, answer: str | None, error: BaseException | None = None) -> RunRecord:
        """The run's facts as they stand: `answer` is None when it ended without one. A run
        stopped (or failed) after an answer was paid for keeps that answer, unjudged."""
        last = self.rounds[-1] if self.rounds else None
        stopped = answer is not None and self.budget_hit.is_set()
        return RunRecord(
            task=self.task,
            ok=answer is not None and not stopped,
            answer=answer if answer is not None else (self.answer or ""),
            error=problems.explain(error).headline if error else self.budget_cut(answer),
            complexity=last.complexity if last else None,
            waves=last.waves if last else [],
            agents=[_given(a, r) for r in self.rounds for a in r.agents],
            failures=[f for r in self.rounds for f in r.failures],
            revisions=self.revisions,
            council_improved=self.council_improved,
            cost=self.usage.cost_summary(),
            duration_seconds=time.monotonic() - self.started,
            started_at=self.started_at,
            sandbox=sorted(self.crew.layers),
            budget_exhausted=self.budget_hit.is_set(),
            warnings=list(self.warnings),
            phases=self.usage.phases(),
            outputs=last.outputs if last and answer is None else {},
            attachments=[item.reply() for item in self.attached.files],
            artifacts=[item.reply() for item in self.artifacts.list()],
            run_id=self.space.id,
            status=RunStatus.BUDGET if stopped else _status(answer, error),
            conversation_id=self.conversation.id if self.conversation else None,
            retry_of=self.retry.run_id if self.retry else None,
            carried=sorted(self.retry.outputs) if self.retry else [],
            model=self.settings.model,
            effort=last.effort if last else None,
            reasoning=last.reasoning if last else "",
            plan=[spec.model_dump() for spec in last.specs] if last else [],
            trimmed=[name for done in self.rounds for name in done.trimmed],
            calls=self.usage.call_log(),
            budget_usd=self.usage.budget_usd,
        )

    def budget_cut(self, answer: str | None) -> str:
        """What a run the budget stopped left undone, as its record's one-line error; "" for a
        run the budget did not stop. Its answer is partial, and says how."""
        if answer is None or not self.budget_hit.is_set():
            return ""
        agents = [a for r in self.rounds for a in r.agents]
        skipped = sum(a.kind == AgentKind.BUDGET for a in agents)
        cut = [f"{skipped} of {len(agents)} agents had no budget left to run"] if skipped else []
        if self.unmerged:
            cut.append("the answer is the agents' outputs, not merged")
        if self.judged != answer and self.settings.task_revisions:
            cut.append("the answer was not judged")
        spent, cap = self.usage.cost_usd(), self.usage.budget_usd or 0.0
        what = "; ".join(cut) or "the answer is partial"
        if self.budget_owner is BudgetOwner.BATCH:
            return (
                f"The batch's budget stopped the run before it finished ({dollars(spent)} "
                f"spent by this run): {what}."
            )
        return (
            f"The budget stopped the run before it finished ({dollars(spent)} of "
            f"{dollars(cap)} spent): {what}."
        )

    def result(self, answer: str) -> TaskResult:
        """The answered run's record, with what its caller still has to act on."""
        planned: dict[str, int] = {}
        for spec in (spec for done in self.rounds for spec in done.specs):
            planned.setdefault(spec.name, len(planned))
        new = sorted(self.crew.new_sources.items(), key=lambda item: planned.get(item[0], 0))
        return TaskResult.of(
            self.record(answer),
            budget_owner=self.budget_owner,
            pending=[  # in the plan's order, as the library keeps them: with the standalone road
                PendingAgent(name, role, generator.for_library(source))
                for name, (role, source) in new
            ],
            agent_paths=sorted(set(self.crew.paths.values())),
            usage=self.usage,
            artifact_files=self.artifacts.list(),
        )

    def recorded(self, agent: AgentRecord) -> None:
        """An agent's record is final (crew.RunState): in the history as the run goes."""
        self.journal.agent(agent)

    def close(self) -> None:
        """The run is over: the crew's processes and doors go with it, and the log is shut."""
        self.crew.close()
        self.journal.close()
        self.log.close()
        self.redactions.close()

    # ---- archive -------------------------------------------------------------------------------

    def archive(self, record: RunRecord, *, wait_seconds: float | None = None) -> Path | None:
        """Write the run to runs/ (success or failure); never raises.

        Once: a run archived again (stopped while its archive was being written) rewrites the
        same run file and the same history row. `wait_seconds` bounds the wait for another
        process's lock on the history.
        """
        self.events.phase_started(Phase.ARCHIVE)
        self.journal.close()
        again, self.archiving = self.archiving, True
        self.run_file = runlog.archive(
            record,
            warn=self.warn,
            settings=self.settings,
            redactions=self.redactions,
            into=self.run_file,
            again=again,
            wait_seconds=wait_seconds,
            wrote=self._wrote,
        )
        self.events.archived(str(self.run_file) if self.run_file else None)
        self.events.phase_finished(Phase.ARCHIVE, 0.0)
        return self.run_file

    def _wrote(self, run_file: Path) -> None:
        """The archive's run file exists: an archive after a stop rewrites this one."""
        self.run_file = run_file

    def settle(self, seconds: float) -> None:
        """Wait (at most `seconds`) for model calls still in flight — an agent's, abandoned when
        it ended — so the record counts what the API bills; any still unanswered is counted at
        its worst case, and said so."""
        unanswered = self.usage.settle(seconds)
        if unanswered:
            calls = f"{unanswered} model call{'s' if unanswered > 1 else ''}"
            self.warn(
                f"{calls} had no reply yet when the run ended; the cost counts "
                f"{'each' if unanswered > 1 else 'it'} at the most it may have cost"
            )


SETTLE_SECONDS = 5.0
"""How long a finished run waits for model calls still in flight before it counts them at their
worst case (an agent that ended before its call was answered)."""
STOP_SETTLE_SECONDS = 0.5
"""The same for a run being stopped: a stop must be prompt."""
STOP_ARCHIVE_SECONDS = 1.0
"""How long a stopped run's archive waits for another process's lock on the history."""


def _given(agent: AgentRecord, done: _Round) -> AgentRecord:
    """The agent's record with the inputs it was given: its upstream agents that delivered, once
    the round is over (one that failed is no input)."""
    if not done.ran or all(name in done.outputs for name in agent.inputs):
        return agent
    return dataclasses.replace(agent, inputs=[n for n in agent.inputs if n in done.outputs])


def _status(answer: str | None, error: BaseException | None) -> RunStatus:
    """How the run ended, for its record."""
    if answer is not None:
        return RunStatus.OK
    if isinstance(error, KeyboardInterrupt):
        return RunStatus.INTERRUPTED
    if isinstance(error, ledger.BudgetExhaustedError):
        return RunStatus.BUDGET
    return RunStatus.FAILED


def handle_task(
    task: str,
    *,
    settings: config.Settings,
    events: TaskEvents | None = None,
    usage: ledger.Usage | None = None,
    written: list[Path] | None = None,
    unjudged: list[str] | None = None,
    space: RunSpace | None = None,
    attached: Attached | None = None,
    conversation: Conversation | None = None,
    retry: Retry | None = None,
    planning: planner.Planning | None = None,
    gate: Gate | None = None,
    started: float | None = None,
) -> TaskResult:
    """Run one task headless and return its TaskResult.

    `settings` is the run's snapshot (config.settings, with the caller's overrides): the run
    reads nothing else, so a flag or a setting changed meanwhile cannot split it.
    `attached` are the files the user attached (attachments.gather): read-only for every agent.
    `conversation` holds the session's earlier turns: the planner decides whether the task
    follows up on them, and then the agents and the merge see them too. `retry` reruns an
    earlier run: no plan call, and only its agents that delivered nothing are built and run.
    `planning` is the first round's plan, asked for ahead (planner.Planning, with `usage` as
    its ledger and the same task, attachments and conversation): the run takes its result
    instead of asking again, and cancels it if the run ends before taking it. `gate` (see
    Gate) lets the caller decide, once the run's first processes are starting, whether it goes
    on, with a new plan, or not at all (Withdrawn: no record is kept). `started` is when the
    person began to wait (time.monotonic(): Enter, or the command's launch), the start of the
    run's duration; now when not given.

    Raises on planner or code-generation failures (bad key, network, an invalid plan) and when
    every agent failed; a failed run is still archived so `history` and `stats` see it. So is an
    interrupted one (Ctrl-C, SIGTERM, SIGHUP: a KeyboardInterrupt), with what it had done and
    spent, and a warning naming the signal. When it raises, `written` (if given) receives the
    scratch files written so far, for cleanup, and `unjudged` the answer already paid for, if
    there was one (a run stopped while the judge read it): the caller shows it.

    `space` is the run's own scratch; the caller closes it (after asking what to keep). Without
    one, the run makes its own and removes it before returning.
    """
    own = space is None
    space = space or RunSpace()
    conductor = _Conductor(
        task,
        settings,
        events,
        usage,
        space,
        attached,
        conversation,
        retry,
        planning,
        gate,
        started,
    )
    try:
        return conductor.run()
    except BaseException as error:
        conductor.stopped.set()
        if conductor.planning is not None:  # ended before its plan was taken: its cost counts
            conductor.planning.cancel(wait=not isinstance(error, KeyboardInterrupt))
        executor.stop_all()
        if written is not None:
            written.extend(sorted(set(conductor.crew.paths.values())))
        if unjudged is not None and conductor.answer:
            unjudged.append(conductor.answer)
        if isinstance(error, Withdrawn):
            _forget(conductor)
        elif isinstance(error, KeyboardInterrupt):
            _archive_interrupted(conductor, error)
        else:
            conductor.bookkeep_library()
            conductor.settle(SETTLE_SECONDS)
            conductor.archive(conductor.record(None, error))
        raise
    finally:
        if conductor.planning is not None:
            conductor.planning.cancel(wait=False)  # a no-op once taken; else nobody's plan
        conductor.close()
        if own:
            space.close()
        if settings.tracing is not None:
            _export_trace(conductor)


def _export_trace(conductor: _Conductor) -> None:
    """Send the run, as it was recorded, to the tracing backend: once its log is closed and its
    record archived, so the trace is exactly `agentgod show RUN --trace`'s. Only here is the
    exporter imported; a failed export is a warning, never the run's failure."""
    from agentgod import otlp

    problem = otlp.export_run(conductor.space.id, conductor.settings)
    if problem is None:
        return
    with contextlib.suppress(Exception):
        conductor.events.warn(problem)
    if conductor.finished is not None:
        conductor.finished.warnings.append(problem)


def _forget(conductor: _Conductor) -> None:
    """A withdrawn run was never a run: its row in the history, its (empty) event log and its
    folder go."""
    conductor.journal.forget()
    conductor.log.close()
    with contextlib.suppress(OSError):
        conductor.log.path.unlink()
        conductor.log.path.parent.rmdir()


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
    conductor.settle(STOP_SETTLE_SECONDS)
    if conductor.answer:
        conductor.warn("the answer was not judged: the run was stopped first")
    path = conductor.archive(conductor.record(None, error), wait_seconds=STOP_ARCHIVE_SECONDS)
    conductor.events = shown
    with contextlib.suppress(Exception):
        if path is not None:  # the display's rail too: the stopped run was archived
            shown.phase_finished(Phase.ARCHIVE, 0.0)
        shown.archived(str(path) if path else None)
