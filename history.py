"""history.py — the run history: what is kept of each run, and reading it back. No model calls.

`runlog.archive` adds each run whole to `history.db`: a row per run (its id, status, plan,
answer, cost...), per agent (its code, inputs, output, usage) and per model call. `agentgod
history`, `stats` and `last` read them back, `show` and `--continue` through `load` and
`conversation`. What is stored was redacted by runlog before it got here.

The database file itself (its schema and migration, opening it, repairing a damaged one from
the run files, the `notices` that tell the person) is historydb's.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from agentgod import historydb
from agentgod.kinds import RunStatus
from agentgod.ledger import Call
from agentgod.replies import CostSummary, TokenUsage
from agentgod.runrecord import AgentRecord, Failure, RunRecord, utc

BY_PREFIX = "SELECT id, run_id, task FROM runs WHERE run_id >= ? AND run_id < ? ORDER BY id DESC"
"""The runs whose id starts with a prefix: a range of the index on run_id (historydb.HIGHEST)."""

_T = TypeVar("_T")


# ---- what the verbs read back ----------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRow:
    """One archived run, as `agentgod history` lists it."""

    id: int
    run_id: str
    """The short id `agentgod show` takes."""
    started_at: datetime
    task: str
    ok: bool
    status: RunStatus
    complexity: str | None
    usd: float
    duration_seconds: float
    run_file: Path | None
    """The Markdown archive, or None when only the database row could be written."""
    agents: int
    """How many agents took part."""
    retry_of: str | None = None
    """The run this one retried, if it is a retry."""


@dataclass(frozen=True)
class LastAnswer:
    """The most recent successful run's answer, for `agentgod last`."""

    id: int
    run_id: str
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


def insert(
    record: RunRecord,
    run_file: Path | None,
    path: Path | None = None,
    *,
    wait_seconds: float = historydb.BUSY_TIMEOUT_MS / 1000,
    again: bool = False,
) -> None:
    """Write a (redacted) run's rows whole; a damaged history is set aside and rebuilt first.

    A run recorded as it started (journal.RunJournal) has its row, agents and calls replaced by
    the record's, under its own row number, so the history lists it where it began. Another
    finished run's id is refused (IntegrityError), unless `again` says this is the same run
    archived a second time (stopped while its first archive was being written). `path` is the
    database (historydb.database() when not given: a run passes its own, so it does not read the
    settings again). `wait_seconds` bounds the wait for another process's write lock. Raises what
    the database raised: runlog.archive turns it into a warning.
    """
    path = path or historydb.database()

    def write(db: sqlite3.Connection) -> None:
        _write_record(db, record, run_file, again=again)

    try:
        historydb.write(path, write, wait_seconds)
    except sqlite3.DatabaseError as error:
        if not historydb.is_corrupt(error) or not historydb.recover(
            path, _insert_rows, without=run_file
        ):
            raise
        historydb.write(path, write, wait_seconds)


def _insert_rows(path: Path, record: RunRecord, run_file: Path | None) -> None:
    """A rebuild's write of one run file's record (historydb.Rebuild)."""
    with contextlib.closing(historydb.open_for_writing(path)) as db, db:
        _write_record(db, record, run_file)


def _write_record(
    db: sqlite3.Connection, record: RunRecord, run_file: Path | None, *, again: bool = False
) -> None:
    """The run's row (its journal's row, replaced, when it has one), agents and calls."""
    run = _row_of(db, record.run_id)
    if run is not None and not again and not _is_running(db, run):
        raise sqlite3.IntegrityError(f"a finished run with the id {record.run_id} is recorded")
    values = _run_row(record, run_file)
    if run is None:
        run = _insert_row(db, "runs", values)
    else:
        assignments = ", ".join(f"{name} = :{name}" for name in values)
        db.execute(
            f"UPDATE runs SET {assignments}, owner = NULL WHERE id = :id", {**values, "id": run}
        )
        db.execute("DELETE FROM run_agents WHERE run_id = ?", (run,))
        db.execute("DELETE FROM run_calls WHERE run_id = ?", (run,))
    add_agents(db, run, record.agents)
    add_calls(db, run, record.calls, first=0)


