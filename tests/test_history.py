"""history: a real SQLite history in the test's AGENTGOD_HOME, filled through runlog.archive."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_runlog import (
    ANTHROPIC_KEY,
    LONG_OUTPUT,
    SOURCE,
    STARTED,
    cost,
    full_record,
    make_record,
    query,
    runs_dir,
)

from agentgod import batchrecord, history, historydb, runlog, runrecord
from agentgod.kinds import RunStatus


def test_history_row_and_agent_rows_are_written() -> None:
    path = runlog.archive(make_record())
    [row] = query(
        "SELECT started_at, task, ok, complexity, answer, error, revisions, council_improved,"
        " llm_calls, input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, usd,"
        " duration_seconds, run_file, budget_exhausted FROM runs"
    )
    assert row == (
        "2026-11-30T09:30:12.000000+00:00",
        "Compare the three laptops and recommend one",
        1,
        "standard",
        "## Recommendation\n\nBuy the **second** one.",
        "",
        1,
        1,
        7,
        12345,
        678,
        90,
        4000,
        0.0123,
        83.25,
        str(path),
        0,
    )
    agents = query(
        "SELECT name, role, reused, ok, attempts, seconds, kind, error FROM run_agents"
        " WHERE run_id = (SELECT id FROM runs) ORDER BY rowid"
    )
    assert agents == [
        ("spec_reader", "Reads specs", 1, 1, 1, 1.5, "ok", ""),
        ("price_lister", "Lists prices", 0, 1, 2, 2.25, "ok", ""),
        ("verdict_writer", "Writes a verdict", 0, 0, 3, 75.0, "timeout", "timed out"),
    ]


def test_database_uses_wal_and_a_schema_version() -> None:
    runlog.archive(make_record())
    assert query("PRAGMA journal_mode") == [("wal",)]
    assert query("PRAGMA user_version") == [(historydb.SCHEMA_VERSION,)]


def test_no_history_reads_as_empty_and_creates_nothing() -> None:
    assert history.history() == []
    assert history.last() is None
    assert history.stats() == history.Stats()
    assert history.stats().success_rate == 0.0
    assert not runs_dir().exists()


def test_history_is_newest_first_and_limited() -> None:
    for hours, task in ((0, "oldest task"), (2, "middle task"), (5, "newest task")):
        runlog.archive(make_record(task=task, started_at=STARTED + timedelta(hours=hours)))
    rows = history.history()
    assert [row.task for row in rows] == ["newest task", "middle task", "oldest task"]
    newest = rows[0]
    assert newest.started_at == STARTED + timedelta(hours=5)
    assert (newest.ok, newest.complexity, newest.agents) == (True, "standard", 3)
    assert (newest.usd, newest.duration_seconds) == (0.0123, 83.25)
    assert newest.run_file is not None and newest.run_file.is_file()
    assert [row.task for row in history.history(2)] == ["newest task", "middle task"]
    assert history.history(0) == []


def test_runs_are_ordered_by_when_they_started_not_by_the_clock() -> None:
    """A clock stepped back (an NTP correction) between two runs must not make the later one
    the older: history, last and --continue follow the order the runs started in."""
    runlog.archive(make_record(task="first", answer="first answer", conversation_id="c0000001"))
    stepped_back = STARTED - timedelta(hours=3)
    runlog.archive(
        make_record(
            task="second",
            answer="second answer",
            conversation_id="c0000002",
            started_at=stepped_back,
        )
    )
    assert [row.task for row in history.history()] == ["second", "first"]
    last = history.last()
    assert last is not None and last.answer == "second answer"
    assert history.last_conversation_id() == "c0000002"


def test_last_is_the_newest_successful_answer() -> None:
    runlog.archive(make_record(task="old", answer="old answer", started_at=STARTED))
    path = runlog.archive(
        make_record(task="good", answer="good answer", started_at=STARTED + timedelta(minutes=1))
    )
    runlog.archive(
        make_record(
            task="broken",
            ok=False,
            answer="",
            error="boom",
            started_at=STARTED + timedelta(minutes=2),
        )
    )
    latest = history.last()
    assert latest is not None
    assert (latest.task, latest.answer, latest.run_file) == ("good", "good answer", path)
    assert latest.started_at == STARTED + timedelta(minutes=1)


def agent(name: str, ok: bool) -> runrecord.AgentRecord:
    return runrecord.AgentRecord(name, "Does things", False, ok, 1, 1.0, "ok" if ok else "crash")


def test_stats_add_up() -> None:
    runlog.archive(
        make_record(
            agents=[agent("reader", True), agent("writer", True), agent("solo", True)],
            cost=cost(llm_calls=5, input_tokens=100, output_tokens=10, usd=0.25),
            duration_seconds=10.0,
        )
    )
    runlog.archive(
        make_record(
            agents=[agent("reader", True), agent("writer", False), agent("writer", True)],
            cost=cost(llm_calls=3, input_tokens=50, output_tokens=5, usd=0.5),
            duration_seconds=20.0,
        )
    )
    runlog.archive(
        make_record(
            ok=False,
            answer="",
            error="every agent failed",
            agents=[agent("reader", False), agent("writer", False)],
            cost=cost(
                llm_calls=1,
                input_tokens=7,
                output_tokens=0,
                cache_write_tokens=0,
                cache_read_tokens=0,
                usd=0.125,
            ),
            duration_seconds=3.0,
        )
    )
    stats = history.stats()
    assert (stats.runs, stats.succeeded) == (3, 2)
    assert stats.success_rate == pytest.approx(2 / 3)
    assert stats.llm_calls == 9
    assert (stats.input_tokens, stats.output_tokens) == (157, 15)
    assert (stats.cache_write_tokens, stats.cache_read_tokens) == (180, 8000)
    assert stats.usd == pytest.approx(0.875)
    assert stats.mean_duration_seconds == pytest.approx(11.0)
    assert stats.most_used_agents == [("reader", 3), ("writer", 3), ("solo", 1)]
    # writer won in run 2 after a failed attempt in the same run: that run counts as one success.
    assert stats.most_reliable_agents == [("reader", 2, 3), ("writer", 2, 3)]


def test_most_used_and_reliable_stop_at_five() -> None:
    names = [f"agent_{letter}" for letter in "abcdefg"]
    for _ in range(2):
        runlog.archive(make_record(agents=[agent(name, name != "agent_a") for name in names]))
    stats = history.stats()
    assert [name for name, _ in stats.most_used_agents] == names[:5]
    assert [name for name, *_ in stats.most_reliable_agents] == names[1:6]


# ---- the whole run, read back (issue 12) -----------------------------------------------------


def test_a_whole_run_is_stored_and_loaded_back() -> None:
    record = full_record()
    path = runlog.archive(record)
    stored = history.load("3f9a0c1d")
    assert stored is not None
    assert (stored.run_id, stored.status, stored.ok) == ("3f9a0c1d", RunStatus.OK, True)
    assert (stored.task, stored.answer, stored.error) == (record.task, record.answer, "")
    assert (stored.model, stored.effort) == ("claude-sonnet-5-5", "high")
    assert (stored.conversation_id, stored.retry_of) == ("c0ffee00", "0badf00d")
    assert stored.reasoning == record.reasoning
    assert list(stored.plan) == record.plan
    assert stored.waves == [["spec_reader"], ["verdict_writer"]]
    assert stored.cost == record.cost
    assert stored.phases == record.phases
    assert stored.calls == record.calls
    assert stored.started_at == STARTED
    assert stored.duration_seconds == record.duration_seconds
    assert stored.run_file == path
    assert stored.warnings == ["judge failed"]
    assert list(stored.attachments) == record.attachments
    assert stored.sandbox == record.sandbox
    reader, writer = stored.agents
    expected = record.agents[0]
    assert (reader.name, reader.role, reader.reused, reader.ok) == (
        "spec_reader",
        *[
            expected.role,
            expected.reused,
            expected.ok,
        ],
    )
    assert (reader.attempts, reader.seconds, reader.kind, reader.usd) == (1, 1.5, "ok", 0.002)
    assert (reader.source, reader.output, reader.inputs) == (SOURCE, expected.output, [])
    assert reader.usage == expected.usage
    assert writer.inputs == ["spec_reader"]
    assert writer.output == LONG_OUTPUT, "the history keeps what the run file leaves out"
    assert stored.agent("verdict_writer") == writer
    assert stored.agent("nobody") is None


def test_show_json_is_plain_json_with_every_agent_and_call() -> None:
    runlog.archive(full_record())
    stored = history.load()
    assert stored is not None
    shown = json.loads(json.dumps(stored.to_json()))
    assert shown["run_id"] == "3f9a0c1d" and shown["status"] == "ok"
    assert shown["started_at"] == STARTED.isoformat()
    assert [agent["name"] for agent in shown["agents"]] == ["spec_reader", "verdict_writer"]
    assert shown["agents"][0]["source"] == SOURCE
    assert shown["agents"][0]["usage"]["web_searches"] == 1
    assert shown["agents"][1]["inputs"] == ["spec_reader"]
    assert [call["phase"] for call in shown["calls"]] == ["other", "plan", "generate", "agents"]
    assert [call["agent"] for call in shown["calls"]] == ["", "", "spec_reader", "spec_reader"]
    assert shown["calls"][3]["seconds"] == 0.75 and shown["calls"][3]["web_fetches"] == 2
    assert shown["calls"][0]["at"] == STARTED.isoformat()
    assert shown["plan"][0]["dependencies"] == ["requests"]
    assert shown["cost"] == cost()
    assert shown["run_file"].endswith(".md")


def test_runs_stopped_early_are_recorded_like_any_other() -> None:
    runlog.archive(full_record(run_id="aaaa0001", started_at=STARTED))
    runlog.archive(
        full_record(
            run_id="aaaa0002",
            ok=False,
            answer="",
            status=RunStatus.INTERRUPTED,
            started_at=STARTED + timedelta(minutes=1),
        )
    )
    runlog.archive(
        full_record(
            run_id="aaaa0003",
            ok=False,
            answer="",
            budget_exhausted=True,
            started_at=STARTED + timedelta(minutes=2),
        )
    )
    rows = history.history()
    assert [(row.run_id, row.status, row.ok) for row in rows] == [
        ("aaaa0003", RunStatus.BUDGET, False),
        ("aaaa0002", RunStatus.INTERRUPTED, False),
        ("aaaa0001", RunStatus.OK, True),
    ]
    stopped = history.load("aaaa0002")
    assert stopped is not None and stopped.status is RunStatus.INTERRUPTED
    assert stopped.cost == cost(), "what it spent is kept"
    last = history.last()
    assert last is not None and last.run_id == "aaaa0001"
    assert history.stats().runs == 3


def test_a_run_is_named_by_its_id_or_a_unique_prefix() -> None:
    runlog.archive(
        full_record(run_id="b0b0b0b0", task="weigh the whale", started_at=STARTED - timedelta(1))
    )
    runlog.archive(full_record(run_id="3f9a0c1d", task="count the otters"))
    runlog.archive(full_record(run_id="3f9a77e2", task="name the seals"))

    def task(ref: str | None) -> str | None:
        found = history.load(ref)
        return None if found is None else found.task

    assert task("3f9a0c1d") == "count the otters"
    assert task(" 3F9A77 ") == "name the seals", "case and spaces do not matter"
    assert task("b0b0") == "weigh the whale"
    assert task(None) == "name the seals", "no id: the newest run"
    assert task("ffff") is None
    assert task("3f9a0c1d0") is None
    with pytest.raises(ValueError, match="start of 2 run ids") as refused:
        history.load("3f9a")
    for named in ("3f9a0c1d (count the otters)", "3f9a77e2 (name the seals)"):
        assert named in str(refused.value)
    with pytest.raises(ValueError, match="at least 4 characters"):
        history.load("3f9")


def test_a_prefix_naming_too_many_runs_names_five_and_counts_the_rest() -> None:
    for number in range(7):
        runlog.archive(full_record(run_id=f"cafe{number:04x}", task=f"task {number}"))
    with pytest.raises(ValueError, match=r"start of 7 run ids: .* and 2 more; give more of it"):
        history.load("cafe")


@settings(max_examples=25, deadline=None)
@given(
    ids=st.lists(
        st.text(alphabet="ab", min_size=8, max_size=8), min_size=1, max_size=6, unique=True
    ),
    data=st.data(),
)
def test_any_prefix_resolves_to_its_one_run_or_is_refused(
    tmp_path_factory: pytest.TempPathFactory, ids: list[str], data: st.DataObject
) -> None:
    os.environ["AGENTGOD_HOME"] = str(tmp_path_factory.mktemp("home"))  # restored by conftest
    runs_dir().mkdir()
    for run_id in ids:
        history.insert(make_record(run_id=run_id, task=f"task {run_id}"), None)
    chosen = data.draw(st.sampled_from(ids))
    prefix = chosen[: data.draw(st.integers(historydb.MIN_PREFIX, len(chosen)))]
    matching = [run_id for run_id in ids if run_id.startswith(prefix)]
    if prefix == chosen or len(matching) == 1:
        found = history.load(prefix)
        assert found is not None and found.run_id == chosen
    else:
        with pytest.raises(ValueError) as refused:
            history.load(prefix)
        assert all(run_id in str(refused.value) for run_id in matching[:5])


@settings(max_examples=25, deadline=None)
@given(
    ids=st.lists(
        st.text(alphabet="ab", min_size=8, max_size=8), min_size=1, max_size=6, unique=True
    ),
    data=st.data(),
)
def test_a_batch_is_named_by_its_id_or_a_unique_prefix_as_a_run_is(
    tmp_path_factory: pytest.TempPathFactory, ids: list[str], data: st.DataObject
) -> None:
    os.environ["AGENTGOD_HOME"] = str(tmp_path_factory.mktemp("home"))  # restored by conftest
    runs_dir().mkdir()
    for number, batch_id in enumerate(ids):
        started = STARTED + timedelta(seconds=number)
        batchrecord.create(batchrecord.BatchRow(batch_id, "-", started_at=started))
    assert (newest := batchrecord.load(None)) is not None and newest.batch_id == ids[-1]
    chosen = data.draw(st.sampled_from(ids))
    prefix = chosen[: data.draw(st.integers(historydb.MIN_PREFIX, len(chosen)))]
    matching = [batch_id for batch_id in ids if batch_id.startswith(prefix)]
    if prefix == chosen or len(matching) == 1:
        found = batchrecord.load(prefix.upper())
        assert found is not None and found.batch_id == chosen
    else:
        with pytest.raises(ValueError, match="give more of it") as refused:
            batchrecord.load(prefix)
        assert all(batch_id in str(refused.value) for batch_id in matching[:5])
    assert batchrecord.load("b" * 8 + "a") is None
    with pytest.raises(ValueError, match="too short to name a batch"):
        batchrecord.load(chosen[:3])


PLAIN = st.text(alphabet=st.characters(categories=("L", "N", "Zs"), include_characters="\n.,!?"))
"""Text redaction leaves alone: no control characters, nothing key-shaped."""


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.fixed_dictionaries(
        dict.fromkeys(
            ("task", "answer", "reasoning", "source", "output", "role", "instructions"), PLAIN
        )
    ),
    secret_at=st.sampled_from(["task", "answer", "reasoning", "source", "output", "instructions"]),
    ok=st.booleans(),
)
def test_any_record_round_trips_with_its_secrets_redacted(
    texts: dict[str, str], secret_at: str, ok: bool
) -> None:
    assume(ok or secret_at != "answer")  # a failed run keeps no answer

    def record(leak: str) -> runrecord.RunRecord:
        value = {
            name: f"{text} {leak}" if name == secret_at else text for name, text in texts.items()
        }
        made = full_record(
            run_id=runrecord.new_run_id(),
            task=value["task"],
            ok=ok,
            answer=value["answer"] if ok else "",
            reasoning=value["reasoning"],
            plan=[{"name": "spec_reader", "instructions": value["instructions"]}],
        )
        made.agents[0].source = value["source"]
        made.agents[0].output = value["output"]
        made.agents[0].role = value["role"]
        return made

    clean, leaky = record(""), record(ANTHROPIC_KEY)
    for sent in (clean, leaky):
        runlog.archive(sent)
    stored = history.load(clean.run_id)
    assert stored is not None
    assert (stored.task, stored.answer, stored.reasoning) == (
        clean.task.replace("\r\n", "\n"),
        clean.answer,
        clean.reasoning,
    )
    assert (stored.agents[0].source, stored.agents[0].output, stored.agents[0].role) == (
        clean.agents[0].source,
        clean.agents[0].output,
        clean.agents[0].role,
    )
    assert list(stored.plan) == clean.plan
    assert stored.status is (RunStatus.OK if ok else RunStatus.FAILED)
    leaked = history.load(leaky.run_id)
    assert leaked is not None
    assert ANTHROPIC_KEY not in json.dumps(leaked.to_json())
    assert "[redacted]" in json.dumps(leaked.to_json())


def test_a_conversation_is_its_answered_runs_oldest_first() -> None:
    def run(minute: int, conversation: str | None, task: str, **more: Any) -> None:
        runlog.archive(
            full_record(
                run_id=runrecord.new_run_id(),
                conversation_id=conversation,
                task=task,
                started_at=STARTED + timedelta(minutes=minute),
                **{"answer": f"answer to {task}", **more},
            )
        )

    assert history.last_conversation_id() is None
    run(0, "c1", "first")
    run(1, "c1", "second")
    run(2, "c2", "elsewhere")
    run(3, "c1", "broken", ok=False, answer="", error="boom")
    run(4, "c1", "third")
    run(5, None, "outside any")
    assert history.conversation("c1") == [
        ("first", "answer to first"),
        ("second", "answer to second"),
        ("third", "answer to third"),
    ]
    assert history.conversation("c1", limit=2) == [
        ("second", "answer to second"),
        ("third", "answer to third"),
    ]
    assert history.conversation("c1", limit=0) == []
    assert history.conversation("nope") == []
    assert history.last_conversation_id() == "c1"
    run(6, "c2", "back there")
    assert history.last_conversation_id() == "c2"


def test_known_ids_are_the_recorded_ones() -> None:
    assert not history.known("3f9a0c1d"), "no history yet"
    runlog.archive(full_record())
    assert history.known("3f9a0c1d")
    assert not history.known("3f9a0c1e")


def test_a_clashing_run_id_is_refused_not_merged() -> None:
    runlog.archive(full_record())
    with pytest.raises(sqlite3.IntegrityError):
        history.insert(full_record(task="another run"), None)
    assert [row.task for row in history.history()] == [make_record().task]


def test_a_rebuilt_history_keeps_each_runs_id_status_and_conversation() -> None:
    runlog.archive(full_record(run_id="aaaa0001"))
    runlog.archive(
        full_record(
            run_id="aaaa0002",
            ok=False,
            answer="",
            status=RunStatus.INTERRUPTED,
            started_at=STARTED + timedelta(minutes=1),
        )
    )
    database = runs_dir() / historydb.DB_NAME
    for companion in database.parent.glob(f"{database.name}-*"):
        companion.unlink()
    database.write_bytes(b"not a database" * 100)
    rows = history.history()
    assert ["rebuilt from 2 run files" in notice for notice in historydb.notices()] == [True]
    assert [(row.run_id, row.status) for row in rows] == [
        ("aaaa0002", RunStatus.INTERRUPTED),
        ("aaaa0001", RunStatus.OK),
    ]
    stored = history.load("aaaa0001")
    assert stored is not None
    assert (stored.model, stored.effort, stored.conversation_id, stored.retry_of) == (
        "claude-sonnet-5-5",
        "high",
        "c0ffee00",
        "0badf00d",
    )
    assert [(agent.name, agent.source) for agent in stored.agents] == [
        ("spec_reader", ""),
        ("verdict_writer", ""),
    ], "the agents come back from the file's table; their code was only in the database"


def test_a_copied_run_file_gets_an_id_of_its_own_when_the_history_is_rebuilt() -> None:
    path = runlog.archive(full_record())
    assert path is not None
    (path.parent / f"copy_{path.name}").write_bytes(path.read_bytes())
    database = runs_dir() / historydb.DB_NAME
    for companion in database.parent.glob(f"{database.name}-*"):
        companion.unlink()
    database.write_bytes(b"not a database" * 100)
    ids = [row.run_id for row in history.history()]
    assert ["rebuilt from 2 run files" in notice for notice in historydb.notices()] == [True]
    assert len(ids) == len(set(ids)) == 2 and "3f9a0c1d" in ids
    assert all(re.fullmatch(r"[0-9a-f]{8}", run_id) for run_id in ids)


# ---- a history written by the first schema ---------------------------------------------------

SCHEMA_V1 = """
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
"""The schema agentgod wrote before issue 12, copied here as it was, not imported."""

