"""The command-line contract: every flag, the --task remainder, verbs vs tasks, every exit 2."""

from __future__ import annotations

import io
import os
import subprocess
import venv
from pathlib import Path

import pytest

from agentgod import cli, config

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("argv", "field", "expected"),
    [
        (["--plain", "t"], "plain", True),
        (["-q", "t"], "quiet", True),
        (["--quiet", "t"], "quiet", True),
        (["--json", "t"], "json", True),
        (["--model", "claude-opus-5-5", "t"], "model", "claude-opus-5-5"),
        (["-m", "claude-opus-5-5", "t"], "model", "claude-opus-5-5"),
        (["--effort", "xhigh", "t"], "effort", "xhigh"),
        (["--council", "off", "t"], "council", "off"),
        (["--keep", "t"], "keep", True),
        (["--discard", "t"], "keep", False),
        (["t"], "keep", None),
        (["--no-input", "t"], "no_input", True),
        (["--budget", "0.25", "t"], "budget", 0.25),
        (["t", "--json"], "json", True),
        (["-V"], "mode", "version"),
        (["--version"], "mode", "version"),
        (["--file", "a.csv", "--file", "b", "t"], "files", ("a.csv", "b")),
        (["--out", "dir", "t"], "out", "dir"),
        (["--no-web", "t"], "no_web", True),
        (["-c", "t"], "resume", "last"),
        (["--continue", "t"], "resume", "last"),
        (["--resume", "3f9a2b1c", "t"], "resume", "3f9a2b1c"),
        (["show", "--code", "writer"], "code", "writer"),
        (["show", "3f9a", "--replay"], "replay", True),
    ],
)
def test_every_flag(argv: list[str], field: str, expected: object) -> None:
    assert getattr(cli.parse(argv), field) == expected


def test_words_are_the_task() -> None:
    invocation = cli.parse(["summarise", "the", "news", "--json"])
    assert invocation.mode == "task"
    assert (invocation.task, invocation.json) == ("summarise the news", True)


@pytest.mark.parametrize(
    ("argv", "task", "json"),
    [
        (["--task", "explain", "--json", "flags"], "explain --json flags", False),
        (["--json", "--task", "what", "is", "-q"], "what is -q", True),
        (["--task=history", "of", "rome"], "history of rome", False),
        (["--task", "stats"], "stats", False),
        (["--task", "-"], "-", False),
    ],
)
def test_everything_after_task_is_task_text(argv: list[str], task: str, json: bool) -> None:
    invocation = cli.parse(argv)
    assert (invocation.mode, invocation.task, invocation.json) == ("task", task, json)


@pytest.mark.parametrize(
    ("argv", "verb", "arg"),
    [
        (["library"], "library", None),
        (["history"], "history", None),
        (["history", "5"], "history", "5"),
        (["stats"], "stats", None),
        (["last"], "last", None),
        (["forget", "csv_parser"], "forget", "csv_parser"),
        (["show"], "show", None),
        (["show", "3f9a2b1c"], "show", "3f9a2b1c"),
        (["retry"], "retry", None),
        (["/retry", "3f9a"], "retry", "3f9a"),
        (["--json", "stats"], "stats", None),
    ],
)
def test_verbs_as_the_whole_command(argv: list[str], verb: str, arg: str | None) -> None:
    invocation = cli.parse(argv)
    assert (invocation.mode, invocation.verb, invocation.verb_arg) == ("verb", verb, arg)


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "of", "rome"],
        ["stats", "for", "my", "team"],
        ["last", "week's", "news"],
        ["library", "of", "alexandria"],
        ["forget", "about", "it"],
    ],
)
def test_verb_words_in_a_longer_line_are_a_usage_error_naming_task(argv: list[str]) -> None:
    """A word more after a verb is never a paid task (issue 31): --task runs such a line."""
    with pytest.raises(cli.UsageError) as raised:
        cli.parse(argv)
    assert raised.value.hint == f"to run it as a task: agentgod --task {' '.join(argv)}"
    invocation = cli.parse(["--task", *argv])
    assert (invocation.mode, invocation.task) == ("task", " ".join(argv))


def test_dash_reads_stdin() -> None:
    assert cli.parse(["-"]).mode == "stdin"


