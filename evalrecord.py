"""evalrecord.py — what the history keeps of an eval: its cases, and each case's result per arm.

An eval is recorded the moment it starts — every case, and a pending result for each case in
each arm — and each result is written as it is settled (answered and scored, or failed), so an
eval stopped by Ctrl-C, a crash or its budget resumes from the record alone
(`agentgod eval resume ID`) and pays for nothing already finished. Its runs ran as one batch
(batchrecord: kind `eval`, its parent the eval), whose tasks are the (case, arm) pairs; a
result names its run, whose own record is the history's as always. The tables are
historydb's version 8. Also here: the user's past tasks an eval may take (`archive_tasks`).
No model calls.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentgod import history, historydb
from agentgod.kinds import BatchStatus, TaskStatus


@dataclass
class CaseRow:
    """One case: what to ask, with which files, and how its answer is scored (a suite's, as
    evalsuite reads it, and as the eval recorded and ran it)."""

    seq: int
    case_id: str
    task: str
    files: list[str] = field(default_factory=list)
    """Attachments, as absolute paths."""
    expect: dict[str, Any] = field(default_factory=dict)
    budget_usd: float | None = None
    line: int = 0
    """Its line in the suite file (1-based), or its place in a built-in suite."""

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "id": self.case_id,
            "line": self.line,
            "task": self.task,
            "files": list(self.files),
            "expect": dict(self.expect),
            "budget_usd": self.budget_usd,
        }


@dataclass
class ResultRow:
    """One case in one arm: how its run ended, its answer's score, and what it cost."""

    seq: int
    """The case's."""
    arm: str
    task_seq: int
    """The batch task that ran it."""
    status: TaskStatus = TaskStatus.PENDING
    score: float | None = None
    """In [0, 1]; None while unscored, or when it could not be scored (detail says why)."""
    detail: str = ""
    answer: str = ""
    error_kind: str = ""
    """Why it has no answer: the run's error type (budget, interrupted, crashed, ...)."""
    error: str = ""
    run_id: str | None = None
    usd: float = 0.0
    """What its run cost, as the gateway billed it."""
    calls: int = 0
    seconds: float = 0.0
    judge_usd: float = 0.0
    """What judging it cost (a rubric's pairwise judge), apart from its run."""
    judge_calls: int = 0
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        """Its run has ended and its score is known (or known to be unknowable)."""
        return self.status.finished and (self.score is not None or bool(self.detail))

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "arm": self.arm,
            "status": self.status.value,
            "score": self.score,
            "detail": self.detail,
            "answer": self.answer,
            "error_kind": self.error_kind,
            "error": self.error,
            "run_id": self.run_id,
            "usd": round(self.usd, 6),
            "calls": self.calls,
            "seconds": round(self.seconds, 3),
            "judge_usd": round(self.judge_usd, 6),
            "judge_calls": self.judge_calls,
            "verdicts": list(self.verdicts),
        }


@dataclass
class EvalRow:
    """One eval as recorded."""

    eval_id: str
    suite: str
    arms: list[str]
    options: dict[str, Any] = field(default_factory=dict)
    """How it runs: parallel, budget_usd, model, effort, the runs' flags, the limit."""
    batch_id: str | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    status: BatchStatus = BatchStatus.RUNNING
    usd: float = 0.0
    """Everything it spent: its runs, its single calls and its judges."""
    seconds: float = 0.0
    cases: list[CaseRow] = field(default_factory=list)
    results: list[ResultRow] = field(default_factory=list)

    def result(self, seq: int, arm: str) -> ResultRow | None:
        return next((r for r in self.results if r.seq == seq and r.arm == arm), None)

    def unsettled(self) -> list[ResultRow]:
        return [result for result in self.results if not result.settled]


def new_eval_id() -> str:
    """A fresh eval id (8 hex), unused in this home."""
    return historydb.unused_id(load, "eval")


