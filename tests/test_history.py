"""history: a real SQLite history in the test's AGENTGOD_HOME, filled through runlog.archive."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_runlog import STARTED, cost, make_record, query, runs_dir

import history
import runlog


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
    assert query("PRAGMA user_version") == [(history.SCHEMA_VERSION,)]


def test_no_history_reads_as_empty_and_creates_nothing() -> None:
    assert history.history() == []
    assert history.last() is None
    assert history.stats() == history.Stats()
    assert history.stats().success_rate == 0.0
    assert not runs_dir().exists()


def test_history_is_newest_first_and_limited() -> None:
    for hours, task in ((2, "middle task"), (0, "oldest task"), (5, "newest task")):
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


def agent(name: str, ok: bool) -> runlog.AgentRecord:
    return runlog.AgentRecord(name, "Does things", False, ok, 1, 1.0, "ok" if ok else "crash")


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
