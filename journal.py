"""journal.py — a run in the history from its first moment, and runs whose process is gone.

A run killed outright (kill -9, the OOM killer, a closed container, a power cut) gets no archive:
nothing runs after SIGKILL. So a run is recorded as it goes. `RunJournal` writes the run's row as
it starts (status running, its `Owner` — the process running it — named), then what the run
comes to know (its plan), every model call counted against it and every agent that finishes, as
they happen, on a thread of its own: the run never waits on the disk, and a batch of moments is
one transaction. The archive (runlog) then replaces all of it with the whole record.

`finish_dead_runs`, called by every command that opens the home, finds rows still running whose
owner is gone, and finishes them as crashed: their spend is the sum of the calls they recorded,
and what their agents delivered is there for `agentgod retry`. A live run — this host's process
with the same start time — is never touched; a run on another host is left to that host.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import sqlite3
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from agentgod import history, historydb, runlog
from agentgod.kinds import RunStatus
from agentgod.ledger import Call
from agentgod.replies import CostSummary
from agentgod.runrecord import AgentRecord, RunRecord, utc
from agentgod.signals import shield_from_signals

CLOSE_SECONDS = 2.0
"""How long closing a journal waits for what is queued to be written (a stop must be prompt)."""
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class Owner:
    """A process, named so that another process can later tell whether it is still running."""

    host: str
    boot: str
    """The kernel's boot id: after a reboot (or a power cut) every earlier process is gone."""
    pid: int
    since: int
    """Its start time in clock ticks after boot: a pid the kernel reused has another one."""

    @classmethod
    def this_process(cls) -> Owner:
        return cls(socket.gethostname(), _boot_id(), os.getpid(), _started(os.getpid()) or 0)

    def to_json(self) -> str:
        return json.dumps(
            {"host": self.host, "boot": self.boot, "pid": self.pid, "since": self.since}
        )

    @classmethod
    def parse(cls, text: str | None) -> Owner | None:
        """The owner a row or a folder names; None for anything else (it is then left alone)."""
        try:
            data = json.loads(text or "")
            return cls(str(data["host"]), str(data["boot"]), int(data["pid"]), int(data["since"]))
        except (ValueError, TypeError, KeyError):
            return None

    def alive(self) -> bool:
        """Whether the process may still be running; True when it cannot be told (another
        host), so nothing of a live run is ever swept."""
        if self.host != socket.gethostname():
            return True
        if self.boot != _boot_id():
            return False
        started = _started(self.pid)
        return started is not None and started == self.since


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _started(pid: int) -> int | None:
    """The process's start time (field 22 of /proc/<pid>/stat), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command's name may hold spaces
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


# ---- a run as it goes --------------------------------------------------------------------------


class RunJournal:
    """One run's row in the history, kept current on a thread of its own.

    Every method only queues; the thread writes what is queued in one transaction. A history
    that cannot be written stops the journal (`failed` says why), never the run: the archive
    tries again at the end, and warns if it cannot either.
    """

    def __init__(self, database: Path) -> None:
        self.database = database
        self.failed = ""
        """Why the journal stopped writing, if it did."""
        self._queue: queue.SimpleQueue[tuple[str, object] | None] = queue.SimpleQueue()
        self._owner = Owner.this_process()
        self._closed = False
        self._abandoned = threading.Event()
        """Set when closing gave up waiting: nothing more is written, so nothing stale can land
        after the archive."""
        self._thread = threading.Thread(target=self._write, name="agentgod-journal", daemon=True)

    def start(self, head: RunRecord) -> None:
        """Begin writing, with the run's row as it starts (`head`): the run is a run now, not
        while small talk may still withdraw it. Whatever was queued before follows it."""
        if self._thread.ident is None and not self._closed:
            self._queue.put(("begin", head))
            self._thread.start()

    def update(self, record: RunRecord) -> None:
        """What the run has come to know since it started (its plan, its grade)."""
        self._queue.put(("update", record))

    def calls(self, calls: list[Call]) -> None:
        """Model calls counted against the run (a ledger's listener)."""
        self._queue.put(("calls", list(calls)))

    def agent(self, record: AgentRecord) -> None:
        """An agent that finished: its output stands for it if the run is retried."""
        self._queue.put(("agent", replace(record, source="")))

    def forget(self) -> None:
        """The run was withdrawn before it began (small talk): nothing of it is kept, then the
        journal stops."""
        if self._thread.is_alive():
            self._queue.put(("forget", None))
        self.close()

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Write what is queued (waiting at most `timeout`) and stop; the archive follows.

        What could not be written in time (another process holds the history) is given up: the
        archive's whole record replaces the journal's anyway.
        """
        if self._closed:
            return
        self._closed = True
        if self._thread.ident is None:
            return  # never started: nothing was queued to be written
        self._queue.put(None)
        self._thread.join(timeout)
        self._abandoned.set()

    def _write(self) -> None:
        shield_from_signals()
        run: int | None = None
        seq = 0
        try:
            with contextlib.closing(
                historydb.open_for_writing(self.database, historydb.LOCK_POLL_MS)
            ) as db:
                while True:
                    batch = [self._queue.get()]
                    while not self._queue.empty():
                        batch.append(self._queue.get())
                    items = [item for item in batch if item is not None]
                    items.sort(key=lambda item: item[0] != "begin")  # the row before its parts
                    run, seq = self._commit(db, items, run, seq)
                    if len(items) < len(batch):
                        return
        except (OSError, sqlite3.Error) as error:
            self.failed = str(error) or type(error).__name__

    def _commit(
        self, db: sqlite3.Connection, items: list[tuple[str, object]], run: int | None, seq: int
    ) -> tuple[int | None, int]:
        """Write one batch, waiting (in slices) for another writer; the row and next call seq."""
        written = runlog.scrubbed_text
        while True:
            try:
                with db:
                    now_run, now_seq = run, seq
                    for kind, value in items:
                        if kind == "begin" and isinstance(value, RunRecord):
                            now_run = history.begin(
                                db, runlog.redacted(value), self._owner.to_json()
                            )
                        elif now_run is None:
                            continue  # the row could not be begun: nothing to attach to
                        elif kind == "update" and isinstance(value, RunRecord):
                            history.update(db, now_run, runlog.redacted(value))
                        elif kind == "calls" and isinstance(value, list):
                            calls = [replace(c, model=written(c.model)) for c in value]
                            history.add_calls(db, now_run, calls, first=now_seq)
                            now_seq += len(calls)
                        elif kind == "agent" and isinstance(value, AgentRecord):
                            history.add_agents(db, now_run, [runlog.redacted_agent(value)])
                        elif kind == "forget":
                            history.forget(db, now_run)
                            now_run = None
                    if now_run is not None:
                        db.execute(
                            "UPDATE runs SET duration_seconds ="
                            " (julianday('now') - julianday(started_at)) * 86400 WHERE id = ?",
                            (now_run,),
                        )
                return now_run, now_seq
            except sqlite3.OperationalError as error:
                if not historydb.is_locked(error) or self._abandoned.is_set():
                    raise


# ---- runs whose process is gone ----------------------------------------------------------------

DEAD_RUN_WARNING = (
    "the process running it ended before it finished (killed outright, out of memory, a closed "
    "container or a power cut); what it had recorded is kept"
)


def finish_dead_runs(database: Path | None = None) -> list[str]:
    """Finish every run still recorded as running whose process is gone: status crashed, its
    cost summed from its recorded calls. Returns their run ids; never raises."""
    path = database or historydb.database()
    if not path.is_file() or not history.running():
        return []  # the common case, read without opening the history for writing
    try:
        with contextlib.closing(historydb.open_for_writing(path, historydb.LOCK_POLL_MS)) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT id, run_id, owner FROM runs WHERE status = ?", (RunStatus.RUNNING.value,)
            ).fetchall()
            dead = [(row, run_id) for row, run_id, owner in rows if _gone(owner)]
            for row, _ in dead:
                with db:
                    _finish(db, row)
            return [run_id for _, run_id in dead]
    except (OSError, sqlite3.Error):
        return []  # a busy or damaged history: the next command tries again


def _gone(owner: str | None) -> bool:
    found = Owner.parse(owner)
    return found is not None and not found.alive()


def _finish(db: sqlite3.Connection, row: int) -> None:
    """One dead run's row: crashed, with its calls summed, unless another process got to it."""
    still = db.execute(
        "SELECT warnings FROM runs WHERE id = ? AND status = ?", (row, RunStatus.RUNNING.value)
    ).fetchone()
    if still is None:
        return
    calls = [
        history.call_of(call)
        for call in db.execute("SELECT * FROM run_calls WHERE run_id = ? ORDER BY seq", (row,))
    ]
    cost = _cost(calls)
    warnings = [*json.loads(still[0] or "[]"), DEAD_RUN_WARNING]
    last = max((utc(call.at) for call in calls), default=None)
    values: dict[str, object] = {
        "status": RunStatus.CRASHED.value,
        "ok": False,
        "owner": None,
        "error": "its process ended before the run finished",
        "warnings": json.dumps(warnings, ensure_ascii=False),
        "phases": json.dumps(_phases(calls)),
        **{name: value for name, value in cost.items() if name in _COST_COLUMNS},
    }
    assignments = ", ".join(f"{name} = :{name}" for name in values)
    db.execute(f"UPDATE runs SET {assignments} WHERE id = :id", {**values, "id": row})
    if last is not None:
        db.execute(
            "UPDATE runs SET duration_seconds = MAX(duration_seconds,"
            " (julianday(?) - julianday(started_at)) * 86400) WHERE id = ?",
            (last.isoformat(), row),
        )


_COST_COLUMNS = (
    "llm_calls",
    "input_tokens",
    "output_tokens",
    "cache_write_tokens",
    "cache_read_tokens",
    "web_searches",
    "usd",
    "estimate",
)


def _cost(calls: list[Call]) -> CostSummary:
    return CostSummary(
        llm_calls=len(calls),
        input_tokens=sum(call.input_tokens for call in calls),
        output_tokens=sum(call.output_tokens for call in calls),
        cache_write_tokens=sum(call.cache_write_tokens for call in calls),
        cache_read_tokens=sum(call.cache_read_tokens for call in calls),
        web_searches=sum(call.web_searches for call in calls),
        usd=round(sum(call.usd for call in calls), 6),
        estimate=False,
    )


def _phases(calls: list[Call]) -> dict[str, CostSummary]:
    by_phase: dict[str, list[Call]] = {}
    for call in calls:
        by_phase.setdefault(call.phase, []).append(call)
    return {name: _cost(group) for name, group in by_phase.items()}