OLD_RUNS = [
    # started_at, task, ok, complexity, answer, error, revisions, council_improved, llm_calls,
    # input, output, cache write, cache read, usd, duration, run_file, budget_exhausted
    (
        "2026-01-02T10:00:00.000000+00:00",
        "old one",
        1,
        "simple",
        "first answer",
        "",
        0,
        0,
        4,
        1200,
        300,
        0,
        50,
        0.0042,
        83.0,
        "/old/runs/a.md",
        0,
    ),
    (
        "2026-01-02T11:00:00.000000+00:00",
        "old two",
        0,
        None,
        "",
        "3 agents timed out",
        1,
        0,
        9,
        2000,
        100,
        10,
        0,
        0.02,
        12.5,
        None,
        0,
    ),
    (
        "2026-01-02T12:00:00.000000+00:00",
        "old three",
        0,
        "deep",
        "",
        "budget",
        0,
        1,
        2,
        50,
        5,
        0,
        0,
        0.5,
        3.0,
        "/old/runs/c.md",
        1,
    ),
]
OLD_AGENTS = [
    (1, "fact_finder", "finds facts", 0, 1, 2, 1.5, "ok", ""),
    (1, "writer", "writes", 1, 1, 1, 0.5, "ok", ""),
    (2, "fact_finder", "finds facts", 0, 0, 3, 30.0, "timeout", "timed out"),
]


