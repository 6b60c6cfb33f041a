"""Benchmark — the history after a year of use: bytes per run, `show` and `stats` at 100, 1,000
and 10,000 runs (issue 30).

One real 4-agent run (3 + 1, the scripted model, agents whose code and answers are the size a
real model writes: a ~2.5 KB body, ~2 KB per agent's answer, a ~3 KB merged answer) is recorded
by the product itself; its record, loaded back with `history.load`, is then inserted again and
again through `history.insert` under fresh run ids, as a year of runs would be. At each size:

- bytes per run: the database's growth (pages in use, WAL checkpointed) over the runs added;
- `show`: `history.load` by a 6-character prefix of a run's id (what `show`, `retry` and
  `--resume` do), in the process, and `agentgod show PREFIX --json` as a whole command;
- `stats`: `history.stats()` in the process, and `agentgod stats --json` as a whole command;
  the command's start-up is `agentgod history 1 --json` on the same home (the same imports,
  the same sweep of dead runs), so the difference is what `stats` itself costs.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import statistics
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from scripted import Factory

from agentgod import config, history, historydb, orchestrator
from agentgod.runrecord import RunRecord, new_run_id
from bench import harness
from bench.overhead import Shape, plan_for, wave_names

SIZES = (100, 1_000, 10_000)
TARGET_BYTES_PER_RUN = 20_000.0
"""A 4-agent run adds at most ~20 KB (KB = 1,000 bytes)."""
TARGET_SHOW_MS = 2.0
TARGET_STATS_MS = 50.0
SHAPE = Shape("3 + 1", (3, 1))

REALISTIC_BODY = '''
SYSTEM = (
    "You are a careful analyst on a small team. Work only from the task and the notes of the "
    "agents before you; say plainly when something is unknown rather than guessing. Answer in "
    "short paragraphs and bullet points, with the figures you used and where they came from."
)

LIMIT = 6000


def _sections(previous_outputs):
    """The upstream notes as labelled sections, longest cut so the prompt stays small."""
    parts = []
    for name in sorted(previous_outputs):
        text = str(previous_outputs[name] or "").strip()
        if not text:
            continue
        if len(text) > LIMIT:
            text = text[:LIMIT] + "\\n[... cut ...]"
        parts.append(f"## Notes from {name}\\n{text}")
    return "\\n\\n".join(parts)


def _tidy(text):
    """Trailing spaces off, runs of blank lines collapsed, a final newline."""
    lines = [line.rstrip() for line in str(text).splitlines()]
    out = []
    blank = False
    for line in lines:
        if not line:
            if not blank and out:
                out.append("")
            blank = True
            continue
        out.append(line)
        blank = False
    return "\\n".join(out).strip() + "\\n"


def _checklist(task):
    """What the answer must cover, read from the task's own sentences."""
    items = []
    for sentence in task.replace("?", ".").split("."):
        sentence = sentence.strip()
        if len(sentence) > 12:
            items.append(f"- {sentence}")
    return "\\n".join(items[:8]) or "- the task as a whole"


def run(task, previous_outputs):
    notes = _sections(previous_outputs)
    prompt = (
        f"agent={AGENT_NAME} keys=[{','.join(sorted(previous_outputs))}]\\n"
        f"Your part: {AGENT_ROLE}\\n\\n"
        f"The task:\\n{task}\\n\\n"
        f"Make sure you cover:\\n{_checklist(task)}\\n\\n"
        + (f"What the team found so far:\\n{notes}\\n\\n" if notes else "")
        + "Write your part of the answer now."
    )
    answer = call_llm(prompt, system=SYSTEM, max_tokens=2048)
    if not answer.strip():
        answer = call_llm(prompt + "\\n\\nAnswer in at least three sentences.", system=SYSTEM)
    return _tidy(answer)