def _is_running(db: sqlite3.Connection, run: int) -> bool:
    found = db.execute("SELECT status FROM runs WHERE id = ?", (run,)).fetchone()
    return found is not None and found[0] == RunStatus.RUNNING.value


def _row_of(db: sqlite3.Connection, run_id: str) -> int | None:
    found = db.execute("SELECT id FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return None if found is None else int(found[0])


def _run_row(record: RunRecord, run_file: Path | None) -> dict[str, object]:
    """The runs table's columns for `record`."""
    cost = record.cost
    return {
        "run_id": record.run_id,
        "started_at": utc(record.started_at).isoformat(timespec="microseconds"),
        "task": record.task,
        "ok": record.ok,
        "status": record.status.value,
        "complexity": record.complexity,
        "answer": record.answer,
        "error": record.error,
        "revisions": record.revisions,
        "council_improved": record.council_improved,
        "llm_calls": cost["llm_calls"],
        "input_tokens": cost["input_tokens"],
        "output_tokens": cost["output_tokens"],
        "cache_write_tokens": cost["cache_write_tokens"],
        "cache_read_tokens": cost["cache_read_tokens"],
        "web_searches": cost["web_searches"],
        "usd": cost["usd"],
        "estimate": cost["estimate"],
        "duration_seconds": record.duration_seconds,
        "run_file": str(run_file) if run_file else None,
        "budget_exhausted": record.budget_exhausted,
        "conversation_id": record.conversation_id,
        "retry_of": record.retry_of,
        "model": record.model,
        "effort": record.effort,
        "reasoning": record.reasoning,
        "plan": _json(record.plan),
        "waves": _json(record.waves),
        "failures": _json([[f.name, f.reason, f.kind] for f in record.failures]),
        "phases": _json(record.phases),
        "warnings": _json(record.warnings),
        "sandbox": _json(record.sandbox),
        "outputs": _json(record.outputs),
        "attachments": _json(record.attachments),
        "artifacts": _json(record.artifacts),
    }


def begin(db: sqlite3.Connection, record: RunRecord, owner: str) -> int:
    """Record a run as it starts (status running, its owner process named); its row number.

    A row for the run id already there (the journal started twice) is taken over.
    """
    run = _row_of(db, record.run_id)
    values = {**_run_row(record, None), "owner": owner}
    if run is not None:
        assignments = ", ".join(f"{name} = :{name}" for name in values)
        db.execute(f"UPDATE runs SET {assignments} WHERE id = :id", {**values, "id": run})
        return run
    return _insert_row(db, "runs", values)


def update(db: sqlite3.Connection, run: int, record: RunRecord) -> None:
    """What a running run has come to know: its plan, its grade, its spend and time so far."""
    values = {
        name: value
        for name, value in _run_row(record, None).items()
        if name not in ("run_id", "started_at", "task", "status", "ok", "run_file")
    }
    assignments = ", ".join(f"{name} = :{name}" for name in values)
    db.execute(f"UPDATE runs SET {assignments} WHERE id = :id", {**values, "id": run})


def forget(db: sqlite3.Connection, run: int) -> None:
    """Remove run `run` (its row number) whole: one that was withdrawn before it began."""
    db.execute("DELETE FROM run_agents WHERE run_id = ?", (run,))
    db.execute("DELETE FROM run_calls WHERE run_id = ?", (run,))
    db.execute("DELETE FROM runs WHERE id = ?", (run,))


def add_agents(db: sqlite3.Connection, run: int, agents: list[AgentRecord]) -> None:
    """Rows for agents of run `run` (its row number) that have finished.

    Each agent's source is stored as its own part, the runtime and footer it shares with every
    agent of its version kept once in `source_parts` (historydb.store_source); that part and
    its output compressed when that saves room (historydb.pack).
    """
    stored = [historydb.store_source(db, agent.source) for agent in agents]
    _insert_rows_of(
        db,
        "run_agents",
        [
            {
                "run_id": run,
                "name": agent.name,
                "role": agent.role,
                "reused": agent.reused,
                "ok": agent.ok,
                "attempts": agent.attempts,
                "seconds": agent.seconds,
                "kind": agent.kind,
                "error": agent.error,
                "usd": agent.usd,
                "source": own,
                "source_head": head,
                "source_tail": tail,
                "inputs": _json(agent.inputs),
                "output": historydb.pack(agent.output),
                "calls": agent.usage["llm_calls"],
                "input_tokens": agent.usage["input_tokens"],
                "output_tokens": agent.usage["output_tokens"],
                "cache_write_tokens": agent.usage["cache_write_tokens"],
                "cache_read_tokens": agent.usage["cache_read_tokens"],
                "web_searches": agent.usage["web_searches"],
            }
            for agent, (own, head, tail) in zip(agents, stored, strict=True)
        ],
    )


def add_calls(db: sqlite3.Connection, run: int, calls: list[Call], *, first: int) -> None:
    """Rows for model calls of run `run` (its row number), numbered from `first` on."""
    _insert_rows_of(
        db,
        "run_calls",
        [
            {
                "run_id": run,
                "seq": seq,
                "phase": call.phase,
                "model": call.model,
                "input_tokens": call.input_tokens,
                "output_tokens": call.output_tokens,
                "cache_write_tokens": call.cache_write_tokens,
                "cache_read_tokens": call.cache_read_tokens,
                "web_searches": call.web_searches,
                "usd": call.usd,
                "at": utc(call.at).isoformat(timespec="microseconds"),
                "agent": call.agent,
                "seconds": call.seconds,
                "web_fetches": call.web_fetches,
                "asked": call.asked,
            }
            for seq, call in enumerate(calls, start=first)
        ],
    )


def _insert_rows_of(db: sqlite3.Connection, table: str, rows: list[dict[str, object]]) -> None:
    """INSERT rows that share their column names (ours, never the user's), in one statement."""
    if rows:
        columns = ", ".join(rows[0])
        marks = ", ".join(f":{name}" for name in rows[0])
        db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)


