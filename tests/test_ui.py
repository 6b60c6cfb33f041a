"""ui.PlainUI, richui.RichUI and main.make_ui: the three streams, the hooks, the renderer choice.

Questions are answered through PlainUI's `input_stream` (a StringIO standing in for the person);
the default path, input(), is covered once by monkeypatching builtins.input.
"""

from __future__ import annotations

import inspect
import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import IMPORT_ROOT
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from agentgod import asking, events, main, text, ui
from agentgod.kinds import AgentKind, Phase
from agentgod.replies import (
    BatchProgress,
    BatchSummaryLine,
    CostSummary,
    FailureReply,
    KeepChoice,
    PlannedAgent,
    Transcript,
    TranscriptAgent,
)
from agentgod.richui import TAGLINE, WORDMARK, RichUI

_IMPORTING_THIS_CHECKOUT = {**os.environ, "PYTHONPATH": str(IMPORT_ROOT)}
ANSI = re.compile(r"\x1b\[")

SUMMARY: CostSummary = {
    "llm_calls": 5,
    "input_tokens": 1234,
    "output_tokens": 567,
    "cache_write_tokens": 100,
    "cache_read_tokens": 890,
    "web_searches": 0,
    "usd": 0.0123,
    "estimate": True,
}
PLAN: list[PlannedAgent] = [
    {"name": "researcher", "role": "finds the facts", "depends_on": [], "reused": True},
    {"name": "writer", "role": "writes the report", "depends_on": ["researcher"], "reused": False},
]
TRANSCRIPT_AGENTS: list[TranscriptAgent] = [
    {
        "name": "researcher",
        "role": "finds the facts",
        "reused": True,
        "ok": True,
        "attempts": 1,
        "seconds": 2.1,
        "usage": {
            "llm_calls": 1,
            "input_tokens": 900,
            "output_tokens": 120,
            "cache_write_tokens": 0,
            "cache_read_tokens": 0,
            "web_searches": 0,
        },
        "usd": 0.0030,
        "kind": AgentKind.OK,
    },
    {
        "name": "writer",
        "role": "writes the report",
        "reused": False,
        "ok": False,
        "attempts": 2,
        "seconds": 0.4,
        "usage": {
            "llm_calls": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_write_tokens": 0,
            "cache_read_tokens": 0,
            "web_searches": 0,
        },
        "usd": 0.0,
        "kind": AgentKind.CRASH,
    },
]
KEEP: list[KeepChoice] = [{"name": a["name"], "role": a["role"]} for a in PLAN]

# One plausible call per pipeline hook; a hook added to events.TaskEvents fails here until the
# renderers are taught it.
HOOK_ARGS: dict[str, tuple[Any, ...]] = {
    "phase_started": (Phase.PLAN,),
    "phase_finished": (Phase.PLAN, 1.25),
    "plan_ready": ("standard", PLAN, [["researcher"], ["writer"]]),
    "revision_started": (1, "no sources cited"),
    "packages": ("writer", ["requests"], ["evil"], ["broken"]),
    "agent_building": ("writer", False),
    "agent_generated": ("writer",),
    "agent_rejected": ("writer", ["calls eval", "opens a socket"]),
    "agent_running": ("writer", 2),
    "agent_repairing": ("writer", 1, "Traceback (most recent call last):\nValueError: x"),
    "agent_finished": ("writer", False, 0.4, AgentKind.CRASH, "Traceback\nValueError: x", 2),
    "merge_started": (2,),
    "answer_started": (),
    "answer_delta": ("The answer, ",),
    "answer_replaced": ("the council refined it",),
    "council_started": (),
    "council_finished": (["thin evidence"], True),
    "judged": (False, "no sources cited"),
    "budget_exhausted": (0.51, 0.5),
    "archived": ("runs/2026/run.json",),
    "warn": ("the judge could not rule",),
}


class TTY(io.StringIO):
    """A StringIO that claims to be a terminal."""

    def isatty(self) -> bool:
        return True


def drawn(
    agents: list[TranscriptAgent],
    failures: list[FailureReply],
    revisions: int,
    council_improved: bool,
    run_file: str | None,
    sandbox: list[str],
    run_id: str | None = None,
) -> Transcript:
    """A transcript as a run's record derives it (runrecord.RunRecord.transcript)."""
    return Transcript(
        agents=agents,
        failures=failures,
        revisions=revisions,
        council_improved=council_improved,
        run_file=run_file,
        sandbox=sandbox,
        run_id=run_id,
    )


