"""The pseudo-terminal helper itself: it types only into a wait for the terminal, fails fast."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from terminal import Terminal

# Busy elsewhere for a moment (a select on a pipe of its own, not on the terminal), then it
# throws away whatever was typed meanwhile, as getpass does, and waits for a line the way argv[1]
# says.
PROGRAM = """
import os, select, sys, termios
print("ready", flush=True)
select.select([os.pipe()[0]], [], [], 0.3)
termios.tcflush(0, termios.TCIFLUSH)
if sys.argv[1] == "select":
    select.select([sys.stdin], [], [])
elif sys.argv[1] == "poll":
    waiting = select.poll()
    waiting.register(sys.stdin, select.POLLIN)
    waiting.poll()
print("got", sys.stdin.readline().strip(), flush=True)
"""


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    """Terminals a test opens; whatever is still running afterwards is killed."""
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.stop()


def python(terminals: list[Terminal], code: str, *args: str) -> Terminal:
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}
    terminals.append(Terminal([sys.executable, "-I", "-c", code, *args], env))
    return terminals[-1]


@pytest.mark.parametrize("wait", ["read", "select", "poll"])
def test_keys_go_in_only_once_the_program_waits_for_the_terminal(
    terminals: list[Terminal], wait: str
) -> None:
    terminal = python(terminals, PROGRAM, wait)
    terminal.expect("ready")
    terminal.type("otters\n")
    terminal.expect("got otters", seconds=10)
    assert terminal.close() == 0


def test_a_program_that_ends_fails_expect_at_once_with_the_screen(
    terminals: list[Terminal],
) -> None:
    terminal = python(terminals, "print('goodbye')")
    with pytest.raises(AssertionError) as failure:
        terminal.expect("hello", seconds=600)
    assert "ended (exit 0) without 'hello'" in str(failure.value)
    assert "goodbye" in str(failure.value)


def test_typing_into_a_program_that_ended_fails(terminals: list[Terminal]) -> None:
    terminal = python(terminals, "import sys; sys.exit(3)")
    with pytest.raises(AssertionError, match=r"ended \(exit 3\) before 'hi\\n'"):
        terminal.type("hi\n", seconds=600)


def test_expect_fails_at_its_deadline_showing_the_screen(terminals: list[Terminal]) -> None:
    terminal = python(terminals, "print('what is on screen', flush=True); input()")
    terminal.expect("what is")
    with pytest.raises(AssertionError) as failure:
        terminal.expect("never shown", seconds=0.5)
    assert "no 'never shown' within 0.5 s" in str(failure.value)
    assert "--- and since then ---\n on screen" in str(failure.value)


def test_a_program_busy_elsewhere_is_not_waiting_for_keys(terminals: list[Terminal]) -> None:
    terminal = python(terminals, "import os; print('busy', flush=True); os.read(os.pipe()[0], 1)")
    terminal.expect("busy")
    with pytest.raises(AssertionError, match=r"not waiting for input after 0.5 s .*syscall read"):
        terminal.type("x", seconds=0.5)