def _insert_row(db: sqlite3.Connection, table: str, values: dict[str, object]) -> int:
    """INSERT one row from column names (ours, never the user's) to values; its rowid."""
    columns = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    cursor = db.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", values)
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


# ---- reading ---------------------------------------------------------------------------------


def _query(read: Callable[[sqlite3.Connection], _T], empty: _T) -> _T:
    """historydb.query, with the rows a rebuild from the run files writes (see insert)."""
    return historydb.query(read, empty, _insert_rows)


def query(read: Callable[[sqlite3.Connection], _T], empty: _T) -> _T:
    """Read the history with `read` (for the other record modules: batchrecord); `empty`
    when there is none. A damaged one is rebuilt from the run files first, as for every reader."""
    return _query(read, empty)


def history(limit: int = 10, *, matching: str = "", status: str = "") -> list[HistoryRow]:
    """The latest `limit` runs, newest first; [] when nothing has been archived or readable.

    `matching` keeps the runs whose task or id holds it (any case), `status` those that ended
    so (kinds.RunStatus): what the viewer's search asks."""
    where, values = [], []
    if matching:
        pattern = "%" + re.sub(r"([\\%_])", r"\\\1", matching.lower()) + "%"
        where.append("(lower(task) LIKE ? ESCAPE '\\' OR run_id LIKE ? ESCAPE '\\')")
        values += [pattern, pattern]
    if status:
        where.append("status = ?")
        values.append(status)
    condition = f" WHERE {' AND '.join(where)}" if where else ""

    def read(db: sqlite3.Connection) -> list[HistoryRow]:
        rows = db.execute(
            "SELECT id, started_at, task, ok, complexity, usd, duration_seconds, run_file,"
            " (SELECT COUNT(*) FROM run_agents WHERE run_agents.run_id = runs.id), run_id, status,"
            f" retry_of FROM runs{condition} ORDER BY id DESC LIMIT ?",
            (*values, limit),
        ).fetchall()
        return [
            HistoryRow(
                id=row[0],
                run_id=row[9],
                started_at=datetime.fromisoformat(row[1]),
                task=row[2],
                ok=bool(row[3]),
                status=_status(row[10], bool(row[3])),
                complexity=row[4],
                usd=row[5],
                duration_seconds=row[6],
                run_file=Path(row[7]) if row[7] else None,
                agents=row[8],
                retry_of=row[11],
            )
            for row in rows
        ]

    return _query(read, []) if limit > 0 else []


