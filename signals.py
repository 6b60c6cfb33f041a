"""signals.py — where threads and signals meet.

Python acts on a signal only in the main thread, while the kernel hands a process's signal to
any thread that does not block it. Every thread AgentGOD starts therefore blocks the signals
that stop a run, so Ctrl-C (and a polite kill, and a closed terminal) always reach the thread
that can act on them. There, each of them becomes a `Stopped`, a KeyboardInterrupt: SIGTERM and
SIGHUP end a run exactly the way Ctrl-C does (agents killed, the run archived as interrupted,
scratch removed), and only the exit code tells them apart.

A process we start that must not outlive the thread that started it (an agent, a Ray worker's
run) asks the kernel for a signal when that thread dies (`die_with_parent`): a parent killed
outright runs no cleanup of its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
"""The signals that end a run; background threads must never swallow them."""
ORPHANED_EXIT = 126
"""A child's status when its parent was gone before it could start (no one reads it)."""
_PR_SET_PDEATHSIG = 1


class Stopped(KeyboardInterrupt):
    """A stop signal arrived in the main thread; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def ends_session(self) -> bool:
        """SIGTERM and SIGHUP end the whole session; Ctrl-C in the REPL only ends the task."""
        return self.signum != signal.SIGINT


def signal_name(error: KeyboardInterrupt) -> str:
    """SIGINT for Ctrl-C (however it was raised), else the signal that stopped us."""
    return signal.Signals(getattr(error, "signum", signal.SIGINT)).name


def shield_from_signals() -> None:
    """Run first in every background thread: a stop signal must reach the main thread.

    One delivered to a busy worker would leave the main thread asleep in a wait or at the
    prompt, and Ctrl-C would seem to do nothing.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


_stopping = False
"""A stop is being carried out: further stop signals must not interrupt its cleanup."""


def _on_stop(signum: int, frame: FrameType | None) -> None:
    global _stopping
    if _stopping:
        return  # a second SIGTERM, or Ctrl-C pressed twice: the first one is already ending it
    _stopping = True
    raise Stopped(signum)


def resume() -> None:
    """The stop has been dealt with and work goes on (the REPL's prompt after Ctrl-C)."""
    global _stopping
    _stopping = False


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While inside, every stop signal raises `Stopped` in the main thread (call it there).

    A signal the caller was told to ignore stays ignored (`nohup agentgod ...` survives the
    terminal closing). One blocked is unblocked: a process inherits its starter's blocked
    signals, and a run started from a shielded thread (a Ray worker's, a batch's) would never
    see its Ctrl-C. The handlers in place before are put back on the way out.
    """
    resume()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    previous: dict[signal.Signals, object] = {}
    for each in sorted(STOP_SIGNALS):
        if signal.getsignal(each) is signal.SIG_IGN:
            continue
        previous[each] = signal.signal(each, _on_stop)
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)  # type: ignore[arg-type]
        resume()


@functools.cache
def prctl() -> Callable[..., int] | None:
    """libc's prctl, or None where there is none. Look it up in the parent before starting a
    child that calls `die_with_parent`: the child between fork and exec must not load it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function: Callable[..., int] = libc.prctl
    except (OSError, AttributeError):
        return None
    return function


def die_with_parent(parent: int, signum: int = signal.SIGKILL) -> None:
    """In a child, between fork and exec: the kernel sends it `signum` when the thread that
    started it dies, however it died.

    A parent killed with SIGKILL runs no cleanup, and nothing else would stop its child still
    calling the model. If the parent (pid `parent`) died between fork and prctl, the child was
    already handed to another process and must not start at all.
    """
    call = prctl()
    if call is not None:
        call(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(ORPHANED_EXIT)
