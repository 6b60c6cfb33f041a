"""evaluation.py — `agentgod eval`: does the team beat one call, on these cases?

An eval runs every case of a suite through several **arms** with the same model and effort:

- `single`: one model call with the task and its attachments (the baseline), through the one
  road (llm), billed like any call and recorded as a run of its own;
- `factory`: the whole pipeline, exactly as `agentgod --json --no-input` runs it;
- `factory-nojudge` (TASK_REVISIONS=0), `factory-nocouncil` (--council off) and `factory-warm`
  (the library kept from earlier cases, against the others' empty one).

It drives runs; it does not change them. Every (case, arm) pair is one task of one batch
(batch.py: `kind="eval"`, its parent the eval), so cases run `parallel` at a time behind the
batch's key-holding gateway under one `--budget`, each factory run a real child process of the
command, and a stop or a crash resumes as a batch does. The single calls run in the batch's
slots too, made here in-process (`EvalEngine`) with their own capability through the gateway,
so they are held and billed against the same budget. Each arm's runs get a library of their
own (LIBRARY_DIR), never the user's: empty for the cold arms (which keep nothing), and one per
eval that keeps every new agent for `factory-warm`.

Each result is scored the moment its run ends (scoring.py: the checks that cost nothing, tests
behind the walls), and recorded (evalrecord.py); judged cases (a rubric, or no `expect`) are
judged pairwise against the single call's answer once both exist, after the runs, under what
is left of the budget. The numbers are evalreport.py's.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from agentgod import (
    agent_runtime,
    attachments,
    batch,
    batchrecord,
    config,
    evalrecord,
    history,
    llm,
    problems,
    redact,
    runlog,
    scoring,
)
from agentgod.batchrecord import BatchRow, TaskRow
from agentgod.childrun import Job, JobResult
from agentgod.evalrecord import CaseRow, EvalRow, ResultRow
from agentgod.evalsuite import Suite
from agentgod.kinds import BatchStatus, RunStatus, TaskStatus
from agentgod.ledger import BudgetExhaustedError, Usage
from agentgod.replies import BatchProgress, BatchTaskLine
from agentgod.runrecord import RunRecord

BASELINE = "single"
ARMS = (BASELINE, "factory", "factory-nojudge", "factory-nocouncil", "factory-warm")
DEFAULT_ARMS = (BASELINE, "factory")
ARM_VARIABLE = "AGENTGOD_EVAL_ARM"
"""Set in a job's environment when the job is the single call, which EvalEngine makes here."""
SINGLE_MAX_TOKENS = 16_000
"""The single call's room: the merge's, so the baseline is never cut shorter than the team."""
SINGLE_NOTE = "agentgod eval: one model call with the task and its files, no team (the baseline)"
EVALS_DIR = "evals"
"""runs/evals/<eval id>/: an eval's own files (a built-in suite's attachments, the libraries)."""


class EvalError(ValueError):
    """The eval cannot be run as asked (bad arms, no case)."""


def parse_arms(text: str | None) -> list[str]:
    """The arms `--arms` names, the baseline always first; ValueError naming a bad one."""
    if text is None:
        return list(DEFAULT_ARMS)
    named = [word.strip() for word in text.split(",") if word.strip()]
    unknown = [word for word in named if word not in ARMS]
    if unknown or not named:
        raise EvalError(
            f"unknown arm {unknown[0]!r}" if unknown else "--arms names no arm",
        )
    return [arm for arm in ARMS if arm == BASELINE or arm in named]


def folder(eval_id: str) -> Path:
    """The eval's own folder in the home."""
    return config.runs_dir() / EVALS_DIR / eval_id