def old_history() -> Path:
    """runs/history.db as the previous agentgod left it: schema 1, three runs, WAL."""
    runs_dir().mkdir(parents=True)
    path = runs_dir() / historydb.DB_NAME
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(SCHEMA_V1)
        db.executemany(f"INSERT INTO runs ({OLD_COLUMNS}) VALUES ({', '.join('?' * 17)})", OLD_RUNS)
        db.executemany("INSERT INTO run_agents VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", OLD_AGENTS)
        db.execute("PRAGMA user_version = 1")
        db.commit()
    return path


OLD_COLUMNS = (
    "started_at, task, ok, complexity, answer, error, revisions, council_improved, llm_calls,"
    " input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, usd, duration_seconds,"
    " run_file, budget_exhausted"
)


def test_an_old_history_is_migrated_in_place_and_loses_nothing() -> None:
    old_history()
    old_stats = (9 + 4 + 2, 1)
    rows = history.history()
    assert query("PRAGMA user_version") == [(historydb.SCHEMA_VERSION,)]
    assert query(f"SELECT {OLD_COLUMNS} FROM runs ORDER BY id") == OLD_RUNS
    assert (
        query(
            "SELECT run_id, name, role, reused, ok, attempts, seconds, kind, error"
            " FROM run_agents ORDER BY rowid"
        )
        == OLD_AGENTS
    )
    assert [(row.task, row.status, row.agents) for row in rows] == [
        ("old three", RunStatus.BUDGET, 0),
        ("old two", RunStatus.FAILED, 1),
        ("old one", RunStatus.OK, 2),
    ]
    ids = [row.run_id for row in rows]
    assert len(set(ids)) == 3 and all(re.fullmatch(r"[0-9a-f]{8}", run_id) for run_id in ids)
    stats = history.stats()
    assert (stats.llm_calls, stats.succeeded, stats.runs) == (*old_stats, 3)
    assert stats.most_used_agents == [("fact_finder", 2), ("writer", 1)]
    last = history.last()
    assert last is not None and (last.task, last.answer) == ("old one", "first answer")
    old = history.load(ids[2])
    assert old is not None
    assert (old.task, old.answer, old.cost["usd"], old.run_file) == (
        "old one",
        "first answer",
        0.0042,
        Path("/old/runs/a.md"),
    )
    assert [(agent.name, agent.source, agent.inputs) for agent in old.agents] == [
        ("fact_finder", "", []),
        ("writer", "", []),
    ]
    assert (old.plan, old.calls, old.model) == ([], [], "")
    assert history.history() == rows, "the ids given are kept"
    runlog.archive(full_record())
    assert history.history()[0].task == make_record().task
    assert len(history.history()) == 4


