"""ledger.py — what a run has spent, and the hard budget it spends against.

`Usage` totals calls, the four token kinds and server-side web searches per model, thread-safely,
and prices them from `models.PRICES` and `models.WEB_SEARCH_USD_PER_1000`; it also keeps every
call it counted, in order (`call_log`), so a run's record can say what each call was for. Under a
budget every call first takes a `hold` for its worst case, so holds and spending together never
exceed the cap: a run can stop short but never overspend.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentgod.models import WEB_SEARCH_USD_PER_1000, Price, price_of
from agentgod.replies import CostSummary


@dataclass
class ModelUsage:
    """Token and search totals for one model."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    searches: int = 0
    """Server-side web searches its replies reported (usage.server_tool_use.web_search_requests)."""

    def cost_usd(self, price: Price) -> float:
        tokens = (
            self.input_tokens * price.input
            + self.output_tokens * price.output
            + self.cache_write_tokens * price.cache_write
            + self.cache_read_tokens * price.cache_read
        ) / 1_000_000
        return tokens + search_usd(self.searches)


OTHER_PHASE = "other"
"""The phase of a call recorded on a ledger itself rather than on a phase view (small talk, the
clarifying question, the key test: the calls made before a run has phases)."""


@dataclass(frozen=True)
class Call:
    """One model call counted against a run, as the run's record keeps it."""

    phase: str
    """The phase view it was recorded under (kinds.Spend), or OTHER_PHASE."""
    model: str
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    web_searches: int
    usd: float
    """Its tokens and searches at the price table's rates when it was counted."""
    at: datetime
    """When its reply was counted (UTC)."""


def search_usd(searches: int) -> float:
    """What `searches` web searches cost on top of their tokens."""
    return searches * WEB_SEARCH_USD_PER_1000 / 1000


MIN_OUTPUT_TOKENS = 256
"""Under a budget, a call that cannot afford this much output is not worth starting.

Low on purpose: a hold reserves the call's worst case and is given back the moment the real reply
is billed, so a tight budget should still let short calls (a plan, a verdict) through."""


class BudgetExhaustedError(RuntimeError):
    """The next model call would cross the budget, so it was not made."""

    def __init__(self, spent_usd: float, budget_usd: float, needed_usd: float = 0.0) -> None:
        needs = f"; the next call needed up to ${needed_usd:.4f}" if needed_usd else ""
        super().__init__(f"the ${budget_usd:g} budget is spent (${spent_usd:.4f} so far{needs})")
        self.spent_usd = spent_usd
        self.budget_usd = budget_usd
        self.needed_usd = needed_usd
        """The worst case of the call that was not made: what it would have had to set aside."""


@dataclass(frozen=True)
class Hold:
    """Money set aside for one call (or one agent run) until it has reported what it spent."""

    tokens: int
    """Output tokens the call may use: its max_tokens, lowered to what the budget can pay for."""
    usd: float
    """The worst case of the call, held back from everyone else meanwhile."""