def arm_shape(arm: str, eval_id: str) -> batch.RunShape:
    """How a run of `arm` differs from the eval's own flags."""
    cold = str(folder(eval_id) / "library-cold")
    if arm == BASELINE:
        return batch.RunShape(env={ARM_VARIABLE: BASELINE})
    if arm == "factory-nojudge":
        return batch.RunShape(("--discard",), {"TASK_REVISIONS": "0", "LIBRARY_DIR": cold})
    if arm == "factory-nocouncil":
        return batch.RunShape(("--council", "off", "--discard"), {"LIBRARY_DIR": cold})
    if arm == "factory-warm":
        warm = str(folder(eval_id) / "library-warm")
        return batch.RunShape(("--keep",), {"LIBRARY_DIR": warm})
    return batch.RunShape(("--discard",), {"LIBRARY_DIR": cold})


def order(
    cases: Sequence[CaseRow], arms: Sequence[str], parallel: int
) -> list[tuple[CaseRow, str]]:
    """The (case, arm) pairs in the order the batch starts them: case by case, each case's
    team arms first and its single call 2 x `parallel` pairs later, so short single calls fill
    the slots the long runs leave rather than all waiting at the end (which would leave slots
    idle at the end of the eval) or all coming first."""
    team = [arm for arm in arms if arm != BASELINE]
    lag = 2 * parallel if parallel > 1 else 0
    pairs: list[tuple[CaseRow, str]] = []
    for index, case in enumerate(cases):
        pairs += [(case, arm) for arm in team]
        if BASELINE in arms and index - lag >= 0:
            pairs.append((cases[index - lag], BASELINE))
    if BASELINE in arms:
        pairs += [(case, BASELINE) for case in cases[max(0, len(cases) - lag) :]]
    return pairs


def task_label(case_id: str, arm: str) -> str:
    """How the batch names a (case, arm) task."""
    return f"{case_id}@{arm}"


def start(
    suite: Suite,
    arms: Sequence[str],
    options: Mapping[str, Any],
    *,
    eval_id: str,
    batch_options: batch.Options,
) -> EvalRow:
    """Record a new eval of `suite`: its batch (one task per case and arm) and its cases."""
    if not suite.cases:
        raise EvalError(f"{suite.name} holds no cases")
    pairs = order(suite.cases, arms, batch_options.parallel)
    rows = [
        TaskRow(
            seq=index,
            line=case.line or case.seq + 1,
            task=case.task,
            task_id=task_label(case.case_id, arm),
            files=list(case.files),
            budget_usd=case.budget_usd,
        )
        for index, (case, arm) in enumerate(pairs)
    ]
    made = batch.start(rows, suite.name, batch_options.to_json(), kind="eval", parent=eval_id)
    record = EvalRow(
        eval_id=eval_id,
        suite=suite.name,
        arms=list(arms),
        options=dict(options),
        batch_id=made.batch_id,
        cases=list(suite.cases),
        results=[
            ResultRow(seq=case.seq, arm=arm, task_seq=index)
            for index, (case, arm) in enumerate(pairs)
        ],
    )
    evalrecord.create(record)
    return record


# ---- the single call -------------------------------------------------------------------------


def file_blocks(attached: attachments.Attached) -> list[dict[str, Any]]:
    """The attached files as the content blocks the API reads (text inlined, PDFs as documents,
    images as images), each read only while it is still the file that was vetted."""
    blocks = []
    for item in attached.files:
        with open(item.path, "rb") as file:
            status = os.fstat(file.fileno())
            if attachments.file_identity(status) != item.identity:
                raise attachments.AttachmentError(
                    str(item.path), "it changed since it was checked", "Run the eval again."
                )
            data = file.read()
        blocks.append(agent_runtime.file_block(item.name, data))
    return blocks


def job_task(args: Sequence[str]) -> tuple[str, list[str]]:
    """The task and the attached files of a batch job's command line."""
    files = [args[i + 1] for i, word in enumerate(args[:-1]) if word == "--file"]
    where = list(args).index("--task")
    return " ".join(args[where + 1 :]), files