def test_history_finds_runs_by_words_of_their_task_or_id_and_by_status() -> None:
    runlog.archive(make_record(task="Sum 100% of the rows", run_id="aaaa0001"))
    runlog.archive(make_record(task="a_b test", run_id="bbbb0002", ok=False))
    runlog.archive(make_record(task="axb plain", run_id="cccc0003"))
    assert [row.run_id for row in history.history(10, matching="100%")] == ["aaaa0001"]
    assert [row.run_id for row in history.history(10, matching="%")] == ["aaaa0001"]
    assert [row.run_id for row in history.history(10, matching="a_b")] == ["bbbb0002"]
    assert [row.run_id for row in history.history(10, matching="SUM")] == ["aaaa0001"]
    assert [row.run_id for row in history.history(10, matching="cccc")] == ["cccc0003"]
    assert [row.run_id for row in history.history(10, status="failed")] == ["bbbb0002"]
    assert history.run_ids() == {"aaaa0001", "bbbb0002", "cccc0003"}


def test_a_version_3_history_gains_whom_each_call_served_and_keeps_its_calls() -> None:
    """Issue 29 (schema 4): run_calls gains agent, seconds and web_fetches; an older call reads
    as the main agent's, untimed, with no page fetched."""
    runlog.archive(full_record())
    path = historydb.database()
    with contextlib.closing(sqlite3.connect(path)) as db:
        for column in ("agent", "seconds", "web_fetches"):
            db.execute(f"ALTER TABLE run_calls DROP COLUMN {column}")
        db.execute("PRAGMA user_version = 3")
        db.commit()
    stored = history.load("3f9a0c1d")
    assert stored is not None
    assert query("PRAGMA user_version") == [(historydb.SCHEMA_VERSION,)]
    expected = [(call.phase, call.input_tokens, call.usd, call.at) for call in full_record().calls]
    assert [(c.phase, c.input_tokens, c.usd, c.at) for c in stored.calls] == expected
    assert {(c.agent, c.seconds, c.web_fetches) for c in stored.calls} == {("", 0.0, 0)}
    runlog.archive(full_record(run_id="5e5e5e5e"))
    again = history.load("5e5e5e5e")
    assert again is not None and again.calls == full_record().calls


