"""batchrecord.py — what the history keeps of a batch: its tasks, how each stands, its runs.

A batch is recorded the moment it starts (every task, bad lines included, as `pending` or
`invalid`) and each task's row is updated as it finishes, so a batch stopped by Ctrl-C, a crash
or its budget can be resumed from the record alone (`agentgod batch resume ID`), whatever its
tasks were read from. The runs themselves are recorded by each run, as always (history.py); a
task names the runs it had (`runs`, the last one `run_id`). The tables live in history.db
(historydb's schema, version 5). No model calls.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentgod import history, historydb
from agentgod.kinds import BatchStatus, TaskStatus


@dataclass
class TaskRow:
    """One task of a batch: its line, what to run, and how it stands."""

    seq: int
    """Its place in the batch (0-based), the order results are listed in."""
    line: int
    """Its line number in the file (1-based), as errors name it."""
    task: str
    task_id: str | None = None
    """The line's own `id`, when it gave one."""
    files: list[str] = field(default_factory=list)
    """Attachments, as absolute paths."""
    budget_usd: float | None = None
    status: TaskStatus = TaskStatus.PENDING
    run_id: str | None = None
    """Its latest run."""
    runs: list[str] = field(default_factory=list)
    """Every run it had, oldest first (a resumed task may have more than one)."""
    usd: float = 0.0
    """What its runs cost together, as the gateway billed them."""
    seconds: float = 0.0
    error: str = ""
    """Why its line is invalid or its run failed, in one line."""

    @property
    def label(self) -> str:
        """How results name it: its own id, else its line."""
        return self.task_id if self.task_id is not None else f"line {self.line}"

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "line": self.line,
            "id": self.task_id,
            "task": self.task,
            "files": list(self.files),
            "budget_usd": self.budget_usd,
            "status": self.status.value,
            "run_id": self.run_id,
            "runs": list(self.runs),
            "usd": round(self.usd, 6),
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }


@dataclass
class BatchRow:
    """One batch as recorded."""

    batch_id: str
    source: str
    """The file its tasks came from, or "-" for stdin."""
    kind: str = "batch"
    """What started it (`batch`; an eval records its own kind)."""
    parent: str | None = None
    """The id of what it belongs to (an eval's), when anything."""
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    status: BatchStatus = BatchStatus.RUNNING
    options: dict[str, Any] = field(default_factory=dict)
    """How it was run (parallel, budget_usd, engine, the flags given to every run)."""
    usd: float = 0.0
    seconds: float = 0.0
    tasks: list[TaskRow] = field(default_factory=list)

    def count(self, status: TaskStatus) -> int:
        return sum(1 for task in self.tasks if task.status is status)

    def unfinished(self) -> list[TaskRow]:
        """The tasks resume would run."""
        return [task for task in self.tasks if not task.status.finished]

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "kind": self.kind,
            "parent": self.parent,
            "source": self.source,
            "status": self.status.value,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "options": dict(self.options),
            "usd": round(self.usd, 6),
            "seconds": round(self.seconds, 3),
            "counts": {status.value: self.count(status) for status in TaskStatus},
            "tasks": [task.to_json() for task in self.tasks],
        }


def new_batch_id() -> str:
    """A fresh batch id, the same shape as a run id (8 hex), unused in this home."""
    return historydb.unused_id(load, "batch")


def _write(sql: str, rows: Sequence[dict[str, Any]]) -> None:
    with contextlib.closing(historydb.open_home()) as db, db:
        db.executemany(sql, rows)


def create(batch: BatchRow) -> None:
    """Record a new batch and all of its tasks (one transaction)."""
    with contextlib.closing(historydb.open_home()) as db, db:
        db.execute(
            "INSERT INTO batches (batch_id, kind, parent, started_at, status, source, options)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                batch.batch_id,
                batch.kind,
                batch.parent,
                historydb.stamp(batch.started_at),
                batch.status.value,
                batch.source,
                json.dumps(batch.options),
            ),
        )
        db.executemany(
            "INSERT INTO batch_tasks (batch_id, seq, line, task_id, task, files, budget_usd,"
            " status, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    batch.batch_id,
                    task.seq,
                    task.line,
                    task.task_id,
                    task.task,
                    json.dumps(task.files),
                    task.budget_usd,
                    task.status.value,
                    task.error,
                )
                for task in batch.tasks
            ],
        )


def update_task(batch_id: str, task: TaskRow) -> None:
    """Record how one task stands now (its status, runs, cost, time, error)."""
    _write(
        "UPDATE batch_tasks SET status = :status, run_id = :run_id, runs = :runs, usd = :usd,"
        " seconds = :seconds, error = :error WHERE batch_id = :batch_id AND seq = :seq",
        [
            {
                "status": task.status.value,
                "run_id": task.run_id,
                "runs": json.dumps(task.runs),
                "usd": task.usd,
                "seconds": task.seconds,
                "error": task.error,
                "batch_id": batch_id,
                "seq": task.seq,
            }
        ],
    )


def update_batch(batch: BatchRow) -> None:
    """Record how the batch stands now (its status, cost, time, when it finished)."""
    _write(
        "UPDATE batches SET status = :status, usd = :usd, seconds = :seconds,"
        " finished_at = :finished_at WHERE batch_id = :batch_id",
        [
            {
                "status": batch.status.value,
                "usd": batch.usd,
                "seconds": batch.seconds,
                "finished_at": historydb.stamp(batch.finished_at) if batch.finished_at else None,
                "batch_id": batch.batch_id,
            }
        ],
    )


def load(ref: str | None = None) -> BatchRow | None:
    """The batch `ref` names (its id, or a unique prefix of at least historydb.MIN_PREFIX
    characters; None: the newest), or None. Raises ValueError for a prefix too short or
    shared."""
    wanted = historydb.wanted_id(ref, "a batch")

    def read(db: sqlite3.Connection) -> BatchRow | None:
        row = historydb.row_named(db, "batches", "batch_id", wanted)
        return None if row is None else _batch(db, row)

    try:
        return history.query(read, None)
    except sqlite3.OperationalError:
        return None  # a history an older agentgod wrote and nobody could migrate


def _batch(db: sqlite3.Connection, row: sqlite3.Row) -> BatchRow:
    tasks = db.execute(
        "SELECT * FROM batch_tasks WHERE batch_id = ? ORDER BY seq", (row["batch_id"],)
    ).fetchall()
    return BatchRow(
        batch_id=row["batch_id"],
        kind=row["kind"],
        parent=row["parent"],
        source=row["source"],
        started_at=datetime.fromisoformat(row["started_at"]),
        finished_at=datetime.fromisoformat(row["finished_at"]) if row["finished_at"] else None,
        status=BatchStatus(row["status"]),
        options=json.loads(row["options"]),
        usd=row["usd"],
        seconds=row["seconds"],
        tasks=[
            TaskRow(
                seq=task["seq"],
                line=task["line"],
                task=task["task"],
                task_id=task["task_id"],
                files=json.loads(task["files"]),
                budget_usd=task["budget_usd"],
                status=TaskStatus(task["status"]),
                run_id=task["run_id"],
                runs=json.loads(task["runs"]),
                usd=task["usd"],
                seconds=task["seconds"],
                error=task["error"],
            )
            for task in tasks
        ],
    )