def create(record: EvalRow) -> None:
    """Record a new eval with its cases and a pending result per case and arm (one
    transaction)."""
    with contextlib.closing(historydb.open_home()) as db, db:
        db.execute(
            "INSERT INTO evals (eval_id, started_at, status, suite, arms, options, batch_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                record.eval_id,
                historydb.stamp(record.started_at),
                record.status.value,
                record.suite,
                json.dumps(record.arms),
                json.dumps(record.options),
                record.batch_id,
            ),
        )
        db.executemany(
            "INSERT INTO eval_cases (eval_id, seq, case_id, line, task, files, expect,"
            " budget_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    record.eval_id,
                    case.seq,
                    case.case_id,
                    case.line,
                    case.task,
                    json.dumps(case.files),
                    json.dumps(case.expect),
                    case.budget_usd,
                )
                for case in record.cases
            ],
        )
        db.executemany(
            "INSERT INTO eval_results (eval_id, seq, arm, task_seq, status) VALUES (?, ?, ?, ?, ?)",
            [(record.eval_id, r.seq, r.arm, r.task_seq, r.status.value) for r in record.results],
        )


def update_result(eval_id: str, result: ResultRow) -> None:
    """Record how one result stands now."""
    values = result.to_json()
    values["verdicts"] = json.dumps(result.verdicts)
    values["status"] = result.status.value
    values["usd"], values["seconds"] = result.usd, result.seconds
    values["judge_usd"] = result.judge_usd
    with contextlib.closing(historydb.open_home()) as db, db:
        db.execute(
            "UPDATE eval_results SET status = :status, score = :score, detail = :detail,"
            " answer = :answer, error_kind = :error_kind, error = :error, run_id = :run_id,"
            " usd = :usd, calls = :calls, seconds = :seconds, judge_usd = :judge_usd,"
            " judge_calls = :judge_calls, verdicts = :verdicts"
            " WHERE eval_id = :eval_id AND seq = :seq AND arm = :arm",
            {**values, "eval_id": eval_id},
        )


def update_eval(record: EvalRow) -> None:
    """Record how the eval stands now (its status, options, cost, time, end)."""
    with contextlib.closing(historydb.open_home()) as db, db:
        db.execute(
            "UPDATE evals SET status = ?, options = ?, usd = ?, seconds = ?, finished_at = ?,"
            " batch_id = ? WHERE eval_id = ?",
            (
                record.status.value,
                json.dumps(record.options),
                record.usd,
                record.seconds,
                historydb.stamp(record.finished_at) if record.finished_at else None,
                record.batch_id,
                record.eval_id,
            ),
        )


def load(ref: str | None = None) -> EvalRow | None:
    """The eval `ref` names (its id, or a unique prefix of at least historydb.MIN_PREFIX
    characters; None: the newest), or None. Raises ValueError for a prefix too short or
    shared."""
    wanted = historydb.wanted_id(ref, "an eval")

    def read(db: sqlite3.Connection) -> EvalRow | None:
        row = historydb.row_named(db, "evals", "eval_id", wanted)
        return None if row is None else _eval(db, row)

    try:
        return history.query(read, None)
    except sqlite3.OperationalError:
        return None  # a history from before evals, that nobody could migrate


def listing(limit: int = 20) -> list[dict[str, Any]]:
    """The latest evals, newest first: id, suite, arms, status, cases, cost, when."""

    def read(db: sqlite3.Connection) -> list[dict[str, Any]]:
        rows = db.execute(
            "SELECT eval_id, started_at, status, suite, arms, usd, seconds,"
            " (SELECT COUNT(*) FROM eval_cases WHERE eval_cases.eval_id = evals.eval_id)"
            " FROM evals ORDER BY started_at DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [
            {
                "eval_id": row[0],
                "started_at": row[1],
                "status": row[2],
                "suite": row[3],
                "arms": json.loads(row[4]),
                "usd": round(row[5], 6),
                "seconds": round(row[6], 3),
                "cases": row[7],
            }
            for row in rows
        ]

    try:
        return history.query(read, [])
    except sqlite3.OperationalError:
        return []