def test_a_new_history_and_a_migrated_one_have_the_same_schema() -> None:
    def columns() -> dict[str, list[tuple[Any, ...]]]:
        tables = [name for (name,) in query("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            table: sorted(
                query(
                    f'SELECT name, type, "notnull", dflt_value, pk'
                    f" FROM pragma_table_info('{table}')"
                )
            )
            for table in tables
        }

    def indexes() -> set[str]:
        return {name for (name,) in query("SELECT name FROM sqlite_master WHERE type = 'index'")}

    old_history()
    history.history()
    migrated = (columns(), indexes())
    for file in runs_dir().iterdir():
        file.unlink()
    runlog.archive(full_record())
    assert (columns(), indexes()) == migrated


def test_an_old_history_is_migrated_once_when_two_runs_archive_onto_it_at_once() -> None:
    old_history()
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def archive(number: int) -> None:
        start.wait()
        try:
            history.insert(make_record(run_id=f"0000000{number}", task=f"new {number}"), None)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=archive, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(history.history(limit=20)) == 3 + 4


# ---- a year of runs: the runtime kept once, found by an index (issue 30) ----------------------

SCHEMA_V4 = """
CREATE TABLE runs (
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
, run_id TEXT, status TEXT NOT NULL DEFAULT 'failed', conversation_id TEXT, retry_of TEXT,
model TEXT NOT NULL DEFAULT '', effort TEXT, reasoning TEXT NOT NULL DEFAULT '', plan TEXT NOT
NULL DEFAULT '[]', waves TEXT NOT NULL DEFAULT '[]', failures TEXT NOT NULL DEFAULT '[]',
web_searches INTEGER NOT NULL DEFAULT 0, estimate INTEGER NOT NULL DEFAULT 0, phases TEXT NOT NULL
DEFAULT '{}', warnings TEXT NOT NULL DEFAULT '[]', sandbox TEXT NOT NULL DEFAULT '[]', outputs
TEXT NOT NULL DEFAULT '{}', attachments TEXT NOT NULL DEFAULT '[]', artifacts TEXT NOT NULL
DEFAULT '[]', owner TEXT);
CREATE INDEX runs_by_start ON runs (started_at);
CREATE TABLE run_agents (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    reused INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    seconds REAL NOT NULL,
    kind TEXT NOT NULL,
    error TEXT NOT NULL
, usd REAL NOT NULL DEFAULT 0, source TEXT NOT NULL DEFAULT '', inputs TEXT NOT NULL DEFAULT
'[]', output TEXT NOT NULL DEFAULT '', calls INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT
NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0, cache_write_tokens INTEGER NOT NULL
DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0, web_searches INTEGER NOT NULL DEFAULT 0);
CREATE INDEX run_agents_by_run ON run_agents (run_id);
CREATE INDEX run_agents_by_name ON run_agents (name);
CREATE TABLE run_calls (
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
    at TEXT NOT NULL, agent TEXT NOT NULL DEFAULT '', seconds REAL NOT NULL DEFAULT 0,
    web_fetches INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, seq)
);
CREATE UNIQUE INDEX runs_by_run_id ON runs (run_id);
CREATE INDEX runs_by_conversation ON runs (conversation_id, started_at);
CREATE INDEX runs_by_status ON runs (status);
"""
"""The schema agentgod wrote before issue 30 (version 4), as its database holds it."""