@dataclass
class Usage:
    """Thread-safe token totals per model, and the optional hard budget they are spent against.

    Every call under a budget first takes a `hold` for its worst case (its input at the
    cache-write price plus max_tokens of output, plus every web search it may make); holds and
    spending together never exceed the budget, so a run can stop short but never overspend.
    `phase(name)` gives a view that counts one phase's calls on its own and in this ledger alike,
    and holds against this ledger's budget: a run's cost per phase is read, never reconstructed.
    Each reply `record`ed is also kept as a `Call`, tagged with its phase, in time order.
    """

    by_model: dict[str, ModelUsage] = field(default_factory=dict)
    budget_usd: float | None = None
    """Hard cap in dollars; None means no cap."""
    parent: Usage | None = field(default=None, repr=False, compare=False)
    """For a phase's view: the run's ledger, which also counts everything and holds the budget."""
    phase_name: str = OTHER_PHASE
    """What the calls recorded here are tagged with: a phase view's name, else OTHER_PHASE."""
    keep_calls: bool = field(default=True, repr=False, compare=False)
    """Whether each call is kept for `call_log` (a gateway's ledgers, which live as long as a
    batch of any size, keep totals only)."""
    _calls: list[Call] = field(default_factory=list, repr=False, compare=False)
    _phases: dict[str, Usage] = field(default_factory=dict, repr=False, compare=False)
    _held_usd: float = field(default=0.0, repr=False, compare=False)
    _lock: threading.Condition = field(
        default_factory=lambda: threading.Condition(threading.RLock()), repr=False, compare=False
    )

    def add(
        self,
        model: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_write_tokens: int = 0,
        cache_read_tokens: int = 0,
        searches: int = 0,
        calls: int = 1,
    ) -> None:
        self.add_row(
            model,
            ModelUsage(
                calls=calls,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_write_tokens=cache_write_tokens,
                cache_read_tokens=cache_read_tokens,
                searches=searches,
            ),
        )

    def add_row(self, model: str, row: ModelUsage) -> None:
        """Fold one row of totals into `model`'s, here and in every ledger above."""
        with self._lock:
            total = self.by_model.setdefault(model, ModelUsage())
            total.calls += row.calls
            total.input_tokens += row.input_tokens
            total.output_tokens += row.output_tokens
            total.cache_write_tokens += row.cache_write_tokens
            total.cache_read_tokens += row.cache_read_tokens
            total.searches += row.searches
        if self.parent is not None:
            self.parent.add_row(model, row)

    def phase(self, name: str) -> Usage:
        """The view that counts phase `name` (plan, generate, agents, merge, council, judge)."""
        with self._lock:
            view = self._phases.get(name)
            if view is None:
                view = self._phases[name] = Usage(parent=self, phase_name=name)
            return view

    def phases(self) -> dict[str, CostSummary]:
        """What each phase has cost so far, in the order the phases first spent."""
        with self._lock:
            views = list(self._phases.items())
        return {name: view.cost_summary() for name, view in views}

    def record(self, model: str, usage: Any) -> None:
        """Count one API reply's `usage` (an SDK object or the raw dict an agent reports),
        its web searches included (`server_tool_use.web_search_requests`), and log the call."""
        row = ModelUsage(
            calls=1,
            input_tokens=usage_count(usage, "input_tokens"),
            output_tokens=usage_count(usage, "output_tokens"),
            cache_write_tokens=usage_count(usage, "cache_creation_input_tokens"),
            cache_read_tokens=usage_count(usage, "cache_read_input_tokens"),
            searches=usage_searches(usage),
        )
        self.add_row(model, row)
        if not self.keep_calls:
            return
        self._log(
            [
                Call(
                    phase=self.phase_name,
                    model=model,
                    input_tokens=row.input_tokens,
                    output_tokens=row.output_tokens,
                    cache_write_tokens=row.cache_write_tokens,
                    cache_read_tokens=row.cache_read_tokens,
                    web_searches=row.searches,
                    usd=row.cost_usd(price_of(model)[0]),
                    at=datetime.now(UTC),
                )
            ]
        )

    def _log(self, calls: list[Call]) -> None:
        """Keep `calls` here and in the ledgers above, each log in time order."""
        with self._lock:
            for call in calls:
                bisect.insort(self._calls, call, key=_when)
        if self.parent is not None:
            self.parent._log(calls)

    def call_log(self) -> list[Call]:
        """Every call recorded here or merged in, oldest first (a phase view: its own only)."""
        with self._lock:
            return list(self._calls)

    def merge(self, other: Usage) -> None:
        """Fold another ledger (a finished run's, or the calls made before a run) into this one:
        its totals and its calls, which keep their phases and times."""
        self._log(other.call_log())
        for model, row in other.snapshot().items():
            self.add_row(model, row)

    def snapshot(self) -> dict[str, ModelUsage]:
        with self._lock:
            return {model: ModelUsage(**vars(row)) for model, row in self.by_model.items()}

    def totals(self) -> ModelUsage:
        total = ModelUsage()
        for row in self.snapshot().values():
            for name, value in vars(row).items():
                setattr(total, name, getattr(total, name) + value)
        return total

    def cost_usd(self) -> float:
        return sum(row.cost_usd(price_of(model)[0]) for model, row in self.snapshot().items())

    def hold(
        self,
        model: str,
        *,
        input_tokens: int,
        max_tokens: int,
        min_tokens: int = MIN_OUTPUT_TOKENS,
        searches: int = 0,
    ) -> Hold:
        """Set aside the worst case of a call; lower max_tokens to what the budget can pay for.

        `searches` is the most web searches the call may make (its web_search max_uses): their
        price is held in full, since the model, not the caller, decides how many it runs.
        While other holds are in flight their money may come back, so this waits for them;
        it raises BudgetExhaustedError only when nothing is in flight and the call still
        cannot afford `min_tokens` of output (or its whole max_tokens, if that is smaller).
        """
        if self.parent is not None:
            return self.parent.hold(
                model,
                input_tokens=input_tokens,
                max_tokens=max_tokens,
                min_tokens=min_tokens,
                searches=searches,
            )
        if self.budget_usd is None:
            return Hold(max_tokens, 0.0)
        price = price_of(model)[0]
        fixed_usd = input_tokens * price.cache_write / 1_000_000 + search_usd(searches)
        with self._lock:
            while True:
                room = self.budget_usd - self.cost_usd() - self._held_usd - fixed_usd
                tokens = min(max_tokens, int(room * 1_000_000 / price.output)) if room > 0 else 0
                if tokens >= min(min_tokens, max_tokens):
                    usd = fixed_usd + tokens * price.output / 1_000_000
                    self._held_usd += usd
                    return Hold(tokens, usd)
                if self._held_usd <= 1e-12:
                    needed = fixed_usd + min(min_tokens, max_tokens) * price.output / 1_000_000
                    raise BudgetExhaustedError(self.cost_usd(), self.budget_usd, needed)
                self._lock.wait()

    def room_usd(self) -> float | None:
        """What the budget has left beyond what is spent and held; None without a budget."""
        if self.parent is not None:
            return self.parent.room_usd()
        if self.budget_usd is None:
            return None
        with self._lock:
            return self.budget_usd - self.cost_usd() - self._held_usd

    def release(self, hold: Hold) -> None:
        """The call is over and its spending recorded: free what was held for it."""
        if self.parent is not None:
            self.parent.release(hold)
            return
        if not hold.usd:
            return
        with self._lock:
            self._held_usd = max(0.0, self._held_usd - hold.usd)
            self._lock.notify_all()

    @property
    def is_estimate(self) -> bool:
        """True when some model's price was not in the table."""
        return bool(self.unpriced())

    def unpriced(self) -> list[str]:
        """The models used whose price is not in the table (their cost is a guess)."""
        return sorted(model for model in self.snapshot() if price_of(model)[1])

    def cost_summary(self) -> CostSummary:
        """Plain numbers for displays, JSON output and the run archive."""
        total = self.totals()
        return CostSummary(
            llm_calls=total.calls,
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
            cache_write_tokens=total.cache_write_tokens,
            cache_read_tokens=total.cache_read_tokens,
            web_searches=total.searches,
            usd=round(self.cost_usd(), 6),
            estimate=self.is_estimate,
            unpriced=self.unpriced(),
        )


def _when(call: Call) -> datetime:
    return call.at


def usage_count(usage: Any, name: str) -> int:
    """One count of a reply's usage, an SDK object or a dict; junk and negatives read as 0."""
    return _count(_get(usage, name))


def usage_searches(usage: Any) -> int:
    """The web searches a reply's usage reports (`server_tool_use.web_search_requests`)."""
    return _count(_get(_get(usage, "server_tool_use"), "web_search_requests"))


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _count(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def estimate_tokens(text: str) -> int:
    """A generous token count for budgeting: about three UTF-8 bytes per token."""
    return tokens_in_bytes(len(text.encode("utf-8")))


def tokens_in_bytes(size: int) -> int:
    """The same estimate for a payload already encoded (the broker's frames)."""
    return size // 3 + 1
