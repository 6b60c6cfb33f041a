"""runlog.py — the answer outlives the terminal. No model calls.

Every finished task is archived twice under runs/: as `<UTC timestamp>_<slug>.md`, a Markdown file
a person can open (task, plan, each agent's result and time, failures, answer, cost), and as rows in
`history.db`, an embedded SQLite database that `agentgod history`, `stats` and `last` read back.

Everything textual is redacted before it is written, so a key that leaked into an agent's output
never reaches the disk. Archiving is best effort: by the time it runs, the answer has been printed
and paid for, so a full disk or a locked database costs the archive, never the run.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import config
from redact import redact
from replies import ArtifactReply, AttachmentReply, CostSummary
from ui import human_size

DB_NAME = "history.db"
SCHEMA_VERSION = 1
"""Stored in PRAGMA user_version; a later schema migrates from it."""
BUSY_TIMEOUT_MS = 5000
"""How long a writer waits for another agentgod process to finish its insert."""
SLUG_LENGTH = 40
PRIVATE_FILE = 0o600
PRIVATE_FOLDER = 0o700
"""Tasks and answers are the user's business: the records are readable by their owner only."""
_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
"""SQLite's verdicts on a file that is no database, or a damaged one (not a locked or busy one)."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters except tab and newline: an ESC or BEL in a task must not reach a file that
someone later `cat`s to a terminal."""

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


# ---- what the orchestrator hands over ---------------------------------------------------------


@dataclass
class AgentRecord:
    """How one agent of the run fared."""

    name: str
    """The agent's safe name."""
    role: str
    """Its one-line role."""
    reused: bool
    """True when it came from the library instead of the generator."""
    ok: bool
    """Whether its final attempt succeeded."""
    attempts: int
    """Executions including repairs."""
    seconds: float
    """Wall-clock time of its executions."""
    kind: str
    """executor.AgentResult.kind of the final attempt: ok, crash, timeout, ..."""
    error: str = ""
    """The last failure's reason, if any (redacted again before it is written)."""
    usd: float = 0.0
    """What its own model calls cost, as the broker billed them."""


@dataclass
class RunRecord:
    """Everything worth keeping about one task; the orchestrator builds one per task."""

    task: str
    """The user's task as typed."""
    ok: bool
    """True when the run produced an answer."""
    answer: str
    """The final answer; "" on failure."""
    error: str
    """One-line headline of why the run failed; "" on success."""
    complexity: str | None
    """The planner's grade (simple, standard, deep); None when planning never finished."""
    waves: list[list[str]]
    """Agent names per execution wave, in order."""
    agents: list[AgentRecord]
    """One record per agent that took part."""
    failures: list[tuple[str, str]]
    """(name, reason) for each agent that was excluded after its repairs."""
    revisions: int
    """Extra rounds the judge asked for."""
    council_improved: bool
    """True when the council's refinement replaced the answer."""
    cost: CostSummary
    """What the run spent: llm_calls, the four token counts, usd, estimate."""
    duration_seconds: float
    """Wall-clock time of the whole task."""
    started_at: datetime
    """When the task started (UTC; a naive value is taken as UTC)."""
    sandbox: list[str] = field(default_factory=list)
    """Confinement layers that were active for the agents."""
    budget_exhausted: bool = False
    """True when BUDGET_USD stopped the run early."""
    warnings: list[str] = field(default_factory=list)
    """What went wrong that the run survived (a package pip refused, a judge that failed)."""
    phases: dict[str, CostSummary] = field(default_factory=dict)
    """The cost by where it went (kinds.Spend)."""
    outputs: dict[str, str] = field(default_factory=dict)
    """Agent outputs that were paid for but reached no answer (the merge failed), by agent."""
    attachments: list[AttachmentReply] = field(default_factory=list)
    """The user's files the agents could read (named, never copied into the archive)."""
    artifacts: list[ArtifactReply] = field(default_factory=list)
    """The files the agents made, kept beside the run file under runs/<run id>/artifacts/."""


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


