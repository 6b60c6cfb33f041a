"""history.py — the run history: an embedded SQLite database under runs/. No model calls.

`runlog.archive` adds one row per run (and one per agent) to `history.db`; `agentgod history`,
`stats` and `last` read them back. Writers wait for each other (WAL, a busy timeout); readers never
create anything. A damaged database is moved aside and rebuilt from the Markdown run files that
runlog writes beside it, and the person is told (`notices`). What is stored was redacted by
runlog before it got here.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import config

if TYPE_CHECKING:
    from runlog import RunRecord

DB_NAME = "history.db"
SCHEMA_VERSION = 1
"""Stored in PRAGMA user_version; a later schema migrates from it."""
BUSY_TIMEOUT_MS = 5000
"""How long a writer waits for another agentgod process to finish its insert."""
PRIVATE_FILE = 0o600
"""Tasks and answers are the user's business: the records are readable by their owner only."""
_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
"""SQLite's verdicts on a file that is no database, or a damaged one (not a locked or busy one)."""

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    task TEXT NOT NULL,
    ok INTEGER NOT NULL,
    complexity TEXT,
    answer TEXT NOT NULL,
    error TEXT NOT NULL,
    revisions INTEGER NOT NULL,
    council_improved INTEGER NOT NULL,
    llm_calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    usd REAL NOT NULL,
    duration_seconds REAL NOT NULL,
    run_file TEXT,
    budget_exhausted INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_start ON runs (started_at);
CREATE TABLE IF NOT EXISTS run_agents (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    reused INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    seconds REAL NOT NULL,
    kind TEXT NOT NULL,
    error TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS run_agents_by_run ON run_agents (run_id);
CREATE INDEX IF NOT EXISTS run_agents_by_name ON run_agents (name);
"""


# ---- what the verbs read back ----------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRow:
    """One archived run, as `agentgod history` lists it."""

    id: int
    started_at: datetime
    task: str
    ok: bool
    complexity: str | None
    usd: float
    duration_seconds: float
    run_file: Path | None
    """The Markdown archive, or None when only the database row could be written."""
    agents: int
    """How many agents took part."""


@dataclass(frozen=True)
class LastAnswer:
    """The most recent successful run's answer, for `agentgod last`."""

    id: int
    started_at: datetime
    task: str
    answer: str
    run_file: Path | None


@dataclass(frozen=True)
class Stats:
    """Totals over every archived run, for `agentgod stats`."""

    runs: int = 0
    succeeded: int = 0
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    usd: float = 0.0
    mean_duration_seconds: float = 0.0
    most_used_agents: list[tuple[str, int]] = field(default_factory=list)
    """Up to five (name, runs it took part in), most first."""
    most_reliable_agents: list[tuple[str, int, int]] = field(default_factory=list)
    """Up to five (name, runs it succeeded in, runs) among agents with at least two runs."""

    @property
    def success_rate(self) -> float:
        """Succeeded runs over all runs; 0.0 before the first run."""
        return self.succeeded / self.runs if self.runs else 0.0


# ---- writing ---------------------------------------------------------------------------------


def database() -> Path:
    """Where the history is kept: runs/history.db."""
    return config.settings().runs_dir / DB_NAME


def insert(record: RunRecord, run_file: Path | None) -> None:
    """Add a (redacted) run's rows; a damaged history is set aside and rebuilt first.

    Raises what the database raised: runlog.archive turns it into a warning.
    """
    path = database()
    try:
        _insert_rows(path, record, run_file)
    except sqlite3.DatabaseError as error:
        if not _is_corrupt(error) or not _recover(path, without=run_file):
            raise
        _insert_rows(path, record, run_file)


def _insert_rows(path: Path, record: RunRecord, run_file: Path | None) -> None:
    cost = record.cost
    with contextlib.closing(_open_for_writing(path)) as db, db:
        cursor = db.execute(
            "INSERT INTO runs (started_at, task, ok, complexity, answer, error, revisions,"
            " council_improved, llm_calls, input_tokens, output_tokens, cache_write_tokens,"
            " cache_read_tokens, usd, duration_seconds, run_file, budget_exhausted)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                utc(record.started_at).isoformat(timespec="microseconds"),
                record.task,
                record.ok,
                record.complexity,
                record.answer,
                record.error,
                record.revisions,
                record.council_improved,
                cost["llm_calls"],
                cost["input_tokens"],
                cost["output_tokens"],
                cost["cache_write_tokens"],
                cost["cache_read_tokens"],
                cost["usd"],
                record.duration_seconds,
                str(run_file) if run_file else None,
                record.budget_exhausted,
            ),
        )
        db.executemany(
            "INSERT INTO run_agents"
            " (run_id, name, role, reused, ok, attempts, seconds, kind, error)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    cursor.lastrowid,
                    agent.name,
                    agent.role,
                    agent.reused,
                    agent.ok,
                    agent.attempts,
                    agent.seconds,
                    agent.kind,
                    agent.error,
                )
                for agent in record.agents
            ],
        )


