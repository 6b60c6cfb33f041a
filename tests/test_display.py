"""What a person sees while a run goes on, on a real pseudo-terminal (issue 14's first hour).

Each test starts the real `agentgod` on a pseudo-terminal against the scripted fake API, holds a
model reply until the screen shows what must be there by then, and only then lets the run go on:
no sleeps, only what the program drew.
"""

from __future__ import annotations

import json
import re
import sqlite3
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
    note = "~ estimated: claude-mystery-9 has no known price, counted as $0"
    assert drawn.stderr.count(note) == 1, drawn.stderr
    done = agentgod(isolated_home, factory.api, "--json", TASK, FAST_MODEL="claude-mystery-9")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    said = "the cost is estimated: claude-mystery-9 has no known price, counted as $0"
    assert any(warning.startswith(said) for warning in reply["warnings"]), reply["warnings"]
    exact = json.loads(agentgod(isolated_home, factory.api, "--json", TASK).stdout)
    assert not any("estimated" in warning for warning in exact["warnings"])


# ---- the terminal shows what is true (issue 23) ---------------------------------------------

OSC_8 = b"\x1b]8;"
"""The start of a terminal hyperlink: the text shown is one thing, where a click leads another."""
BIDI = [chr(code).encode() for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
TRICK = (
    "The docs are at [https://docs.example/guide](https://evil.example/steal?k=1), "
    "or [the guide](https://evil.example/other). Access: "
    "\u202eadmin\u202c and \u2066user\u2069."
)


def test_a_link_in_the_answer_shows_its_real_target_and_bidi_controls_show_as_markers(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    """A Markdown link became an OSC 8 hyperlink whose target never appeared on screen, and
    bidi controls reached the terminal raw."""
    factory.merge_reply = lambda request: TRICK
    terminal = open_terminal(
        _env(isolated_home, factory.api, TERM="xterm", COLUMNS="160"), "--discard", TASK
    )
    terminal.expect("Access:")
    assert terminal.close() == 0
    assert OSC_8 not in terminal.raw, "no link is made live"
    screen = re.sub(r"\s+", "", terminal.text)  # the panel may wrap a long line anywhere
    assert "https://docs.example/guide(https://evil.example/steal?k=1)" in screen
    assert "theguide(https://evil.example/other)" in screen
    assert all(control not in terminal.raw for control in BIDI)
    assert "<U+202E>admin<U+202C>" in screen and "<U+2066>user<U+2069>" in screen


def test_a_role_in_the_library_table_cannot_make_a_live_link(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    role = "Finds [link=https://evil.example/x]the docs[/link] \u202eeman\u202c"
    factory.plans = [plan(agent_spec("fact_finder", role=role), complexity="simple")]
    kept = agentgod(isolated_home, factory.api, "--keep", TASK)
    assert kept.returncode == 0, kept.stderr
    terminal = open_terminal(
        _env(isolated_home, factory.api, TERM="xterm", COLUMNS="160"), "library"
    )
    assert terminal.close() == 0
    assert OSC_8 not in terminal.raw
    assert "[link=https://evil.example/x]" in terminal.text
    assert all(control not in terminal.raw for control in BIDI)


def test_show_code_flags_and_marks_bidi_controls_and_json_keeps_the_code_exact(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    """Trojan Source: code reviewed with `show --code` must read as it runs."""
    done = agentgod(isolated_home, factory.api, "--json", "--discard", TASK)
    run_id = json.loads(done.stdout)["run_id"]
    # The guard refuses such code now; a run recorded before it did not, nor a raw ESC.
    line = '    access = "user\u202e \u2066# admin only\u2069 \u2066"  # \x1b[2Jcleared\n'
    with sqlite3.connect(isolated_home / "runs" / "history.db") as database:
        database.execute(
            "UPDATE run_agents SET source = source || ? WHERE name = 'fact_finder'", (line,)
        )
    terminal = open_terminal(
        _env(isolated_home, factory.api, TERM="xterm", COLUMNS="160"),
        "show",
        run_id,
        "--code",
        "fact_finder",
        "--full",  # the line is after the model's part: the whole file that ran shows it
    )
    assert terminal.close() == 0
    assert all(control not in terminal.raw for control in BIDI)
    assert b"\x1b[2J" not in terminal.raw
    assert '"user<U+202E> <U+2066># admin only<U+2069> <U+2066>"  # \\x1b[2Jcleared' in (
        terminal.text
    )
    assert "invisible control or bidi characters" in terminal.text
    assert "Trojan Source" in terminal.text
    exact = agentgod(isolated_home, factory.api, "--json", "show", run_id, "--code", "fact_finder")
    source = json.loads(exact.stdout)["source"]
    assert "\u202e" in source and "\x1b[2J" in source, "the JSON carries the code exactly"
    assert "\u202e" not in exact.stdout, "escaped in the JSON text itself"
