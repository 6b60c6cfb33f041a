"""historydb.py — the history's database file itself: kept current, openable and whole.

history.py says what is stored and reads it back; this module looks after the file it lives in,
runs/history.db: its schema (versioned in PRAGMA user_version, an older one migrated in place),
how it is opened (private to its owner, WAL, a busy timeout so writers wait for each other;
read-only for readers, who create nothing), and what happens when it is damaged: it is moved
aside and rebuilt from the Markdown run files runlog writes beside it, and the person is told
(`notices`). Turning a record into rows is history's, so a rebuild is handed that step
(`Rebuild`) rather than importing history back. No model calls.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from agentgod import config, runfile
from agentgod.agent_runtime import BODY_END
from agentgod.runrecord import RunRecord, new_run_id

DB_NAME = "history.db"
SCHEMA_VERSION = 8
"""Stored in PRAGMA user_version; an older database is migrated up in place (_migrate)."""
BUSY_TIMEOUT_MS = 5000
"""How long a writer waits for another agentgod process to finish its insert."""
LOCK_POLL_MS = 50
"""One wait for a lock inside SQLite: `write` waits in slices this long, so a stop signal is
heard between them rather than after the whole wait."""
PRIVATE_FILE = 0o600
"""Tasks and answers are the user's business: the records are readable by their owner only."""
_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
"""SQLite's verdicts on a file that is no database, or a damaged one (not a locked or busy one)."""

_T = TypeVar("_T")

MIN_PREFIX = 4
"""The fewest characters of an id (a run's, a batch's, an eval's) that may name it."""
HIGHEST = chr(0x10FFFF)
"""Sorts after any character an id may hold next (SQLite compares text's UTF-8 bytes): the ids
that start with a prefix all sort between the prefix and the prefix followed by this, so they
are a range of the id's index, never a look at every row."""


def wanted_id(ref: str | None, what: str) -> str | None:
    """`ref` as the id, or the start of the id, to look a `what` (a run, a batch, an eval) up
    by: stripped and lowered; None (the newest) stays None. Raises ValueError when it is too
    short to name one."""
    if ref is None:
        return None
    wanted = ref.strip().lower()
    if len(wanted) < MIN_PREFIX:
        raise ValueError(
            f"{ref!r} is too short to name {what}: give at least {MIN_PREFIX} characters of its id"
        )
    return wanted


def row_named(
    db: sqlite3.Connection, table: str, column: str, wanted: str | None
) -> sqlite3.Row | None:
    """The row of `table` (batches, evals) whose `column`, its id, is `wanted` or starts with
    it; the newest (by started_at) when `wanted` is None; None when there is none. Raises
    ValueError when the prefix starts several ids and names none of them whole."""
    db.row_factory = sqlite3.Row
    if wanted is None:
        newest = f"SELECT * FROM {table} ORDER BY started_at DESC LIMIT 1"
        return db.execute(newest).fetchone()  # type: ignore[no-any-return]
    rows = db.execute(
        f"SELECT * FROM {table} WHERE {column} >= ? AND {column} < ?", (wanted, wanted + HIGHEST)
    ).fetchall()
    exact = [row for row in rows if row[column] == wanted]
    if len(rows) > 1 and not exact:
        named = ", ".join(row[column] for row in rows[:5])
        raise ValueError(f"{wanted!r} is the start of several ids: {named}; give more of it")
    chosen = exact or rows
    return chosen[0] if chosen else None