def last() -> LastAnswer | None:
    """The newest successful run's answer, or None when there is none."""

    def read(db: sqlite3.Connection) -> LastAnswer | None:
        row = db.execute(
            "SELECT id, started_at, task, answer, run_file, run_id FROM runs WHERE ok"
            " ORDER BY id DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        return LastAnswer(
            id=row[0],
            run_id=row[5],
            started_at=datetime.fromisoformat(row[1]),
            task=row[2],
            answer=row[3],
            run_file=Path(row[4]) if row[4] else None,
        )

    return _query(read, None)


_PER_RUN = "SELECT name, run_id, MAX(ok) AS ok FROM run_agents GROUP BY name, run_id"
"""One row per agent per run it took part in; ok when any of its records in that run was."""
_TOTALS = (
    "SELECT COUNT(*), COALESCE(SUM(ok), 0), COALESCE(SUM(llm_calls), 0),"
    " COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),"
    " COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(cache_read_tokens), 0),"
    " COALESCE(SUM(usd), 0.0), COALESCE(AVG(duration_seconds), 0.0) FROM runs"
)
_PER_AGENT = (
    f"WITH per_run AS ({_PER_RUN}) SELECT name, COUNT(*), SUM(ok) FROM per_run GROUP BY name"
)
"""Per agent name: the runs it took part in, and those it succeeded in; one pass in the index's
order (most used and most reliable are both chosen from these rows)."""
STATS_QUERIES = (_TOTALS, _PER_AGENT)
"""What `stats` asks. Each reads a covering index (historydb's runs_totals and
run_agents_by_name_run), in its order, not every row: 10,000 runs cost milliseconds."""


def stats() -> Stats:
    """Totals over every archived run; all zeros when there is no history."""

    def read(db: sqlite3.Connection) -> Stats:
        totals = db.execute(_TOTALS).fetchone()
        agents = [(str(name), int(runs), int(ok)) for name, runs, ok in db.execute(_PER_AGENT)]
        used = sorted(agents, key=lambda agent: (-agent[1], agent[0]))[:5]
        tried = [agent for agent in agents if agent[1] >= 2]
        trusted = sorted(tried, key=lambda agent: (-agent[2] / agent[1], -agent[1], agent[0]))[:5]
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
            most_used_agents=[(name, runs) for name, runs, _ in used],
            most_reliable_agents=[(name, ok, runs) for name, runs, ok in trusted],
        )

    return _query(read, Stats())


def load(ref: str | None = None) -> RunRecord | None:
    """The run `ref` names (its id, or a unique prefix of at least historydb.MIN_PREFIX
    characters; None: the newest run), or None when no run has that id or there is no history.

    Raises ValueError when `ref` is too short, or when it is the start of several runs' ids
    (the message names them, so the person can type more of the one they mean).
    """
    wanted = historydb.wanted_id(ref, "a run")

    def read(db: sqlite3.Connection) -> RunRecord | None:
        row = _resolve(db, wanted)
        return None if row is None else _stored(db, row)

    return _query(read, None)


