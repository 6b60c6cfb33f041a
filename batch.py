"""batch.py — many tasks at once: the engine behind `agentgod batch` (and, later, `eval`).

A batch is a list of tasks, each run as a whole run exactly as `agentgod --json --no-input` runs
it (childrun: a child process per run), `parallel` at a time, under one budget, recorded as one
thing (batchrecord) and resumable. The batch holds the one key: it starts a gateway (gateway.py)
on loopback and gives every run a short-lived capability — bound to the run's id, its models,
its share of the budget and an expiry — as its API key, so no run ever holds the real key and the
batch budget binds exactly across all of them: no run starts that the budget cannot start, and
no call is sent that would pass it.

The library API is `read_lines` (a JSONL file into task rows, bad lines kept as `invalid` with
their reason), `start` (record a new batch) and `Batch(...).run()` (run the unfinished tasks,
reporting each as it finishes and the progress as it goes). Where the runs run is an `Engine`:
here (`LocalEngine`, through a fork server) or on a Ray cluster (rayengine, imported only when
asked for). The command line is a thin layer over this (session.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from agentgod import attachments, batchrecord, config, gateway, history, llm, models, redact, runlog
from agentgod.batchrecord import BatchRow, TaskRow
from agentgod.childrun import (
    ForkServer,
    ForkServerError,
    Job,
    JobResult,
    RunLost,
    Spawner,
    child_env,
)
from agentgod.kinds import (
    BUDGET_USD_RANGE,
    TASK_MAX_CHARS,
    BatchStatus,
    BudgetOwner,
    EngineName,
    RunStatus,
    TaskStatus,
)
from agentgod.ledger import MIN_OUTPUT_TOKENS, Usage
from agentgod.replies import (
    BatchProgress,
    BatchSummaryLine,
    BatchTaskLine,
    CostSummary,
    ErrorDetail,
)
from agentgod.runrecord import RunRecord, new_run_id
from agentgod.text import dollars

LINE_FIELDS = frozenset({"id", "task", "files", "budget"})
"""What a line may hold; anything else is a typo worth reporting, not ignoring."""
LINE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A line's `id` (a task's, a case's): safe as a folder name under --out, short enough to read
in a table."""
FIRST_CALL_TOKENS = 4_000
"""A run's first call (the plan) sends at least this much: a run that cannot afford it with
MIN_OUTPUT_TOKENS of output is not started."""
CAPABILITY_TTL_SECONDS = 24 * 3600.0
"""How long a run's capability lives: a run is over long before; a leaked one dies soon."""
EXIT_INTERRUPTED = (129, 130, 143)
"""Exit codes of a run a stop signal ended (cli.EXITS_BY_SIGNAL)."""
LOST_RUN_WARNING = (
    "its record was lost with the worker that ran it (killed, out of memory, or its machine "
    "gone): its spend is what the batch's gateway billed for it; its plan and agents are not "
    "known, so it is run afresh, not retried"
)
STOPPED_LOST_WARNING = (
    "it was stopped, and its record did not come back from the worker that ran it in time: its "
    "spend is what the batch's gateway billed for it; its plan and agents are not known, so it "
    "is run afresh, not retried"
)


def default_parallel() -> int:
    """What the machine can take: runs mostly wait on the model, so two per core, at most 8."""
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


def capability_models(settings: config.Settings) -> list[str]:
    """The models a run's capability lets it name at the gateway: every model its settings may
    call (MODEL, FAST_MODEL, DEEP_MODEL and the fallbacks, flags included), so a fallback is
    never refused there as a model not allowed."""
    return sorted({ref.model for ref in settings.models_in_use()})


# ---- reading the tasks ---------------------------------------------------------------------------


