"""signals.py — where threads and signals meet.

Python acts on a signal only in the main thread, while the kernel hands a process's signal to
any thread that does not block it. Every thread AgentGOD starts therefore blocks the signals
that stop a run, so Ctrl-C (and a polite kill) always reach the thread that can act on them.
"""

from __future__ import annotations

import signal

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})
"""The signals that end a run; background threads must never swallow them."""


def shield_from_signals() -> None:
    """Run first in every background thread: a stop signal must reach the main thread.

    One delivered to a busy worker would leave the main thread asleep in a wait or at the
    prompt, and Ctrl-C would seem to do nothing.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