_SCHEMA_V1 = """
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
"""The first schema, as databases written before issue 12 have it; every database starts here
and is migrated up, so a new one and an old one end up alike. (run_agents.run_id is the integer
runs.id; the short id people type is runs.run_id, from version 2 on.)"""

_V2_COLUMNS = (
    ("runs", "run_id TEXT"),
    ("runs", "status TEXT NOT NULL DEFAULT 'failed'"),
    ("runs", "conversation_id TEXT"),
    ("runs", "retry_of TEXT"),
    ("runs", "model TEXT NOT NULL DEFAULT ''"),
    ("runs", "effort TEXT"),
    ("runs", "reasoning TEXT NOT NULL DEFAULT ''"),
    ("runs", "plan TEXT NOT NULL DEFAULT '[]'"),
    ("runs", "waves TEXT NOT NULL DEFAULT '[]'"),
    ("runs", "failures TEXT NOT NULL DEFAULT '[]'"),
    ("runs", "web_searches INTEGER NOT NULL DEFAULT 0"),
    ("runs", "estimate INTEGER NOT NULL DEFAULT 0"),
    ("runs", "phases TEXT NOT NULL DEFAULT '{}'"),
    ("runs", "warnings TEXT NOT NULL DEFAULT '[]'"),
    ("runs", "sandbox TEXT NOT NULL DEFAULT '[]'"),
    ("runs", "outputs TEXT NOT NULL DEFAULT '{}'"),
    ("runs", "attachments TEXT NOT NULL DEFAULT '[]'"),
    ("runs", "artifacts TEXT NOT NULL DEFAULT '[]'"),
    ("run_agents", "usd REAL NOT NULL DEFAULT 0"),
    ("run_agents", "source TEXT NOT NULL DEFAULT ''"),
    ("run_agents", "inputs TEXT NOT NULL DEFAULT '[]'"),
    ("run_agents", "output TEXT NOT NULL DEFAULT ''"),
    ("run_agents", "calls INTEGER NOT NULL DEFAULT 0"),
    ("run_agents", "input_tokens INTEGER NOT NULL DEFAULT 0"),
    ("run_agents", "output_tokens INTEGER NOT NULL DEFAULT 0"),
    ("run_agents", "cache_write_tokens INTEGER NOT NULL DEFAULT 0"),
    ("run_agents", "cache_read_tokens INTEGER NOT NULL DEFAULT 0"),
    ("run_agents", "web_searches INTEGER NOT NULL DEFAULT 0"),
)
"""Version 2 (issue 12): the whole run. JSON text where a value is a list or a mapping."""

_V2_STATEMENTS = (
    "UPDATE runs SET status = CASE WHEN ok THEN 'ok' WHEN budget_exhausted THEN 'budget'"
    " ELSE 'failed' END",
    """CREATE TABLE IF NOT EXISTS run_calls (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    phase TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    web_searches INTEGER NOT NULL,
    usd REAL NOT NULL,
    at TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
)""",
)
_V2_INDEXES = (
    "CREATE UNIQUE INDEX IF NOT EXISTS runs_by_run_id ON runs (run_id)",
    "CREATE INDEX IF NOT EXISTS runs_by_conversation ON runs (conversation_id, started_at)",
)

_V3_COLUMNS = (("runs", "owner TEXT"),)
"""Version 3 (issue 24): a run is recorded as it starts, and `owner` names the process running
it (journal.Owner, as JSON) until it is archived, so a later command can tell a live run from one
whose process is gone."""
_V3_INDEXES = ("CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status)",)

_V4_COLUMNS = (
    ("run_calls", "agent TEXT NOT NULL DEFAULT ''"),
    ("run_calls", "seconds REAL NOT NULL DEFAULT 0"),
    ("run_calls", "web_fetches INTEGER NOT NULL DEFAULT 0"),
)
"""Version 4 (issue 29): whom each model call served, how long it took, the pages it fetched:
what a run's timeline and trace place each call by."""
_V5_STATEMENTS = (
    """CREATE TABLE IF NOT EXISTS batches (
    batch_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    parent TEXT,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    source TEXT NOT NULL,
    options TEXT NOT NULL DEFAULT '{}',
    usd REAL NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0
)""",
    """CREATE TABLE IF NOT EXISTS batch_tasks (
    batch_id TEXT NOT NULL REFERENCES batches (batch_id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    line INTEGER NOT NULL,
    task_id TEXT,
    task TEXT NOT NULL,
    files TEXT NOT NULL DEFAULT '[]',
    budget_usd REAL,
    status TEXT NOT NULL,
    run_id TEXT,
    runs TEXT NOT NULL DEFAULT '[]',
    usd REAL NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (batch_id, seq)
)""",
    "CREATE INDEX IF NOT EXISTS batches_by_start ON batches (started_at)",
)
"""Version 5 (issue 27): batches of runs (batchrecord.py reads and writes them). A batch's runs
are linked from its tasks (batch_tasks.runs), so the runs table itself is unchanged."""