'''
"""An agent's code of the size a real model writes (~2.5 KB), calling the scripted model."""


def template_record() -> RunRecord:
    """One real 4-agent run, recorded by the product, as `history.load` gives it back."""
    settings = {**harness.TASK_SETTINGS, "SANDBOX": "off", "MAX_PARALLEL_AGENTS": "4"}
    with harness.environment(**settings), harness.scripted_model() as factory:
        _script(factory)
        result = orchestrator.handle_task(
            "Compare SQLite and DuckDB for a 5 GB analytics side project and pick one.",
            settings=config.settings(),
        )
        if not all(agent.ok for agent in result.agents):
            raise harness.BenchError(f"template run: {[f.reason for f in result.failures]}")
        record = history.load(result.run_id)
    if record is None:
        raise harness.BenchError("template run: not in the history")
    return record


def _script(factory: Factory) -> None:
    factory.plans = [plan_for(SHAPE)]
    factory.bodies = {name: [REALISTIC_BODY] for wave in wave_names(SHAPE) for name in wave}
    factory.agent_reply = lambda name, request: f"result from {name}\n" + harness.prose(name, 2000)
    factory.merge_reply = lambda request: harness.prose("the answer", 3000)


def fill(record: RunRecord, start: int, stop: int, database: Path) -> None:
    """Runs number start..stop-1, each the template under a fresh id, through history.insert."""
    for number in range(start, stop):
        copy = replace(
            record,
            run_id=new_run_id(),
            task=f"{record.task} (run {number})",
            started_at=record.started_at + timedelta(minutes=number),
            conversation_id=f"c{number:08d}",
        )
        history.insert(copy, None, database)


def used_bytes(database: Path) -> int:
    """Bytes of the database's pages in use, its WAL checkpointed into it first."""
    with contextlib.closing(sqlite3.connect(database)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def _in_process_ms(work: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _each_ms(work: Any, arguments: list[str]) -> float:
    """The median milliseconds of `work(argument)` over the arguments."""
    times = []
    for argument in arguments:
        started = time.perf_counter()
        work(argument)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _prefixes(database: Path, count: int) -> list[str]:
    with contextlib.closing(sqlite3.connect(database)) as db:
        ids = [row[0] for row in db.execute("SELECT run_id FROM runs")]
    chosen = random.Random(30).sample(ids, min(count, len(ids)))
    return [run_id[:6] for run_id in chosen]


def run(options: harness.Options) -> harness.Report:
    repeat = options.repetitions(full=7, quick=3)
    record = template_record()
    command = harness.cli_commands()[0][1]
    rows: list[list[Any]] = []
    figures: list[harness.Figure] = []
    data: dict[str, Any] = {"sizes": {}, "template": _template_facts(record)}
    with harness.environment() as home:
        database = home / "runs" / historydb.DB_NAME
        database.parent.mkdir(parents=True)
        done, before = 0, 0
        for size in SIZES:
            filled = time.perf_counter()
            fill(record, done, size, database)
            fill_seconds = time.perf_counter() - filled
            now = used_bytes(database)
            per_run = (now - before) / (size - done)
            done, before = size, now
            prefixes = _prefixes(database, 20)
            show_ms = _each_ms(history.load, prefixes * 5)
            stats_ms = _in_process_ms(history.stats, repeat)
            start_ms = harness.command_ms([*command, "history", "1", "--json"], repeat)
            show_cmd_ms = harness.command_ms([*command, "show", prefixes[0], "--json"], repeat)
            stats_cmd_ms = harness.command_ms([*command, "stats", "--json"], repeat)
            facts = {
                "fill_seconds": fill_seconds,
                "database_bytes": database.stat().st_size,
                "bytes_per_run": per_run,
                "show_ms": show_ms,
                "stats_ms": stats_ms,
                "command_start_ms": start_ms,
                "show_command_ms": show_cmd_ms,
                "stats_command_ms": stats_cmd_ms,
            }
            data["sizes"][size] = facts
            sized = [
                harness.Figure(f"history bytes per 4-agent run, at {size:,}", per_run, "B",
                               TARGET_BYTES_PER_RUN),
                harness.Figure(f"show by id prefix at {size:,} runs (in process)", show_ms, "ms",
                               TARGET_SHOW_MS if size == SIZES[-1] else None),
                harness.Figure(f"stats at {size:,} runs (in process)", stats_ms, "ms",
                               TARGET_STATS_MS if size == SIZES[-1] else None),
                harness.Figure(f"`agentgod stats` at {size:,} runs, past start-up",
                               stats_cmd_ms - start_ms, "ms",
                               TARGET_STATS_MS if size == SIZES[-1] else None),
            ]  # fmt: skip
            figures += [figure for figure in sized if figure.target is not None]
            rows.append(
                [
                    f"{size:,}",
                    f"{per_run / 1000:.1f} KB",
                    f"{facts['database_bytes'] / 1e6:.1f} MB",
                    f"{show_ms:.2f} ms",
                    f"{stats_ms:.1f} ms",
                    f"{start_ms:.0f} ms",
                    f"{show_cmd_ms:.0f} ms",
                    f"{stats_cmd_ms:.0f} ms",
                ]
            )
    table = harness.Table(
        "History at scale: one real 4-agent run's record inserted again and again through "
        f"history.insert (median of {repeat})",
        ["runs", "bytes/run", "database", "show (in)", "stats (in)", "start-up", "show cmd",
         "stats cmd"],
        rows,
        [
            "bytes/run: growth of the pages in use over the runs added; targets: <= 20 KB a run, "
            f"show <= {TARGET_SHOW_MS:g} ms and stats <= {TARGET_STATS_MS:g} ms at 10,000 runs",
            "start-up: `agentgod history 1 --json` on the same home (imports, sweep); the "
            "commands' figures are measured past it",
            "template: " + ", ".join(f"{k} {v}" for k, v in data["template"].items()),
        ],
    )  # fmt: skip
    return harness.Report("history", [table], figures, data)


def _template_facts(record: RunRecord) -> dict[str, Any]:
    return {
        "agents": len(record.agents),
        "source bytes": sum(len(agent.source.encode()) for agent in record.agents),
        "output bytes": sum(len(agent.output.encode()) for agent in record.agents),
        "answer bytes": len(record.answer.encode()),
        "calls": len(record.calls),
    }
