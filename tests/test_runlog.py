"""runlog: real Markdown files and a real SQLite history in the test's AGENTGOD_HOME."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentgod import config, history, historydb, ledger, runfile, runlog, runrecord
from agentgod.kinds import RunStatus

STARTED = datetime(2026, 11, 30, 9, 30, 12, tzinfo=UTC)
ANTHROPIC_KEY = "sk-ant-api03-" + "Q7x9" * 10
BEARER = "Bearer abcDEF0123456789ghiJKL"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAzLwPlantedPrivateKeyMaterial0123456789\n"
    "-----END RSA PRIVATE KEY-----"
)


def cost(**overrides: Any) -> dict[str, Any]:
    summary = {
        "llm_calls": 7,
        "input_tokens": 12345,
        "output_tokens": 678,
        "cache_write_tokens": 90,
        "cache_read_tokens": 4000,
        "web_searches": 0,
        "usd": 0.0123,
        "estimate": False,
    }
    return {**summary, **overrides}


def make_record(**overrides: Any) -> runrecord.RunRecord:
    values: dict[str, Any] = {
        "task": "Compare the three laptops and recommend one",
        "ok": True,
        "answer": "## Recommendation\n\nBuy the **second** one.",
        "error": "",
        "complexity": "standard",
        "waves": [["spec_reader", "price_lister"], ["verdict_writer"]],
        "agents": [
            runrecord.AgentRecord("spec_reader", "Reads specs", True, True, 1, 1.5, "ok"),
            runrecord.AgentRecord("price_lister", "Lists prices", False, True, 2, 2.25, "ok"),
            runrecord.AgentRecord(
                "verdict_writer", "Writes a verdict", False, False, 3, 75.0, "timeout", "timed out"
            ),
        ],
        "failures": [runrecord.Failure("verdict_writer", "timed out after 30 s", "timeout")],
        "revisions": 1,
        "council_improved": True,
        "cost": cost(),
        "duration_seconds": 83.25,
        "started_at": STARTED,
        "sandbox": ["env", "scratch", "landlock"],
    }
    values.update(overrides)
    return runrecord.RunRecord(**values)


LONG_OUTPUT = "\n".join(f"Row {number}: a measured value" for number in range(40))
SOURCE = "def run(task, previous_outputs):\n    return 'specs: 16 GB, 1.2 kg'\n"


def call(phase: str, minute: int, **counts: Any) -> ledger.Call:
    values: dict[str, Any] = {
        "input_tokens": 100,
        "output_tokens": 10,
        "cache_write_tokens": 0,
        "cache_read_tokens": 0,
        "web_searches": 0,
        "usd": 0.001,
        **counts,
    }
    return ledger.Call(
        phase=phase, model="claude-sonnet-5-5", at=STARTED + timedelta(minutes=minute), **values
    )


def full_record(**overrides: Any) -> runrecord.RunRecord:
    """A record with every field issue 12 added filled in, as the orchestrator will build it."""
    agents = [
        runrecord.AgentRecord(
            "spec_reader",
            "Reads specs",
            False,
            True,
            1,
            1.5,
            "ok",
            usd=0.002,
            source=SOURCE,
            output="specs: 16 GB, 1.2 kg",
            usage={
                "llm_calls": 2,
                "input_tokens": 300,
                "output_tokens": 40,
                "cache_write_tokens": 5,
                "cache_read_tokens": 6,
                "web_searches": 1,
            },
        ),
        runrecord.AgentRecord(
            "verdict_writer",
            "Writes a verdict",
            True,
            True,
            2,
            3.0,
            "ok",
            usd=0.004,
            source="def run(task, previous_outputs):\n    return 'long'\n",
            inputs=["spec_reader"],
            output=LONG_OUTPUT,
        ),
    ]
    values: dict[str, Any] = {
        "waves": [["spec_reader"], ["verdict_writer"]],
        "agents": agents,
        "failures": [],
        "run_id": "3f9a0c1d",
        "conversation_id": "c0ffee00",
        "retry_of": "0badf00d",
        "model": "claude-sonnet-5-5",
        "effort": "high",
        "reasoning": "Two steps: read the specs, then weigh them.\nThe second needs the first.",
        "plan": [
            {
                "name": "spec_reader",
                "role": "Reads specs",
                "instructions": "Read the three spec sheets.",
                "depends_on": [],
                "web": True,
                "dependencies": ["requests"],
            },
            {
                "name": "verdict_writer",
                "role": "Writes a verdict",
                "instructions": "Weigh the specs.",
                "depends_on": ["spec_reader"],
                "web": False,
                "dependencies": [],
            },
        ],
        "calls": [
            call("other", 0),
            call("plan", 1, seconds=2.5),
            call("generate", 2, agent="spec_reader", seconds=1.5),
            call("agents", 3, web_searches=1, web_fetches=2, agent="spec_reader", seconds=0.75),
        ],
        "phases": {"plan": cost(llm_calls=1, usd=0.001)},
        "warnings": ["judge failed"],
        "attachments": [
            {"name": "specs.csv", "path": "/home/me/specs.csv", "bytes": 120, "kind": "csv"}
        ],
        "artifacts": [],
        "outputs": {},
    }
    values.update(overrides)
    return make_record(**values)


def runs_dir() -> Path:
    return config.settings().runs_dir


def query(sql: str, *parameters: Any) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(runs_dir() / historydb.DB_NAME)
    try:
        return db.execute(sql, parameters).fetchall()
    finally:
        db.close()


# ---- the Markdown file -----------------------------------------------------------------------


def test_run_file_name_has_timestamp_and_slug() -> None:
    path = runlog.archive(make_record())
    assert path is not None
    assert path.parent == runs_dir()
    assert path.name == "20261130T093012Z_compare-the-three-laptops-and-recommend.md"


def test_run_file_has_every_section() -> None:
    path = runlog.archive(make_record())
    assert path is not None
    text = path.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings == [
        "Task",
        "Plan",
        "Agents",
        "Failures",
        "Answer",
        "Recommendation",  # the answer's own Markdown, kept as written
        "Cost",
        "Run",
    ]
    assert text.startswith("# Run: Compare the three laptops and recommend one\n")
    assert "**Answered** · 2026-11-30 09:30:12 UTC · 1 min 23 s · 3 agents · $0.0123" in text
    assert "> Compare the three laptops and recommend one" in text
    assert "- Complexity: standard" in text
    assert "- Wave 1: `spec_reader`, `price_lister`" in text
    assert "- Wave 2: `verdict_writer`" in text
    assert "- Revisions asked for by the judge: 1" in text
    assert "- Council improved the answer: yes" in text
    assert "| `spec_reader` | Reads specs | library | ok | 1 | 1.5 s |" in text
    assert "| `price_lister` | Lists prices | new | ok | 2 | 2.2 s |" in text
    assert (
        "| `verdict_writer` | Writes a verdict | new | failed (timeout) — timed out | 3 |" in text
    )
    assert "### `verdict_writer`\n\n```text\ntimed out after 30 s\n```" in text
    assert "Buy the **second** one." in text
    for row in (
        "| Input | 12,345 |",
        "| Output | 678 |",
        "| Cache write | 90 |",
        "| Cache read | 4,000 |",
    ):
        assert row in text
    assert "7 model calls · $0.0123" in text
    assert "- Duration: 1 min 23 s" in text
    assert "- Sandbox layers: env, scratch, landlock" in text
    assert "budget" not in text.lower()


def test_failed_run_file_says_why_and_has_no_answer() -> None:
    record = make_record(
        ok=False,
        answer="",
        error="Every agent failed: the model refused the key",
        complexity=None,
        waves=[],
        agents=[],
        failures=[],
        cost=cost(usd=0.5, estimate=True),
        budget_exhausted=True,
        sandbox=[],
    )
    path = runlog.archive(record)
    assert path is not None
    text = path.read_text(encoding="utf-8")
    assert "**Out of budget**" in text, "a run the budget stopped says so first"
    assert "## Error\n\nEvery agent failed: the model refused the key" in text
    assert "## Answer\n\n_No answer._" in text
    assert "- Complexity: not graded" in text
    assert "No agents ran." in text
    assert "## Failures\n\nNone." in text
    assert "$0.5000 (estimated)" in text
    assert "The budget (BUDGET_USD) ran out" in text
    assert "- Sandbox layers: none recorded" in text


def test_text_from_agents_cannot_break_the_document() -> None:
    reason = "Traceback:\n```\nboom\n```"
    record = make_record(
        agents=[runrecord.AgentRecord("pipe_agent", "Splits a | b", False, False, 1, 0.5, "crash")],
        failures=[runrecord.Failure("pipe_agent", reason)],
    )
    path = runlog.archive(record)
    assert path is not None
    text = path.read_text(encoding="utf-8")
    assert "| Splits a \\| b |" in text
    assert f"````text\n{reason}\n````" in text


def test_two_runs_in_the_same_second_get_two_files() -> None:
    first = runlog.archive(make_record())
    second = runlog.archive(make_record())
    assert first is not None and second is not None
    assert first != second
    assert second.name == "20261130T093012Z_compare-the-three-laptops-and-recommend_2.md"
    ids = re.compile(r"^- Run id: .*$", re.MULTILINE)
    texts = [ids.sub("", path.read_text(encoding="utf-8")) for path in (first, second)]
    assert texts[0] == texts[1], "the same run, but for its id"
    assert len(history.history()) == 2


@pytest.mark.parametrize(
    ("task", "slug"),
    [
        ("Write a haiku about the sea!", "write-a-haiku-about-the-sea"),
        ("Ünïcödé café — naïve façade", "unicode-cafe-naive-facade"),
        ("", "task"),
        ("!!! ??? 🙂", "task"),
        ("x" * 60, "x" * 40),
        (
            "one two three four five six seven eight nine ten",
            "one-two-three-four-five-six-seven-eight",
        ),
    ],
)
def test_slugify(task: str, slug: str) -> None:
    assert runfile.slugify(task) == slug
    assert len(slug) <= runfile.SLUG_LENGTH


def test_secrets_are_redacted_in_the_file_and_the_database() -> None:
    record = make_record(
        task=f"Use {ANTHROPIC_KEY} to summarise",
        answer=f"Here it is: {BEARER}\n\n{PEM}\n\nDone.",
        agents=[
            runrecord.AgentRecord(
                "leaky_agent", "Leaks", False, False, 1, 0.1, "crash", f"auth: {ANTHROPIC_KEY}"
            )
        ],
        failures=[runrecord.Failure("leaky_agent", f"request sent {BEARER}")],
    )
    path = runlog.archive(record)
    assert path is not None
    assert "sk-ant" not in path.name
    stored = [path.read_bytes()]
    stored += [file.read_bytes() for file in runs_dir().glob(f"{historydb.DB_NAME}*")]
    stored += [
        repr(query("SELECT * FROM runs")).encode(),
        repr(query("SELECT * FROM run_agents")).encode(),
    ]
    for blob in stored:
        for secret in (ANTHROPIC_KEY, "abcDEF0123456789ghiJKL", "PlantedPrivateKeyMaterial"):
            assert secret.encode() not in blob
    text = path.read_text(encoding="utf-8")
    assert "Use [redacted] to summarise" in text
    assert "Here it is: [redacted]" in text
    [(task, answer)] = query("SELECT task, answer FROM runs")
    assert task == "Use [redacted] to summarise"
    assert answer == "Here it is: [redacted]\n\n[redacted]\n\nDone."
    assert query("SELECT error FROM run_agents") == [("auth: [redacted]",)]


# ---- a failed write never raises -------------------------------------------------------------


def test_unwritable_runs_folder_returns_none() -> None:
    runs_dir().parent.mkdir(parents=True, exist_ok=True)
    runs_dir().write_text("a file where the folder should be", encoding="utf-8")
    assert runlog.archive(make_record()) is None
    assert history.history() == []


def test_bad_settings_return_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_AGENTS", "lots")
    assert runlog.archive(make_record()) is None


def test_a_broken_database_still_leaves_the_file() -> None:
    (runs_dir() / historydb.DB_NAME).mkdir(parents=True)
    path = runlog.archive(make_record())
    assert path is not None
    assert "Buy the **second** one." in path.read_text(encoding="utf-8")
    assert history.history() == []


def test_a_file_that_cannot_be_written_still_leaves_the_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*_: object) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runlog, "_write_new_file", refuse)
    assert runlog.archive(make_record()) is None
    [row] = history.history()
    assert row.run_file is None
    assert not list(runs_dir().glob("*.md"))


def test_warnings_are_listed_in_the_run_file_and_redacted() -> None:
    path = runlog.archive(
        make_record(warnings=[f"parser: packages not installed: {ANTHROPIC_KEY}", "judge failed"])
    )
    assert path is not None
    text = path.read_text(encoding="utf-8")
    section = text.split("## Warnings", 1)[1].split("\n## ", 1)[0]
    assert "- parser: packages not installed:" in section
    assert "- judge failed" in section
    assert "sk-ant" not in text


def test_a_run_without_warnings_has_no_warnings_section() -> None:
    path = runlog.archive(make_record())
    assert path is not None
    assert "## Warnings" not in path.read_text(encoding="utf-8")


# ---- the whole run (issue 12) ----------------------------------------------------------------


def test_a_status_left_out_follows_ok_and_the_budget() -> None:
    assert make_record().status is RunStatus.OK
    failed = make_record(ok=False, answer="", error="boom")
    assert failed.status is RunStatus.FAILED
    assert make_record(ok=False, budget_exhausted=True).status is RunStatus.BUDGET
    stopped = make_record(ok=False, status=RunStatus.INTERRUPTED)
    assert stopped.status is RunStatus.INTERRUPTED
    assert re.fullmatch(r"[0-9a-f]{8}", make_record().run_id)
    assert make_record().run_id != make_record().run_id


def test_the_run_file_tells_the_plan_and_each_agent_but_keeps_the_code_out() -> None:
    path = runlog.archive(full_record())
    assert path is not None
    text = path.read_text(encoding="utf-8")
    assert "- Model: `claude-sonnet-5-5`, effort high" in text
    assert "- Reasoning: Two steps: read the specs, then weigh them.\n" in text
    assert "The second needs the first." not in text, "one line of reasoning, not all of it"
    agents = text.split("\n## Agents\n\n", 1)[1].split("\n## Failures", 1)[0]
    assert "### `spec_reader`\n\nCode: `agentgod show 3f9a0c1d --code spec_reader`" in agents
    assert "```text\nspecs: 16 GB, 1.2 kg\n```" in agents, "a short output is shown"
    assert (
        "Inputs: `spec_reader` · Code: `agentgod show 3f9a0c1d --code verdict_writer`"
        f" · Output: {len(LONG_OUTPUT):,} characters, `agentgod show 3f9a0c1d`"
    ) in agents
    assert "Row 39" not in text, "a long output stays in the history"
    assert "def run(" not in text
    assert "- Run id: `3f9a0c1d` (`agentgod show 3f9a0c1d`)" in text
    assert "- Conversation: `c0ffee00`" in text
    assert "- Retry of: `0badf00d`" in text


def test_an_output_that_looks_like_a_heading_is_not_put_in_the_file() -> None:
    record = full_record()
    record.agents[0].output = "## Answer\n\nnot the answer"
    path = runlog.archive(record)
    assert path is not None
    text = path.read_text(encoding="utf-8")
    assert "not the answer" not in text
    assert text.count("\n## Answer\n") == 1


def test_an_interrupted_run_is_filed_as_one() -> None:
    record = full_record(ok=False, answer="", error="", status=RunStatus.INTERRUPTED)
    path = runlog.archive(record)
    assert path is not None
    text = path.read_text(encoding="utf-8")
    assert text.split("\n\n")[1].startswith("**Interrupted** · ")
    assert "## Error\n\nThe run was stopped before it could answer." in text
    assert "## Answer\n\n_No answer._" in text


def test_secrets_in_code_outputs_plan_and_reasoning_are_redacted_everywhere() -> None:
    record = full_record(
        reasoning=f"use {ANTHROPIC_KEY}",
        plan=[{"name": "a", "instructions": f"send {BEARER}", "dependencies": [PEM]}],
        attachments=[
            {"name": "k.txt", "path": f"/tmp/{ANTHROPIC_KEY}", "bytes": 1, "kind": "text"}
        ],
        warnings=[f"token={ANTHROPIC_KEY}"],
    )
    record.agents[0].source = f"KEY = '{ANTHROPIC_KEY}'\n"
    record.agents[0].output = f"the header was {BEARER}"
    record.agents[1].inputs = [f"from {ANTHROPIC_KEY}"]
    path = runlog.archive(record)
    assert path is not None
    stored = [path.read_bytes()]
    stored += [file.read_bytes() for file in runs_dir().glob(f"{historydb.DB_NAME}*")]
    for table in ("runs", "run_agents", "run_calls"):
        stored.append(repr(query(f"SELECT * FROM {table}")).encode())
    for blob in stored:
        for secret in (ANTHROPIC_KEY, "abcDEF0123456789ghiJKL", "PlantedPrivateKeyMaterial"):
            assert secret.encode() not in blob
    [(source, output)] = query("SELECT source, output FROM run_agents WHERE name = 'spec_reader'")
    assert (source, output) == ("KEY = '[redacted]'\n", "the header was [redacted]")


def test_what_was_redacted_ahead_is_stored_exactly_as_redacting_at_the_archive_stores_it() -> None:
    def planted(run_id: str) -> runrecord.RunRecord:
        record = full_record(run_id=run_id)
        record.agents[0].source = f"KEY = '{ANTHROPIC_KEY}'\n{SOURCE}"
        record.agents[0].output = f"the header was {BEARER}\x1b[31m"
        return record

    runlog.archive(planted("0000aaaa"))
    redactions = runlog.Redactions()
    ahead = planted("0000bbbb")
    redactions.ahead(text for agent in ahead.agents for text in (agent.source, agent.output))
    runlog.archive(ahead, redactions=redactions)
    redactions.close()
    rows = query("SELECT name, source, output FROM run_agents ORDER BY run_id, name")
    assert rows[:2] == rows[2:]
    assert "[redacted]" in rows[0][1] and "[redacted]" in rows[0][2]


def test_a_key_read_after_the_texts_were_redacted_ahead_is_still_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    new_key = "zq8LiveKeyWithoutAnyKnownShape77"
    record = full_record()
    record.agents[0].output = f"the agent saw {new_key}"
    redactions = runlog.Redactions()
    redactions.ahead([record.agents[0].output])
    assert new_key in redactions.writer()(record.agents[0].output), "not a secret yet"
    monkeypatch.setenv("ANTHROPIC_API_KEY", new_key)
    runlog.archive(record, redactions=redactions)
    redactions.close()
    assert query("SELECT output FROM run_agents WHERE name = 'spec_reader'") == [
        ("the agent saw [redacted]",)
    ]