_V6_STATEMENTS = (
    """CREATE TABLE IF NOT EXISTS source_parts (
    id INTEGER PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL
)""",
)
_V6_COLUMNS = (
    ("run_agents", "source_head INTEGER REFERENCES source_parts (id)"),
    ("run_agents", "source_tail INTEGER REFERENCES source_parts (id)"),
)
_V6_INDEXES = (
    "DROP INDEX IF EXISTS run_agents_by_name",
    "CREATE INDEX IF NOT EXISTS run_agents_by_name_run ON run_agents (name, run_id, ok)",
    "CREATE INDEX IF NOT EXISTS runs_totals ON runs (ok, llm_calls, input_tokens, output_tokens,"
    " cache_write_tokens, cache_read_tokens, usd, duration_seconds)",
)
"""Version 6 (issue 30): a year of runs stays small and quick. Every agent's stored source
inlines the same ~20 KB runtime and the same footer: those parts are kept once each, by their
sha256, in `source_parts`, and an agent's row holds only its own part (`source`) between the two
it names (`source_head`, `source_tail`; NULL: none), joined back byte for byte on reading
(`store_source`, `whole_source`); that part and the agent's output are stored compressed when
that saves room (`pack`, `unpack`). `stats` reads two
covering indexes instead of every row: its totals from `runs_totals`, its per-agent counts from
`run_agents_by_name_run` (which replaces the index on the name alone)."""
_MIGRATION_BATCH = 200
"""Agent rows whose sources a migration to version 6 splits at a time (bounded memory)."""
_COMPACT_AT = 0.25
"""After a migration freed at least this share of the file's pages, it is compacted (VACUUM)."""

_V7_COLUMNS = (("run_calls", "asked TEXT NOT NULL DEFAULT ''"),)
"""Version 7 (issue 26): the model each call was asked of, beside `model`, the one that answered
(another when a fallback did; '' in rows written before: `model`)."""

_V8_STATEMENTS = (
    """CREATE TABLE IF NOT EXISTS evals (
    eval_id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    suite TEXT NOT NULL,
    arms TEXT NOT NULL DEFAULT '[]',
    options TEXT NOT NULL DEFAULT '{}',
    batch_id TEXT,
    usd REAL NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0
)""",
    """CREATE TABLE IF NOT EXISTS eval_cases (
    eval_id TEXT NOT NULL REFERENCES evals (eval_id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    case_id TEXT NOT NULL,
    line INTEGER NOT NULL DEFAULT 0,
    task TEXT NOT NULL,
    files TEXT NOT NULL DEFAULT '[]',
    expect TEXT NOT NULL DEFAULT '{}',
    budget_usd REAL,
    PRIMARY KEY (eval_id, seq)
)""",
    """CREATE TABLE IF NOT EXISTS eval_results (
    eval_id TEXT NOT NULL REFERENCES evals (eval_id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    arm TEXT NOT NULL,
    task_seq INTEGER NOT NULL,
    status TEXT NOT NULL,
    score REAL,
    detail TEXT NOT NULL DEFAULT '',
    answer TEXT NOT NULL DEFAULT '',
    error_kind TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    run_id TEXT,
    usd REAL NOT NULL DEFAULT 0,
    calls INTEGER NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0,
    judge_usd REAL NOT NULL DEFAULT 0,
    judge_calls INTEGER NOT NULL DEFAULT 0,
    verdicts TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (eval_id, seq, arm)
)""",
    "CREATE INDEX IF NOT EXISTS evals_by_start ON evals (started_at)",
)
"""Version 8 (issue 28): evals (evalrecord.py reads and writes them). An eval's runs ran as one
batch (evals.batch_id, a batch of kind 'eval' whose parent is the eval); each case's result in
each arm names its run (eval_results.run_id)."""


Rebuild = Callable[[Path, RunRecord, Path | None], None]
"""Writes one run's rows into the database at a path (history's _insert_rows): what a rebuild
from the run files does for each of them."""


def database() -> Path:
    """Where the history is kept: runs/history.db."""
    return config.runs_dir() / DB_NAME