BODY = '''
def run(task, previous_outputs):
    """Answer the task in {words} words."""
    notes = format_previous(previous_outputs)
    return call_llm(f"In {words} words: {{task}}\\n\\n{{notes}}", max_tokens=2048)
'''


def year_of_sources() -> dict[str, str]:
    """Agents' code as a year of runs recorded it: the runtime of this version, a kept agent's
    copy with the standalone road, an earlier runtime, and texts that are no agent at all."""
    from agents import spec

    from agentgod import generator

    def written(name: str, words: int) -> str:
        return generator.assemble_agent(BODY.format(words=words), spec(name, f"Writes {name}"))

    earlier = written("earlier_agent", 7).replace("# Generated by AgentGOD.", "# AgentGOD 0.3.", 1)
    assert earlier != written("earlier_agent", 7)
    return {
        "writer": written("writer", 50),
        "kept_writer": generator.for_library(written("kept_writer", 60)),
        "earlier_agent": earlier,
        "odd": "x = 1\r\nAGENT_NAME = 'odd'\n\u202e# \x1b[2J no newline at the end",
        "blank": "",
        **{f"writer_{n}": written(f"writer_{n}", n) for n in range(5)},
    }


V4_RUNS = {
    "4a4a0001": ["writer", "kept_writer", "blank"],
    "4a4a0002": ["writer", "earlier_agent", "odd"],
    "4a4a0003": [f"writer_{n}" for n in range(5)],
}