def archive(record: RunRecord, warn: Callable[[str], None] | None = None) -> Path | None:
    """Write the run's Markdown file and its history row; returns the file, or None.

    The two writes are independent: a database that refuses still leaves the file (and its path is
    returned), and a file that cannot be written still leaves a history row with no run_file. This
    never raises; what could not be written is told to `warn`, so the loss is never silent.
    """
    say = warn or (lambda text: None)
    try:
        clean = _redacted(record)
        folder = config.settings().runs_dir
    except Exception as error:  # never fail a run that is already answered and paid for
        say(f"the run was not archived: {_reason(error)}")
        return None
    run_file: Path | None = None
    try:
        _private_folder(folder)
        run_file = _write_new_file(folder, _file_stem(clean), _render(clean))
    except Exception as error:
        say(
            f"the run file could not be written in {folder} ({_reason(error)}); "
            "check that AGENTGOD_HOME is writable and has space"
        )
        run_file = None
    try:
        _insert(folder / DB_NAME, clean, run_file)
    except Exception as error:
        say(
            f"the run was not added to the history in {folder / DB_NAME} ({_reason(error)}), so "
            "`agentgod history` and `stats` will not show it; check that the file is writable "
            "and that no other program holds it locked"
        )
    return run_file


def _reason(error: BaseException) -> str:
    """An error as one short line for a warning: the OS's or SQLite's own words."""
    text = " ".join(str(error).split()) or type(error).__name__
    return redact(text[:300])


def _render(record: RunRecord) -> str:
    """The run as a Markdown document, written for a person (pass a redacted record)."""
    cost = record.cost
    outcome = "Answered" if record.ok else "Failed"
    summary = (
        f"**{outcome}** · {_utc(record.started_at):%Y-%m-%d %H:%M:%S} UTC · "
        f"{_duration(record.duration_seconds)} · {len(record.agents)} agents · {_dollars(cost)}"
    )
    parts = [
        f"# {_title(record.task)}",
        summary,
        "## Task",
        _quoted(record.task),
        "## Plan",
        _plan(record),
        "## Agents",
        _agent_table(record.agents),
        "## Failures",
        _failures(record.failures),
    ]
    if record.warnings:
        parts += ["## Warnings", "\n".join(f"- {warning}" for warning in record.warnings)]
    if not record.ok:
        parts += ["## Error", record.error or "The run failed without a stated reason."]
    if record.attachments or record.artifacts:
        parts += ["## Files", _files(record)]
    if record.outputs:
        parts.append("## Agent outputs (not merged)")
        for name, text in record.outputs.items():
            parts += [f"### {name}", _fenced(text)]
    parts += [
        "## Answer",
        record.answer.strip() if record.ok and record.answer.strip() else "_No answer._",
        "## Cost",
        _cost_table(cost) + _phase_table(record.phases),
        "## Run",
        _run_facts(record),
    ]
    return "\n\n".join(parts) + "\n"


def slugify(task: str) -> str:
    """The task's lowercase ASCII words joined by hyphens: at most SLUG_LENGTH long, never empty."""
    folded = unicodedata.normalize("NFKD", task).encode("ascii", "ignore").decode().lower()
    words = re.findall(r"[a-z0-9]+", folded)
    slug = ""
    for word in words:
        longer = f"{slug}-{word}" if slug else word
        if len(longer) > SLUG_LENGTH:
            break
        slug = longer
    return slug or (words[0][:SLUG_LENGTH] if words else "task")


def _private_folder(folder: Path) -> None:
    """runs/, created or tightened to its owner only."""
    folder.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        folder.chmod(PRIVATE_FOLDER)


def _written(text: str) -> str:
    """Text as it may be stored: redacted, and without control characters."""
    return _CONTROL.sub("", redact(text.replace("\r\n", "\n")))


def _redacted(record: RunRecord) -> RunRecord:
    """A copy of the record with every piece of text passed through redact (and _CONTROL)."""
    return replace(
        record,
        task=_written(record.task),
        answer=_written(record.answer),
        error=_written(record.error),
        complexity=_written(record.complexity) if record.complexity else record.complexity,
        waves=[[_written(name) for name in wave] for wave in record.waves],
        agents=[
            replace(
                agent,
                name=_written(agent.name),
                role=_written(agent.role),
                kind=_written(agent.kind),
                error=_written(agent.error),
            )
            for agent in record.agents
        ],
        failures=[(_written(name), _written(reason)) for name, reason in record.failures],
        sandbox=[_written(layer) for layer in record.sandbox],
        warnings=[_written(warning) for warning in record.warnings],
        outputs={_written(name): _written(text) for name, text in record.outputs.items()},
    )


def _file_stem(record: RunRecord) -> str:
    return f"{_utc(record.started_at):%Y%m%dT%H%M%SZ}_{slugify(record.task)}"


def _write_new_file(folder: Path, stem: str, text: str) -> Path:
    """Create a file that did not exist before (`_2`, `_3`... on a clash) and fill it."""
    number = 1
    while True:
        path = folder / (f"{stem}.md" if number == 1 else f"{stem}_{number}.md")
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        except FileExistsError:
            number += 1
            continue
        handle = os.fdopen(descriptor, "w", encoding="utf-8")
        try:
            with handle:
                handle.write(text)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path


