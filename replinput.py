"""replinput.py — the REPL's line reader: readline editing, history, Tab, and what a line means.

Kept apart from the session so the rules for a typed line (a slash command, a bare command word,
a pasted burst, a task) can be read and tested without a run.
"""

from __future__ import annotations

import contextlib
import select
import sys
from pathlib import Path
from typing import Any

SLASH_COMMANDS = [
    ("/help", "this list"),
    ("/library", "the kept agents and their track records"),
    ("/forget NAME", "remove an agent from the library"),
    ("/history [N]", "the last N runs (default 10)"),
    ("/last", "the last answer again"),
    ("/show [RUN]", "one run whole: plan, agents, their inputs and outputs (default: the last)"),
    ("/stats", "runs, success rate, tokens, dollars, best agents"),
    ("/cost", "this session's tokens and dollars"),
    ("/models", "the models a run calls: what each is sent, its price, where that came from"),
    ("/new", "start a new conversation: the next task is planned without the earlier ones"),
    ("/clear", "clear the screen"),
    ("/quit", "leave (also quit, exit, Ctrl-D)"),
]


class Prompt:
    """The REPL's line reader: readline editing, persistent history, pasted bursts as one task."""

    def __init__(self, history_file: Path) -> None:
        self.history_file = history_file
        self.readline: Any = None
        with contextlib.suppress(ImportError):
            import readline

            self.readline = readline
            with contextlib.suppress(OSError):
                readline.read_history_file(history_file)
            readline.set_history_length(1000)
            readline.set_completer_delims(" \t\n")  # `@data/q1.csv` is one word to complete
            readline.set_completer(self.complete)
            libedit = "libedit" in (readline.__doc__ or "")
            readline.parse_and_bind("bind ^I rl_complete" if libedit else "tab: complete")
        self._matches: list[str] = []

    def complete(self, word: str, state: int) -> str | None:
        """readline's completer: `@` and a partial path offers files to attach, `/` commands."""
        if state == 0:
            self._matches = completions(word)
        return self._matches[state] if state < len(self._matches) else None

    def read(self) -> str:
        """One task: a line, plus every further line that arrived in the same burst (a paste)."""
        lines = [input("agentgod> ")]
        while _more_input_waiting():
            try:
                lines.append(input())
            except EOFError:
                break
        text = "\n".join(lines)
        if self.readline is not None and text.strip():
            with contextlib.suppress(OSError):
                self.history_file.parent.mkdir(parents=True, exist_ok=True)
                self.readline.write_history_file(self.history_file)
        return text

    def buffer_was_empty(self) -> bool:
        """Whether Ctrl-C hit an empty prompt (exit) rather than a half-typed line (discard)."""
        print(file=sys.stderr)
        if self.readline is None:
            return True
        return not self.readline.get_line_buffer().strip()


def completions(word: str) -> list[str]:
    """What Tab offers for the word under the cursor: paths after `@`, or a slash command."""
    if word.startswith("@"):
        from agentgod import attachments

        typed = word[1:].lstrip('"')
        return ["@" + attachments.quoted(path) for path in attachments.complete(typed)]
    if word.startswith("/"):
        names = (command.split()[0] for command, _ in SLASH_COMMANDS)
        return [name for name in names if name.startswith(word)]
    return []


BARE_COMMANDS = ("help", "clear", "library", "history", "stats", "cost", "last")
"""Prompt commands that work without their slash: `clear` must never be a paid task."""


def as_command(text: str) -> str | None:
    """The slash command a prompt line means, or None when the line is a task.

    `/anything` is a command; so is a bare command word alone, or `history` and one more word
    (a mistyped number is reported, not run as a task).
    """
    if text.startswith("/"):
        return text
    words = text.split()
    first = words[0].lower()
    if first in BARE_COMMANDS and (len(words) == 1 or (first == "history" and len(words) == 2)):
        return "/" + " ".join([first, *words[1:]])
    return None


def near_command(text: str) -> str | None:
    """The command a one-word line is one edit away from (`histroy`, `Stats`), or None.

    Such a line is a typo, not a task worth a team; `/help` lists what there is.
    """
    from agentgod import cli

    words = text.split()
    if len(words) != 1 or words[0].startswith(("/", "@")):
        return None
    names = tuple(dict.fromkeys((*BARE_COMMANDS, *cli.VERBS)))
    return cli.near_verb(words[0], names)


def _more_input_waiting(seconds: float = 0.01) -> bool:
    """A paste delivers its lines at once; typed lines arrive one Enter at a time."""
    try:
        ready, _, _ = select.select([sys.stdin], [], [], seconds)
    except (OSError, ValueError):
        return False
    return bool(ready)