def _open_for_writing(path: Path) -> sqlite3.Connection:
    """A connection to the history, creating the schema on first use; the file is private.

    SQLite gives the -wal and -shm files the database's own permissions.
    """
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE))
    with contextlib.suppress(OSError):
        path.chmod(PRIVATE_FILE)
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA journal_mode = WAL")
        if db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            db.executescript(
                f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            )
    except BaseException:
        db.close()
        raise
    return db


def _query(read: Callable[[sqlite3.Connection], _T], empty: _T) -> _T:
    """Run `read` on a read-only connection; `empty` when there is no history or it is unreadable.

    Nothing is created here, except when the history is damaged: then it is set aside and
    rebuilt from the run files (see _recover). A WAL database in a folder this user cannot
    write (no -shm file can be made) refuses a plain read-only open, so the second try reads it
    as immutable.
    """
    path = config.settings().runs_dir / DB_NAME
    recovered = False
    while path.is_file():
        for options in ("mode=ro", "immutable=1"):
            uri = f"{path.as_uri()}?{options}"
            try:
                with contextlib.closing(
                    sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
                ) as db:
                    return read(db)
            except sqlite3.Error as error:
                if _is_corrupt(error):
                    break
        else:
            return empty  # unreadable (locked, no permission), not damaged
        if recovered or not _recover(path):
            return empty
        recovered = True
    return empty


# ---- a damaged history ------------------------------------------------------------------------

_notices: list[str] = []
_notices_lock = threading.Lock()


def notices() -> list[str]:
    """What the archive had to repair since the last call (for the person to be told); drains."""
    with _notices_lock:
        taken = list(_notices)
        _notices.clear()
    return taken


def _notice(text: str) -> None:
    with _notices_lock:
        _notices.append(text)


def _is_corrupt(error: sqlite3.Error) -> bool:
    return getattr(error, "sqlite_errorname", "") in _CORRUPT


def _still_corrupt(path: Path) -> bool:
    """Checked again just before moving the file: another agentgod may have rebuilt it already."""
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            return bool(db.execute("PRAGMA quick_check").fetchone()[0] != "ok")
    except sqlite3.Error as error:
        return _is_corrupt(error)


def _recover(path: Path, without: Path | None = None) -> bool:
    """Move a damaged history.db aside and rebuild it from the run files; True when rebuilt.

    The damaged file (and its WAL, which a new database must not replay) is kept as
    history.db.corrupt-<stamp>, for whoever wants to dig. Each run file gives back its history
    row and agent rows; `without` is the run being archived now, whose full record follows.
    """
    if not _still_corrupt(path):
        return True
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    building = path.with_name(f"{path.name}.rebuilding-{os.getpid()}")
    try:
        path.rename(aside)
        for suffix in ("-wal", "-shm"):
            companion = path.with_name(path.name + suffix)
            if companion.exists():
                companion.rename(aside.with_name(aside.name + suffix))
        import runlog  # the run files are runlog's format (and runlog imports this module)

        records = [
            (record, run_file)
            for run_file in sorted(path.parent.glob("*.md"))
            if run_file != without and (record := runlog.read_run_file(run_file)) is not None
        ]
        for record, run_file in records:
            _insert_rows(building, record, run_file)
        if records:
            building.replace(path)
    except (OSError, sqlite3.Error) as error:
        _notice(f"the run history ({path}) is damaged and could not be rebuilt: {error}")
        return False
    finally:
        for leftover in (
            building,
            *(building.with_name(building.name + s) for s in ("-wal", "-shm")),
        ):
            leftover.unlink(missing_ok=True)
    _notice(
        f"the run history was damaged: moved aside to {aside} and rebuilt from "
        f"{len(records)} run file{'' if len(records) == 1 else 's'}"
    )
    return True