# ---- Markdown pieces -------------------------------------------------------------------------


def _dollars(cost: CostSummary) -> str:
    return f"${cost['usd']:.4f}" + (" (estimated)" if cost["estimate"] else "")


def _cost_table(cost: CostSummary) -> str:
    rows = [
        ("Input", cost["input_tokens"]),
        ("Output", cost["output_tokens"]),
        ("Cache write", cost["cache_write_tokens"]),
        ("Cache read", cost["cache_read_tokens"]),
    ]
    lines = ["| Tokens | Count |", "|---|---:|"]
    lines += [f"| {label} | {value:,} |" for label, value in rows]
    searches = cost["web_searches"]
    searched = f" · {searches} web searches" if searches else ""
    return "\n".join(lines) + f"\n\n{cost['llm_calls']} model calls{searched} · {_dollars(cost)}"


def _plan(record: RunRecord) -> str:
    lines = [f"- Complexity: {record.complexity or 'not graded'}"]
    if record.waves:
        lines += [
            f"- Wave {number}: " + ", ".join(f"`{name}`" for name in wave)
            for number, wave in enumerate(record.waves, 1)
        ]
    else:
        lines.append("- No agents were planned.")
    lines.append(f"- Revisions asked for by the judge: {record.revisions}")
    lines.append(f"- Council improved the answer: {'yes' if record.council_improved else 'no'}")
    if record.budget_exhausted:
        lines.append("- The budget (BUDGET_USD) ran out before the run could finish.")
    return "\n".join(lines)


