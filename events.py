"""events.py — the seam between the pipeline and whoever watches it.

The orchestrator reports every notable moment of a run to a `TaskEvents`; it never prints.
`TaskEvents` is a Protocol, so a renderer (`ui.PlainUI`, `richui.RichUI`) needs no base class
from the pipeline and mypy still checks it hook by hook. `NullEvents` does nothing, so
`handle_task` runs headless — in tests, scripts, or inside another program — at zero
presentation cost. Arguments are plain values and the `replies` shapes, so a renderer needs none
of the pipeline's types.

The answer is streamed through three hooks: answer_started, then answer_delta piece by piece, and
answer_replaced when what was streamed will not stand; `answer_stream` turns the merge call's
text sink into them. A renderer shows the pieces only where a person watches them arrive.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from agentgod.kinds import AgentKind, Phase
from agentgod.replies import PlannedAgent


class TaskEvents(Protocol):
    """Every notable moment of a run, as a hook; each body does nothing, for `NullEvents`."""

    def phase_started(self, phase: Phase) -> None:
        """A phase began (build and run overlap: agents run as soon as they exist)."""
        return None

    def phase_finished(self, phase: Phase, seconds: float) -> None:
        """A phase ended."""
        return None

    def plan_ready(
        self, complexity: str, agents: list[PlannedAgent], waves: list[list[str]]
    ) -> None:
        """The plan: each agent, in the order it is built, and the waves it runs in."""
        return None

    def revision_started(self, revision: int, missing: str) -> None:
        """The judge found a gap; another full round begins with it appended to the task."""
        return None

    def packages(
        self, name: str, installed: list[str], refused: list[str], failed: list[str]
    ) -> None:
        """An agent asked for pip packages; what was installed, refused and failed."""
        return None

    def agent_building(self, name: str, reused: bool) -> None:
        """Code for the agent is being written (or fetched from the library when reused)."""
        return None

    def agent_generated(self, name: str) -> None:
        """The agent's code was written and passed codeguard."""
        return None

    def agent_rejected(self, name: str, reasons: list[str]) -> None:
        """Codeguard refused the agent's code on every attempt; it will not run."""
        return None

    def agent_running(self, name: str, attempt: int) -> None:
        """The agent's process started (attempt 1, or a repaired version after that)."""
        return None

    def agent_repairing(self, name: str, attempt: int, error: str) -> None:
        """The agent failed and is being rewritten from its own source and stderr."""
        return None

    def agent_finished(
        self, name: str, ok: bool, seconds: float, kind: AgentKind, error: str, attempts: int
    ) -> None:
        """The agent is done for good: ok, or failed and excluded from the merge."""
        return None

    def merge_started(self, count: int) -> None:
        """`count` agent outputs are being merged into one answer."""
        return None

    def answer_started(self) -> None:
        """The answer is being written, from its beginning: whatever was streamed before it is
        void (an attempt that failed part-way, a rewrite with more room, a revision's merge)."""
        return None

    def answer_delta(self, text: str) -> None:
        """The next piece of the answer being written, in order; never empty."""
        return None

    def answer_replaced(self, reason: str) -> None:
        """The answer streamed so far will not be the final one, for `reason` in the user's terms
        ("the council refined it"); the final answer is shown whole when the run ends."""
        return None

    def council_started(self) -> None:
        """The adversarial review of a deep answer began."""
        return None

    def council_finished(self, weaknesses: list[str], improved: bool) -> None:
        """The critic's findings, and whether a refinement replaced the answer."""
        return None

    def judged(self, done: bool, missing: str) -> None:
        """The judge's verdict on the answer against the request."""
        return None

    def budget_exhausted(self, spent_usd: float, budget_usd: float) -> None:
        """The next step would cross the budget; no more model work is launched."""
        return None

    def archived(self, path: str | None) -> None:
        """The run was written to runs/ (None when the write failed)."""
        return None

    def warn(self, text: str) -> None:
        """Something went wrong that the run survives (a review that could not be had)."""
        return None


class NullEvents(TaskEvents):
    """Shows nothing: every hook is the Protocol's own empty body."""


class SerialisedEvents(TaskEvents):
    """Forwards every hook under one lock, so two workers never interleave inside a renderer."""

    def __init__(self, inner: TaskEvents) -> None:
        self.inner = inner
        self.lock = threading.RLock()


def answer_stream(events: TaskEvents) -> Callable[[str], None]:
    """An `llm.TextSink` that shows the answer through `events` as it is written.

    Each piece becomes answer_delta, the first after answer_started. The sink's "" (the text so
    far is void) becomes answer_started at once when something was shown, so a renderer takes
    the stale text down while the retry is still on its way; one that showed nothing is no news.
    """
    shown = False
    started = False

    def on_text(text: str) -> None:
        nonlocal shown, started
        if not text:
            if shown:
                events.answer_started()
                shown = False
            return
        if not started:
            events.answer_started()
            started = True
        shown = True
        events.answer_delta(text)

    return on_text


HOOKS: tuple[str, ...] = tuple(
    name for name, value in vars(TaskEvents).items() if callable(value) and name[0] != "_"
)
"""The names of every hook, in the order the Protocol declares them."""


def _forward(name: str) -> Callable[..., None]:
    def hook(self: SerialisedEvents, *args: Any, **kwargs: Any) -> None:
        with self.lock:
            getattr(self.inner, name)(*args, **kwargs)

    hook.__name__ = name
    hook.__doc__ = getattr(TaskEvents, name).__doc__
    return hook


for _name in HOOKS:
    setattr(SerialisedEvents, _name, _forward(_name))