def _resolve(db: sqlite3.Connection, wanted: str | None) -> int | None:
    """The database row of the run `wanted` names (see load)."""
    if wanted is None:
        newest = db.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 1")
        found = newest.fetchone()
        return None if found is None else int(found[0])
    rows = db.execute(BY_PREFIX, (wanted, wanted + historydb.HIGHEST)).fetchall()
    exact = [row for row in rows if row[1] == wanted]
    if len(rows) > 1 and not exact:
        named = "; ".join(f"{run_id} ({_first_line(task)})" for _, run_id, task in rows[:5])
        more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
        raise ValueError(
            f"{wanted!r} is the start of {len(rows)} run ids: {named}{more}; give more of it"
        )
    chosen = exact or rows
    return int(chosen[0][0]) if chosen else None


def _first_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= 50 else line[:49].rstrip() + "…"


def _stored(db: sqlite3.Connection, row: int) -> RunRecord:
    """Everything about the run in database row `row`, as its record.

    A run recorded before issue 12 (or rebuilt from its run file) has what its record had then:
    no plan, sources, outputs or calls.
    """
    db.row_factory = sqlite3.Row
    run = db.execute("SELECT * FROM runs WHERE id = ?", (row,)).fetchone()
    agents = db.execute(
        "SELECT * FROM run_agents WHERE run_id = ? ORDER BY rowid", (row,)
    ).fetchall()
    columns = set(agents[0].keys()) if agents else set()  # a history too old to migrate: none
    split = [
        tuple(agent[name] if name in columns else None for name in historydb.SHARED_COLUMNS)
        for agent in agents
    ]
    parts = historydb.shared_parts(db, [part for pair in split for part in pair])
    calls = db.execute("SELECT * FROM run_calls WHERE run_id = ? ORDER BY seq", (row,))
    return RunRecord(
        run_id=run["run_id"],
        task=run["task"],
        status=_status(run["status"], bool(run["ok"])),
        ok=bool(run["ok"]),
        answer=run["answer"],
        error=run["error"],
        complexity=run["complexity"],
        started_at=datetime.fromisoformat(run["started_at"]),
        duration_seconds=run["duration_seconds"],
        cost=CostSummary(
            llm_calls=run["llm_calls"],
            input_tokens=run["input_tokens"],
            output_tokens=run["output_tokens"],
            cache_write_tokens=run["cache_write_tokens"],
            cache_read_tokens=run["cache_read_tokens"],
            web_searches=run["web_searches"],
            usd=run["usd"],
            estimate=bool(run["estimate"]),
        ),
        phases=json.loads(run["phases"]),
        agents=[
            AgentRecord(
                name=agent["name"],
                role=agent["role"],
                reused=bool(agent["reused"]),
                ok=bool(agent["ok"]),
                attempts=agent["attempts"],
                seconds=agent["seconds"],
                kind=agent["kind"],
                error=agent["error"],
                usd=agent["usd"],
                usage=TokenUsage(
                    llm_calls=agent["calls"],
                    input_tokens=agent["input_tokens"],
                    output_tokens=agent["output_tokens"],
                    cache_write_tokens=agent["cache_write_tokens"],
                    cache_read_tokens=agent["cache_read_tokens"],
                    web_searches=agent["web_searches"],
                ),
                source=historydb.whole_source(parts, agent["source"], *pair),
                inputs=list(json.loads(agent["inputs"])),
                output=historydb.unpack(agent["output"]),
            )
            for agent, pair in zip(agents, split, strict=True)
        ],
        calls=[call_of(call) for call in calls],
        plan=list(json.loads(run["plan"])),
        reasoning=run["reasoning"],
        model=run["model"],
        effort=run["effort"],
        conversation_id=run["conversation_id"],
        retry_of=run["retry_of"],
        waves=[list(wave) for wave in json.loads(run["waves"])],
        failures=[Failure(*entry) for entry in json.loads(run["failures"])],
        revisions=run["revisions"],
        council_improved=bool(run["council_improved"]),
        budget_exhausted=bool(run["budget_exhausted"]),
        warnings=list(json.loads(run["warnings"])),
        sandbox=list(json.loads(run["sandbox"])),
        outputs=json.loads(run["outputs"]),
        attachments=list(json.loads(run["attachments"])),
        artifacts=list(json.loads(run["artifacts"])),
        run_file=Path(run["run_file"]) if run["run_file"] else None,
    )