def plain(**kwargs: Any) -> tuple[ui.PlainUI, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return ui.PlainUI(out=out, err=err, **kwargs), out, err


# ---- PlainUI: the hooks ------------------------------------------------------------------------


def test_every_pipeline_hook_takes_the_same_parameters_in_both_renderers() -> None:
    """mypy checks the types (ui._renders_every_hook); this keeps names and order honest."""
    assert set(events.HOOKS) <= set(dir(ui.PlainUI))
    assert set(events.HOOKS) == set(HOOK_ARGS)
    for name in events.HOOKS:
        expected = list(inspect.signature(getattr(events.TaskEvents, name)).parameters)
        assert list(inspect.signature(getattr(ui.PlainUI, name)).parameters) == expected, name
        assert list(inspect.signature(getattr(RichUI, name)).parameters) == expected, name


ANSWER_HOOKS = ("answer_started", "answer_delta", "answer_replaced")
"""The streamed answer: shown only at a terminal, so a pipe gets one final answer."""


@pytest.mark.parametrize("hook", sorted(set(HOOK_ARGS) - set(ANSWER_HOOKS)))
def test_every_hook_prints_a_colourless_line(hook: str) -> None:
    view, out, err = plain()
    getattr(view, hook)(*HOOK_ARGS[hook])
    assert err.getvalue().strip()  # narration goes to stderr: StringIO is not a terminal
    assert not ANSI.search(err.getvalue())
    assert out.getvalue() == ""


def test_in_a_pipe_the_streamed_answer_shows_nothing_and_the_answer_is_printed_once() -> None:
    view, out, err = plain()
    for hook in ANSWER_HOOKS:
        getattr(view, hook)(*HOOK_ARGS[hook])
    assert out.getvalue() + err.getvalue() == ""
    view.answer("The answer, whole.")
    assert out.getvalue() == "The answer, whole.\n"
    assert err.getvalue() == ""


def test_agent_lines_are_aligned_to_the_longest_planned_name() -> None:
    view, _, err = plain()
    plan: list[PlannedAgent] = [
        {"name": n, "role": "r", "depends_on": [], "reused": False} for n in ("ab", "x" * 20)
    ]
    view.plan_ready("simple", plan, [["ab", "x" * 20]])
    view.agent_running("ab", 1)
    view.agent_finished("x" * 20, True, 1.0, AgentKind.OK, "", 1)
    lines = [line for line in err.getvalue().splitlines() if line.startswith("[agent]")]
    columns = {
        line.index(state) for line, state in zip(lines[-2:], ("running", "done"), strict=True)
    }
    assert len(columns) == 1
    assert lines[-2].index("running") == lines[0].index("waiting")


def test_agent_states_read_as_the_brief_shows_them() -> None:
    view, _, err = plain()
    view.agent_finished("researcher", True, 2.1, AgentKind.OK, "", 1)
    view.agent_finished("writer", False, 0.3, AgentKind.CRASH, "Traceback\nValueError: x", 1)
    done, failed = err.getvalue().splitlines()
    assert re.fullmatch(r"\[agent\] +researcher +done +2\.1s", done)
    assert re.fullmatch(r"\[agent\] +writer +failed +0\.3s +crash: ValueError: x", failed)


# ---- PlainUI: the three streams ----------------------------------------------------------------


def test_answer_narration_and_problems_each_take_their_stream() -> None:
    out, err, narration = io.StringIO(), io.StringIO(), io.StringIO()
    view = ui.PlainUI(out=out, err=err, narrate_to=narration)
    view.info("planning")
    view.answer("forty-two")
    view.problem("The model is unknown.", "Pass --model.", "NotFoundError: x")
    assert out.getvalue() == "forty-two\n"
    assert "planning" in narration.getvalue()
    assert "The model is unknown." in err.getvalue()
    assert "Pass --model." in err.getvalue()
    assert "NotFoundError: x" in err.getvalue()
    assert "planning" not in out.getvalue() + err.getvalue()


def test_quiet_silences_narration_but_never_the_answer_a_warning_or_a_problem() -> None:
    view, out, err = plain(quiet=True)
    view.banner("0.1.0", "claude", "/home")
    view.task_started("task")
    for hook, args in HOOK_ARGS.items():
        if hook != "warn":
            getattr(view, hook)(*args)
    view.cost(SUMMARY, 3.0)
    view.transcript(drawn(TRANSCRIPT_AGENTS, [], 0, False, None, []))
    view.warn("careful")
    view.answer("the answer")
    view.problem("It broke.", "Try again.", "boom")
    assert out.getvalue() == "the answer\n"
    assert err.getvalue().splitlines()[0] == "[warn]     careful"
    assert err.getvalue().splitlines()[1].startswith("[error]")
    assert "It broke." in err.getvalue()


def test_a_warning_goes_to_stderr_even_when_narration_goes_to_stdout() -> None:
    out, err = io.StringIO(), io.StringIO()
    view = ui.PlainUI(out=out, err=err, narrate_to=out)
    view.warn("the judge could not rule")
    assert out.getvalue() == ""
    assert "the judge could not rule" in err.getvalue()


def test_command_results_go_to_stdout_even_when_quiet() -> None:
    view, out, err = plain(quiet=True)
    view.library([])
    view.history([])
    view.help([("/quit", "leave")])
    assert "library is empty" in out.getvalue()
    assert "No runs yet." in out.getvalue()
    assert "/quit" in out.getvalue()
    assert err.getvalue() == ""


def test_narration_follows_the_person() -> None:
    piped, _, err = plain()
    assert piped.narrate_to is err
    out = TTY()
    watched = ui.PlainUI(out=out, err=io.StringIO())
    assert watched.narrate_to is out


def test_escape_sequences_in_model_text_never_reach_the_terminal() -> None:
    view, out, err = plain()
    view.answer("\x1b]0;pwned\x07red \x1b[31mtext\x9b2J")
    view.agent_repairing("writer", 1, "\x1b[2Jboom")
    assert "\x1b" not in out.getvalue() + err.getvalue()
    assert "\x9b" not in out.getvalue()
    assert "red" in out.getvalue()


UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What must never reach a terminal from model or agent text: control and bidi characters."""


@given(st.text())
def test_clean_text_holds_no_control_or_bidi_character(raw: str) -> None:
    assert not UNSAFE.search(text.clean(raw))


@given(st.text())
def test_visible_code_hides_nothing_and_flags_each_line_that_held_one(raw: str) -> None:
    shown, flagged = text.visible_code(raw)
    assert not UNSAFE.search(shown)
    assert shown.count("\n") == raw.count("\n"), "a line stays a line"
    held = [n for n, line in enumerate(raw.split("\n"), 1) if UNSAFE.search(line)]
    assert flagged == held


def test_bidi_controls_in_an_answer_are_shown_as_markers() -> None:
    view, out, _ = plain()
    view.answer("grant \u202eadmin\u202c to \u2066user\u2069")
    assert out.getvalue().strip() == "grant <U+202E>admin<U+202C> to <U+2066>user<U+2069>"


# ---- PlainUI: questions ------------------------------------------------------------------------


def test_nobody_to_ask_means_none_the_default_and_keep_nothing() -> None:
    view, out, err = plain(input_stream=io.StringIO("yes\nall\n"))
    assert view.ask("Which year?") is None
    assert view.ask_secret("Key?") is None
    assert view.confirm("Save?") is False
    assert view.confirm("Save?", default=True) is True
    assert view.choose_keep(KEEP) == []
    assert out.getvalue() == err.getvalue() == ""


def test_ask_reads_one_line_and_shows_the_prompt_even_when_quiet() -> None:
    view, _, err = plain(interactive=True, quiet=True, input_stream=io.StringIO("  2024  \n"))
    assert view.ask("Which year?") == "2024"
    assert "Which year?" in err.getvalue()
    assert view.ask("And then?") is None  # end of input


def test_ask_uses_input_when_no_stream_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    replies = iter(["paris"])

    def fake_input(prompt: str = "") -> str:
        try:
            return next(replies)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    view, _, _ = plain(interactive=True)
    assert view.ask("Which city?") == "paris"
    assert view.ask("Which city?") is None


@pytest.mark.parametrize(
    ("typed", "default", "expected"),
    [
        ("y\n", False, True),
        ("YES\n", False, True),
        ("n\n", True, False),
        ("\n", True, True),
        ("\n", False, False),
        ("maybe\nyes\n", False, True),
        ("", True, True),
    ],
)
def test_confirm(typed: str, default: bool, expected: bool) -> None:
    view, _, _ = plain(interactive=True, input_stream=io.StringIO(typed))
    assert view.confirm("Save it?", default=default) is expected


@pytest.mark.parametrize(
    ("typed", "kept"),
    [
        ("all\n", ["researcher", "writer"]),
        ("none\n", []),
        ("\n", []),
        ("writer, researcher\n", ["researcher", "writer"]),
        ("writer ghost\nwriter\n", ["writer"]),
        ("keep\n", ["researcher", "writer"]),
        ("keep all\n", ["researcher", "writer"]),
        ("y\n", ["researcher", "writer"]),
        ("n\n", []),
        ("keep writer\n", ["writer"]),
        ("foo\nwritr\n1\n", ["researcher"]),
        ("foo\nbar\nbaz\nall\n", []),
        ("2\n", ["writer"]),
        ("", []),
    ],
)
def test_choose_keep(typed: str, kept: list[str]) -> None:
    view, _, err = plain(interactive=True, input_stream=io.StringIO(typed))
    assert view.choose_keep(KEEP) == kept
    assert "writes the report" in err.getvalue()


def test_parse_keep_does_not_understand_unknown_names_or_out_of_range_numbers() -> None:
    names = ["alpha", "beta", "gamma"]
    assert asking.parse_keep("a, c", names) is None
    assert asking.parse_keep("gamma, alpha", names) == ["alpha", "gamma"]
    assert asking.parse_keep("alpha 0", names) is None
    assert asking.parse_keep("alpha 4", names) is None
    assert asking.parse_keep("alpha delta", names) is None
    assert asking.parse_keep("ALL", names) == names
    assert asking.parse_keep("  ", names) == []


def test_an_answer_the_keep_question_does_not_understand_is_asked_again() -> None:
    view, _, err = plain(interactive=True, input_stream=io.StringIO("/help\nwriter\n"))
    assert view.choose_keep(KEEP) == ["writer"]
    shown = err.getvalue()
    assert shown.count("Keep which?") == 2
    assert "Not understood: '/help'. Names: researcher, writer" in shown


# ---- PlainUI: what commands show ---------------------------------------------------------------


def test_cost_line_separates_every_token_kind_and_marks_an_estimate() -> None:
    view, _, err = plain()
    view.cost(SUMMARY, 12.34)
    view.cost({**SUMMARY, "estimate": False, "usd": 2.5}, 1.0)
    estimate, exact = err.getvalue().splitlines()
    for part in ("5 calls", "1,234 in", "567 out", "100 cache-write", "890 cache-read"):
        assert part in estimate
    assert "~$0.0123" in estimate
    assert "12.3s" in estimate
    assert "$2.50" in exact
    assert "~" not in exact


@pytest.mark.parametrize("width", [80, 160])
def test_an_estimated_cost_says_once_which_model_has_no_known_price(width: int) -> None:
    guessed: CostSummary = {**SUMMARY, "unpriced": ["claude-mystery-9"]}
    view, _, err = plain()
    view.cost(guessed, 1.0)
    view.cost({**SUMMARY, "estimate": False, "unpriced": []}, 1.0)
    estimate, exact = err.getvalue().splitlines()
    assert estimate.endswith(
        "~$0.0123 | 1.0s | ~ estimated: claude-mystery-9 has no known price, counted as $0 "
        "(models.toml can set one)"
    )
    assert "estimated" not in exact
    console = recording_at(width)
    RichUI(console=console).cost(guessed, 1.0)
    shown = console.export_text()
    assert shown.count("~ estimated: claude-mystery-9 has no known price") == 1
    assert all(len(line.rstrip()) <= width for line in shown.splitlines())
    assert "a-1, b-2 have no known price" in text.cost_text({**SUMMARY, "unpriced": ["a-1", "b-2"]})


def test_session_cost_goes_to_stdout() -> None:
    view, out, _ = plain()
    view.session_cost(SUMMARY)
    assert "this session" in out.getvalue()
    assert "890 cache-read" in out.getvalue()
    assert "~$0.0123" in out.getvalue()


def test_transcript_lists_agents_failures_and_the_run_facts() -> None:
    view, _, err = plain()
    view.transcript(
        drawn(
            TRANSCRIPT_AGENTS,
            [{"name": "writer", "reason": "ValueError: x"}],
            1,
            True,
            "runs/run.json",
            ["landlock", "rlimits"],
        )
    )
    text = err.getvalue()
    assert re.search(r"researcher +done +1 attempt +2\.1s +\$0\.0030 +reused", text)
    assert re.search(r"writer +failed +2 attempts +0\.4s +\$0\.0000 +new +crash", text)
    assert re.search(r"\[failed\] +writer +ValueError: x", text)
    assert "1 revision - council improved the answer" in text
    assert "sandbox: landlock, rlimits" in text
    assert "runs/run.json" in text


def test_library_history_and_stats() -> None:
    view, out, _ = plain()
    view.library(
        [
            {
                "name": "researcher",
                "role": "finds facts",
                "generation": 2,
                "wins": 3,
                "losses": 1,
                "uses": 4,
                "reliable": True,
                "evolved": True,
            },
            {
                "name": "scraper",
                "role": "reads pages",
                "generation": 1,
                "wins": 0,
                "losses": 3,
                "uses": 3,
                "reliable": False,
                "evolved": False,
            },
        ]
    )
    view.history(
        [
            {
                "id": 7,
                "run_id": "3f9a2b1c",
                "status": "failed",
                "started_at": "2026-05-09T07:35:12+00:00",
                "task": "compare two databases",
                "ok": False,
                "complexity": None,
                "usd": 0.25,
                "duration_seconds": 31.0,
                "agents": 3,
                "run_file": None,
            }
        ]
    )
    view.stats(
        {
            "runs": 4,
            "succeeded": 3,
            "success_rate": 0.75,
            "llm_calls": 9,
            "tokens": {"input": 10, "output": 20, "cache_read": 30, "cache_write": 40},
            "usd": 1.5,
            "mean_duration": None,
            "most_used": [("researcher", 4)],
            "most_reliable": [("researcher", 3, 4)],
        }
    )
    text = out.getvalue()
    assert re.search(r"researcher +gen 2 +3 won +1 lost +4 uses +reliable +evolved", text)
    assert re.search(r"scraper +gen 1 .* retired", text)
    assert re.search(r"3f9a2b1c +2026-05-09 07:35 +failed +- +\$0\.2500 +31\.0s +3 agents", text)
    assert "3 (75%)" in text
    assert "10 in / 20 out / 40 cache-write / 30 cache-read" in text
    assert "mean duration  -" in text
    assert "researcher (3/4)" in text
    assert not ANSI.search(text)


# ---- make_ui -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "env", "tty", "expected"),
    [
        ({"plain": True}, "", True, ui.PlainUI),
        ({}, "1", True, ui.PlainUI),
        ({}, "yes", True, ui.PlainUI),
        ({"json_mode": True}, "", True, ui.PlainUI),
        ({}, "", False, ui.PlainUI),
        ({}, "", True, RichUI),
        ({}, "0", True, RichUI),
        ({}, "False", True, RichUI),
        ({"quiet": True}, "", True, ui.PlainUI),
    ],
)
def test_make_ui_chooses_once(
    options: dict[str, bool],
    env: str,
    tty: bool,
    expected: type,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTGOD_PLAIN", env)
    monkeypatch.setenv("TERM", "xterm-256color")
    out = TTY() if tty else io.StringIO()
    view = main.make_ui(
        out=out,
        err=io.StringIO(),
        plain=options.get("plain", False),
        quiet=options.get("quiet", False),
        json_mode=options.get("json_mode", False),
    )
    assert type(view) is expected


@pytest.mark.parametrize("term", ["dumb", "unknown"])
def test_a_terminal_rich_cannot_drive_gets_plain_lines(
    term: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERM", term)
    assert type(main.make_ui(out=TTY(), err=io.StringIO())) is ui.PlainUI


def test_json_mode_silences_narration_but_not_problems() -> None:
    err = io.StringIO()
    view = main.make_ui(json_mode=True, out=TTY(), err=err)
    view.info("planning")
    view.problem("It broke.", "Try again.", "boom")
    assert view.quiet
    assert "planning" not in err.getvalue()
    assert "It broke." in err.getvalue()


def test_plain_works_without_rich_and_ui_does_not_import_it() -> None:
    """main.make_ui falls back to PlainUI when rich cannot be imported; ui never imports it."""
    code = (
        "import io, sys\n"
        "sys.modules['rich'] = None\n"
        "from agentgod import main\n"
        "class TTY(io.StringIO):\n"
        "    def isatty(self): return True\n"
        "out, err = TTY(), io.StringIO()\n"
        "view = main.make_ui(out=out, err=err)\n"
        "view.plan_ready('simple', [{'name': 'a_b', 'role': 'r', 'reused': False}], [['a_b']])\n"
        "view.answer('42')\n"
        "print(type(view).__name__, repr(out.getvalue()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=_IMPORTING_THIS_CHECKOUT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.startswith("PlainUI ")
    assert "[plan]" in done.stdout
    assert "42" in done.stdout
    light = subprocess.run(
        [sys.executable, "-c", "import sys; from agentgod import ui; print('rich' in sys.modules)"],
        env=_IMPORTING_THIS_CHECKOUT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert light.stdout.strip() == "False"


# ---- RichUI ------------------------------------------------------------------------------------


def recording() -> Console:
    return Console(record=True, width=100, force_terminal=True, file=io.StringIO())


def scripted_run(view: RichUI) -> None:
    """A whole run as the orchestrator reports it: a reused agent, a repaired and failed one."""
    view.banner("0.1.0", "claude-sonnet-4-5", "/home/me/.agentgod")
    view.task_started("Write a short report")
    view.phase_started(Phase.PLAN)
    view.plan_ready("standard", PLAN, [["researcher"], ["writer"]])
    view.phase_finished(Phase.PLAN, 1.2)
    view.phase_started(Phase.BUILD)
    view.phase_started(Phase.RUN)
    view.agent_building("researcher", True)
    view.agent_building("writer", False)
    view.packages("writer", ["requests"], [], [])
    view.agent_generated("writer")
    view.phase_finished(Phase.BUILD, 2.0)
    view.agent_running("researcher", 1)
    view.agent_finished("researcher", True, 2.1, AgentKind.OK, "", 1)
    view.agent_running("writer", 1)
    view.agent_repairing("writer", 1, "Traceback\nValueError: x")
    view.agent_running("writer", 2)
    view.agent_finished("writer", False, 0.4, AgentKind.CRASH, "Traceback\nValueError: x", 2)
    view.phase_finished(Phase.RUN, 3.1)
    view.phase_started(Phase.MERGE)
    view.merge_started(1)
    view.phase_finished(Phase.MERGE, 0.5)
    view.phase_started(Phase.JUDGE)
    view.judged(True, "")
    view.phase_finished(Phase.JUDGE, 0.3)
    view.phase_started(Phase.ARCHIVE)
    view.archived("runs/run.json")
    view.phase_finished(Phase.ARCHIVE, 0.0)
    view.task_finished()
    view.answer("# Findings\n\nThe sky is **blue**.\n\n- one\n- two\n")
    view.cost(SUMMARY, 12.3)
    view.transcript(
        drawn(
            TRANSCRIPT_AGENTS,
            [{"name": "writer", "reason": "ValueError: x"}],
            0,
            False,
            "runs/run.json",
            ["rlimits"],
        )
    )


def test_rich_renders_a_whole_run() -> None:
    console = recording_at(160)
    scripted_run(RichUI(console=console))
    text = console.export_text()
    for line in WORDMARK:
        assert line in text
    assert TAGLINE in text
    assert "claude-sonnet-4-5" in text
    assert "[packages] writer: installed requests" in text  # a hook RichUI leaves to PlainUI
    rail = [line for line in text.splitlines() if "archive" in line and "plan" in line][-1]
    assert re.search(r"✓ plan 1\.2s .* ✓ run 3\.1s .* - council .* ✓ archive", rail)
    board = text[text.rindex(rail) :]
    assert re.search(r"researcher \(reused\) +done +2\.1s", board)
    assert re.search(r"writer +failed +0\.4s +crash: ValueError: x +2 attempts", board)
    assert "✓ judge" in text
    assert "Findings" in text
    assert "# Findings" not in text
    assert "**blue**" not in text
    assert "• one" in text
    assert "1,234 in / 567 out / 100 cache-write / 890 cache-read | ~$0.0123 | 12.3s" in text
    assert "run transcript" in text
    assert re.search(r"agent +role +origin +result +tries +time", text)
    assert re.search(r"writer +writes the report +new +failed \(crash\) +2 +0\.4s", text)
    assert "saved to runs/run.json" in text


def test_rich_marks_work_cut_short_when_the_task_ends_early() -> None:
    console = recording()
    view = RichUI(console=console)
    view.task_started("task")
    view.phase_started(Phase.PLAN)
    view.plan_ready("standard", PLAN, [["researcher"], ["writer"]])
    view.phase_finished(Phase.PLAN, 1.0)
    view.phase_started(Phase.BUILD)
    view.phase_started(Phase.RUN)
    view.agent_running("researcher", 1)
    view.task_finished()
    final = console.export_text()
    final = final[final.rindex("✓ plan") :]
    assert "■ build" in final
    assert "- merge" in final
    assert re.search(r"researcher \(reused\) +stopped", final)
    assert re.search(r"writer +skipped", final)


def last_rail(drawn: str) -> str:
    """The phase rail of the last frame drawn: one line, from the plan to the archive."""
    return [line for line in drawn.splitlines() if "plan" in line and "archive" in line][-1]


def recording_at(width: int) -> Console:
    return Console(record=True, width=width, height=50, force_terminal=True, file=io.StringIO())


@pytest.mark.parametrize("width", [80, 160])
def test_rich_a_revision_restarts_the_rail_from_the_merge_and_a_new_plan_from_the_plan(
    width: int,
) -> None:
    console = recording_at(width)
    view = RichUI(console=console)
    view.task_started("task")
    view.phase_started(Phase.PLAN)
    view.plan_ready("standard", PLAN, [["researcher"], ["writer"]])
    view.phase_finished(Phase.PLAN, 1.0)
    view.phase_started(Phase.MERGE)
    view.phase_finished(Phase.MERGE, 1.0)
    view.phase_started(Phase.JUDGE)
    view.phase_finished(Phase.JUDGE, 0.2)
    view.judged(False, "no sources")
    assert "✓ judge" in last_rail(wait_for_frame(console, "judge: incomplete"))
    view.revision_started(1, "no sources")
    view.phase_started(Phase.MERGE)
    rail = last_rail(wait_for_frame(console, "↻ revision 1: no sources"))
    assert "✓ plan" in rail and "○ judge" in rail
    assert "✓ judge" not in rail, "no stale verdict while the revision runs"
    view.phase_finished(Phase.MERGE, 1.0)
    view.phase_started(Phase.PLAN)  # tier two: a new round
    rail = last_rail(wait_for_frame(console, "plan 0."))
    assert "○ merge" in rail and "✓ merge" not in rail
    view.task_finished()
    text = console.export_text()
    assert "judge: incomplete — no sources" in text
    final = text[text.rindex("plan") - 2 :]
    assert final.startswith("■ plan")


@pytest.mark.parametrize("width", [80, 160])
def test_rich_the_verdicts_come_after_the_plan_and_the_answer_never_above(width: int) -> None:
    console = recording_at(width)
    view = RichUI(console=console)
    view.task_started("task")
    view.phase_started(Phase.PLAN)
    view.plan_ready("standard", PLAN, [["researcher"], ["writer"]])
    view.phase_finished(Phase.PLAN, 1.0)
    view.phase_started(Phase.MERGE)
    events.answer_stream(view)("The streamed answer.")
    view.phase_finished(Phase.MERGE, 1.0)
    view.phase_started(Phase.COUNCIL)
    view.council_finished(["thin evidence"], False)
    view.phase_finished(Phase.COUNCIL, 1.0)
    view.phase_started(Phase.JUDGE)
    view.judged(True, "")
    view.phase_finished(Phase.JUDGE, 0.2)
    view.task_finished()
    view.answer("The streamed answer.")
    text = console.export_text()
    final = text[text.rindex("standard · 2 agents") :]  # the last frame, left on screen
    answer = final.index("The streamed answer.")
    council, judge = final.index("council: 1 weakness found"), final.index("✓ judge: the answer")
    assert answer < council < judge


def _finished_late_first(view: ui.PlainUI) -> None:
    """A plan of researcher then writer, where writer finished first."""
    view.task_started("task")
    view.plan_ready("standard", PLAN, [["researcher"], ["writer"]])
    view.plan_ready("standard", [PLAN[1], {**PLAN[0], "name": "checker"}], [["writer", "checker"]])


def test_transcript_and_keep_list_follow_the_plan_not_the_finishing_order() -> None:
    view, _, err = plain(interactive=True, input_stream=io.StringIO("1\n"))
    _finished_late_first(view)
    checker: TranscriptAgent = {**TRANSCRIPT_AGENTS[0], "name": "checker"}
    view.transcript(drawn([checker, *TRANSCRIPT_AGENTS[::-1]], [], 0, False, None, []))
    rows = [line.split()[1] for line in err.getvalue().splitlines() if "attempt" in line]
    assert rows == ["researcher", "writer", "checker"]
    keep = [KeepChoice(name=name, role="r") for name in ("checker", "writer")]
    assert view.choose_keep(keep) == ["writer"]  # 1 is the first listed: the plan's order
    assert err.getvalue().index("1. writer") < err.getvalue().index("2. checker")


@pytest.mark.parametrize("width", [80, 160])
def test_rich_transcript_follows_the_plan_not_the_finishing_order(width: int) -> None:
    console = recording_at(width)
    view = RichUI(console=console)
    _finished_late_first(view)
    view.task_finished()
    view.transcript(drawn(TRANSCRIPT_AGENTS[::-1], [], 0, False, None, []))
    table = console.export_text()
    table = table[table.index("run transcript") :]
    assert table.index("researcher") < table.index("writer")


def test_rich_waiting_spins_until_the_work_ends_or_something_else_is_shown() -> None:
    console = recording()
    view = RichUI(console=console, interactive=True, input_stream=io.StringIO("y\n"))
    with view.waiting("reading the task"):
        wait_for_frame(console, "reading the task…")
        assert view.confirm("Go on?") is True  # a question takes the spinner down first
        assert console.export_text().endswith("Go on? [y/N] ")
    with view.waiting("reading the task"):
        wait_for_frame(console, "reading the task…")
    view.task_started("task")  # a second live display would raise: the spinner is gone
    view.task_finished()
    silent, out, err = plain()
    with silent.waiting("reading the task"):
        pass
    quiet = recording()
    with RichUI(console=quiet, quiet=True).waiting("reading the task"):
        pass
    assert out.getvalue() == err.getvalue() == quiet.export_text() == ""


def test_rich_questions_take_the_live_display_down_first() -> None:
    console = recording()
    view = RichUI(console=console, interactive=True, input_stream=io.StringIO("y\n"))
    view.task_started("task")
    view.plan_ready("standard", PLAN, [["researcher"], ["writer"]])
    assert view.confirm("Keep going?") is True
    # A display still up would redraw the board below the question.
    assert re.search(r"writer +waiting *\nKeep going\? \[y/N\] $", console.export_text())
    assert view.choose_keep(KEEP[1:]) == []
    assert "New agents from this run" in console.export_text()


def test_rich_streams_are_bound_like_plain_ones() -> None:
    out, err = TTY(), io.StringIO()
    view = RichUI(out=out, err=err)
    view.problem("It broke.", "Try again.", "boom")
    view.answer("fine")
    assert "It broke." in err.getvalue()
    assert "boom" in err.getvalue()
    assert "It broke." not in out.getvalue()
    assert "fine" in out.getvalue()
    assert "fine" not in err.getvalue()


def test_rich_quiet_shows_only_the_answer_and_problems() -> None:
    console = recording()
    view = RichUI(console=console, quiet=True)
    view.banner("0.1.0", "claude", "/home")
    scripted = dict(HOOK_ARGS)
    view.task_started("task")
    for hook, args in scripted.items():
        getattr(view, hook)(*args)
    view.task_finished()
    view.cost(SUMMARY, 1.0)
    view.answer("the answer")
    view.problem("It broke.", "Try again.", "boom")
    view.history([])
    text = console.export_text()
    assert "No runs yet." in text
    assert WORDMARK[1] not in text
    assert "plan" not in text
    assert "the answer" in text
    assert "It broke." in text


def test_rich_hooks_from_many_threads_do_not_deadlock_the_live_display() -> None:
    console = recording()
    view = RichUI(console=console)
    names = [f"agent_{n}" for n in range(8)]
    view.task_started("task")
    view.plan_ready(
        "deep",
        [{"name": n, "role": "r", "depends_on": [], "reused": False} for n in names],
        [names],
    )
    lock = threading.Lock()  # the pipeline serialises its hooks the same way

    def work(name: str) -> None:
        for attempt in range(1, 40):
            with lock:
                view.agent_running(name, attempt)
            with lock:
                view.info(f"{name} {attempt}")
        with lock:
            view.agent_finished(name, True, 1.0, AgentKind.OK, "", 39)

    threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not any(thread.is_alive() for thread in threads)
    view.task_finished()
    final = console.export_text()
    final = final[final.rindex("agent_0") :]
    assert final.count("done") == len(names)


ANSWER_WITH_TAGS = (
    "Call it as `mytool`:\n\n"
    "mytool --input <file> --output <dir>\n\n"
    "It returns a Vec<u8>, and <br> or <div>x</div> are text here too.\n"
)
UNFENCED_CODE = (
    "Here it is:\n\ndef area(r):\n    if r < 0:\n        raise ValueError(r)\n    return r\n"
)


def _rendered_answer(text: str, width: int) -> list[str]:
    """The answer panel's lines as a terminal of `width` columns shows them, borders removed."""
    console = Console(record=True, width=width, force_terminal=True, file=io.StringIO())
    RichUI(console=console).answer(text)
    return [line.strip("│ ").rstrip() for line in console.export_text().splitlines()]


@pytest.mark.parametrize("width", [80, 160])
def test_rich_answer_keeps_every_tag_shaped_word(width: int) -> None:
    shown = "\n".join(_rendered_answer(ANSWER_WITH_TAGS, width))
    assert "mytool --input <file> --output <dir>" in shown
    assert "Vec<u8>" in shown
    assert "<br> or <div>x</div> are text" in shown


@pytest.mark.parametrize("width", [80, 160])
def test_rich_answer_keeps_the_lines_and_indentation_of_unfenced_code(width: int) -> None:
    console = Console(record=True, width=width, force_terminal=True, file=io.StringIO())
    RichUI(console=console).answer(UNFENCED_CODE)
    rows = [line.strip("│").rstrip() for line in console.export_text().splitlines()]
    first = next(row for row in rows if "def area(r):" in row)
    indent = first.index("def")
    at = rows.index(first)
    assert [row[indent:] for row in rows[at : at + 4]] == [
        "def area(r):",
        "    if r < 0:",
        "        raise ValueError(r)",
        "    return r",
    ]


@pytest.mark.parametrize("width", [80, 160])
def test_rich_answer_keeps_line_breaks_in_a_paragraph(width: int) -> None:
    shown = _rendered_answer("x = 1\ny = 2\nprint(x + y)\n", width)
    inside = [line for line in shown if line and not line.startswith(("╭", "╰"))]
    assert inside == ["x = 1", "y = 2", "print(x + y)"]


# ---- the answer as it is written -----------------------------------------------------------------


class Calls(events.NullEvents):
    """Records the answer hooks, as (name, arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def answer_started(self) -> None:
        self.calls.append(("answer_started", ()))

    def answer_delta(self, text: str) -> None:
        self.calls.append(("answer_delta", (text,)))


def test_a_text_sink_becomes_the_answer_hooks_a_restart_at_once_and_only_after_text() -> None:
    watcher = Calls()
    sink = events.answer_stream(watcher)
    sink("")  # nothing shown yet: no news
    for piece in ("Half ", "an", "", "", "Whole."):
        sink(piece)
    assert watcher.calls == [
        ("answer_started", ()),
        ("answer_delta", ("Half ",)),
        ("answer_delta", ("an",)),
        ("answer_started", ()),
        ("answer_delta", ("Whole.",)),
    ]


def watched(**kwargs: Any) -> tuple[ui.PlainUI, TTY, io.StringIO]:
    out, err = TTY(), io.StringIO()
    return ui.PlainUI(out=out, err=err, **kwargs), out, err


def test_at_a_terminal_the_answer_is_shown_as_it_is_written_and_not_printed_twice() -> None:
    view, out, _ = watched()
    view.task_started("task")
    view.merge_started(1)
    sink = events.answer_stream(view)
    sink("Forty")
    sink("-two,\nas")
    assert out.getvalue().endswith("[answer]   being written:\nForty-two,\nas")
    view.phase_finished(Phase.MERGE, 1.0)  # the next line starts on a line of its own
    view.judged(True, "")
    view.answer("Forty-two,\nas\n")  # the merge's text, its whitespace trimmed or not
    shown = out.getvalue()
    assert "Forty-two,\nas\n[phase]    merge    done" in shown
    assert shown.count("Forty-two") == 1
    assert shown.endswith("[judge]    complete\n")


def test_a_restarted_answer_says_so_and_the_final_one_is_not_repeated() -> None:
    view, out, _ = watched()
    view.task_started("task")
    sink = events.answer_stream(view)
    for piece in ("Half an", "", "The whole ", "answer."):
        sink(piece)
    view.answer("The whole answer.")
    assert out.getvalue().endswith(
        "[answer]   being written:\nHalf an\n"
        "[answer]   written again from the start:\nThe whole answer.\n"
    )


def test_a_replaced_answer_is_said_to_be_and_the_final_one_printed() -> None:
    view, out, _ = watched()
    view.task_started("task")
    sink = events.answer_stream(view)
    sink("A first answer.")
    view.answer_replaced("the council refined it")
    view.council_finished(["thin"], True)
    view.answer("A better answer.")
    shown = out.getvalue()
    assert "A first answer.\n[answer]   the council refined it: the final answer follows" in shown
    assert shown.endswith("[answer]   the final answer:\nA better answer.\n")


def test_an_answer_that_differs_from_the_stream_is_printed_whole() -> None:
    view, out, _ = watched()
    view.task_started("task")
    events.answer_stream(view)("Partial")
    view.answer("## writer\n\nDraft.")  # the merge fell back to the outputs
    assert out.getvalue().endswith("Partial\n[answer]   the final answer:\n## writer\n\nDraft.\n")


@pytest.mark.parametrize("options", [{"quiet": True, "plain": True}, {"json_mode": True}])
def test_quiet_or_json_at_a_terminal_print_one_answer_and_no_pieces(
    options: dict[str, Any],
) -> None:
    out = TTY()
    view = main.make_ui(out=out, err=io.StringIO(), **options)
    view.task_started("task")
    events.answer_stream(view)("Forty")
    assert out.getvalue() == ""
    view.answer("Forty-two")
    assert out.getvalue() == "Forty-two\n"


def test_streamed_pieces_never_carry_an_escape_to_the_terminal() -> None:
    view, out, _ = watched()
    view.task_started("task")
    sink = events.answer_stream(view)
    sink("red \x1b")
    sink("[31mtext\x9b2J")
    assert "\x1b" not in out.getvalue()
    assert "\x9b" not in out.getvalue()
    assert "red [31mtext2J" in out.getvalue()


def test_the_next_task_starts_with_nothing_streamed() -> None:
    view, out, _ = watched()
    view.task_started("first")
    events.answer_stream(view)("One.")
    view.task_started("second")  # the first's answer never came: an interrupted run
    view.answer("One.")
    assert out.getvalue().endswith("One.\n[task]     second\nOne.\n")


def wait_for_frame(console: Console, text: str, seconds: float = 10) -> str:
    """What the live display has drawn so far, once it has drawn `text` (it redraws 8 times a
    second on its own thread)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        drawn = console.export_text(clear=False)
        if text in drawn:
            return drawn
        time.sleep(0.01)
    raise AssertionError(f"never drawn: {text!r}\n{console.export_text(clear=False)[-2000:]}")


LONG_ANSWER = "".join(f"line {n}\n\n" for n in range(1, 41))


def test_rich_shows_the_end_of_the_answer_as_it_is_written_and_all_of_it_at_the_end() -> None:
    console = recording()
    view = RichUI(console=console)
    view.task_started("task")
    view.plan_ready("standard", PLAN, [["researcher"], ["writer"]])
    view.phase_started(Phase.MERGE)
    sink = events.answer_stream(view)
    for line in LONG_ANSWER.splitlines(keepends=True):
        sink(line)
    drawn = wait_for_frame(console, "line 40")
    frame = drawn[drawn.rindex("answer · being written") :]
    assert re.search(r"… \d+ lines above", frame)  # 40 lines do not fit 25 rows
    assert "line 1\n" not in frame.replace("│", "").replace(" ", "")
    view.phase_finished(Phase.MERGE, 2.0)
    view.task_finished()
    drawn = console.export_text(clear=False)
    final = drawn[drawn.rindex("✓ merge") :]
    rows = [row.strip("│ ") for row in final.splitlines()]
    assert [row for row in rows if row.startswith("line ")] == [f"line {n}" for n in range(1, 41)]
    assert "above" not in final
    view.answer(LONG_ANSWER.strip())
    assert console.export_text(clear=False) == drawn  # already on screen: not printed again


def test_rich_says_a_replaced_answer_will_not_stand_and_prints_the_final_one() -> None:
    console = recording()
    view = RichUI(console=console)
    view.task_started("task")
    view.phase_started(Phase.MERGE)
    events.answer_stream(view)("A first answer.")
    wait_for_frame(console, "A first answer.")
    view.phase_finished(Phase.MERGE, 1.0)
    view.answer_replaced("the council refined it")
    view.task_finished()
    drawn = console.export_text(clear=False)
    final = drawn[drawn.rindex("✓ merge") :]
    assert "↻ the council refined it: the final answer is shown when the run ends" in final
    assert "A first answer." not in final
    view.answer("A better answer.")
    after = console.export_text(clear=False)[len(drawn) :]
    assert "the final answer:" in after
    assert "A better answer." in after


def test_rich_a_restart_empties_the_panel_and_says_it_is_written_again() -> None:
    console = recording()
    view = RichUI(console=console)
    view.task_started("task")
    view.phase_started(Phase.MERGE)
    sink = events.answer_stream(view)
    sink("Half an")
    wait_for_frame(console, "Half an")
    sink("")
    sink("Whole answer.")
    drawn = wait_for_frame(console, "Whole answer.")
    frame = drawn[drawn.rindex("answer · written again") :]
    assert "Half an" not in frame
    view.phase_finished(Phase.MERGE, 1.0)
    view.task_finished()
    done = console.export_text(clear=False)
    view.answer("Whole answer.")
    assert console.export_text(clear=False) == done


def test_rich_an_answer_that_differs_from_the_stream_is_printed() -> None:
    console = recording()
    view = RichUI(console=console)
    view.task_started("task")
    view.phase_started(Phase.MERGE)
    events.answer_stream(view)("Partial")
    view.task_finished()
    done = console.export_text(clear=False)
    view.answer("## writer\n\nDraft.")
    after = console.export_text(clear=False)[len(done) :]
    assert "the final answer:" in after
    assert "Draft." in after


def test_rich_an_answer_stopped_part_way_says_so_in_the_final_frame() -> None:
    console = recording()
    view = RichUI(console=console)
    view.task_started("task")
    view.phase_started(Phase.MERGE)
    events.answer_stream(view)("The first half")
    view.task_finished()  # Ctrl-C: no answer follows
    drawn = console.export_text(clear=False)
    final = drawn[drawn.rindex("■ merge") :]
    assert "answer · stopped part-way" in final
    assert "The first half" in final


# ---- RichUI at 80 and 160 columns --------------------------------------------------------------

NORTH = "customer_feedback_sentiment_analyzer_for_region_north"
SOUTH = "customer_feedback_sentiment_analyzer_for_region_south"
LONG_ROLE = (
    "Reads every customer feedback message from the attached export, classifies the sentiment "
    "of each one and writes a per-product summary with counts and the most telling quotes"
)
ROLE_WORDS = r"Reads|classifies|export|per-product|quotes"
ROLE_WORDS = r"Reads|classifies|export|per-product|quotes"
BIG: CostSummary = {
    "llm_calls": 12,
    "input_tokens": 123456,
    "output_tokens": 12345,
    "cache_write_tokens": 45678,
    "cache_read_tokens": 234567,
    "web_searches": 3,
    "usd": 1.2345,
    "estimate": False,
}


def long_named_run(width: int, home: Path) -> str:
    """A run of two agents whose long names differ only at the end, as `width` columns show it."""
    console = recording_at(width)
    view = RichUI(console=console, interactive=True, input_stream=io.StringIO("none\n"))
    planned: list[PlannedAgent] = [
        {"name": name, "role": LONG_ROLE, "depends_on": [], "reused": reused}
        for name, reused in ((NORTH, False), (SOUTH, True))
    ]
    view.task_started("task")
    for phase in PHASES[:5]:
        view.phase_started(phase)
        if phase is Phase.PLAN:
            view.plan_ready("standard", planned, [[NORTH, SOUTH]])
        view.phase_finished(phase, 123.4)
    view.agent_finished(NORTH, True, 2.0, AgentKind.OK, "", 1)
    view.agent_finished(SOUTH, False, 3.2, AgentKind.CRASH, "ValueError: " + "long " * 30, 2)
    view.phase_started(Phase.JUDGE)
    view.judged(True, "")
    view.task_finished()
    view.cost(BIG, 123.4)
    rows: list[TranscriptAgent] = [
        {**TRANSCRIPT_AGENTS[0], "name": NORTH, "role": LONG_ROLE},
        {**TRANSCRIPT_AGENTS[1], "name": SOUTH, "role": LONG_ROLE},
    ]
    run_file = str(home / "runs" / "20261201T134120Z_find-the-facts-about-otters-and-beavers.md")
    view.transcript(
        drawn(rows, [], 1, True, run_file, ["landlock", "seccomp", "rlimits"], "1a2b3c4d")
    )
    view.choose_keep([{"name": NORTH, "role": LONG_ROLE}, {"name": SOUTH, "role": LONG_ROLE}])
    return console.export_text()


PHASES = tuple(Phase)


@pytest.mark.parametrize("width", [80, 160])
def test_rich_at_80_and_160_columns_nothing_wraps_mid_word_and_long_names_stay_apart(
    width: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    text = long_named_run(width, tmp_path / ".agentgod")
    lines = [line.rstrip() for line in text.splitlines()]
    assert all(len(line) <= width for line in lines)
    rail = last_rail(text)
    assert rail.startswith("✓ plan") and rail.endswith("archive"), "the rail is one line"
    cost = text[text.rindex("cost  12 calls") :].split("\nrun transcript")[0]
    for part in ("123,456 in", "12,345 out", "45,678 cache-write", "234,567 cache-read"):
        assert part in cost, f"{part!r} is whole"
    assert "3 web searches | $1.23 | 123.4s" in cost
    cost_lines = cost.splitlines()
    assert len(cost_lines) == (1 if width >= 140 else 2)
    assert all(line.startswith("      ") for line in cost_lines[1:])
    path = "~/.agentgod/runs/20261201T134120Z_find-the-facts-about-otters-and-beavers.md"
    assert re.search(rf"saved to(\n  | ){re.escape(path)}\n", text), "the path whole, never cut"
    assert re.search(r"run 1a2b3c4d \(agentgod show 1a2b3c4d\)", text), "the run id on one line"
    transcript = text[text.rindex("run transcript") : text.index("New agents from this run")]
    keep = text[text.index("New agents from this run") :]
    for shown in (transcript, keep):
        role_lines = [line for line in shown.splitlines() if re.search(ROLE_WORDS, line)]
        assert 2 <= len(role_lines) <= 4, "each role in at most two lines"
        if width == 80:
            assert "telling quotes" not in shown and "…" in shown, "a longer role is cut"
    board = text[text.rindex(rail) : text.rindex("✓ judge: the answer")]
    for part in (board, transcript):
        north = [line for line in part.splitlines() if "north" in line]
        south = [line for line in part.splitlines() if "south" in line]
        assert len(north) == len(south) == 1, "each name keeps its distinguishing tail"
    assert NORTH in keep and SOUTH in keep, "whole names: they are what may be typed"
    if width == 160:
        assert NORTH in board and NORTH in transcript


STORED_ROLE = (
    "Collects the regional sales figures from every source the task names and normalises them "
    "into one table with a column per region"
)


def stored(role: str = STORED_ROLE) -> dict[str, Any]:
    """A recorded run as `agentgod show` gets it from history (history.StoredRun.to_json)."""
    agent = {
        "name": "collector",
        "role": role,
        "ok": True,
        "kind": "ok",
        "attempts": 1,
        "seconds": 1.0,
        "usd": 0.0002,
        "inputs": [],
        "output": "42",
    }
    return {
        "run_id": "47556266",
        "status": "ok",
        "ok": True,
        "started_at": "2026-12-01T14:19:27",
        "duration_seconds": 6.3,
        "cost": {"usd": 0.0045},
        "task": "sum the sales per region",
        "model": "claude-sonnet-5-5",
        "effort": "medium",
        "reasoning": "scripted plan",
        "agents": [agent],
        "answer": "The total is 42.",
    }


@pytest.mark.parametrize("width", [80, 160])
def test_rich_show_wraps_a_long_role_in_its_own_column(width: int) -> None:
    console = recording_at(width)
    RichUI(console=console).stored_run(stored())
    lines = console.export_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  role    "))
    end = next(i for i, line in enumerate(lines) if line.startswith("  inputs  "))
    role = lines[start:end]
    assert all(line.startswith(" " * 10) for line in role[1:])  # never under the label
    assert " ".join(" ".join(line[10:].split()) for line in role) == STORED_ROLE
    assert len(role) == (2 if width == 80 else 1)
    assert all(len(line) <= width for line in lines)


def test_plain_show_keeps_each_field_on_one_line() -> None:
    out = io.StringIO()
    ui.PlainUI(out=out).stored_run(stored())
    assert f"  role    {STORED_ROLE}\n" in out.getvalue()
    assert "task      sum the sales per region\n" in out.getvalue()


# ---- a batch: the capped tasks counted apart -----------------------------------------------------

BATCH_PROGRESS: BatchProgress = {
    "batch_id": "3f9a2b1c",
    "total": 4,
    "done": 1,
    "capped": 1,
    "failed": 1,
    "running": 1,
    "usd": 0.05,
    "elapsed_seconds": 10.0,
    "eta_seconds": 5.0,
}
BATCH_SUMMARY: BatchSummaryLine = {
    "type": "summary",
    "batch_id": "3f9a2b1c",
    "status": "done",
    "tasks": 3,
    "done": 1,
    "capped": 1,
    "failed": 1,
    "invalid": 0,
    "unfinished": 0,
    "usd": 0.05,
    "seconds": 12.0,
}


def test_a_task_its_own_budget_stopped_is_counted_as_capped_in_the_plain_progress() -> None:
    view, out, err = plain()
    view.batch_progress(BATCH_PROGRESS)
    view.batch_finished(BATCH_SUMMARY)
    told = out.getvalue() + err.getvalue()
    assert "3/4 finished: 1 done, 1 capped, 1 running, 1 failed" in told
    assert "1 done, 1 capped by their own budget" in told
    assert "agentgod retry RUN --budget USD" in told
    view, out, err = plain()
    view.batch_progress({**BATCH_PROGRESS, "capped": 0, "done": 2})
    assert "capped" not in out.getvalue() + err.getvalue(), "said only once one is"


def test_a_task_its_own_budget_stopped_is_counted_as_capped_in_the_rich_progress() -> None:
    console = recording()
    view = RichUI(console=console)
    view.batch_progress(BATCH_PROGRESS)
    view.batch_finished(BATCH_SUMMARY)
    drawn = console.export_text()
    assert "3/4 · 1 done · 1 capped · 1 running · 1 failed" in drawn
    assert "1 capped by their own budget" in drawn
    bar = drawn[: drawn.index(" 3/4")].split("\n")[-1]
    assert bar.count("█") == 9 and bar.count("▒") == 3, "done, capped and failed; running"


def test_batch_show_counts_a_capped_task_and_says_how_to_go_on() -> None:
    stored: dict[str, Any] = {
        "batch_id": "3f9a2b1c",
        "status": "done",
        "source": "tasks.jsonl",
        "started_at": "2026-01-01T00:00:00+00:00",
        "counts": {"ok": 1, "capped": 1, "failed": 0},
        "usd": 0.2,
        "seconds": 30.0,
        "options": {"parallel": 2, "budget_usd": None, "engine": "local"},
        "tasks": [
            {"id": "a", "line": 1, "status": "ok", "run_id": "0a1b2c3d", "usd": 0.05,
             "seconds": 10.0, "task": "one", "error": "", "budget_usd": None},
            {"id": "b", "line": 2, "status": "capped", "run_id": "4e5f6a7b", "usd": 0.15,
             "seconds": 20.0, "task": "two", "budget_usd": 0.15,
             "error": "The budget stopped the run before it finished"},
        ],
    }  # fmt: skip
    for view, out, _ in (plain(), (RichUI(out=(text := io.StringIO())), text, None)):
        view.stored_batch(stored)
        shown = out.getvalue()
        assert "1 ok, 1 capped" in shown
        assert re.search(r"b +capped +4e5f6a7b", shown)
        assert "agentgod retry 4e5f6a7b --budget 0.15" in shown
