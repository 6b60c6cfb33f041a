"""The first hour, third pass (issue 31), through the real `agentgod` command.

Each test drives the product as a person or a script would — a subprocess with pipes, or a
pseudo-terminal — against the fake Messages API, and counts the requests where money is at stake:
nothing spent by mistake, nothing reported wrong, nothing mangled.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import agentgod, agentgod_command
from conftest import scripted_env as _env
from fakeapi import FakeMessagesAPI
from scripted import Factory, agent_spec, plan
from terminal import Terminal

from agentgod import cli, eventlog


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    return made


def _reply(done: object) -> dict:
    stdout = getattr(done, "stdout", "")
    assert stdout.strip(), getattr(done, "stderr", "")
    return json.loads(stdout)


def _nothing_spent(api: FakeMessagesAPI, home: Path) -> None:
    assert api.messages() == [], "not one request reached the API"
    runs = home / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "no run was started"


# ---- 1. a key on the command line is never a task ------------------------------------------------

KEY = "sk-ant-api03-Zq0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH-_0123456789AA"


@pytest.mark.parametrize("json_mode", [False, True])
def test_key_set_with_the_key_as_a_word_is_a_usage_error_that_never_echoes_it(
    fake_api: FakeMessagesAPI, isolated_home: Path, json_mode: bool
) -> None:
    flags = ["--json"] if json_mode else []
    done = agentgod(isolated_home, fake_api, *flags, "key", "set", KEY)
    assert done.returncode == cli.EXIT_USAGE, done.stderr
    assert "key set reads the key from the prompt or stdin" in done.stderr
    assert "lands in your shell history" in done.stderr
    assert KEY not in done.stdout + done.stderr
    assert "[task]" not in done.stdout + done.stderr
    if json_mode:
        reply = json.loads(done.stdout)
        assert (reply["ok"], reply["task"], reply["error"]["type"]) == (False, "", "usage")
    _nothing_spent(fake_api, isolated_home)
    assert not (isolated_home / ".env").exists()


@pytest.mark.parametrize("argv", [["key", KEY], ["key", "check", KEY], ["key", "sett"]])
def test_any_other_word_after_key_is_refused_without_echo(
    fake_api: FakeMessagesAPI, isolated_home: Path, argv: list[str]
) -> None:
    done = agentgod(isolated_home, fake_api, *argv)
    assert done.returncode == cli.EXIT_USAGE
    assert KEY not in done.stdout + done.stderr
    _nothing_spent(fake_api, isolated_home)


# ---- 2. an extra word after a verb, a verb mistyped ----------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "5", "6"],
        ["show", "a", "b"],
        ["forget", "a", "b"],
        ["retry", "a", "b"],
        ["last", "x"],
        ["stats", "x", "y"],
        ["library", "x"],
        ["ui", "x"],
        ["/history", "5", "6"],
    ],
)
def test_an_extra_word_after_a_verb_is_a_usage_error_and_costs_nothing(
    fake_api: FakeMessagesAPI, isolated_home: Path, argv: list[str]
) -> None:
    done = agentgod(isolated_home, fake_api, *argv)
    assert done.returncode == cli.EXIT_USAGE, done.stdout + done.stderr
    assert "hint: to run it as a task: agentgod --task" in done.stderr
    _nothing_spent(fake_api, isolated_home)


@pytest.mark.parametrize(
    ("word", "verb"),
    [("histroy", "history"), ("History", "history"), ("Stats", "stats"), ("libary", "library"),
     ("shwo", "show"), ("UI", "ui"), ("retyr", "retry")],
)  # fmt: skip
def test_a_one_word_task_one_edit_from_a_verb_asks_did_you_mean(
    fake_api: FakeMessagesAPI, isolated_home: Path, word: str, verb: str
) -> None:
    done = agentgod(isolated_home, fake_api, word)
    assert done.returncode == cli.EXIT_USAGE
    assert f"did you mean `{verb}`?" in done.stderr
    assert f"hint: to run it as a task: agentgod --task {word}" in done.stderr
    _nothing_spent(fake_api, isolated_home)


@pytest.mark.parametrize("word", ["hi", "hey", "summarise"])
def test_a_one_word_task_far_from_any_verb_still_runs(
    factory: Factory, isolated_home: Path, word: str
) -> None:
    done = agentgod(isolated_home, factory.api, word)
    assert done.returncode == 0, done.stderr
    assert factory.api.messages(), "it went to the model"


# ---- 3. a slash command's error leaves the prompt alive ------------------------------------------


def test_a_bad_slash_command_leaves_the_prompt_and_the_session_alive(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="100")
    terminal = open_terminal(env, "--discard")
    terminal.expect("agentgod> ")
    terminal.type("find the facts about otters\n")
    terminal.expect("MERGED: fact_finder")
    for line, shown in [
        ("/show ab", r"/show: show takes a run id such as 3f9a2b1c"),
        ("/show a b", r"/show: show takes at most one run id, got 2 words"),
        ("/show zzzz", r"show takes a run id"),
        ("/show abcd", r"There is no run abcd"),
        ("/forget a b", r"/forget: forget takes the NAME of one library agent"),
        ("/forget", r"/forget: forget needs the NAME"),
        ("/history 5 6", r"/history takes a positive whole number of runs"),
        ("histroy", r"did you mean /history\?"),
        ("/cost", r"this session:? +\d+ calls"),
    ]:
        terminal.expect("agentgod> ")
        terminal.type(line + "\n")
        terminal.expect(shown)
    calls = len(factory.api.messages())
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    assert len(factory.api.messages()) == calls, "no command became a task"


# ---- 7. a closed pipe, bytes that are no text, a folder that cannot be written -------------------


def _with_stdout_closed(home: Path, api: FakeMessagesAPI | None, *args: str) -> tuple[int, str]:
    """Run agentgod with its stdout's reader gone before it writes a byte (`| head -0`)."""
    process = subprocess.Popen(
        [*agentgod_command(), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(home, api),
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # long before the interpreter has started
    error = process.stderr.read().decode()
    return process.wait(timeout=120), error


@pytest.mark.parametrize("json_mode", [False, True])
def test_a_closed_pipe_is_silence_for_the_verbs_and_after_a_run(
    factory: Factory, isolated_home: Path, json_mode: bool
) -> None:
    flags = ["--json"] if json_mode else []
    ran = agentgod(isolated_home, factory.api, "count the otters")
    assert ran.returncode == 0, ran.stderr
    for argv in (["history"], ["show"], ["last"], ["stats"], ["library"], ["count the seals"]):
        code, error = _with_stdout_closed(isolated_home, factory.api, *flags, *argv)
        assert code in (0, cli.EXIT_PIPE), (argv, error)
        assert "went wrong" not in error and "BrokenPipe" not in error and "[error]" not in error
    runs = _reply(agentgod(isolated_home, None, "--json", "history"))
    assert [(row["task"], row["status"]) for row in runs] == [
        ("count the seals", "ok"),
        ("count the otters", "ok"),
    ], "the run whose answer met a closed pipe is recorded whole"


def test_bytes_on_stdin_that_are_no_utf8_are_named_as_such(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    done = subprocess.run(
        [*agentgod_command(), "-"],
        input=b"summarise \xff\xfe this",
        capture_output=True,
        timeout=120,
        env=_env(isolated_home, fake_api),
    )
    error = done.stderr.decode()
    assert done.returncode == cli.EXIT_USAGE, error
    assert "the task read from stdin is not UTF-8 text (byte 0xff at offset 10)" in error
    assert "went wrong" not in error
    _nothing_spent(fake_api, isolated_home)


def test_a_runs_folder_that_cannot_be_written_is_found_before_any_spend(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    (isolated_home / "runs").write_text("not a folder")
    done = agentgod(isolated_home, fake_api, "--json", "count the otters")
    assert done.returncode == cli.EXIT_FAILED
    reply = _reply(done)
    assert reply["error"]["type"] == "home"
    assert (
        reply["error"]["headline"] == f"AgentGOD cannot keep its files in {isolated_home / 'runs'}."
    )
    assert fake_api.messages() == []


@pytest.mark.parametrize("where", ["/proc/agentgod-out", "a-file/inside"])
def test_an_out_folder_that_cannot_be_written_is_found_before_any_spend(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path, where: str
) -> None:
    (tmp_path / "a-file").write_text("a file")
    out = where if where.startswith("/") else str(tmp_path / where)
    done = agentgod(isolated_home, fake_api, "--out", out, "count the otters")
    assert done.returncode == cli.EXIT_USAGE, done.stderr
    assert f"--out {out}:" in done.stderr
    _nothing_spent(fake_api, isolated_home)


# ---- 8. redaction never mangles ordinary text ----------------------------------------------------

ORDINARY = "ask-me-anything-2024-edition and disk-usage-report-for-the-team"


def test_ordinary_words_reach_every_record_and_the_follow_up_unmangled(
    factory: Factory, isolated_home: Path
) -> None:
    factory.merge_reply = lambda request: f"The answer on {ORDINARY}."
    task = f"summarise {ORDINARY}"
    reply = _reply(agentgod(isolated_home, factory.api, "--json", task))
    assert reply["ok"] and reply["task"] == task
    run_id = reply["run_id"]
    [row] = _reply(agentgod(isolated_home, None, "--json", "history"))
    assert row["task"] == task
    run_file = Path(reply["run_file"]).read_text(encoding="utf-8")
    assert run_file.count(ORDINARY) >= 2, "the task and the answer"
    logged = eventlog.run_log(isolated_home / "runs", run_id).read_text(encoding="utf-8")
    assert ORDINARY in logged and "[redacted]" not in logged
    last = _reply(agentgod(isolated_home, None, "--json", "last"))
    assert last["answer"] == f"The answer on {ORDINARY}."
    followed = agentgod(isolated_home, factory.api, "--json", "--continue", "now in French")
    assert followed.returncode == 0, followed.stderr
    planned = factory.of("plan")[-1].prompt
    assert task in planned and f"The answer on {ORDINARY}." in planned
    assert "[redacted]" not in planned
