"""runexport.py — one recorded run carried from one home to another (a Ray worker's to ours).

A run on a Ray worker records itself in a home of its own there; `export` takes what it left
(its history rows, run file, event log and artifacts) as plain JSON-able data, and `take_in`
writes it into this home, so `agentgod history`, `show` and `batch show` find it as if it had
run here. Rows are copied column by column, only the columns both databases have, so a worker
one schema older or newer still hands its run over. An agent's code and output travel whole
(a database keeps the runtime they share once, by its own row numbers, and may compress them):
each home stores them its own way. No model calls.
"""

from __future__ import annotations

import base64
import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

from agentgod import artifacts, config, history, historydb

RUN_TABLES = ("run_agents", "run_calls")
"""The tables that hang off a run's row (their run_id is the integer runs.id)."""


def _rows(db: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
    db.row_factory = sqlite3.Row
    return [dict(row) for row in db.execute(sql, args).fetchall()]


def export(home: Path, run_id: str) -> dict[str, Any] | None:
    """Everything `home` keeps of run `run_id`, or None when it has no such run."""
    database = home / "runs" / historydb.DB_NAME
    if not database.is_file():
        return None
    with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
        runs = _rows(db, "SELECT * FROM runs WHERE run_id = ?", (run_id,))
        if not runs:
            return None
        run = runs[0]
        tables = {
            table: _rows(db, f"SELECT * FROM {table} WHERE run_id = ? ORDER BY rowid", (run["id"],))
            for table in RUN_TABLES
        }
        tables["run_agents"] = _whole(db, tables["run_agents"])
    exported: dict[str, Any] = {"run": run, "tables": tables, "files": {}}
    run_file = Path(run["run_file"]) if run.get("run_file") else None
    if run_file is not None and run_file.is_file():
        exported["run_file"] = {"name": run_file.name, "text": run_file.read_text("utf-8")}
    folder = home / "runs" / run_id
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.is_file():
            relative = path.relative_to(folder).as_posix()
            exported["files"][relative] = base64.b64encode(path.read_bytes()).decode("ascii")
    return exported


def _whole(db: sqlite3.Connection, agents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Agent rows with their code and output whole and plain (no shared part, no compression)."""
    shared = historydb.SHARED_COLUMNS
    parts = historydb.shared_parts(db, [row.get(name) for row in agents for name in shared])
    whole = []
    for row in agents:
        source = historydb.whole_source(
            parts, row.get("source") or "", *(row.get(name) for name in shared)
        )
        plain = {name: value for name, value in row.items() if name not in shared}
        whole.append({**plain, "source": source, "output": historydb.unpack(row["output"])})
    return whole


def _private_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as sink:
        sink.write(data)


def take_in(exported: dict[str, Any], home: Path | None = None) -> list[artifacts.Artifact]:
    """Write an exported run into `home` (None: this process's home); its artifacts, as now
    kept there. A run the home already has is left as it is. (A Ray worker takes in the run a
    retry carries on, from the submitting home, before the retry starts.)"""
    run = dict(exported["run"])
    run_id = str(run["run_id"])
    runs_dir = config.runs_dir() if home is None else home / "runs"
    folder = runs_dir / run_id
    if history.known(run_id) if home is None else _has_run(runs_dir, run_id):
        return []
    for relative, data in exported.get("files", {}).items():
        target = (folder / relative).resolve()
        if not target.is_relative_to(folder.resolve()):
            continue  # a worker's record names only its own run's files
        _private_write(target, base64.b64decode(data))
    run_file = exported.get("run_file")
    if run_file:
        name = Path(str(run_file["name"])).name
        target = runs_dir / name
        if not target.exists():
            _private_write(target, str(run_file["text"]).encode("utf-8"))
        run["run_file"] = str(target)
    made = folder / "artifacts"
    kept = sorted(made.iterdir()) if made.is_dir() else []
    run["artifacts"] = _local_artifacts(run.get("artifacts"), made)
    _insert(runs_dir / historydb.DB_NAME, run, exported.get("tables", {}))
    return [
        artifacts.Artifact(name=path.name, path=path, bytes=path.stat().st_size, agent="")
        for path in kept
    ]


def _has_run(runs_dir: Path, run_id: str) -> bool:
    """Whether the history in `runs_dir` (another home's) already holds run `run_id`."""
    database = runs_dir / historydb.DB_NAME
    if not database.is_file():
        return False
    with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
        return db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None


def _local_artifacts(stored: Any, folder: Path) -> Any:
    """The run's artifact list with each path pointing into this home."""
    import json

    try:
        items = json.loads(stored) if isinstance(stored, str) else []
    except ValueError:
        return stored
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            item["path"] = str(folder / Path(item["name"]).name)
    return json.dumps(items, ensure_ascii=False)


def _insert(path: Path, run: dict[str, Any], tables: dict[str, list[dict[str, Any]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(historydb.open_for_writing(path)) as db, db:
        columns = _columns(db, "runs") - {"id"}
        kept = {name: value for name, value in run.items() if name in columns}
        names = ", ".join(kept)
        marks = ", ".join(f":{name}" for name in kept)
        cursor = db.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", kept)
        row = cursor.lastrowid
        for table in RUN_TABLES:
            known = _columns(db, table)
            for each in tables.get(table, []):
                values = {k: v for k, v in each.items() if k in known}
                values["run_id"] = row
                if table == "run_agents":  # stored as this home stores code and output
                    own, head, tail = historydb.store_source(db, str(each.get("source") or ""))
                    values |= {"source": own, "output": historydb.pack(str(each["output"]))}
                    values |= dict(zip(historydb.SHARED_COLUMNS, (head, tail), strict=True))
                names = ", ".join(values)
                marks = ", ".join(f":{name}" for name in values)
                db.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", values)


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}