def single_call(job: Job, overrides: Mapping[str, str], cancel: llm.Cancel) -> JobResult:
    """The baseline: the task (and its files) sent once to the model, through the batch's
    gateway with the job's capability, and recorded as a run. Never raises: every ending is the
    reply a run would give."""
    started, moment = time.monotonic(), datetime.now(UTC)
    usage = Usage()
    task, files = job_task(job.args)
    told = {
        **overrides,
        "ANTHROPIC_API_KEY": job.env["ANTHROPIC_API_KEY"],
        "ANTHROPIC_BASE_URL": job.env["ANTHROPIC_BASE_URL"],
    }
    settings: config.Settings | None = None
    answer, error, exit_code = "", None, 0
    record_files: list[Any] = []
    try:
        settings = config.settings(told)
        attached = attachments.gather(
            task,
            files,
            cwd=Path(job.cwd),
            max_bytes=settings.attach_max_bytes,
            max_files=settings.attach_max_files,
        )
        record_files = [item.reply() for item in attached.files]
        task = attached.task
        blocks = file_blocks(attached)
        prompt: llm.Prompt = [*blocks, {"type": "text", "text": task}] if blocks else task
        answer = llm.completion(
            prompt,
            model=settings.model,
            effort=settings.effort.value,
            max_tokens=SINGLE_MAX_TOKENS,
            usage=usage,
            settings=settings,
            cancel=cancel,
        ).text
    except llm.Cancelled:
        error, exit_code = problems.Problem("Stopped.", "", "cancelled", "interrupted"), 130
    except Exception as failure:
        error, exit_code = problems.explain(failure), 1
    status = RunStatus.OK if error is None else _run_status(error.kind)
    seconds = time.monotonic() - started
    cost = usage.cost_summary()
    if settings is not None:
        runlog.archive(
            RunRecord.without_team(
                task=task,
                ok=error is None,
                answer=answer,
                error=error.headline if error else "",
                cost=cost,
                duration_seconds=seconds,
                started_at=moment,
                run_id=job.run_id,
                status=status,
                model=settings.model,
                effort=settings.effort.value,
                reasoning=SINGLE_NOTE,
                calls=usage.call_log(),
                attachments=record_files,
            ),
            settings=settings,
        )
    reply: dict[str, Any] = {"ok": error is None, "task": task, "run_id": job.run_id}
    reply["cost"] = {key: value for key, value in cost.items() if key != "estimate"}
    reply["duration_seconds"] = round(seconds, 3)
    if error is None:
        reply["answer"] = answer
    else:
        reply["error"] = {
            "type": error.kind,
            "headline": error.headline,
            "advice": error.advice,
            "detail": error.technical,
        }
        if error.budget_of:  # whose budget: the case's own, or the eval's
            reply["error"]["budget_of"] = error.budget_of
    return JobResult(exit_code, reply, "", seconds)


def _run_status(kind: str) -> RunStatus:
    return {"budget": RunStatus.BUDGET, "interrupted": RunStatus.INTERRUPTED}.get(
        kind, RunStatus.FAILED
    )


class EvalEngine:
    """The batch's engine for an eval: a factory run goes to the local engine (a forked
    `agentgod`), the single call is made here, in the batch's slot."""

    gateway_host = "127.0.0.1"

    def __init__(self, overrides: Mapping[str, str], *, runs: bool) -> None:
        self._overrides = dict(overrides)
        self._inner: batch.LocalEngine | None = batch.LocalEngine() if runs else None
        self._lock = threading.Lock()
        self._calls: set[llm.Cancel] = set()
        self._stopped = False

    def run(self, job: Job) -> JobResult:
        if job.env.get(ARM_VARIABLE) != BASELINE:
            with self._lock:
                if self._inner is None:
                    self._inner = batch.LocalEngine()
                inner = self._inner
            return inner.run(job)
        cancel = llm.Cancel()
        with self._lock:
            if self._stopped:
                cancel()
            self._calls.add(cancel)
        try:
            return single_call(job, self._overrides, cancel)
        finally:
            with self._lock:
                self._calls.discard(cancel)

    def interrupt(self) -> None:
        with self._lock:
            self._stopped = True
            calls, inner = list(self._calls), self._inner
        for cancel in calls:
            cancel()
        if inner is not None:
            inner.interrupt()

    def close(self) -> None:
        with self._lock:
            inner, self._inner = self._inner, None
        if inner is not None:
            inner.close()