def _column(row: sqlite3.Row, name: str, missing: str) -> str:
    """A column a history not yet migrated (one this user may only read) does not have."""
    try:
        return str(row[name])
    except IndexError:
        return missing


def call_of(row: sqlite3.Row) -> Call:
    """A run_calls row back as the call it records."""
    return Call(
        phase=row["phase"],
        model=row["model"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cache_write_tokens=row["cache_write_tokens"],
        cache_read_tokens=row["cache_read_tokens"],
        web_searches=row["web_searches"],
        usd=row["usd"],
        at=datetime.fromisoformat(row["at"]),
        agent=row["agent"],
        seconds=row["seconds"],
        web_fetches=row["web_fetches"],
        asked=_column(row, "asked", ""),
    )


def _status(text: str, ok: bool) -> RunStatus:
    """A stored status; one this version does not know (a newer agentgod's) reads as ok or
    failed, by whether the run answered."""
    try:
        return RunStatus(text)
    except ValueError:
        return RunStatus.OK if ok else RunStatus.FAILED


def conversation(
    conversation_id: str, limit: int = 20, *, up_to: str | None = None
) -> list[tuple[str, str]]:
    """(task, answer) of the conversation's latest `limit` answered runs, oldest first: what a
    follow-up is planned with. `up_to` (a run id) stops at that run: `--resume RUN` continues
    the conversation as it stood then, without the turns that came after it."""

    def read(db: sqlite3.Connection) -> list[tuple[str, str]]:
        rows = db.execute(
            "SELECT task, answer FROM (SELECT id, started_at, task, answer FROM runs"
            " WHERE conversation_id = ? AND ok AND answer != ''"
            " AND (? IS NULL OR id <= (SELECT id FROM runs WHERE run_id = ?))"
            " ORDER BY id DESC LIMIT ?) ORDER BY id",
            (conversation_id, up_to, up_to, limit),
        ).fetchall()
        return [(task, answer) for task, answer in rows]

    return _query(read, []) if limit > 0 else []


def last_conversation_id() -> str | None:
    """The conversation of the newest run that had one (what `--continue` continues)."""

    def read(db: sqlite3.Connection) -> str | None:
        row = db.execute(
            "SELECT conversation_id FROM runs WHERE conversation_id IS NOT NULL"
            " ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else str(row[0])

    return _query(read, None)


def run_ids() -> set[str]:
    """Every finished run's id: the viewer tells a run in progress by its having none yet (its
    journal's row says `running`)."""

    def read(db: sqlite3.Connection) -> set[str]:
        rows = db.execute("SELECT run_id FROM runs WHERE status != 'running'")
        return {str(row[0]) for row in rows if row[0]}

    return _query(read, set())


def running() -> list[str]:
    """The ids of the runs recorded as still running (this process's, another's, or a dead
    one's, which journal.finish_dead_runs finishes)."""

    def read(db: sqlite3.Connection) -> list[str]:
        rows = db.execute("SELECT run_id FROM runs WHERE status = 'running'").fetchall()
        return [str(row[0]) for row in rows]

    return _query(read, [])


def known(run_id: str) -> bool:
    """Whether a recorded run has this id (a new run must not take it)."""

    def read(db: sqlite3.Connection) -> bool:
        return db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None

    return _query(read, False)
