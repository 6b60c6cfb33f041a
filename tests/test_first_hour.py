"""What a new user meets in the first hour (issue 14), through the real `agentgod` command.

Each test drives the product as a person or a script would — a subprocess, a pseudo-terminal,
real files in the home — against the fake Messages API, and checks what must never happen: a
paid call nobody asked for, a traceback, lost text, a world-readable record.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import agentgod, agentgod_command, archived_record
from conftest import scripted_env as _env
from fakeapi import FakeMessagesAPI, Reply, Request
from scripted import Factory, agent_spec, plan
from terminal import Terminal

from agentgod import cli, history, historydb, intake, ledger, problems, runlog, runrecord, ui


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    return made


# ---- a mistyped verb never starts a paid run ---------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "abc"],
        ["history", "-3"],
        ["history", "0"],
        ["stats", "all"],
        ["/help"],
        ["/clear"],
        ["/histroy"],
        ["/history", "abc"],
    ],
)
def test_a_mistyped_verb_is_a_usage_error_and_costs_nothing(
    fake_api: FakeMessagesAPI, isolated_home: Path, argv: list[str]
) -> None:
    done = agentgod(isolated_home, fake_api, *argv)
    assert done.returncode == cli.EXIT_USAGE, done.stderr
    assert done.stderr.splitlines()[-1].startswith("hint: ")
    assert "Traceback" not in done.stderr
    assert fake_api.messages() == []
    assert not (isolated_home / "runs").exists(), "nothing was archived"


@pytest.mark.parametrize(
    ("argv", "shown"),
    [(["/library"], "The library is empty."), (["/history"], "No runs yet."), (["/stats"], "runs")],
)
def test_a_slash_command_on_the_command_line_is_the_verb(
    fake_api: FakeMessagesAPI, isolated_home: Path, argv: list[str], shown: str
) -> None:
    done = agentgod(isolated_home, fake_api, *argv)
    assert done.returncode == 0, done.stderr
    assert shown in done.stdout + done.stderr
    assert fake_api.messages() == []


def test_task_still_runs_verb_words_as_a_task(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "--task", "history", "abc")
    assert done.returncode == 0, done.stderr
    assert "history abc" in factory.of("plan")[0].prompt


def test_the_repl_does_commands_typed_without_a_slash_and_reports_a_bad_number(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm", COLUMNS="100"))
    terminal.expect("agentgod> ")
    terminal.type("/history abc\n")
    terminal.expect(r"/history takes a positive whole number of runs, not 'abc'")
    for word, shown in [
        ("help", r"/forget NAME"),
        ("history", "No runs yet."),
        ("library", "The library is empty"),
        ("stats", "most reliable"),
        ("history 0", "not '0'"),
        ("clear", ""),
    ]:
        terminal.expect("agentgod> ")
        terminal.type(word + "\n")
        terminal.expect(shown)
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    assert factory.api.messages() == [], "no command became a task or a small-talk check"


# ---- the home is checked before anything is spent ----------------------------------------------


@pytest.mark.parametrize("where", ["/proc/agentgod-home", "/sys/agentgod", "a-file"])
def test_an_unusable_home_is_named_before_any_spend(
    fake_api: FakeMessagesAPI, isolated_home: Path, where: str
) -> None:
    home = isolated_home / where if where == "a-file" else Path(where)
    if where == "a-file":
        home.write_text("not a folder")
    done = agentgod(isolated_home, fake_api, "--json", "do a thing", AGENTGOD_HOME=str(home))
    assert done.returncode == cli.EXIT_FAILED
    assert "Traceback" not in done.stderr
    assert f"AgentGOD cannot keep its files in {home}." in done.stderr
    reply = json.loads(done.stdout)
    assert (reply["ok"], reply["task"], reply["error"]["type"]) == (False, "do a thing", "home")
    assert fake_api.messages() == []


# ---- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["history", "stats", "library", "last"])
def test_a_bad_setting_does_not_block_a_read_only_verb(
    fake_api: FakeMessagesAPI, isolated_home: Path, verb: str
) -> None:
    done = agentgod(isolated_home, fake_api, verb, MAX_AGENTS="abc")
    assert "MAX_AGENTS must be a whole number from 1 to 12, got 'abc'" in done.stderr
    assert "The setting MAX_AGENTS has a value" not in done.stderr
    assert done.returncode == (1 if verb == "last" else 0), done.stderr


def test_a_bad_setting_in_dotenv_does_not_block_a_read_only_verb(isolated_home: Path) -> None:
    (isolated_home / ".env").write_text("TASK_REVISIONS=lots\n")
    done = agentgod(isolated_home, None, "history")
    assert done.returncode == 0, done.stderr
    assert "TASK_REVISIONS must be" in done.stderr
    assert "No runs yet." in done.stdout + done.stderr


def test_a_json_failure_keeps_the_task_text(fake_api: FakeMessagesAPI, isolated_home: Path) -> None:
    done = agentgod(isolated_home, fake_api, "--json", "count the otters", MAX_AGENTS="abc")
    reply = json.loads(done.stdout)
    assert (reply["ok"], reply["task"], reply["error"]["type"]) == (
        False,
        "count the otters",
        "config",
    )
    piped = agentgod(isolated_home, fake_api, "--json", stdin="count the seals\n", MAX_AGENTS="x")
    assert json.loads(piped.stdout)["task"] == "count the seals"
    assert fake_api.messages() == []


# ---- the records: private, clean, and a damaged history repaired -------------------------------


def _record(task: str, **overrides: Any) -> runrecord.RunRecord:
    """An archived run whose agent's role holds a table's separator and took two attempts."""
    agent = runrecord.AgentRecord("fact_finder", "finds | facts", False, True, 2, 1.5, "ok")
    return archived_record(task, **{"agents": [agent], **overrides})


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_run_files_and_the_history_are_readable_by_their_owner_only(isolated_home: Path) -> None:
    runs = isolated_home / "runs"
    runs.mkdir(mode=0o755)
    runs.chmod(0o755)  # as an older version left it
    run_file = runlog.archive(_record("count the otters"))
    assert run_file is not None
    assert _mode(runs) == 0o700
    assert _mode(run_file) == 0o600
    for made in runs.glob(f"{historydb.DB_NAME}*"):
        assert _mode(made) == 0o600, made.name


def test_control_bytes_from_a_task_never_reach_the_records(isolated_home: Path) -> None:
    run_file = runlog.archive(
        _record("paint \x1b[31mred\x1b[0m and ring\x07", answer="a\x1b]0;title\x07b\r\nc")
    )
    assert run_file is not None
    text = run_file.read_text(encoding="utf-8")
    assert "paint [31mred[0m and ring" in text
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
    [row] = history.history()
    assert row.task == "paint [31mred[0m and ring"
    last = history.last()
    assert last is not None and last.answer == "a]0;titleb\nc"


def _damage(history: Path) -> None:
    for companion in history.parent.glob(f"{history.name}-*"):
        companion.unlink()
    history.write_bytes(b"this is no database\n" * 200)


def test_a_damaged_history_is_moved_aside_and_rebuilt_from_the_run_files(
    isolated_home: Path,
) -> None:
    tasks = ["count the otters", "name the seals", "weigh the whale"]
    for task in tasks:
        runlog.archive(_record(task))
    runlog.archive(_record("it broke", ok=False, answer="", error="3 agents timed out"))
    database = isolated_home / "runs" / historydb.DB_NAME
    before = history.history()
    _damage(database)
    after = history.history()
    [notice] = historydb.notices()
    [aside] = database.parent.glob(f"{historydb.DB_NAME}.corrupt-*")
    assert str(aside) in notice and "rebuilt from 4 run files" in notice
    assert aside.read_bytes().startswith(b"this is no database")
    assert [(r.task, r.ok, r.agents, r.usd, r.run_file) for r in after] == [
        (r.task, r.ok, r.agents, r.usd, r.run_file) for r in before
    ]
    assert after[0].duration_seconds == 83.0
    assert after[0].started_at == before[0].started_at
    last = history.last()
    assert last is not None and last.answer == "answer to weigh the whale"
    stats = history.stats()
    assert (stats.runs, stats.succeeded, stats.llm_calls, stats.input_tokens) == (4, 3, 16, 4800)
    assert _mode(database) == 0o600
    assert runlog.archive(_record("and one more")) is not None
    assert len(history.history()) == 5, "the next run is recorded"
    assert historydb.notices() == []


def test_a_run_archived_onto_a_damaged_history_is_recorded_once(isolated_home: Path) -> None:
    runlog.archive(_record("count the otters"))
    database = isolated_home / "runs" / historydb.DB_NAME
    _damage(database)
    runlog.archive(_record("name the seals", complexity="deep"))
    assert "rebuilt from 1 run file" in historydb.notices()[0]
    rows = history.history()
    assert [(r.task, r.complexity) for r in rows] == [
        ("name the seals", "deep"),
        ("count the otters", "simple"),
    ]


def test_the_product_warns_about_a_damaged_history_and_lists_the_runs(
    factory: Factory, isolated_home: Path
) -> None:
    for task in ("count the otters", "name the seals"):
        assert agentgod(isolated_home, factory.api, task).returncode == 0
    _damage(isolated_home / "runs" / historydb.DB_NAME)
    listed = agentgod(isolated_home, None, "history")
    assert listed.returncode == 0, listed.stderr
    assert "the run history was damaged: moved aside to" in listed.stderr
    assert "name the seals" in listed.stdout and "count the otters" in listed.stdout
    assert agentgod(isolated_home, factory.api, "weigh the whale").returncode == 0
    again = agentgod(isolated_home, None, "--json", "history")
    assert [row["task"] for row in json.loads(again.stdout)] == [
        "weigh the whale",
        "name the seals",
        "count the otters",
    ]
    assert "damaged" not in again.stderr


# ---- the keep question -------------------------------------------------------------------------


def test_the_keep_question_ignores_typed_ahead_keys_and_stays_out_of_the_history(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    merging, typed = threading.Event(), threading.Event()

    def merge_after_typing(request: Request) -> str:
        merging.set()
        typed.wait(60)
        return "MERGED: fact_finder"

    factory.merge_reply = merge_after_typing
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm", COLUMNS="100"))
    terminal.expect("agentgod> ")
    terminal.type("find the facts about otters\n")
    assert merging.wait(60), "the run reached its merge"
    os.write(terminal.fd, b"/help\n")  # typed while the run goes on, before any question
    typed.set()
    terminal.expect(r"Keep which\?")
    terminal.type("keep\n")
    terminal.expect("Kept in the library: fact_finder")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    assert (isolated_home / "inventory" / "agents" / "fact_finder.py").exists()
    remembered = (isolated_home / ".history").read_text().splitlines()
    assert "find the facts about otters" in remembered
    assert "keep" not in remembered, "the keep answer is not a prompt line"


# ---- messages ----------------------------------------------------------------------------------


def test_with_no_key_the_detail_names_the_variable(isolated_home: Path) -> None:
    done = agentgod(isolated_home, None, "a task")
    assert done.returncode == cli.EXIT_FAILED
    assert "No Anthropic API key is set." in done.stderr
    assert "MissingApiKeyError: ANTHROPIC_API_KEY is not set" in done.stderr
    assert "[redacted] is not set" not in done.stderr


@pytest.mark.parametrize(
    ("model", "suggested"),
    [("claude-sonnet-5-5", "claude-haiku-5-5"), ("claude-nope-1", "claude-sonnet-5-5")],
)
def test_a_missing_model_is_not_suggested_as_the_fix(
    fake_api: FakeMessagesAPI, isolated_home: Path, model: str, suggested: str
) -> None:
    fake_api.handler = lambda request: Reply.error(404, f"model: {request.body['model']}")
    done = agentgod(isolated_home, fake_api, "--json", "-m", model, "a task")
    assert done.returncode == cli.EXIT_FAILED
    error = json.loads(done.stdout)["error"]
    assert error["headline"] == f"The model {model} was not found."
    assert f"for example {suggested}" in error["advice"]
    sent = {r.body["model"] for r in fake_api.messages() if r.system != intake.INTAKE_PROMPT}
    assert sent == {model}, "-m is --model (the small-talk check is the fast model's)"


def test_a_tiny_budget_is_shown_with_enough_digits(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "--json", "--budget", "0.0001", "a task")
    error = json.loads(done.stdout)["error"]
    assert error["headline"].startswith("The budget of $0.0001 cannot pay for the first model call")
    assert re.search(r"; the next call needed up to \$0\.\d+\.$", error["headline"])
    assert problems.explain(ledger.BudgetExhaustedError(0.00004, 0.0001)).headline == (
        "The budget ran out before any answer was ready (spent $0.000040 of $0.0001)."
    )
    narration = io.StringIO()
    ui.PlainUI(out=io.StringIO(), narrate_to=narration).budget_exhausted(0.000042, 0.0001)
    assert "$0.000042 of $0.0001 spent" in narration.getvalue()


# ---- the key, and shell completion ---------------------------------------------------------

GOOD_KEY = "sk-ant-good-key-0123456789abcdef"


def test_key_set_tests_a_piped_key_and_saves_only_one_that_works(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    fake_api.valid_keys = {GOOD_KEY}
    env = _env(isolated_home, None, ANTHROPIC_BASE_URL=fake_api.base_url)
    env_file = isolated_home / ".env"
    command = [*agentgod_command(), "key", "set"]
    run = functools.partial(subprocess.run, command, capture_output=True, text=True, env=env)
    wrong = run(input="sk-ant-wrong-key-0123456789abcdef\n", timeout=60)
    assert wrong.returncode == 1 and "rejected the key" in wrong.stderr
    assert "console.anthropic.com" in wrong.stderr, "it says where keys come from"
    assert not env_file.exists(), "a key that does not work is never saved"
    right = run(input=GOOD_KEY + "\n", timeout=60)
    assert right.returncode == 0, right.stderr
    assert f"ANTHROPIC_API_KEY={GOOD_KEY}" in env_file.read_text(encoding="utf-8")
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert GOOD_KEY not in right.stdout + right.stderr
    check = subprocess.run(
        [*agentgod_command(), "key", "check"], capture_output=True, text=True, env=env, timeout=60
    )
    assert check.returncode == 0 and "The key works (from " in check.stdout + check.stderr
    assert [request.api_key for request in fake_api.messages()][-1] == GOOD_KEY


def test_a_wrong_key_at_the_prompt_is_asked_again(
    fake_api: FakeMessagesAPI, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    fake_api.valid_keys = {GOOD_KEY}
    terminal = open_terminal(
        _env(isolated_home, None, TERM="xterm", ANTHROPIC_BASE_URL=fake_api.base_url)
    )
    terminal.expect("console.anthropic.com")
    terminal.expect(r"Anthropic API key \(input hidden\):")
    terminal.type("sk-ant-mistyped-0123456789abcdef\n")
    terminal.expect("rejected that key")
    terminal.expect(r"Anthropic API key \(input hidden\):")
    terminal.type(GOOD_KEY + "\n")
    terminal.expect(r"Save it to")
    terminal.type("n\n")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_name_every_verb_and_flag_and_parse(
    shell: str, isolated_home: Path
) -> None:
    done = subprocess.run(
        [*agentgod_command(), "--completion", shell],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(isolated_home, None),
    )
    assert done.returncode == 0, done.stderr
    for word in (*cli.VERBS, "--resume", "--file", "--no-web"):
        assert word.lstrip("-") in done.stdout
    checker = shutil.which(shell)
    if checker is not None and shell != "fish":
        syntax = subprocess.run([checker, "-n"], input=done.stdout, capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr
