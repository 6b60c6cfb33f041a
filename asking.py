"""asking.py — putting a question to a person and reading the answer: ui.PlainUI's `Questions`.

A question interrupts a run the person may have typed into meanwhile, and is answered at the
same terminal as the REPL's prompt. So keys typed before the question was shown are thrown away
(they were meant for the next prompt), the answer never lands in the prompt's up-arrow history,
and a reply to the keep question that is none of the words it understands is asked again rather
than read as "none". Standard library only, like ui, which mixes `Questions` in.
"""

from __future__ import annotations

import contextlib
import getpass
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TextIO

KEEP_ALL = ("all", "keep", "yes", "y")
KEEP_NONE = ("none", "no", "n", "discard")
KEEP_ASKS = 3
"""How often an answer the keep question does not understand is asked again, before none."""

Show = Callable[[str], None]
"""Puts part of a question where the person looks (the UI's prompt stream)."""
Read = Callable[[str], "str | None"]
"""Shows a prompt and reads one line; None at end of input."""


def parse_keep(reply: str, names: Sequence[str]) -> list[str] | None:
    """Which of `names` a reply keeps: all/keep/yes/y, none/no/n or blank, or names and 1-based
    numbers separated by commas or spaces, in the plan's order. None when a word is none of
    these (a misspelt name): the person is asked again rather than losing an agent to a typo."""
    words = reply.replace(",", " ").lower().split()
    if len(words) > 1 and words[0] == "keep":  # "keep all", "keep writer"
        words = words[1:]
    if all(word in KEEP_NONE for word in words):
        return []
    if all(word in KEEP_ALL for word in words):
        return list(names)
    chosen: set[str] = set()
    for word in words:
        if word.isdigit() and 1 <= int(word) <= len(names):
            chosen.add(names[int(word) - 1])
        elif word in names:
            chosen.add(word)
        else:
            return None
    return [name for name in names if name in chosen]


def discard_typed_ahead() -> None:
    """Throw away what was typed at the terminal before the question was shown."""
    try:
        import termios

        if sys.stdin is not None and sys.stdin.isatty():
            termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
    except (ImportError, OSError, ValueError):
        pass


@contextlib.contextmanager
def out_of_history() -> Iterator[None]:
    """An answer to a question is not a prompt line: readline must not remember it."""
    readline = sys.modules.get("readline")
    switch = getattr(readline, "set_auto_history", None)
    if switch is None:
        yield
        return
    switch(False)
    try:
        yield
    finally:
        switch(True)


def read_line(show: Show, stream: TextIO | None, prompt: str) -> str | None:
    """One line from `stream` when given (tests, embedding), else from input() at the terminal,
    typed-ahead keys thrown away first and the answer kept out of the prompt's history."""
    if stream is not None:
        show(prompt)
        line = stream.readline()
        return line.rstrip("\r\n") if line else None
    discard_typed_ahead()
    show(prompt)
    with out_of_history():
        try:
            return input()
        except EOFError:
            return None


def read_secret(show: Show, stream: TextIO | None, prompt: str, tty: TextIO) -> str | None:
    """Like read_line without echo (an API key); getpass writes its prompt to `tty`."""
    if stream is not None:
        return read_line(show, stream, prompt)
    try:
        return getpass.getpass(prompt, stream=tty)
    except EOFError:
        return None


def yes_or_no(read: Read, question: str, default: bool) -> bool:
    """y/n, asked until it is one of them; blank or end of input take the default."""
    prompt = f"{question.rstrip()} {'[Y/n]' if default else '[y/N]'} "
    while True:
        reply = read(prompt)
        word = (reply or "").strip().lower()
        if not word:
            return default
        if word in ("y", "yes"):
            return True
        if word in ("n", "no"):
            return False


def keep(read: Read, show: Show, names: Sequence[str]) -> list[str]:
    """The keep question's answer: what parse_keep understands, asked up to KEEP_ASKS times."""
    for _ in range(KEEP_ASKS):
        reply = read("Keep which? all, none, or names/numbers [none] ")
        if reply is None:
            return []
        chosen = parse_keep(reply, names)
        if chosen is not None:
            return chosen
        shown = reply.strip() if len(reply.strip()) <= 60 else reply.strip()[:57] + "..."
        show(f"Not understood: {shown!r}. Names: {', '.join(names)}\n")
    show("Keeping none.\n")
    return []


class Asker(Protocol):
    """What a UI gives its questions: whether anyone can answer, where answers come from (a
    stream in tests and embedding, else the terminal) and how a question is shown."""

    interactive: bool
    input_stream: TextIO | None
    narrate_to: TextIO

    def _prompt(self, text: str) -> None: ...


class Questions:
    """ui.PlainUI's questions, for any Asker; nobody present means no answer, or the default."""

    def _read(self: Asker, prompt: str) -> str | None:
        """One line from the person, or None at end of input (see read_line)."""
        return read_line(self._prompt, self.input_stream, prompt)

    def ask(self: Asker, question: str) -> str | None:
        if not self.interactive:
            return None
        reply = read_line(self._prompt, self.input_stream, f"{question.rstrip()} ")
        return None if reply is None else reply.strip()

    def ask_secret(self: Asker, question: str) -> str | None:
        """Like ask, without echo (an API key)."""
        if not self.interactive:
            return None
        prompt = f"{question.rstrip()} "
        reply = read_secret(self._prompt, self.input_stream, prompt, self.narrate_to)
        return None if reply is None else reply.strip()

    def confirm(self: Asker, question: str, default: bool = False) -> bool:
        """y/n; blank, end of input or no person present take the default."""
        if not self.interactive:
            return default
        return yes_or_no(
            lambda prompt: read_line(self._prompt, self.input_stream, prompt), question, default
        )