def v4_history(sources: dict[str, str]) -> Path:
    """runs/history.db as agentgod left it before issue 30: version 4, every agent's code whole."""
    runs_dir().mkdir(parents=True)
    path = runs_dir() / historydb.DB_NAME
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(SCHEMA_V4)
        for number, (run_id, names) in enumerate(V4_RUNS.items(), start=1):
            db.execute(
                f"INSERT INTO runs ({OLD_COLUMNS}, run_id, status, model, plan) VALUES"
                f" ({', '.join('?' * 21)})",
                (
                    *OLD_RUNS[number - 1][:-1],
                    0,
                    run_id,
                    "ok",
                    "claude-test",
                    json.dumps([{"name": name} for name in names]),
                ),
            )
            for name in names:
                db.execute(
                    "INSERT INTO run_agents (run_id, name, role, reused, ok, attempts, seconds,"
                    " kind, error, usd, source, inputs, output) VALUES"
                    " (?, ?, ?, 0, 1, 1, 1.5, 'ok', '', 0.01, ?, '[]', ?)",
                    (number, name, f"Writes {name}", sources[name], f"{name} wrote " * 200),
                )
            db.execute(
                "INSERT INTO run_calls VALUES (?, 0, 'plan', 'claude-test', 10, 20, 0, 0, 0, 0.1,"
                " '2026-11-30T09:30:12.000000+00:00', '', 1.25, 0)",
                (number,),
            )
        db.execute("PRAGMA user_version = 4")
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


AGENT_COLUMNS = (
    "run_id, name, role, reused, ok, attempts, seconds, kind, error, usd, inputs, calls,"
    " input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, web_searches"
)


def test_a_version_4_history_is_migrated_in_place_keeping_every_row_and_every_code_exactly(
    isolated_home: Path,
) -> None:
    """Issue 30 (schema 6): the first command to open an older history splits every stored
    source into the runtime it shares (kept once) and its own part, keeps every row, gives the
    disk back the pages that freed, and `show --code` prints every agent's code as it ran."""
    from conftest import agentgod

    from agentgod.text import visible_code

    sources = year_of_sources()
    path = v4_history(sources)
    size_before = path.stat().st_size
    objects = "SELECT COUNT(*) FROM sqlite_master WHERE rootpage > 0"
    [(objects_before,)] = query(objects)
    runs_before = query("SELECT * FROM runs ORDER BY id")
    calls_before = query("SELECT * FROM run_calls ORDER BY run_id, seq")
    agents_before = query(f"SELECT {AGENT_COLUMNS}, output FROM run_agents ORDER BY rowid")

    shown = agentgod(isolated_home, None, "show", "4a4a0002", "--code", "earlier_agent", "--full")
    assert shown.returncode == 0, shown.stderr
    assert query("PRAGMA user_version") == [(historydb.SCHEMA_VERSION,)]
    assert shown.stdout == sources["earlier_agent"], "show --code --full, byte for byte"
    for run_id, names in V4_RUNS.items():
        done = agentgod(isolated_home, None, "show", run_id, "--json")
        stored = {agent["name"]: agent for agent in json.loads(done.stdout)["agents"]}
        assert {name: stored[name]["source"] for name in names} == {
            name: sources[name] for name in names
        }
    odd = agentgod(isolated_home, None, "show", "4a4a0002", "--code", "odd")
    assert odd.stdout == visible_code(sources["odd"])[0] + "\n"
    kept = agentgod(isolated_home, None, "show", "4a4a0001", "--code", "kept_writer", "--full")
    assert kept.stdout == sources["kept_writer"]

    assert query("SELECT * FROM runs ORDER BY id") == runs_before
    asked = ""  # version 7's column: '' reads as `model`
    assert query("SELECT * FROM run_calls ORDER BY run_id, seq") == [
        (*row, asked) for row in calls_before
    ]
    assert query(f"SELECT {AGENT_COLUMNS} FROM run_agents ORDER BY rowid") == [
        row[:-1] for row in agents_before
    ]
    loaded = [history.load(run_id) for run_id in V4_RUNS]
    assert [(a.output, a.source) for run in loaded if run for a in run.agents] == [
        (row[-1], sources[row[1]]) for row in agents_before
    ]
    # this version's runtime, the kept copy's, the earlier one, and the one footer: once each
    assert query("SELECT COUNT(*) FROM source_parts") == [(4,)]
    assert all(
        "agent runtime: begin" not in (own if isinstance(own, str) else "")
        for (own,) in query("SELECT source FROM run_agents")
    )
    assert query("PRAGMA freelist_count") == [(0,)], "the freed pages went back to the disk"
    # the shared runtime freed most of the file, beside the page each table or index the later
    # versions add (the batch's, the eval's: empty here) takes
    [(objects_after,)] = query(objects)
    [(page_size,)] = query("PRAGMA page_size")
    added = (objects_after - objects_before) * page_size
    assert path.stat().st_size - added < size_before * 0.6


