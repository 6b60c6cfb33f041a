"""A program on a pseudo-terminal, driven like a person: read what it shows, type when it waits.

Nothing here guesses with a sleep. Output is read with select against a deadline. Keys are typed
once the program's main thread is blocked in a read, select or poll on the terminal, as the
kernel reports it in /proc/<pid>/syscall. Earlier is a race a person never hits: getpass throws
away what arrives before it turns echo off, and CPython's readline loses a Ctrl-C that lands
between drawing the prompt and starting to wait. Whatever goes wrong fails at once, or at the
deadline, with what was on the screen.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import platform
import re
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
UNFINISHED_ESCAPE = re.compile(r"\x1b(\[[0-9;?]*|\][^\x07]*)?\Z")

# The syscalls a program waits for the terminal in, by number on each architecture.
SYSCALLS = {
    "x86_64": {0: "read", 7: "poll", 23: "select", 270: "pselect6", 271: "ppoll"},
    "aarch64": {63: "read", 72: "pselect6", 73: "ppoll"},
}
POLLIN = 0x1
_WORD_BITS = struct.calcsize("L") * 8

# Run first in the child: a new session (Popen) whose controlling terminal is the pty, so
# getpass can open /dev/tty and Ctrl-C reaches the program; then the program, on the same pid.
TAKE_THE_TERMINAL = (
    "import fcntl, os, sys, termios; "
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execve(sys.argv[1], sys.argv[1:], os.environ)"
)


class Terminal:
    """One program on its own pseudo-terminal; `text` is everything it showed, escapes removed,
    and `raw` every byte that reached the terminal, escapes and all."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str]) -> None:
        self.fd, child_end = os.openpty()
        self.tty = os.ttyname(child_end)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", TAKE_THE_TERMINAL, *command],
                stdin=child_end,
                stdout=child_end,
                stderr=child_end,
                env=dict(env),
                start_new_session=True,
            )
        finally:
            os.close(child_end)
        self.text = ""
        self.raw = bytearray()
        self._matched = 0
        self._held = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._ended = False

    # ---- reading ---------------------------------------------------------------------------

    def expect(self, pattern: str, seconds: float = 60) -> str:
        """Wait for `pattern` after the last match; returns the text up to the end of it."""
        wanted = re.compile(pattern)
        deadline = time.monotonic() + seconds
        while not (found := wanted.search(self.text, self._matched)):
            if self._ended:
                self._fail(f"the program ended ({self._ending()}) without {pattern!r}")
            if time.monotonic() >= deadline:
                self._fail(f"no {pattern!r} within {seconds:g} s")
            self._read(deadline - time.monotonic())
        shown = self.text[self._matched : found.end()]
        self._matched = found.end()
        return shown

    def _read(self, seconds: float) -> None:
        """Take in what the program wrote, waiting at most `seconds` for something to arrive."""
        if not select.select([self.fd], [], [], max(seconds, 0))[0]:
            return
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: every holder of the terminal's other end has closed it
            data = b""
        self._ended = not data
        self.raw += data
        text = self._held + self._decoder.decode(data, final=self._ended)
        unfinished = None if self._ended else UNFINISHED_ESCAPE.search(text)
        cut = unfinished.start() if unfinished else len(text)
        self.text += ESCAPES.sub("", text[:cut])
        self._held = text[cut:]

    # ---- typing ----------------------------------------------------------------------------

    def type(self, keys: str, seconds: float = 60) -> None:
        """Type `keys` once the program waits for the terminal, reading its output meanwhile."""
        deadline = time.monotonic() + seconds
        while not self._waiting_for_keys():
            if self._ended or self.process.poll() is not None:
                self._fail(f"the program ended ({self._ending()}) before {keys!r}")
            if time.monotonic() >= deadline:
                self._fail(f"not waiting for input after {seconds:g} s ({self._state()})")
            # No event says "now blocked in a read": look again soon, or as soon as it writes.
            self._read(min(0.005, deadline - time.monotonic()))
        os.write(self.fd, keys.encode())

    def _waiting_for_keys(self) -> bool:
        """Whether the main thread sleeps in a syscall that waits for this terminal's input."""
        pid = self.process.pid
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            call = Path(f"/proc/{pid}/syscall").read_text()
            terminal_fds = {
                int(fd.name)
                for fd in Path(f"/proc/{pid}/fd").iterdir()
                if os.readlink(fd) in (self.tty, "/dev/tty")
            }
            waiting = state == "S" and self._on_terminal(pid, call, terminal_fds)
            return waiting and Path(f"/proc/{pid}/syscall").read_text() == call
        except (FileNotFoundError, ProcessLookupError):  # ended meanwhile; type() says so
            return False
        except PermissionError as error:
            self._fail(f"cannot see whether the program waits for input: {error}")

    @staticmethod
    def _on_terminal(pid: int, call: str, terminal_fds: set[int]) -> bool:
        """Whether the syscall in /proc/<pid>/syscall ("nr arg1 ... arg6 sp pc") reads them."""
        fields = call.split()
        if fields[0] == "running" or int(fields[0]) < 0:
            return False
        machine = platform.machine()
        assert machine in SYSCALLS, f"tests/terminal.py needs the syscall numbers of {machine}"
        name = SYSCALLS[machine].get(int(fields[0]))
        args = [int(arg, 16) for arg in fields[1:7]]
        if name == "read":
            return args[0] in terminal_fds
        if name in ("select", "pselect6"):  # (nfds, fd_set *readfds, ...)
            count, address = args[0], args[1]
            size = (count + _WORD_BITS - 1) // _WORD_BITS * (_WORD_BITS // 8)
            readable = _fd_set(_memory(pid, address, size)) if address else set()
            return any(fd < count for fd in readable & terminal_fds)
        if name in ("poll", "ppoll"):  # (struct pollfd {int fd; short events, revents} *, n)
            entries = _memory(pid, args[0], args[1] * 8)
            return any(
                fd in terminal_fds and events & POLLIN
                for fd, events, _ in struct.iter_unpack("=ihh", entries)
            )
        return False

    def _state(self) -> str:
        """What the main thread is doing, for a failure message."""
        pid = self.process.pid
        with contextlib.suppress(OSError):
            call = Path(f"/proc/{pid}/syscall").read_text().split()
            wchan = Path(f"/proc/{pid}/wchan").read_text()
            if call[0] == "running":
                return "main thread running"
            name = SYSCALLS.get(platform.machine(), {}).get(int(call[0]), call[0])
            return f"main thread: syscall {name} {call[1:3]}, kernel wait {wchan!r}"
        return "its state is unreadable"

    # ---- ending ----------------------------------------------------------------------------

    def close(self, seconds: float = 60) -> int:
        """Wait for the program to end, reading the rest of its output; its exit code."""
        deadline = time.monotonic() + seconds
        while self.process.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(f"still running after {seconds:g} s")
            if self._ended:  # nothing more to read: only its exit to wait for
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=left)
            else:
                self._read(min(0.05, left))
        self._drain()
        self.stop()
        return self.process.returncode

    def stop(self) -> None:
        """Kill what is left (a failed test's program) and let go of the terminal."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _ending(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return f"exit {self.process.wait(timeout=10)}"
        return "its terminal closed, yet it still runs"

    def _drain(self) -> None:
        """Take in everything already written."""
        while self.fd >= 0 and not self._ended and select.select([self.fd], [], [], 0)[0]:
            self._read(0)

    def _fail(self, what: str) -> NoReturn:
        self._drain()
        seen, unmatched = self.text[: self._matched], self.text[self._matched :]
        raise AssertionError(
            f"{what}; the screen, up to the last match:\n{seen[-1000:]}\n"
            f"--- and since then ---\n{unmatched[-4000:]}"
        )


def _fd_set(data: bytes) -> set[int]:
    """The fds in a select() set: unsigned longs, fd n at bit n % bits of word n // bits."""
    found: set[int] = set()
    step = _WORD_BITS // 8
    for start in range(0, len(data) - step + 1, step):
        word = int.from_bytes(data[start : start + step], sys.byteorder)
        found |= {start * 8 + bit for bit in range(_WORD_BITS) if word >> bit & 1}
    return found


def _memory(pid: int, address: int, size: int) -> bytes:
    """Bytes of a stopped-in-a-syscall child's memory (a parent may read its child's)."""
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        memory.seek(address)
        return memory.read(size)