def read_lines(
    lines: Iterable[str], *, base: Path, settings: config.Settings | None = None
) -> list[TaskRow]:
    """One TaskRow per non-blank line, in order; a line that cannot be a task is `invalid`, with
    its reason, and the others still run.

    Attachments are vetted here, before anything is spent (a secret, a device, a missing file
    refuses its line); relative paths are read from `base` (the file's folder, or the current
    one for stdin), and kept absolute so a resume finds them from anywhere.
    """
    settings = settings or config.settings()
    rows: list[TaskRow] = []
    seen: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        row = TaskRow(seq=len(rows), line=number, task="")
        try:
            _fill(row, text, base, settings, seen)
        except BadLine as bad:
            row.status = TaskStatus.INVALID
            row.error = str(bad)
        rows.append(row)
    return rows


class BadLine(ValueError):
    """Why a line of tasks (a batch's, or a suite's case) cannot be run."""


@dataclass(frozen=True)
class LineFields:
    """What every line of tasks may hold, checked: a batch's task and a suite's case alike."""

    task: str
    line_id: str | None
    """Its `id`, when it gave one."""
    budget_usd: float | None
    files: list[str]
    """Its attachments as absolute paths, each vetted as a run vets its attachments (so a
    resume finds them from anywhere)."""


def line_fields(
    data: Any,
    *,
    allowed: frozenset[str],
    noun: str,
    line: int,
    seen: dict[str, int],
    base: Path,
    settings: config.Settings,
) -> LineFields:
    """A parsed line's task, id, budget and files, or BadLine saying what is wrong with them
    (`noun`: "line" or "case", for the messages; `seen`: the ids so far, by line, gains this
    one). Only the fields in `allowed` may stand in it."""
    if not isinstance(data, dict):
        raise BadLine('not a JSON object; expected {"task": "..."}')
    unknown = sorted(set(data) - allowed)
    if unknown:
        fields = ", ".join(sorted(allowed))
        raise BadLine(f"unknown field {unknown[0]!r} (a {noun} may have {fields})")
    task = data.get("task")
    if not isinstance(task, str) or not task.strip():
        raise BadLine(f"no task: a {noun} needs a non-empty string under 'task'")
    if len(task.strip()) > TASK_MAX_CHARS:
        raise BadLine(
            f"its task is {len(task.strip()):,} characters, over the {TASK_MAX_CHARS:,} sent whole "
            "into every model call of a run: put the text in a file and name it under 'files'"
        )
    line_id = None
    raw_id = data.get("id")
    if raw_id is not None:
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
            raise BadLine("'id' must be a string or a number")
        line_id = str(raw_id)
        if not LINE_ID.fullmatch(line_id):
            raise BadLine(
                f"id {line_id!r}: letters, digits, '.', '_' and '-' only, at most 64, "
                "starting with a letter or digit"
            )
        if line_id in seen:
            raise BadLine(f"id {line_id!r} is already line {seen[line_id]}'s")
        seen[line_id] = line
    budget = data.get("budget")
    low, high = BUDGET_USD_RANGE
    if budget is not None and (
        isinstance(budget, bool)
        or not isinstance(budget, int | float)
        or not low <= budget <= high  # as --budget takes it (NaN is in no range)
    ):
        raise BadLine(f"'budget' must be a positive number of dollars, at most {high:,.0f}")
    files = data.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) and f.strip() for f in files):
        raise BadLine("'files' must be a list of paths")
    return LineFields(
        task.strip(),
        line_id,
        float(budget) if budget is not None else None,
        vetted(task, files, base, settings),
    )


def vetted(task: str, files: list[str], base: Path, settings: config.Settings) -> list[str]:
    """The files as absolute paths, each vetted as a run vets its attachments (a secret, a
    device, a missing file: BadLine); the run gathers them again itself, as the command does."""
    try:
        attachments.gather(
            task,
            files,
            cwd=base,
            max_bytes=settings.attach_max_bytes,
            max_files=settings.attach_max_files,
        )
    except attachments.AttachmentError as error:
        raise BadLine(f"attachment refused: {error} ({error.advice})") from None
    return [str((base / Path(path).expanduser()).resolve()) for path in files]