def history(limit: int = 10) -> list[HistoryRow]:
    """The latest `limit` runs, newest first; [] when nothing has been archived or readable."""

    def read(db: sqlite3.Connection) -> list[HistoryRow]:
        rows = db.execute(
            "SELECT id, started_at, task, ok, complexity, usd, duration_seconds, run_file,"
            " (SELECT COUNT(*) FROM run_agents WHERE run_agents.run_id = runs.id)"
            " FROM runs ORDER BY started_at DESC, id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [
            HistoryRow(
                id=row[0],
                started_at=datetime.fromisoformat(row[1]),
                task=row[2],
                ok=bool(row[3]),
                complexity=row[4],
                usd=row[5],
                duration_seconds=row[6],
                run_file=Path(row[7]) if row[7] else None,
                agents=row[8],
            )
            for row in rows
        ]

    return _query(read, []) if limit > 0 else []


def last() -> LastAnswer | None:
    """The newest successful run's answer, or None when there is none."""

    def read(db: sqlite3.Connection) -> LastAnswer | None:
        row = db.execute(
            "SELECT id, started_at, task, answer, run_file FROM runs WHERE ok"
            " ORDER BY started_at DESC, id DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        return LastAnswer(
            id=row[0],
            started_at=datetime.fromisoformat(row[1]),
            task=row[2],
            answer=row[3],
            run_file=Path(row[4]) if row[4] else None,
        )

    return _query(read, None)


_PER_RUN = "SELECT name, run_id, MAX(ok) AS ok FROM run_agents GROUP BY name, run_id"
"""One row per agent per run it took part in; ok when any of its records in that run was."""


def stats() -> Stats:
    """Totals over every archived run; all zeros when there is no history."""

    def read(db: sqlite3.Connection) -> Stats:
        totals = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(ok), 0), COALESCE(SUM(llm_calls), 0),"
            " COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),"
            " COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(cache_read_tokens), 0),"
            " COALESCE(SUM(usd), 0.0), COALESCE(AVG(duration_seconds), 0.0) FROM runs"
        ).fetchone()
        used = db.execute(
            f"WITH per_run AS ({_PER_RUN}) SELECT name, COUNT(*) AS runs FROM per_run"
            " GROUP BY name ORDER BY runs DESC, name LIMIT 5"
        ).fetchall()
        trusted = db.execute(
            f"WITH per_run AS ({_PER_RUN}) SELECT name, SUM(ok), COUNT(*) AS runs FROM per_run"
            " GROUP BY name HAVING runs >= 2"
            " ORDER BY CAST(SUM(ok) AS REAL) / runs DESC, runs DESC, name LIMIT 5"
        ).fetchall()
        return Stats(
            runs=totals[0],
            succeeded=totals[1],
            llm_calls=totals[2],
            input_tokens=totals[3],
            output_tokens=totals[4],
            cache_write_tokens=totals[5],
            cache_read_tokens=totals[6],
            usd=totals[7],
            mean_duration_seconds=totals[8],
            most_used_agents=[(name, runs) for name, runs in used],
            most_reliable_agents=[(name, ok, runs) for name, ok, runs in trusted],
        )

    return _query(read, Stats())


def utc(moment: datetime) -> datetime:
    """A moment in UTC; a naive one is taken to be UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
