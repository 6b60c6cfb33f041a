"""events.py — the seam between the pipeline and whoever watches it.

The orchestrator reports every notable moment of a run to a `TaskEvents`; it never prints. Each
hook is a no-op here, so `handle_task` runs headless — in tests, scripts, or inside another
program — at zero presentation cost; a renderer subclasses this and overrides what it shows.
Arguments are plain values (names, numbers, strings, lists) so a renderer needs none of the
pipeline's types.
"""

from __future__ import annotations

import threading
from typing import Any

PHASES = ("plan", "build", "run", "merge", "council", "judge", "archive")


class TaskEvents:
    """Every notable moment of a run, as a no-op hook."""

    def phase_started(self, phase: str) -> None:
        """A phase of PHASES began (build and run overlap: agents run as soon as they exist)."""

    def phase_finished(self, phase: str, seconds: float) -> None:
        """A phase ended."""

    def plan_ready(
        self, complexity: str, agents: list[dict[str, Any]], waves: list[list[str]]
    ) -> None:
        """The plan: each agent as {name, role, depends_on, reused}, and the waves it runs in."""

    def revision_started(self, revision: int, missing: str) -> None:
        """The judge found a gap; another full round begins with it appended to the task."""

    def packages(
        self, name: str, installed: list[str], refused: list[str], failed: list[str]
    ) -> None:
        """An agent asked for pip packages; what was installed, refused and failed."""

    def agent_building(self, name: str, reused: bool) -> None:
        """Code for the agent is being written (or fetched from the library when reused)."""

    def agent_generated(self, name: str) -> None:
        """The agent's code was written and passed codeguard."""

    def agent_rejected(self, name: str, reasons: list[str]) -> None:
        """Codeguard refused the agent's code on every attempt; it will not run."""

    def agent_running(self, name: str, attempt: int) -> None:
        """The agent's process started (attempt 1, or a repaired version after that)."""

    def agent_repairing(self, name: str, attempt: int, error: str) -> None:
        """The agent failed and is being rewritten from its own source and stderr."""

    def agent_finished(
        self, name: str, ok: bool, seconds: float, kind: str, error: str, attempts: int
    ) -> None:
        """The agent is done for good: ok, or failed and excluded from the merge."""

    def merge_started(self, count: int) -> None:
        """`count` agent outputs are being merged into one answer."""

    def council_started(self) -> None:
        """The adversarial review of a deep answer began."""

    def council_finished(self, weaknesses: list[str], improved: bool) -> None:
        """The critic's findings, and whether a refinement replaced the answer."""

    def judged(self, done: bool, missing: str) -> None:
        """The judge's verdict on the answer against the request."""

    def budget_exhausted(self, spent_usd: float, budget_usd: float) -> None:
        """The next step would cross the budget; no more model work is launched."""

    def archived(self, path: str | None) -> None:
        """The run was written to runs/ (None when the write failed)."""

    def warn(self, text: str) -> None:
        """Something went wrong that the run survives (a review that could not be had)."""


class SerialisedEvents(TaskEvents):
    """Forwards every hook under one lock, so two workers never interleave inside a renderer."""

    def __init__(self, inner: TaskEvents) -> None:
        self.inner = inner
        self.lock = threading.RLock()


def _forward(name: str) -> Any:
    def hook(self: SerialisedEvents, *args: Any, **kwargs: Any) -> None:
        with self.lock:
            getattr(self.inner, name)(*args, **kwargs)

    hook.__name__ = name
    hook.__doc__ = getattr(TaskEvents, name).__doc__
    return hook


HOOKS = tuple(name for name in vars(TaskEvents) if not name.startswith("_"))
for _name in HOOKS:
    setattr(SerialisedEvents, _name, _forward(_name))