def _fill(
    row: TaskRow, text: str, base: Path, settings: config.Settings, seen: dict[str, int]
) -> None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadLine(f"not JSON ({error.msg} at column {error.colno})") from None
    fields = line_fields(
        data,
        allowed=LINE_FIELDS,
        noun="line",
        line=row.line,
        seen=seen,
        base=base,
        settings=settings,
    )
    row.task, row.budget_usd, row.files = fields.task, fields.budget_usd, fields.files
    if fields.line_id is not None:
        row.task_id = fields.line_id


def source_base(source: str) -> Path:
    """The folder relative paths in a batch's lines are read from."""
    return Path.cwd() if source == "-" else Path(source).expanduser().resolve().parent


def start(
    rows: list[TaskRow],
    source: str,
    options: Mapping[str, Any],
    *,
    kind: str = "batch",
    parent: str | None = None,
) -> BatchRow:
    """Record a new batch of `rows` and return it (its id fresh)."""
    batch = BatchRow(
        batch_id=batchrecord.new_batch_id(),
        source=source,
        kind=kind,
        parent=parent,
        options=dict(options),
        tasks=rows,
    )
    batchrecord.create(batch)
    return batch


# ---- what watches a batch ----------------------------------------------------------------------


class BatchEvents(Protocol):
    """What a batch reports as it goes; the session draws it (ui) and prints the lines."""

    def task_finished(self, line: BatchTaskLine) -> None:
        """A task ended (or its line was found invalid): its output line."""

    def progress(self, progress: BatchProgress) -> None:
        """The counts changed (a task started or ended)."""


class NullBatchEvents:
    """Nothing watches (a library caller that reads the record afterwards)."""

    def task_finished(self, line: BatchTaskLine) -> None:
        return None

    def progress(self, progress: BatchProgress) -> None:
        return None


# ---- where runs run ------------------------------------------------------------------------------


class Engine(Protocol):
    """Runs one job to its end (blocking: the batch calls it from a thread per slot)."""

    gateway_host: str
    """Where the gateway must listen for this engine's runs to reach it."""

    def run(self, job: Job) -> JobResult: ...

    def interrupt(self) -> None:
        """Stop every job in flight; each archives its run as interrupted and returns."""

    def close(self) -> None: ...


class LocalEngine:
    """Runs on this machine: child processes from one fork server (spawned when fork is not
    available), against the gateway on loopback."""

    gateway_host = "127.0.0.1"

    def __init__(self, base_env: Mapping[str, str] | None = None) -> None:
        self._base = child_env(base_env)
        self._starter: ForkServer | Spawner | None = None
        self._lock = threading.Lock()
        self._get()  # its imports overlap with everything else the batch does before a run

    def _get(self) -> ForkServer | Spawner:
        with self._lock:
            if self._starter is None:
                try:
                    self._starter = ForkServer(self._base)
                except OSError:
                    self._starter = Spawner(self._base)
            return self._starter

    def run(self, job: Job) -> JobResult:
        starter = self._get()
        try:
            return starter.run(job)
        except ForkServerError:
            with self._lock:
                if self._starter is starter:
                    self._starter = Spawner(self._base)
            return self._get().run(job)

    def interrupt(self) -> None:
        with self._lock:
            starter = self._starter
        if starter is not None:
            starter.interrupt()

    def close(self) -> None:
        with self._lock:
            starter, self._starter = self._starter, None
        if starter is not None:
            starter.close()


# ---- one sitting of a batch ----------------------------------------------------------------------