# ---- one sitting -------------------------------------------------------------------------------


class EvalWatcher(Protocol):
    """What an eval reports as it goes (the session draws it)."""

    def progress(self, progress: BatchProgress) -> None: ...

    def warn(self, text: str) -> None: ...


class QuietWatcher:
    def progress(self, progress: BatchProgress) -> None:
        return None

    def warn(self, text: str) -> None:
        return None


@dataclass
class SittingOptions:
    parallel: int
    budget_usd: float | None
    overrides: dict[str, str]
    """What the session was told (its flags as settings): the single calls and judges use it."""


class Sitting:
    """One sitting of a recorded eval: what is unfinished runs, what is unscored is scored."""

    def __init__(
        self,
        record: EvalRow,
        options: SittingOptions,
        *,
        settings: config.Settings,
        watcher: EvalWatcher | None = None,
        listen: tuple[str, int] | None = None,
    ) -> None:
        self.record = record
        self.options = options
        self.settings = settings
        self.watcher: EvalWatcher = watcher or QuietWatcher()
        self._listen = listen
        self._cases = {case.seq: case for case in record.cases}
        self._lock = threading.Lock()
        self._cancels: set[llm.Cancel] = set()
        self._budget_stop = False
        self._warned_walls = False
        self.batch: BatchRow | None = None
        self._tasks: dict[str, TaskRow] = {}
        self._by_task: dict[int, ResultRow] = {r.task_seq: r for r in record.results}

    def run(self) -> EvalRow:
        """Run and score what is unfinished; the eval as recorded at the end. A stop signal
        (KeyboardInterrupt) is raised again once the record says where it stopped."""
        started = time.monotonic()
        stopped: BaseException | None = None
        self.record.status = BatchStatus.RUNNING
        self.record.options["parallel"] = self.options.parallel
        self.record.options["budget_usd"] = self.options.budget_usd
        evalrecord.update_eval(self.record)
        try:
            self._runs()
            self._judge_all()
        except KeyboardInterrupt as stop:
            stopped = stop
        self._finish(time.monotonic() - started, stopped)
        if stopped is not None:
            raise stopped
        return self.record

    # ---- the runs ------------------------------------------------------------------------------

    def _runs(self) -> None:
        loaded = batchrecord.load(self.record.batch_id) if self.record.batch_id else None
        if loaded is None:
            raise EvalError(f"the eval's batch {self.record.batch_id} is not in the history")
        self.batch = loaded
        self._tasks = {task.task_id or "": task for task in loaded.tasks}
        for task in loaded.tasks:  # settled before a crash, but not yet scored
            result = self._by_task.get(task.seq)
            if result is not None and task.status.finished and not result.settled:
                self._settle(result, task, None)
        if not loaded.unfinished():
            return
        options = batch.Options.from_json(loaded.options)
        options.parallel = self.options.parallel
        options.budget_usd = self._room(loaded.usd, runs=True)
        runs = any(
            task.task_id and not task.task_id.endswith("@" + BASELINE)
            for task in loaded.unfinished()
        )
        sitting = batch.Batch(
            loaded,
            options,
            engine=EvalEngine(self.options.overrides, runs=runs),
            events=self,
            settings=self.settings,
            listen=self._listen,
            shape=self._shape,
        )
        try:
            sitting.run()
        finally:
            self._budget_stop = loaded.status is BatchStatus.BUDGET

    def _room(self, batch_usd: float, *, runs: bool) -> float | None:
        """What the eval's budget leaves: for its batch (which counts its own spending), what
        the judges did not spend; for the judges, what neither did."""
        if self.options.budget_usd is None:
            return None
        judges = sum(result.judge_usd for result in self.record.results)
        left = self.options.budget_usd - judges
        return left if runs else max(0.0, left - batch_usd)

    def _shape(self, task: TaskRow) -> batch.RunShape:
        result = self._by_task[task.seq]
        return arm_shape(result.arm, self.record.eval_id)

    # BatchEvents: each finished task is settled and scored at once.

    def task_finished(self, line: BatchTaskLine) -> None:
        task = self._tasks.get(line["id"] or "")
        result = self._by_task.get(task.seq) if task is not None else None
        if task is None or result is None:
            return
        self._settle(result, task, line["result"])

    def progress(self, progress: BatchProgress) -> None:
        self.watcher.progress(progress)

    def _settle(self, result: ResultRow, task: TaskRow, reply: dict[str, Any] | None) -> None:
        """The result from how its task ended: its answer, cost and score."""
        case = self._cases[result.seq]
        if reply is None and task.run_id:
            reply = _stored_reply(task.run_id)
        reply = reply or {}
        # A run its case's own budget stopped (even before its first call) is `capped` in the
        # batch: finished, so that is its answer (within_budget scores it) and resume does not
        # pay for it again; one the eval's budget stopped is `budget`, unfinished, for resume.
        result.status = task.status
        result.run_id = task.run_id
        result.usd = task.usd
        result.seconds = task.seconds
        cost = reply.get("cost")
        result.calls = int(cost.get("llm_calls", 0)) if isinstance(cost, dict) else 0
        told = reply.get("error")
        error: dict[str, Any] = told if isinstance(told, dict) else {}
        if task.status is TaskStatus.OK:
            result.answer = redact.redact(str(reply.get("answer") or ""))
            result.error_kind = result.error = ""
        else:
            result.answer = ""
            result.error_kind = str(error.get("type") or task.status.value)
            result.error = str(error.get("headline") or task.error)
        if task.status.finished:
            score = self._score(case, result)
            result.score, result.detail = score.value, score.detail
        else:
            result.score, result.detail = None, ""
        evalrecord.update_result(self.record.eval_id, result)

    def _score(self, case: CaseRow, result: ResultRow) -> scoring.Score:
        expect = case.expect
        answered = result.status is TaskStatus.OK
        if scoring.judged(expect):
            if not answered:
                return scoring.Score(0.0, f"no answer ({result.error_kind})")
            if result.arm == BASELINE:
                return scoring.Score(0.5, "the baseline of the pairwise judge")
            return scoring.Score(None, "")  # judged once both answers exist
        scores: list[scoring.Score] = []
        if "within_budget" in expect and case.budget_usd is not None:
            scores.append(scoring.within_budget(result.usd, case.budget_usd))
        checks = [key for key in expect if key in scoring.TEXT_CHECKS or key == "python_tests"]
        if checks and not answered:
            scores.append(scoring.Score(0.0, f"no answer ({result.error_kind})"))
        elif checks:
            if any(key in scoring.TEXT_CHECKS for key in checks):
                scores.append(scoring.score_text(expect, result.answer))
            if "python_tests" in expect:
                scores.append(self._tests(expect, result.answer))
        values = [score.value for score in scores]
        if any(value is None for value in values) or not values:
            return scoring.Score(None, "; ".join(s.detail for s in scores) or "not scored")
        return scoring.Score(
            min(v for v in values if v is not None), "; ".join(s.detail for s in scores)
        )

    def _tests(self, expect: Mapping[str, Any], answer: str) -> scoring.Score:
        from agentgod import sandbox

        warning = sandbox.unconfined_warning(self.settings.sandbox.value)
        if warning and not self._warned_walls:
            self._warned_walls = True
            self.watcher.warn(f"python_tests: {warning}")
        try:
            return scoring.run_tests(
                answer,
                expect["python_tests"],
                prelude=str(expect.get("prelude") or ""),
                settings=self.settings,
            )
        except Exception as error:  # the walls could not be raised (SANDBOX=strict), say
            problem = problems.explain(error)
            return scoring.Score(None, f"the tests could not run: {problem.headline}")

    # ---- the pairwise judge --------------------------------------------------------------------

    def _judge_all(self) -> None:
        """Judge every answered result of a judged case against the single call's answer,
        `parallel` at a time, under what is left of the budget."""
        waiting: list[tuple[ResultRow, ResultRow]] = []
        for result in self.record.results:
            case = self._cases[result.seq]
            if result.arm == BASELINE or not scoring.judged(case.expect):
                continue
            if result.status is not TaskStatus.OK or result.score is not None:
                continue
            base = self.record.result(result.seq, BASELINE)
            if base is None or not base.status.finished:
                continue
            if base.status is not TaskStatus.OK:
                result.score, result.detail = 1.0, "the single call gave no answer"
                evalrecord.update_result(self.record.eval_id, result)
                continue
            waiting.append((result, base))
        if not waiting:
            return
        batch_usd = self.batch.usd if self.batch is not None else 0.0
        ledger = Usage(budget_usd=self._room(batch_usd, runs=False))
        pool = ThreadPoolExecutor(max(1, self.options.parallel), "agentgod-eval-judge")
        futures: dict[Future[None], ResultRow] = {}
        try:
            for result, base in waiting:
                futures[pool.submit(self._judge, result, base, ledger)] = result
            pending = set(futures)
            while pending:
                _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        except KeyboardInterrupt:
            with self._lock:
                cancels = list(self._cancels)
            for cancel in cancels:
                cancel()
            for future in futures:
                future.cancel()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _cancel(self) -> llm.Cancel:
        cancel = llm.Cancel()
        with self._lock:
            self._cancels.add(cancel)
        return cancel

    def _judge(self, result: ResultRow, base: ResultRow, ledger: Usage) -> None:
        from agentgod import signals

        signals.shield_from_signals()
        case = self._cases[result.seq]
        view = ledger.for_agent(f"judge {case.case_id} {result.arm}")
        try:
            score = scoring.judge_pair(
                case.task,
                scoring.rubric_of(case.expect),
                result.answer,
                base.answer,
                settings=self.settings,
                usage=view,
                cancel=self._cancel,
            )
            result.score, result.detail, result.verdicts = (
                score.value,
                score.detail,
                score.verdicts,
            )
        except BudgetExhaustedError:
            with self._lock:
                self._budget_stop = True
        except llm.Cancelled:
            pass
        except Exception as error:
            problem = problems.explain(error)
            result.detail = f"not judged: {problem.headline}"
        finally:
            result.judge_usd += view.cost_usd()
            result.judge_calls += view.totals().calls
            with contextlib.suppress(Exception):
                evalrecord.update_result(self.record.eval_id, result)

    # ---- the end -------------------------------------------------------------------------------

    def _finish(self, seconds: float, stopped: BaseException | None) -> None:
        record = self.record
        spent_runs = self.batch.usd if self.batch is not None else _batch_usd(record)
        record.usd = spent_runs + sum(result.judge_usd for result in record.results)
        record.seconds += seconds
        record.finished_at = datetime.now(UTC)
        if stopped is not None:
            record.status = BatchStatus.INTERRUPTED
        elif record.unsettled() and self._budget_stop:
            record.status = BatchStatus.BUDGET
        elif record.unsettled():
            record.status = BatchStatus.INTERRUPTED
        else:
            record.status = BatchStatus.DONE
        evalrecord.update_eval(record)


def _batch_usd(record: EvalRow) -> float:
    loaded = batchrecord.load(record.batch_id) if record.batch_id else None
    return loaded.usd if loaded is not None else 0.0


def _stored_reply(run_id: str) -> dict[str, Any] | None:
    """What a run's `--json` reply would have said, from its record (a run whose reply was
    lost: the eval died after it ended)."""
    stored = history.load(run_id)
    if stored is None:
        return None
    reply: dict[str, Any] = {"ok": stored.ok, "cost": dict(stored.cost), "run_id": run_id}
    if stored.ok:
        reply["answer"] = stored.answer
    else:
        reply["error"] = {"type": stored.status.value, "headline": stored.error}
    return reply