def test_no_task_at_a_terminal_is_the_repl_and_piped_is_stdin() -> None:
    assert cli.parse([], stdin_is_tty=True).mode == "repl"
    assert cli.parse(["--plain"], stdin_is_tty=False).mode == "stdin"


def test_read_task_strips_bom_and_zero_width() -> None:
    stream = io.StringIO("\ufeff\u200bsummarise\u200d this\u2060\n")
    assert cli.read_task(stream) == "summarise this"


@pytest.mark.parametrize("text", ["", "   \n", "\ufeff\u200b\n"])
def test_empty_stdin_is_a_usage_error(text: str) -> None:
    with pytest.raises(cli.UsageError):
        cli.read_task(io.StringIO(text))


@pytest.mark.parametrize(
    "argv",
    [
        ["--keep", "--discard", "t"],
        ["--budget", "0", "t"],
        ["--budget", "-1", "t"],
        ["--budget", "lots", "t"],
        ["--budget", "inf", "t"],
        ["--effort", "huge", "t"],
        ["--council", "sometimes", "t"],
        ["--model"],
        ["--model", " ", "t"],
        ["--unknown-flag", "t"],
        ["--task"],
        ["--task", "   "],
        ["words", "--task", "more"],
        ["-", "extra"],
        ["forget"],
        ["  "],
    ],
)
def test_usage_errors_raise(argv: list[str]) -> None:
    with pytest.raises(cli.UsageError):
        cli.parse(argv)


def test_usage_error_prints_one_line_and_a_hint() -> None:
    stream = io.StringIO()
    code = cli.usage_error(cli.UsageError("bad thing"), stream)
    assert code == cli.EXIT_USAGE == 2
    lines = stream.getvalue().splitlines()
    assert lines == ["agentgod: bad thing", "hint: try 'agentgod --help'"]


def test_flags_reach_the_settings_without_touching_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A flag wins over the environment and .env, and the process's environment is left as it
    was (a flag is this run's, not every later child's)."""
    monkeypatch.setenv("MODEL", "from-the-shell")
    before = dict(os.environ)
    told = cli.overrides(
        cli.parse(
            [
                *("--model", "claude-opus-5-5", "--effort", "low", "--council", "always"),
                *("--budget", "1.5", "--no-web", "--plain", "t"),
            ]
        )
    )
    settings = config.settings(told)
    assert settings.model == "claude-opus-5-5"
    assert settings.effort == "low"
    assert settings.council == "always"
    assert settings.budget_usd == 1.5
    assert settings.web is False
    assert dict(os.environ) == before


def test_flags_not_given_leave_the_environment_and_dotenv_in_charge(
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    monkeypatch.setenv("MODEL", "from-the-shell")
    (isolated_home / ".env").write_text("COUNCIL=off\n")
    told = cli.overrides(cli.parse(["t"]))
    assert told == {}
    settings = config.settings(told)
    assert (settings.model, settings.council) == ("from-the-shell", "off")


def _run_cli(python: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, str(ROOT / "cli.py"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")},
    )


def test_version_and_usage_errors_work_in_an_empty_venv(tmp_path: Path) -> None:
    """`python cli.py --version` must answer before any dependency is installed."""
    venv.create(tmp_path / "bare", with_pip=False)
    python = str(tmp_path / "bare" / "bin" / "python")
    done = _run_cli(python, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"agentgod {cli.__version__}"
    bad = _run_cli(python, "--keep", "--discard", "task")
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.splitlines()[-1].startswith("hint:")
    helped = _run_cli(python, "--help")
    assert helped.returncode == 0
    assert "--task" in helped.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "abc"],
        ["retry", "last-run"],
        ["--resume", "yesterday", "t"],
        ["--code", "writer", "t"],
        ["--replay"],
        ["-c", "--resume", "3f9a2b1c", "t"],
        ["--file", " ", "t"],
        ["--out", "", "t"],
    ],
)
def test_run_references_and_show_flags_are_checked(argv: list[str]) -> None:
    """A mistyped run id is a usage error, never a paid task; --code/--replay need show."""
    with pytest.raises(cli.UsageError):
        cli.parse(argv)


@pytest.mark.parametrize("text", ["1", "10", "250"])
def test_run_counts(text: str) -> None:
    assert cli.is_positive_number(text)


@pytest.mark.parametrize("text", ["0", "-3", "abc", "²", "", "1.5"])
def test_not_run_counts(text: str) -> None:
    assert not cli.is_positive_number(text)