def stamp(moment: datetime) -> str:
    """A moment as the history stores one: UTC, ISO 8601 to the microsecond (text that sorts
    as the time it names)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def unused_id(taken: Callable[[str], object], what: str) -> str:
    """A fresh id the shape of a run id (8 hex) that `taken` finds nothing under (a batch's, an
    eval's): ids stay apart across the home's records."""
    for _ in range(64):
        fresh = new_run_id()
        if taken(fresh) is None:
            return fresh
    raise RuntimeError(f"no free {what} id after 64 draws")


# ---- opening it --------------------------------------------------------------------------------


def open_home() -> sqlite3.Connection:
    """The home's history for writing (`database()`), its runs/ folder made when missing."""
    path = database()
    path.parent.mkdir(parents=True, exist_ok=True)
    return open_for_writing(path)


def open_for_writing(path: Path, busy_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """A connection to the history, its schema created or migrated first; the file is private.

    SQLite gives the -wal and -shm files the database's own permissions. `busy_ms` is how long
    one statement waits for another writer's lock.

    The file is opened here only to create it: closing any descriptor of it would drop every
    POSIX lock this process holds on it, those of another thread's SQLite connection included,
    and let another process write under that connection's feet (a malformed database).
    """
    if not path.exists():
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    with contextlib.suppress(OSError):
        path.chmod(PRIVATE_FILE)
    db = sqlite3.connect(path, timeout=busy_ms / 1000)
    try:
        db.execute(f"PRAGMA busy_timeout = {busy_ms}")
        db.execute("PRAGMA journal_mode = WAL")
        if _version(db) < SCHEMA_VERSION and _migrate(db) < 6:
            _compact(db)  # its sources shared their runtime: most of the file is free now
    except BaseException:
        db.close()
        raise
    return db


def write(path: Path, work: Callable[[sqlite3.Connection], None], wait_seconds: float) -> None:
    """Do `work` in one transaction, waiting up to `wait_seconds` for another writer's lock.

    SQLite waits for a lock in C, where no signal handler runs; waiting in short slices here
    keeps a Ctrl-C or SIGTERM prompt while another process holds the history.
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            with contextlib.closing(open_for_writing(path, busy_ms=LOCK_POLL_MS)) as db, db:
                work(db)
            return
        except sqlite3.OperationalError as error:
            if not is_locked(error) or time.monotonic() >= deadline:
                raise
        time.sleep(LOCK_POLL_MS / 1000 / 2)


def is_locked(error: sqlite3.OperationalError) -> bool:
    """Another connection holds the lock: worth waiting for, unlike any other failure."""
    return getattr(error, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED") or (
        "locked" in str(error)
    )


def _version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def _migrate(db: sqlite3.Connection) -> int:
    """Bring the schema up to SCHEMA_VERSION in place, in one transaction: every row is kept.
    Returns the version found (SCHEMA_VERSION: another process had migrated it already).

    The version is read again under the write lock, so two agentgod processes opening an old
    history at once migrate it once.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _version(db)
        if version < 1:
            for statement in _SCHEMA_V1.split(";"):
                if statement.strip():
                    db.execute(statement)
        if version < 2:
            for table, column in _V2_COLUMNS:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
            for statement in _V2_STATEMENTS:
                db.execute(statement)
            _give_run_ids(db)
            for statement in _V2_INDEXES:
                db.execute(statement)
        if version < 3:
            _add_columns(db, _V3_COLUMNS)
            for statement in _V3_INDEXES:
                db.execute(statement)
        if version < 4:
            _add_columns(db, _V4_COLUMNS)
        if version < 5:
            # A history the batch branch wrote before it was merged says version 3 with these
            # tables in it and without 3's and 4's columns: those are added wherever missing.
            _add_columns(db, (*_V3_COLUMNS, *_V4_COLUMNS))
            for statement in (*_V3_INDEXES, *_V5_STATEMENTS):
                db.execute(statement)
        if version < 6:
            for statement in _V6_STATEMENTS:
                db.execute(statement)
            _add_columns(db, _V6_COLUMNS)
            for statement in _V6_INDEXES:
                db.execute(statement)
            _share_sources(db)
        if version < 7:
            _add_columns(db, _V7_COLUMNS)
        if version < 8:
            for statement in _V8_STATEMENTS:
                db.execute(statement)
        if version < SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.commit()
    except BaseException:
        db.rollback()
        raise
    return version


def _share_sources(db: sqlite3.Connection) -> None:
    """Version 5: every stored source split into the runtime and footer it shares with other
    agents (kept once each, by digest) and its own part, and that part and every output stored
    as `pack` stores them; a batch of rows at a time."""
    last = 0
    while True:
        rows = db.execute(
            "SELECT rowid, source, output FROM run_agents WHERE rowid > ?"
            " AND source_head IS NULL AND source_tail IS NULL AND typeof(source) = 'text'"
            " ORDER BY rowid LIMIT ?",
            (last, _MIGRATION_BATCH),
        ).fetchall()
        if not rows:
            return
        for rowid, source, output in rows:
            own, head, tail = store_source(db, source)
            packed = pack(output) if isinstance(output, str) else output
            db.execute(
                "UPDATE run_agents SET source = ?, source_head = ?, source_tail = ?, output = ?"
                " WHERE rowid = ?",
                (own, head, tail, packed, rowid),
            )
        last = rows[-1][0]


# ---- agents' sources, their shared parts kept once ----------------------------------------------

SHARED_COLUMNS = ("source_head", "source_tail")
"""run_agents' columns naming an agent's shared parts, in the order they are joined around it."""
SHARED_FROM = 1024
"""A runtime shorter than this before an agent's identity is not worth a shared part (it is
no runtime of ours)."""
COMPRESS_FROM = 512
"""A text this long or longer (an agent's own code, its output) is stored compressed when that
saves room (`pack`)."""
_IDENTITY = "\nAGENT_NAME = "
"""Where an agent file's own part begins: its identity lines, after the runtime it inlines."""
_FOOTER = f"\n{BODY_END}\n"
"""Where it ends: the trusted footer, the same in every agent of one version."""


def split_source(source: str) -> tuple[str, str, str]:
    """(the runtime before the agent's own part, its own part, the footer after it): the parts
    every agent of one AgentGOD version shares, and its own. Joined they give the source back
    byte for byte, whatever it holds; a text that is not an agent file is all its own part."""
    start = source.find(_IDENTITY)
    head = source[: start + 1] if start >= SHARED_FROM else ""
    end = source.rfind(_FOOTER)
    tail = source[end:] if end >= len(head) else ""
    return head, source[len(head) : len(source) - len(tail)], tail


def store_source(db: sqlite3.Connection, source: str) -> tuple[str | bytes, int | None, int | None]:
    """(the agent's own part as stored, the row of its shared head, of its shared tail) for
    `source`; the shared parts are added to `source_parts` once each, by their sha256."""
    head, own, tail = split_source(source)
    return pack(own), _part(db, head), _part(db, tail)


def pack(text: str) -> str | bytes:
    """A long text as stored: compressed (zlib, a BLOB) when that makes it smaller, else as it
    is. Code and prose compress to a third or so; `unpack` gives it back exactly."""
    if len(text) >= COMPRESS_FROM:
        with contextlib.suppress(UnicodeEncodeError):  # unstorable either way: left as it is
            packed = zlib.compress(text.encode("utf-8"), 6)
            if len(packed) < len(text):
                return packed
    return text


def unpack(stored: str | bytes) -> str:
    """A text as `pack` stored it (a text stored before version 6 is one it left as it is)."""
    return zlib.decompress(stored).decode("utf-8") if isinstance(stored, bytes) else stored


def _part(db: sqlite3.Connection, text: str) -> int | None:
    if not text:
        return None
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    found = db.execute("SELECT id FROM source_parts WHERE digest = ?", (digest,)).fetchone()
    if found is not None:
        return int(found[0])
    cursor = db.execute("INSERT INTO source_parts (digest, text) VALUES (?, ?)", (digest, text))
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def whole_source(
    parts: dict[int, str], own: str | bytes, head: int | None, tail: int | None
) -> str:
    """An agent's source as it ran, from its own part as stored and the shared parts its row
    names (`parts`: source_parts' texts by row, at least those two)."""
    before = parts[head] if head is not None else ""
    return before + unpack(own) + (parts[tail] if tail is not None else "")


def shared_parts(db: sqlite3.Connection, rows: Collection[int | None]) -> dict[int, str]:
    """The texts of these source_parts rows (None: no part), by row."""
    wanted = sorted({row for row in rows if row is not None})
    if not wanted:
        return {}
    marks = ", ".join("?" * len(wanted))
    found = db.execute(f"SELECT id, text FROM source_parts WHERE id IN ({marks})", wanted)
    return {int(row): text for row, text in found}


def _compact(db: sqlite3.Connection) -> None:
    """Give the disk back the pages a migration freed (a year of runtimes is most of the file),
    when they are a good share of it, and say so; best effort: a history in use by another
    process, or a disk without room for the copy, stays as it is and reuses those pages as runs
    come. The write-ahead log is emptied before and after: the migration and the copy each pass
    through it, and it would otherwise keep their size on disk until the last connection closes.
    """
    size = int(db.execute("PRAGMA page_size").fetchone()[0])
    pages = int(db.execute("PRAGMA page_count").fetchone()[0])
    free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
    if not pages or free / pages < _COMPACT_AT:
        return
    with contextlib.suppress(sqlite3.Error):
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        after = int(db.execute("PRAGMA page_count").fetchone()[0])
        _notice(
            "the run history was upgraded in place: every agent's code now shares one copy of "
            f"the runtime it inlines ({pages * size / 1e6:,.1f} MB -> {after * size / 1e6:,.1f} MB,"
            " every run kept)"
        )


def _add_columns(db: sqlite3.Connection, columns: tuple[tuple[str, str], ...]) -> None:
    """Add each (table, column definition) the table does not have yet."""
    for table, column in columns:
        have = {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}
        if column.split()[0] not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")


def _give_run_ids(db: sqlite3.Connection) -> None:
    """Runs recorded before run ids existed get one now, so `agentgod show` can name them."""
    taken = {row[0] for row in db.execute("SELECT run_id FROM runs WHERE run_id IS NOT NULL")}
    for (row,) in db.execute("SELECT id FROM runs WHERE run_id IS NULL").fetchall():
        fresh = new_run_id()
        while fresh in taken:
            fresh = new_run_id()
        taken.add(fresh)
        db.execute("UPDATE runs SET run_id = ? WHERE id = ?", (fresh, row))


def query(read: Callable[[sqlite3.Connection], _T], empty: _T, rebuild: Rebuild) -> _T:
    """Run `read` on a read-only connection; `empty` when there is no history or it is unreadable.

    Nothing is created here, except when the history is damaged: then it is set aside and
    rebuilt from the run files with `rebuild` (see recover). A WAL database in a folder this
    user cannot write (no -shm file can be made) refuses a plain read-only open, so the second
    try reads it as immutable.
    """
    path = database()
    recovered = False
    while path.is_file():
        for options in ("mode=ro", "immutable=1"):
            uri = f"{path.as_uri()}?{options}"
            try:
                with contextlib.closing(
                    sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
                ) as db:
                    if _version(db) < SCHEMA_VERSION:
                        _upgrade(path)  # on its own connection; this one then reads the new schema
                    return read(db)
            except sqlite3.Error as error:
                if is_corrupt(error):
                    break
        else:
            return empty  # unreadable (locked, no permission), not damaged
        if recovered or not recover(path, rebuild):
            return empty
        recovered = True
    return empty


def _upgrade(path: Path) -> None:
    """Migrate a history written by an older agentgod before reading it.

    One that cannot be written is left as it is (what it holds is then read as far as the
    queries find their columns), and a damaged one is query's to repair.
    """
    with contextlib.suppress(OSError, sqlite3.Error):
        open_for_writing(path).close()


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


def is_corrupt(error: sqlite3.Error) -> bool:
    """Damaged, or no database at all; not locked or busy, which no repair would help."""
    return getattr(error, "sqlite_errorname", "") in _CORRUPT


def _still_corrupt(path: Path) -> bool:
    """Checked again just before moving the file: another agentgod may have rebuilt it already."""
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            return bool(db.execute("PRAGMA quick_check").fetchone()[0] != "ok")
    except sqlite3.Error as error:
        return is_corrupt(error)


def recover(path: Path, rebuild: Rebuild, without: Path | None = None) -> bool:
    """Move a damaged history.db aside and rebuild it from the run files; True when rebuilt.

    The damaged file (and its WAL, which a new database must not replay) is kept as
    history.db.corrupt-<stamp>, for whoever wants to dig. Each run file gives back its history
    row and agent rows, written by `rebuild`; `without` is the run being archived now, whose
    full record follows.
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
        records = [
            (record, run_file)
            for run_file in sorted(path.parent.glob("*.md"))
            if run_file != without and (record := runfile.read_run_file(run_file)) is not None
        ]
        seen: set[str] = set()
        for record, run_file in records:
            while record.run_id in seen:  # a copied run file: the copy gets an id of its own
                record.run_id = new_run_id()
            seen.add(record.run_id)
            rebuild(building, record, run_file)
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