def _eval(db: sqlite3.Connection, row: sqlite3.Row) -> EvalRow:
    eval_id = row["eval_id"]
    cases = db.execute(
        "SELECT * FROM eval_cases WHERE eval_id = ? ORDER BY seq", (eval_id,)
    ).fetchall()
    results = db.execute(
        "SELECT * FROM eval_results WHERE eval_id = ? ORDER BY seq, task_seq", (eval_id,)
    ).fetchall()
    return EvalRow(
        eval_id=eval_id,
        suite=row["suite"],
        arms=json.loads(row["arms"]),
        options=json.loads(row["options"]),
        batch_id=row["batch_id"],
        started_at=datetime.fromisoformat(row["started_at"]),
        finished_at=datetime.fromisoformat(row["finished_at"]) if row["finished_at"] else None,
        status=BatchStatus(row["status"]),
        usd=row["usd"],
        seconds=row["seconds"],
        cases=[
            CaseRow(
                seq=case["seq"],
                case_id=case["case_id"],
                task=case["task"],
                files=json.loads(case["files"]),
                expect=json.loads(case["expect"]),
                budget_usd=case["budget_usd"],
                line=case["line"],
            )
            for case in cases
        ],
        results=[
            ResultRow(
                seq=result["seq"],
                arm=result["arm"],
                task_seq=result["task_seq"],
                status=TaskStatus(result["status"]),
                score=result["score"],
                detail=result["detail"],
                answer=result["answer"],
                error_kind=result["error_kind"],
                error=result["error"],
                run_id=result["run_id"],
                usd=result["usd"],
                calls=result["calls"],
                seconds=result["seconds"],
                judge_usd=result["judge_usd"],
                judge_calls=result["judge_calls"],
                verdicts=json.loads(result["verdicts"]),
            )
            for result in results
        ],
    )


# ---- the user's own tasks ----------------------------------------------------------------------


@dataclass(frozen=True)
class PastTask:
    run_id: str
    task: str
    files: list[str]


def archive_tasks(limit: int) -> list[PastTask]:
    """The user's latest distinct tasks that answered, newest first: no retry, no follow-up in
    a conversation (its task means little alone), no run of a batch an eval started."""

    def read(db: sqlite3.Connection) -> list[PastTask]:
        rows = db.execute(
            "SELECT run_id, task, attachments FROM runs"
            " WHERE status = 'ok' AND retry_of IS NULL AND run_id IS NOT NULL"
            " AND (conversation_id IS NULL OR id = (SELECT MIN(first.id) FROM runs AS first"
            "      WHERE first.conversation_id = runs.conversation_id))"
            " ORDER BY id DESC LIMIT ?",
            (limit * 4,),
        ).fetchall()
        evals = _eval_runs(db)
        found: list[PastTask] = []
        seen: set[str] = set()
        for run_id, task, attached in rows:
            if run_id in evals or task in seen:
                continue
            seen.add(task)
            files = [item["path"] for item in json.loads(attached or "[]") if "path" in item]
            found.append(PastTask(run_id, task, files))
            if len(found) == limit:
                break
        return found

    try:
        return history.query(read, [])
    except sqlite3.OperationalError:
        return []


def _eval_runs(db: sqlite3.Connection) -> set[str]:
    """Every run a batch of kind 'eval' had."""
    runs: set[str] = set()
    with contextlib.suppress(sqlite3.OperationalError):
        for (listed,) in db.execute(
            "SELECT batch_tasks.runs FROM batch_tasks JOIN batches"
            " ON batches.batch_id = batch_tasks.batch_id WHERE batches.kind = 'eval'"
        ):
            runs.update(json.loads(listed or "[]"))
    return runs