@dataclass
class Options:
    """How a batch runs; stored with it, so a resume runs it the same way."""

    parallel: int
    budget_usd: float | None = None
    """The whole batch's cap (every sitting together), or None."""
    out: str | None = None
    """A folder for the runs' artifacts, one subfolder per task (its id, or line-N)."""
    flags: list[str] = field(default_factory=list)
    """Flags every run is given (--model, --effort, --council, --no-web, --keep/--discard)."""
    models: list[str] = field(default_factory=list)
    """The models a run's capability allows; empty: any."""
    engine: str = EngineName.LOCAL.value
    """kinds.EngineName: where the runs run."""

    def to_json(self) -> dict[str, Any]:
        return {
            "parallel": self.parallel,
            "budget_usd": self.budget_usd,
            "out": self.out,
            "flags": list(self.flags),
            "models": list(self.models),
            "engine": self.engine,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Options:
        return cls(
            parallel=int(data.get("parallel") or default_parallel()),
            budget_usd=data.get("budget_usd"),
            out=data.get("out"),
            flags=[str(flag) for flag in data.get("flags") or []],
            models=[str(model) for model in data.get("models") or []],
            engine=str(data.get("engine") or EngineName.LOCAL.value),
        )


@dataclass(frozen=True)
class RunShape:
    """What one task's run gets beyond the batch's own options: more flags (after the batch's,
    so they win) and settings as environment variables. An eval runs its arms in one batch this
    way (`--council off`, `TASK_REVISIONS=0`, a library of the arm's own)."""

    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


Shaper = Callable[[TaskRow], RunShape]
"""Says how each task's run differs from the batch's options (None: it does not)."""


def out_folder(options: Options, task: TaskRow) -> Path | None:
    """Where a task's artifacts are copied: <out>/<its id, or line-N>."""
    if options.out is None:
        return None
    return Path(options.out).expanduser().resolve() / (task.task_id or f"line-{task.line}")


class Batch:
    """One sitting of a recorded batch: its unfinished tasks run, `options.parallel` at a time.

    `run` returns the batch as it stands at the end (recorded); a Ctrl-C or a stop signal
    interrupts every run (each archives itself) and is raised again once the record is written.
    """

    def __init__(
        self,
        batch: BatchRow,
        options: Options,
        *,
        engine: Engine | None = None,
        events: BatchEvents | None = None,
        settings: config.Settings | None = None,
        cwd: Path | None = None,
        listen: tuple[str, int] | None = None,
        gateway_url: str | None = None,
        shape: Shaper | None = None,
    ) -> None:
        self.batch = batch
        self.shape = shape
        self.options = options
        self.settings = settings or config.settings()
        self.engine: Engine = engine or LocalEngine()
        self.events: BatchEvents = events or NullBatchEvents()
        self.cwd = cwd or Path.cwd()
        self.earlier_usd = batch.usd
        """What earlier sittings spent: the budget binds them all together."""
        budget = None
        if options.budget_usd is not None:
            budget = max(0.0, options.budget_usd - self.earlier_usd)
        self.ledger = Usage(budget_usd=budget, keep_calls=False)
        host, port = listen or (self.engine.gateway_host, 0)
        self._listen = (host, port)
        self._gateway_url = gateway_url
        self._lock = threading.Lock()
        self._running = 0
        self._done = 0
        self._capped = 0
        self._failed = 0
        self._total = 0
        self._started = 0.0
        self._stopping = threading.Event()
        self._budget_stop = False

    # ---- the sitting ---------------------------------------------------------------------------

    def run(self) -> BatchRow:
        """Run every unfinished task; return the batch as recorded at the end."""
        self._started = time.monotonic()
        llm.connect_ahead(self.settings)  # the gateway's first relay finds its handshake done
        if self.batch.finished_at is None:  # bad lines are told once, in the first sitting
            for task in self.batch.tasks:
                if task.status is TaskStatus.INVALID:
                    self.events.task_finished(self._line(task, None))
        self._reconcile()
        pending = self.batch.unfinished()
        self._total = len(pending)
        self.batch.status = BatchStatus.RUNNING
        batchrecord.update_batch(self.batch)
        relay = llm.relay_for(self.settings)
        the_gateway = gateway.Gateway(
            relay, self.ledger, host=self._listen[0], port=self._listen[1]
        )
        slots = threading.Semaphore(max(1, self.options.parallel))
        workers: list[threading.Event] = []
        """One event a run in flight, set when its task is settled: waited on rather than its
        thread joined, since a Ctrl-C inside Thread.join can leave a live thread looking ended
        (Python before 3.13), and the batch would end with its runs still out."""
        stopped: BaseException | None = None
        ready: tuple[TaskRow, Job] | None = None
        with the_gateway:
            url = self._gateway_url or the_gateway.url
            self._report()
            try:
                for task in pending:
                    # Made ready while the slots are busy, so a freed slot starts it at once.
                    job = self._prepare(task, the_gateway, url)
                    ready = (task, job)
                    while not slots.acquire(timeout=0.2):
                        if self._stopping.is_set():
                            break
                    if self._stopping.is_set():
                        slots.release()
                        self._unprepare(task, job, the_gateway)
                        break
                    if not self._wait_affordable():
                        slots.release()
                        self._unprepare(task, job, the_gateway)
                        if not self._stopping.is_set():
                            self._budget_stop = True
                        break
                    settled = threading.Event()
                    worker = threading.Thread(
                        target=self._run_task,
                        args=(task, job, the_gateway, slots, settled),
                        name=f"agentgod-batch-{task.seq}",
                        daemon=True,
                    )
                    with self._lock:
                        self._running += 1
                    workers.append(settled)
                    worker.start()
                    ready = None
                    workers = [event for event in workers if not event.is_set()]
                    self._report()
                for settled in workers:
                    while not settled.wait(0.2):
                        pass
            except KeyboardInterrupt as stop:
                stopped = stop
                self._stopping.set()
                the_gateway.stop_runs()  # runs elsewhere (on Ray) hear it from the gateway
                self.engine.interrupt()
                if ready is not None:  # made ready, never started
                    self._unprepare(*ready, the_gateway)
                for settled in workers:
                    with contextlib.suppress(KeyboardInterrupt):
                        while not settled.wait(0.2):
                            pass
            finally:
                self.engine.close()
        self._finish(stopped)
        if stopped is not None:
            raise stopped
        return self.batch

    def _wait_affordable(self) -> bool:
        """Whether the budget can start one more run, once the runs in flight have given back
        what they hold: False only when none is in flight and it still cannot (the rule the
        ledger's holds follow)."""
        while not self._affordable():
            with self._lock:
                running = self._running
            if running == 0 or self._stopping.wait(0.1):
                return False
        return True

    def _affordable(self) -> bool:
        """Whether the budget left can pay a run's first call (the plan) at least."""
        room = self.ledger.room_usd()
        if room is None:
            return True
        price = models.price_of(self.settings.model)[0]
        needed = (FIRST_CALL_TOKENS * price.cache_write + MIN_OUTPUT_TOKENS * price.output) / 1e6
        return room >= needed

    def _reconcile(self) -> None:
        """A task whose run went on to its end after the batch itself died (a crash, a kill)
        is settled from that run's record, not run and paid for again. (A run whose process
        died with it was found so and finished as crashed by the command's sweep: it stays
        unfinished, and its task's next run retries it.)"""
        for task in self.batch.unfinished():
            if not task.runs:
                continue
            stored = history.load(task.runs[-1])
            if stored is None or stored.status not in (RunStatus.OK, RunStatus.FAILED):
                continue
            task.status = TaskStatus.OK if stored.status is RunStatus.OK else TaskStatus.FAILED
            task.error = stored.error
            task.usd = max(task.usd, stored.cost["usd"])
            task.seconds = max(task.seconds, stored.duration_seconds)
            self._update(task)
            self.events.task_finished(self._line(task, None))

    def _finish(self, stopped: BaseException | None) -> None:
        for task in self.batch.tasks:
            if self._budget_stop and task.status is TaskStatus.PENDING:
                task.status = TaskStatus.BUDGET
                task.error = "not started: the batch's budget could not pay for its first call"
                self._update(task)
        self.batch.usd = self.earlier_usd + self.ledger.cost_usd()
        self.batch.seconds += time.monotonic() - self._started
        self.batch.finished_at = datetime.now(UTC)
        if stopped is not None:
            self.batch.status = BatchStatus.INTERRUPTED
        elif self._budget_stop or any(t.status is TaskStatus.BUDGET for t in self.batch.tasks):
            self.batch.status = BatchStatus.BUDGET
        else:
            self.batch.status = BatchStatus.DONE
        batchrecord.update_batch(self.batch)

    # ---- one task ------------------------------------------------------------------------------

    def _prepare(self, task: TaskRow, the_gateway: gateway.Gateway, url: str) -> Job:
        """The task's next run, made ready: its id, its capability, its command line; linked in
        the record before it starts, so a crash cannot lose it."""
        run_id = _fresh_run_id()
        shape = self.shape(task) if self.shape is not None else RunShape()
        capability = the_gateway.mint(
            run_id,
            self.batch.batch_id,
            models=self.options.models,
            usd=task.budget_usd,
            ttl_seconds=CAPABILITY_TTL_SECONDS,
        )
        job = Job(
            run_id=run_id,
            args=tuple(self._args(task, run_id, shape.flags)),
            env={**shape.env, "ANTHROPIC_API_KEY": capability, "ANTHROPIC_BASE_URL": url},
            cwd=str(self.cwd),
        )
        task.runs.append(run_id)
        task.run_id = run_id
        task.status = TaskStatus.PENDING
        self._update(task)
        return job

    def _unprepare(self, task: TaskRow, job: Job, the_gateway: gateway.Gateway) -> None:
        """A run made ready that will not start after all: it leaves no trace in the record."""
        if task.runs and task.runs[-1] == job.run_id:
            task.runs.pop()
        task.run_id = task.runs[-1] if task.runs else None
        the_gateway.forget(self.batch.batch_id, job.run_id)
        self._update(task)

    def _run_task(
        self,
        task: TaskRow,
        job: Job,
        the_gateway: gateway.Gateway,
        slots: threading.Semaphore,
        settled: threading.Event,
    ) -> None:
        """One task's run, start to record; `settled` is set once it is written down, however
        it ended. Its slot is freed the moment the run has ended, so the next task's run starts
        while this one's result is still being written down."""
        from agentgod import signals

        signals.shield_from_signals()
        freed = False
        started, moment = time.monotonic(), datetime.now(UTC)
        try:
            lost, stopped = "", False
            try:
                result = self.engine.run(job)
            except RunLost as error:
                lost, stopped = redact.redact(str(error)), error.interrupted
                result = JobResult(1, None, lost, time.monotonic() - started)
            except Exception as error:
                text = redact.redact(f"{type(error).__name__}: {error}")
                result = JobResult(1, None, text, time.monotonic() - started)
            billed = the_gateway.forget(self.batch.batch_id, job.run_id)
            task.usd += billed["usd"]
            task.seconds += result.seconds
            if lost:
                task.status = TaskStatus.INTERRUPTED if stopped else TaskStatus.CRASHED
                task.error = lost
            else:
                self._settle(task, result)
            with self._lock:
                self._running -= 1
                if task.status is TaskStatus.OK:
                    self._done += 1
                elif task.status is TaskStatus.CAPPED:
                    self._capped += 1
                else:
                    self._failed += 1
            freed = True
            slots.release()
            if lost:
                unwritten = self._record_lost(
                    task, job, billed, lost, moment, result.seconds, stopped=stopped
                )
                if unwritten:
                    result.stderr += "\n" + unwritten
            self._update(task)
            self.events.task_finished(self._line(task, result))
            self._report()
        finally:
            if not freed:
                slots.release()
            settled.set()

    def _record_lost(
        self,
        task: TaskRow,
        job: Job,
        billed: CostSummary,
        error: str,
        started_at: datetime,
        seconds: float,
        *,
        stopped: bool = False,
    ) -> str:
        """A run lost with the worker that ran it, recorded in this home as crashed (its record
        went with the worker; `stopped`: as interrupted, for a stopped run that did not come
        back in time): what the gateway billed for it is its spend, and a warning says why
        nothing else is known (no plan, so resume starts it afresh). What could not be written,
        or ""."""
        if history.known(job.run_id):
            return ""  # it had recorded itself here after all
        retried = job.retries
        record = RunRecord.without_team(
            task=task.task,
            ok=False,
            answer="",
            error=error,
            cost=billed,
            duration_seconds=seconds,
            started_at=started_at,
            warnings=[STOPPED_LOST_WARNING if stopped else LOST_RUN_WARNING],
            run_id=job.run_id,
            status=RunStatus.INTERRUPTED if stopped else RunStatus.CRASHED,
            retry_of=retried,
            model=_flag(job.args, "--model") or self.settings.model,
            budget_usd=task.budget_usd,
        )
        said: list[str] = []
        runlog.archive(record, said.append, self.settings)
        return "\n".join(said)

    def _args(self, task: TaskRow, run_id: str, flags: Sequence[str] = ()) -> list[str]:
        """The command line of the task's run: a fresh run, or a retry of its stopped one that
        keeps what that one had paid for (its plan and the agents that delivered)."""
        args = ["--json", "--no-input", "--run-id", run_id, *self.options.flags, *flags]
        if task.budget_usd is not None:
            args += ["--budget", repr(task.budget_usd)]
        folder = out_folder(self.options, task)
        if folder is not None:
            args += ["--out", str(folder)]
        earlier = _retryable(task.runs)
        if earlier is not None:
            return [*args, "retry", earlier]
        for path in task.files:
            args += ["--file", path]
        return [*args, "--task", task.task]

    def _settle(self, task: TaskRow, result: JobResult) -> None:
        """The task's status from how its run ended.

        A budget stop is told apart by whose budget it was, as the run's reply names it
        (error.budget_of): its own cap (in the run, or its share at the gateway) finishes the
        task as `capped`; the batch's leaves it `budget`, for resume. A reply that names
        neither is taken as the batch's: resume runs it, as it always did.
        """
        reply = result.reply
        if reply is not None and reply.get("ok") is True:
            task.status = TaskStatus.OK
            task.error = ""
            return
        error = reply.get("error") if isinstance(reply, dict) else None
        kind = error.get("type") if isinstance(error, dict) else None
        headline = error.get("headline") if isinstance(error, dict) else None
        owner = error.get("budget_of") if isinstance(error, dict) else None
        killed = reply is None and result.exit_code > 128
        if result.exit_code in EXIT_INTERRUPTED or kind == "interrupted":
            task.status = TaskStatus.INTERRUPTED
        elif kind == "budget" and owner == BudgetOwner.RUN.value:
            task.status = TaskStatus.CAPPED
        elif kind == "budget":
            task.status = TaskStatus.BUDGET
        elif killed:
            task.status = TaskStatus.CRASHED
        else:
            task.status = TaskStatus.FAILED
        if isinstance(headline, str) and headline:
            task.error = headline
        elif killed and task.status is TaskStatus.CRASHED:
            signum = result.exit_code - 128
            task.error = f"the run's process was killed (signal {signum}) before it answered"
        else:
            last = [line for line in result.stderr.strip().splitlines() if line.strip()]
            task.error = (last[-1] if last else f"the run exited with {result.exit_code}")[:500]

    def _update(self, task: TaskRow) -> None:
        with self._lock:
            batchrecord.update_task(self.batch.batch_id, task)

    # ---- what is reported ------------------------------------------------------------------------

    def _line(self, task: TaskRow, result: JobResult | None) -> BatchTaskLine:
        line = BatchTaskLine(
            type="task",
            batch_id=self.batch.batch_id,
            id=task.task_id,
            line=task.line,
            status=task.status.value,
            ok=task.status is TaskStatus.OK,
            run_id=task.run_id,
            usd=round(task.usd, 6),
            seconds=round(task.seconds, 3),
            result=result.reply if result is not None else None,
        )
        if task.status is TaskStatus.INVALID:
            line["error"] = ErrorDetail(
                type="bad_line",
                headline=f"Line {task.line} is not a task: {task.error}",
                advice='Each line must be a JSON object such as {"id": "a1", "task": "..."}.',
                detail="",
            )
        elif result is not None and result.reply is None:
            line["error"] = ErrorDetail(
                type="run_failed",
                headline=f"The run for line {task.line} gave no answer: {task.error}",
                advice="The detail is the end of the run's error output.",
                detail=redact.redact(result.stderr[-1000:]),
            )
        elif task.status is TaskStatus.CAPPED:
            line["error"] = ErrorDetail(
                type=TaskStatus.CAPPED.value,
                headline=f"Line {task.line}'s own budget stopped its run. {task.error}",
                advice=capped_advice(task),
                detail="",
            )
        return line

    def progress(self) -> BatchProgress:
        with self._lock:
            done, capped, failed = self._done, self._capped, self._failed
            running, total = self._running, self._total
        elapsed = time.monotonic() - self._started
        finished = done + capped + failed
        eta = None
        if finished:
            eta = max(0.0, elapsed / finished * (total - finished))
        return BatchProgress(
            batch_id=self.batch.batch_id,
            total=total,
            done=done,
            capped=capped,
            failed=failed,
            running=running,
            usd=round(self.ledger.cost_usd(), 6),
            elapsed_seconds=elapsed,
            eta_seconds=eta,
        )

    def _report(self) -> None:
        self.events.progress(self.progress())


def summary(batch: BatchRow) -> BatchSummaryLine:
    """The batch's last output line."""
    return BatchSummaryLine(
        type="summary",
        batch_id=batch.batch_id,
        status=batch.status.value,
        tasks=len(batch.tasks),
        done=batch.count(TaskStatus.OK),
        capped=batch.count(TaskStatus.CAPPED),
        failed=batch.count(TaskStatus.FAILED),
        invalid=batch.count(TaskStatus.INVALID),
        unfinished=len(batch.unfinished()),
        usd=round(batch.usd, 6),
        seconds=round(batch.seconds, 3),
    )


def capped_advice(task: TaskRow) -> str:
    """How to go on with a task its own cap stopped: a retry given more money, on purpose (its
    plan and the agents that delivered are kept), or the task again when it had no plan."""
    more = f"{task.budget_usd!r}" if task.budget_usd is not None else "USD"
    stored = history.load(task.run_id) if task.run_id else None
    if stored is not None and stored.plan:
        amount = dollars(task.budget_usd) if task.budget_usd is not None else "that much"
        return (
            f"`agentgod retry {task.run_id} --budget {more}` finishes it with {amount} more to "
            "spend, reusing what it paid for; `batch resume` leaves it, since its own cap is spent."
        )
    return (
        "It stopped before it had a plan: run the task again with a larger budget (a line "
        'with a larger "budget", or `agentgod --budget USD "..."`); `batch resume` '
        "leaves it, since its own cap is spent."
    )


# ---- helpers -------------------------------------------------------------------------------------


def _fresh_run_id() -> str:
    """A run id no run in this home has (the run claims it, and its capability names it)."""
    runs, agents = config.runs_dir(), config.agents_dir()
    for _ in range(64):
        run_id = new_run_id()
        taken = (runs / run_id).exists() or (agents / run_id).exists()
        if not taken and not history.known(run_id):
            return run_id
    raise RuntimeError("no free run id after 64 draws")


def _flag(args: Sequence[str], name: str) -> str | None:
    """The value of a run's flag `name` (its last, which wins), or None."""
    found = None
    for at, arg in enumerate(args[:-1]):
        if arg == name:
            found = args[at + 1]
    return found


RETRYABLE = (RunStatus.INTERRUPTED, RunStatus.BUDGET, RunStatus.CRASHED)
"""How a run may have stopped that its task's next run retries, keeping what it paid for."""


def _retryable(runs: Sequence[str]) -> str | None:
    """The task's last run, when it stopped with a plan worth keeping (interrupted, out of
    money, or its process killed): resume retries it instead of paying for its plan and
    finished agents again."""
    if not runs:
        return None
    stored = history.load(runs[-1])
    if stored is None or not stored.plan:
        return None
    if stored.status in RETRYABLE:
        return stored.run_id
    return None