def _agent_table(agents: list[AgentRecord]) -> str:
    if not agents:
        return "No agents ran."
    lines = [
        "| Agent | Role | Source | Result | Attempts | Time | Cost |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for agent in agents:
        result = "ok" if agent.ok else f"failed ({agent.kind})"
        if agent.error.strip():
            result += " — " + _first_line(agent.error, 100)
        lines.append(
            f"| `{agent.name}` | {_cell(agent.role)} | {'library' if agent.reused else 'new'} "
            f"| {_cell(result)} | {agent.attempts} | {_duration(agent.seconds)} "
            f"| ${agent.usd:.4f} |"
        )
    return "\n".join(lines)


def _phase_table(phases: dict[str, CostSummary]) -> str:
    """Where the money went, phase by phase; nothing when no phase spent anything."""
    if not phases:
        return ""
    lines = ["", "", "| Phase | Calls | Cost |", "|---|---:|---:|"]
    lines += [f"| {name} | {c['llm_calls']} | ${c['usd']:.4f} |" for name, c in phases.items()]
    return "\n".join(lines)


def _failures(failures: list[tuple[str, str]]) -> str:
    if not failures:
        return "None."
    return "\n\n".join(f"### `{name}`\n\n{_fenced(reason)}" for name, reason in failures)


def _files(record: RunRecord) -> str:
    """The attachments by name and path, the artifacts as links relative to the run file."""
    lines = [
        f"- Attached: `{item['name']}` ({human_size(item['bytes'])}, {item['kind']}) "
        f"from `{item['path']}`"
        for item in record.attachments
    ]
    for item in record.artifacts:
        link = Path(item["path"])
        with contextlib.suppress(ValueError):  # not under runs/: a plain path will do
            link = link.relative_to(config.settings().runs_dir)
        lines.append(
            f"- Made by `{item['agent']}`: [{item['name']}]({link.as_posix()}) "
            f"({human_size(item['bytes'])})"
        )
    return "\n".join(lines)


def _run_facts(record: RunRecord) -> str:
    layers = ", ".join(record.sandbox) if record.sandbox else "none recorded"
    return "\n".join(
        [
            f"- Started: {_utc(record.started_at).isoformat(timespec='seconds')}",
            f"- Duration: {_duration(record.duration_seconds)}",
            f"- Sandbox layers: {layers}",
        ]
    )


def _title(task: str) -> str:
    line = _first_line(task, 80)
    return f"Run: {line}" if line else "Run"


def _first_line(text: str, limit: int) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _quoted(text: str) -> str:
    lines = text.strip().splitlines() or [""]
    return "\n".join(f"> {line}".rstrip() for line in lines)


def _fenced(text: str) -> str:
    """A code block whose fence is longer than any backtick run inside, so it cannot close early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.strip()}\n{fence}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# ---- the database ----------------------------------------------------------------------------


def _insert(path: Path, record: RunRecord, run_file: Path | None) -> None:
    """Add the run's rows; a damaged history is set aside and rebuilt first (see _recover)."""
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
                _utc(record.started_at).isoformat(timespec="microseconds"),
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
        records = [
            (record, run_file)
            for run_file in sorted(path.parent.glob("*.md"))
            if run_file != without and (record := _record_from_file(run_file)) is not None
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


_SUMMARY = re.compile(
    r"^\*\*(Answered|Failed)\*\* · (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC · ([^·]+) · ",
    re.MULTILINE,
)


def _record_from_file(run_file: Path) -> RunRecord | None:
    """What a run file written by _render says about its run, or None if it is not one."""
    try:
        text = run_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    summary = _SUMMARY.search(text)
    task = _section(text, "Task")
    if summary is None or task is None:
        return None
    ok = summary.group(1) == "Answered"
    answer = text.partition("\n\n## Answer\n\n")[2].rpartition("\n\n## Cost\n\n")[0]
    cost_text = text.rpartition("\n\n## Cost\n\n")[2]
    calls = re.search(
        r"^(\d+) model calls(?: · (\d+) web searches)? · \$([0-9.]+)", cost_text, re.MULTILINE
    )
    complexity = re.search(r"^- Complexity: (\S+)$", text, re.MULTILINE)
    revisions = re.search(r"^- Revisions asked for by the judge: (\d+)$", text, re.MULTILINE)

    def tokens(label: str) -> int:
        found = re.search(rf"^\| {label} \| ([0-9,]+) \|$", cost_text, re.MULTILINE)
        return int(found.group(1).replace(",", "")) if found else 0

    return RunRecord(
        task="\n".join(line.removeprefix(">").removeprefix(" ") for line in task.splitlines()),
        ok=ok,
        answer=answer.strip() if ok else "",
        error=(_section(text, "Error") or "") if not ok else "",
        complexity=None
        if complexity is None or complexity.group(1) == "not"
        else complexity.group(1),
        waves=[],
        agents=_agents_from(_section(text, "Agents") or ""),
        failures=[],
        revisions=int(revisions.group(1)) if revisions else 0,
        council_improved="- Council improved the answer: yes" in text,
        cost=CostSummary(
            llm_calls=int(calls.group(1)) if calls else 0,
            input_tokens=tokens("Input"),
            output_tokens=tokens("Output"),
            cache_write_tokens=tokens("Cache write"),
            cache_read_tokens=tokens("Cache read"),
            web_searches=int(calls.group(2) or 0) if calls else 0,
            usd=float(calls.group(3)) if calls else 0.0,
            estimate="(estimated)" in (calls.group(0) if calls else ""),
        ),
        duration_seconds=_seconds(summary.group(3)),
        started_at=datetime.strptime(summary.group(2), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC),
    )


def _section(text: str, heading: str) -> str | None:
    """The body of the first `## heading` section (up to the next `## `)."""
    start = text.find(f"\n## {heading}\n\n")
    if start < 0:
        return None
    body = text[start + len(heading) + 6 :]
    end = body.find("\n\n## ")
    return (body if end < 0 else body[:end]).strip()


def _seconds(shown: str) -> float:
    """_duration's text back to seconds: "83.2 s" or "1 min 23 s"."""
    minutes = re.match(r"\s*(\d+) min (\d+) s", shown)
    if minutes:
        return int(minutes.group(1)) * 60 + int(minutes.group(2))
    plain = re.match(r"\s*([0-9.]+) s", shown)
    return float(plain.group(1)) if plain else 0.0


def _agents_from(table: str) -> list[AgentRecord]:
    """The agent rows of _agent_table, as far as a table cell keeps them."""
    agents: list[AgentRecord] = []
    for line in table.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 7 or not cells[0].startswith("`"):
            continue
        name, role, source, result, attempts, seconds, usd = cells
        outcome = re.match(r"failed \((\w+)\)(?: — (.*))?", result)
        agents.append(
            AgentRecord(
                name=name.strip("`"),
                role=role.replace("\\|", "|"),
                reused=source == "library",
                ok=outcome is None,
                attempts=int(attempts) if attempts.isdigit() else 0,
                seconds=_seconds(seconds),
                kind=outcome.group(1) if outcome else "ok",
                error=(outcome.group(2) or "") if outcome else "",
                usd=float(usd.lstrip("$") or 0) if re.fullmatch(r"\$[0-9.]+", usd) else 0.0,
            )
        )
    return agents


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
