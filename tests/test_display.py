"""What a person sees while a run goes on, on a real pseudo-terminal (issue 14's first hour).

Each test starts the real `agentgod` on a pseudo-terminal against the scripted fake API, holds a
model reply until the screen shows what must be there by then, and only then lets the run go on:
no sleeps, only what the program drew.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import agentgod
from conftest import scripted_env as _env
from fakeapi import FakeMessagesAPI, Request
from scripted import Factory, agent_spec, plan
from terminal import Terminal

SPINNER = "[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]"
TASK = "find the facts about otters"


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    return made


def hold_small_talk_check(factory: Factory) -> tuple[threading.Event, threading.Event]:
    """The small-talk check (the intake call, sent beside the plan) waits for `release`."""
    asked, release = threading.Event(), threading.Event()

    def chat_reply(text: str) -> None:
        asked.set()
        release.wait(60)
        return None

    factory.chat_reply = chat_reply
    return asked, release


@pytest.mark.parametrize("columns", ["80", "160"])
def test_a_spinner_is_on_screen_at_once_after_enter_in_the_repl(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal], columns: str
) -> None:
    asked, release = hold_small_talk_check(factory)
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm", COLUMNS=columns))
    terminal.expect("agentgod> ")
    terminal.type(f"{TASK}\n")
    assert asked.wait(60), "the small-talk check reached the fake"
    terminal.expect(f"{SPINNER} reading the task…")
    assert not factory.of("generate"), "the spinner came before any agent was built"
    release.set()
    terminal.expect("MERGED: fact_finder")
    terminal.expect(r"Keep which\?")
    terminal.type("none\n")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0


def test_a_spinner_is_on_screen_at_once_in_a_one_shot_run_at_a_terminal(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    asked, release = hold_small_talk_check(factory)
    terminal = open_terminal(
        _env(isolated_home, factory.api, TERM="xterm", COLUMNS="160"), "--discard", TASK
    )
    assert asked.wait(60), "the small-talk check reached the fake"
    terminal.expect(f"{SPINNER} reading the task…")
    release.set()
    terminal.expect("MERGED: fact_finder")
    assert terminal.close() == 0


def test_no_spinner_in_a_pipe_or_with_json(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    piped = agentgod(isolated_home, factory.api, "--discard", TASK)
    assert piped.returncode == 0, piped.stderr
    assert "reading the task" not in piped.stdout + piped.stderr
    terminal = open_terminal(
        _env(isolated_home, factory.api, TERM="xterm", COLUMNS="80"), "--json", "--discard", TASK
    )
    assert terminal.close() == 0
    assert '"ok": true' in terminal.text
    assert "reading the task" not in terminal.text


def test_json_at_a_terminal_asks_no_keep_question_and_keeps_only_with_keep(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    """The one object is for a program: no question stands between it and the answer."""
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="80")
    terminal = open_terminal(env, "--json", TASK)
    assert terminal.close() == 0, "it never waited for an answer"
    assert "Keep which" not in terminal.text
    assert '"kept": []' in terminal.text
    assert not (isolated_home / "inventory" / "agents" / "fact_finder.py").exists()
    kept = open_terminal(env, "--json", "--keep", TASK)
    assert kept.close() == 0
    assert '"kept": ["fact_finder"]' in kept.text
    assert (isolated_home / "inventory" / "agents" / "fact_finder.py").exists()


@pytest.mark.parametrize("columns", ["80", "160"])
def test_quiet_at_a_terminal_is_the_plain_answer_with_no_panel_narration_or_question(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal], columns: str
) -> None:
    factory.merge_reply = lambda request: "mytool --input <file>\n    indented line"
    terminal = open_terminal(
        _env(isolated_home, factory.api, TERM="xterm", COLUMNS=columns), "-q", TASK
    )
    assert terminal.close() == 0
    shown = terminal.text
    assert "mytool --input <file>\n    indented line" in shown
    for absent in ("╭", "│", "reading the task", "[task]", "cost", "transcript", "Keep which"):
        assert absent not in shown, absent
    assert not (isolated_home / "inventory" / "agents" / "fact_finder.py").exists()


def test_a_dumb_terminal_gets_plain_progress_lines_as_the_run_goes(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    merging, release = threading.Event(), threading.Event()

    def merge_later(request: Request) -> str:
        merging.set()
        release.wait(60)
        return "MERGED: fact_finder"

    factory.merge_reply = merge_later
    terminal = open_terminal(
        _env(isolated_home, factory.api, TERM="dumb", COLUMNS="80"), "--discard", TASK
    )
    terminal.expect(r"\[plan\] +simple - 1 agent in 1 wave")
    terminal.expect(r"\[agent\] +fact_finder +done")
    assert merging.wait(60), "the run reached its merge"
    assert "MERGED" not in terminal.text, "progress came before the answer"
    release.set()
    terminal.expect("MERGED: fact_finder")
    assert terminal.close() == 0
    assert not re.search("╭|" + SPINNER, terminal.text)


def test_an_unknown_models_cost_is_explained_in_the_cost_line_and_in_json(
    factory: Factory, isolated_home: Path
) -> None:
    drawn = agentgod(isolated_home, factory.api, "--discard", TASK, FAST_MODEL="claude-mystery-9")
    assert drawn.returncode == 0, drawn.stderr
    note = "~ estimated: claude-mystery-9 has no known price"
    assert drawn.stderr.count(note) == 1, drawn.stderr
    done = agentgod(isolated_home, factory.api, "--json", TASK, FAST_MODEL="claude-mystery-9")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert "the cost is estimated: claude-mystery-9 has no known price" in reply["warnings"]
    exact = json.loads(agentgod(isolated_home, factory.api, "--json", TASK).stdout)
    assert not any("estimated" in warning for warning in exact["warnings"])