def test_the_runtime_every_agent_inlines_is_stored_once_and_each_code_comes_back_whole() -> None:
    sources = year_of_sources()
    for number in range(3):
        record = full_record(run_id=f"5b5b000{number}")
        for agent, name in zip(record.agents, ("writer", f"writer_{number}"), strict=False):
            agent.source = sources[name]
        runlog.archive(record)
    assert query("SELECT COUNT(*) FROM source_parts") == [(2,)], "one runtime, one footer"
    stored = sum(length for (length,) in query("SELECT length(source) FROM run_agents"))
    assert stored < len(sources["writer"]), "six agents' own parts: less than one whole file"
    for number in range(3):
        run = history.load(f"5b5b000{number}")
        assert run is not None
        assert [agent.source for agent in run.agents[:2]] == [
            sources["writer"],
            sources[f"writer_{number}"],
        ]


@given(st.text(), st.sampled_from(["", "\nAGENT_NAME = 'x'\n", "\n# ---- runtime footer"]))
def test_any_source_splits_into_parts_that_join_back_exactly(text: str, mark: str) -> None:
    from agentgod.agent_runtime import BODY_END

    source = "#" * 2000 + mark + text + f"\n{BODY_END}\n" + text
    head, own, tail = historydb.split_source(source)
    assert head + own + tail == source
    assert historydb.unpack(historydb.pack(own)) == own
    assert (
        historydb.split_source(text)[0]
        + historydb.split_source(text)[1]
        + (historydb.split_source(text)[2])
        == text
    )


def test_a_run_is_found_by_its_id_and_stats_are_counted_through_indexes() -> None:
    """`show`, `retry` and `--resume` look a prefix up in the index on run_id; `stats` reads
    two covering indexes rather than every run's row (its answer, plan and code)."""
    runlog.archive(full_record())

    def plan_of(sql: str, *parameters: Any) -> str:
        return " | ".join(row[-1] for row in query(f"EXPLAIN QUERY PLAN {sql}", *parameters))

    assert "INDEX runs_by_run_id" in plan_of(history.BY_PREFIX, "3f9a", "3f9a\U0010ffff")
    for statement in history.STATS_QUERIES:
        assert "COVERING INDEX" in plan_of(statement)
        assert re.search(r"SCAN (runs|run_agents)(?! USING)", plan_of(statement)) is None


def test_a_version_4_history_gains_the_model_each_call_was_asked_of() -> None:
    """Issue 26 (schema 7): run_calls gains `asked`; an older call reads as asked of the model
    that answered it, and a fallback's call keeps both."""
    from dataclasses import replace

    runlog.archive(full_record())
    path = historydb.database()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("ALTER TABLE run_calls DROP COLUMN asked")
        db.execute("PRAGMA user_version = 4")
        db.commit()
    stored = history.load("3f9a0c1d")
    assert stored is not None
    assert query("PRAGMA user_version") == [(historydb.SCHEMA_VERSION,)]
    assert all(c.asked_model == c.model and not c.fell_back for c in stored.calls)
    record = full_record(run_id="6a6a6a6a")
    record.calls = [
        replace(c, asked="claude-sonnet-5-5", model="claude-haiku-5-5") for c in record.calls
    ]
    runlog.archive(record)
    again = history.load("6a6a6a6a")
    assert again is not None and again.calls == record.calls
    assert again.fallbacks() == [
        {"asked": "claude-sonnet-5-5", "answered": "claude-haiku-5-5", "calls": len(record.calls)}
    ]
    with contextlib.closing(sqlite3.connect(path)) as db:  # opened again: nothing to add twice
        db.execute("PRAGMA user_version = 6")
        db.commit()
    assert history.load("6a6a6a6a") == again
