"""ledger.py — what a run has spent, and the hard budget it spends against.

`Usage` totals calls, the four token kinds and server-side web searches per model, thread-safely,
and prices them at the prices the run knows them by (`set_price`: the model's profile, which the
road tells it; else `models.PRICES`) and `models.WEB_SEARCH_USD_PER_1000`; a model with no known
price counts $0 and is named in the summary's `unpriced`, never priced as another model. It also
keeps every call it counted, in order (`call_log`), with the model asked for and the one that
answered (a fallback), so a run's record can say what each call was for. Under a budget every
call first takes a `hold` for its worst case, so holds and spending together never exceed the
cap: a run can stop short but never overspend.
"""

from __future__ import annotations

import bisect
import functools
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentgod.kinds import BudgetOwner
from agentgod.models import FREE, WEB_SEARCH_USD_PER_1000, Price, table_price
from agentgod.replies import CostSummary
from agentgod.text import dollars


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
    agent: str = ""
    """The agent whose build or run the call served (an agent's own call through the broker,
    or the generation of its code); "" for the main agent's own calls."""
    seconds: float = 0.0
    """How long the call took, request to counted reply, retries included: it began at
    `at - seconds`. 0.0 when not measured (a run recorded before calls were timed)."""
    web_fetches: int = 0
    """Pages its reply says the web fetch tool read (usage.server_tool_use.web_fetch_requests)."""
    asked: str = ""
    """The model the call was made for; `model` is the one that answered, another when a
    fallback did. "" in a record made before fallbacks existed: `model` then."""

    @property
    def asked_model(self) -> str:
        return self.asked or self.model

    @property
    def fell_back(self) -> bool:
        """Another model than the one asked for answered it (MODEL_FALLBACKS)."""
        return bool(self.asked) and self.asked != self.model

    def to_json(self) -> dict[str, Any]:
        """As `agentgod show --json` lists it."""
        return {
            "phase": self.phase,
            "agent": self.agent,
            "asked": self.asked_model,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "web_searches": self.web_searches,
            "web_fetches": self.web_fetches,
            "usd": self.usd,
            "at": self.at.isoformat(),
            "seconds": self.seconds,
        }


def search_usd(searches: int) -> float:
    """What `searches` web searches cost on top of their tokens."""
    return searches * WEB_SEARCH_USD_PER_1000 / 1000


MIN_OUTPUT_TOKENS = 256
"""Under a budget, a call that cannot afford this much output is not worth starting.

Low on purpose: a hold reserves the call's worst case and is given back the moment the real reply
is billed, so a tight budget should still let short calls (a plan, a verdict) through."""


class BudgetExhaustedError(RuntimeError):
    """The next model call would cross the budget, so it was not made."""

    def __init__(
        self,
        spent_usd: float,
        budget_usd: float,
        needed_usd: float = 0.0,
        owner: BudgetOwner = BudgetOwner.RUN,
    ) -> None:
        needs = f"; the next call needed up to {dollars(needed_usd)}" if needed_usd else ""
        whose = "the batch's " if owner is BudgetOwner.BATCH else "the "
        super().__init__(
            f"{whose}{dollars(budget_usd)} budget is spent ({dollars(spent_usd)} so far{needs})"
        )
        self.spent_usd = spent_usd
        self.budget_usd = budget_usd
        self.needed_usd = needed_usd
        """The worst case of the call that was not made: what it would have had to set aside."""
        self.owner = owner
        """Whose budget it was: the run's own (a ledger's here, or its share at a gateway), or
        the batch's, which a gateway refused the call for (llm.gateway_budget_refusal)."""


def stopped_by(owners: Collection[BudgetOwner]) -> BudgetOwner | None:
    """Whose budget stopped a run that `owners` refused calls for (None: no budget did).

    Both may have: the run's own cap then wins. A refusal by its own cap means that cap is
    (all but) spent, so running the run again could only spend past what its line allowed,
    whatever the batch's budget has left; going on is the person's choice (`agentgod retry`
    with a new --budget), not a resume's.
    """
    if BudgetOwner.RUN in owners:
        return BudgetOwner.RUN
    if BudgetOwner.BATCH in owners:
        return BudgetOwner.BATCH
    return None


@dataclass(frozen=True, eq=False)
class Hold:
    """Money set aside for one call (or one agent run) until it has reported what it spent.

    Every call takes one, under a budget or not, so the ledger knows which calls are in flight.
    """

    tokens: int
    """Output tokens the call may use: its max_tokens, lowered to what the budget can pay for."""
    usd: float
    """The worst case of the call, held back from everyone else meanwhile (0 without a budget)."""
    extra_input: int = 0
    """Input beyond the call's own the budget pays for (its `extra_input`, lowered with it)."""
    model: str = ""
    input_tokens: int = 0
    """The call's input as estimated when it was held."""
    searches: int = 0
    phase: str = OTHER_PHASE
    """The phase the call is spent under."""


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
    agent_name: str = ""
    """The agent the calls recorded here serve (`for_agent`'s view); "" for the main agent."""
    _calls: list[Call] = field(default_factory=list, repr=False, compare=False)
    _phases: dict[str, Usage] = field(default_factory=dict, repr=False, compare=False)
    _held_usd: float = field(default=0.0, repr=False, compare=False)
    _in_flight: set[Hold] = field(default_factory=set, repr=False, compare=False)
    """Calls held and not yet released: sent, and not yet answered."""
    _unfinished: int = field(default=0, repr=False, compare=False)
    """Calls counted at their worst case because the run ended before their reply."""
    _listeners: list[Callable[[list[Call]], None]] = field(
        default_factory=list, repr=False, compare=False
    )
    _prices: dict[str, Price | None] = field(default_factory=dict, repr=False, compare=False)
    """The run's price of each model it was told of (set_price); None: known to be unknown."""
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

    def for_agent(self, name: str) -> Usage:
        """A view of this ledger (a phase's, say) whose calls are tagged as serving agent `name`:
        the generation of its code. It counts and holds through this ledger like a phase view."""
        return Usage(parent=self, phase_name=self.phase_name, agent_name=name)

    def _root(self) -> Usage:
        return self.parent._root() if self.parent is not None else self

    @property
    def capped(self) -> bool:
        """Whether the run's ledger has a budget (a phase view answers for its run)."""
        return self._root().budget_usd is not None

    def set_price(self, model: str, price: Price | None) -> None:
        """The price this run counts `model`'s calls at (its profile's); None when it has none
        known: its calls then count $0 and the summary names it in `unpriced`."""
        root = self._root()
        with root._lock:
            root._prices[model] = price

    def price(self, model: str) -> Price | None:
        """The price `model`'s calls count at: the one set for it, else the price table's;
        None when neither knows it."""
        root = self._root()
        with root._lock:
            if model in root._prices:
                return root._prices[model]
        return table_price(model)

    def _usd(self, model: str, row: ModelUsage) -> float:
        return row.cost_usd(self.price(model) or FREE)

    def phases(self) -> dict[str, CostSummary]:
        """What each phase has cost so far, in the order the phases first spent."""
        with self._lock:
            views = list(self._phases.items())
        return {name: view.cost_summary() for name, view in views}

    def record(
        self, model: str, usage: Any, *, agent: str = "", seconds: float = 0.0, asked: str = ""
    ) -> None:
        """Count one API reply's `usage` (an SDK object or the raw dict an agent reports),
        its web searches included (`server_tool_use.web_search_requests`), and log the call:
        for `agent` (else this view's agent), taking `seconds` from request to reply, made for
        model `asked` (else `model`) and answered by `model`, at whose price it counts."""
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
                    usd=self._usd(model, row),
                    at=datetime.now(UTC),
                    agent=agent or self.agent_name,
                    seconds=max(0.0, seconds),
                    web_fetches=usage_fetches(usage),
                    asked=asked or model,
                )
            ]
        )

    def _log(self, calls: list[Call]) -> None:
        """Keep `calls` here and in the ledgers above, each log in time order; the run's
        ledger tells its listeners."""
        with self._lock:
            for call in calls:
                bisect.insort(self._calls, call, key=_when)
            listeners = list(self._listeners)
        if self.parent is not None:
            self.parent._log(calls)
        for listener in listeners:
            listener(calls)

    def listen(self, listener: Callable[[list[Call]], None]) -> None:
        """Have `listener` told of every call counted from now on (quickly: it runs on the
        thread that counted them). It is told of the calls counted before, at once."""
        with self._lock:
            self._listeners.append(listener)
            earlier = list(self._calls)
        if earlier:
            listener(earlier)

    def call_log(self) -> list[Call]:
        """Every call recorded here or merged in, oldest first (a phase view: its own only)."""
        with self._lock:
            return list(self._calls)

    def merge(self, other: Usage) -> None:
        """Fold another ledger (a finished run's, or the calls made before a run) into this one:
        its totals and its calls, which keep their phases and times, and the prices it knew."""
        theirs = other._root()
        with theirs._lock:
            prices = dict(theirs._prices)
        for model, price in prices.items():
            self.set_price(model, price)
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
        return sum(self._usd(model, row) for model, row in self.snapshot().items())

    def hold(
        self,
        model: str,
        *,
        input_tokens: int,
        max_tokens: int,
        min_tokens: int = MIN_OUTPUT_TOKENS,
        searches: int = 0,
        extra_input: int = 0,
    ) -> Hold:
        """Set aside the worst case of a call; lower max_tokens to what the budget can pay for.

        `searches` is the most web searches the call may make (its web_search max_uses): their
        price is held in full, since the model, not the caller, decides how many it runs.
        `extra_input` is input the call may be given beyond `input_tokens` that the caller can
        still bound (the pages a web fetch reads, by max_content_tokens): it is lowered together
        with max_tokens, in proportion, to what the budget can pay for (`Hold.extra_input`).
        While other holds are in flight their money may come back, so this waits for them;
        it raises BudgetExhaustedError only when nothing is in flight and the call still
        cannot afford `min_tokens` of output (or its whole max_tokens, if that is smaller).
        """
        return self._hold(
            model,
            input_tokens=input_tokens,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            searches=searches,
            extra_input=extra_input,
            phase=self.phase_name,
        )

    def _hold(
        self,
        model: str,
        *,
        input_tokens: int,
        max_tokens: int,
        min_tokens: int,
        searches: int,
        extra_input: int,
        phase: str,
    ) -> Hold:
        if self.parent is not None:
            return self.parent._hold(
                model,
                input_tokens=input_tokens,
                max_tokens=max_tokens,
                min_tokens=min_tokens,
                searches=searches,
                extra_input=extra_input,
                phase=phase,
            )
        held_for = functools.partial(
            Hold, model=model, input_tokens=input_tokens, searches=searches, phase=phase
        )
        if self.budget_usd is None:
            held = held_for(max_tokens, 0.0, extra_input)
            with self._lock:
                self._in_flight.add(held)
            return held
        price = self.price(model) or FREE
        least = min(min_tokens, max_tokens)
        fixed_usd = input_tokens * price.cache_write / 1_000_000 + search_usd(searches)
        fixed_usd += least * price.output / 1_000_000
        more = max_tokens - least
        rest_usd = (extra_input * price.cache_write + more * price.output) / 1_000_000
        with self._lock:
            while True:
                room = self.budget_usd - self.cost_usd() - self._held_usd - fixed_usd
                if room >= 0:  # the least output first; then the rest of both, in proportion
                    share = min(1.0, room / rest_usd) if rest_usd > 0 else 1.0
                    tokens, extra = least + int(more * share), int(extra_input * share)
                    usd = input_tokens * price.cache_write + extra * price.cache_write
                    usd = (usd + tokens * price.output) / 1_000_000 + search_usd(searches)
                    self._held_usd += usd
                    held = held_for(tokens, usd, extra)
                    self._in_flight.add(held)
                    return held
                if self._held_usd <= 1e-12:
                    raise BudgetExhaustedError(self.cost_usd(), self.budget_usd, fixed_usd)
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
        with self._lock:
            if hold not in self._in_flight:
                return  # counted already, at its worst case, when the run ended without it
            self._in_flight.discard(hold)
            self._held_usd = max(0.0, self._held_usd - hold.usd)
            self._lock.notify_all()

    def settle(self, timeout: float) -> int:
        """Wait up to `timeout` for the calls in flight to be answered and counted; then count
        each one still unanswered at its worst case (it is billed whether or not anyone waits
        for it). Returns how many were counted so."""
        if self.parent is not None:
            return self.parent.settle(timeout)
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._in_flight and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)
            unanswered = list(self._in_flight)
            self._in_flight.clear()
            self._held_usd = 0.0
            self._unfinished += len(unanswered)
            self._lock.notify_all()
        for call in unanswered:
            view = self if call.phase == OTHER_PHASE else self.phase(call.phase)
            worst = _worst_case(call, self.price(call.model) or FREE)
            view.add(
                call.model,
                cache_write_tokens=worst.cache_write_tokens,
                output_tokens=worst.output_tokens,
                searches=worst.web_searches,
            )
            view._log([worst])
        return len(unanswered)

    @property
    def is_estimate(self) -> bool:
        """True when some model used has no known price (its calls counted $0)."""
        return bool(self.unpriced())

    def unpriced(self) -> list[str]:
        """The models used whose price is unknown: their calls are counted at $0."""
        return sorted(model for model in self.snapshot() if self.price(model) is None)

    def cost_summary(self) -> CostSummary:
        """Plain numbers for displays, JSON output and the run archive."""
        total = self.totals()
        summary = CostSummary(
            llm_calls=total.calls,
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
            cache_write_tokens=total.cache_write_tokens,
            cache_read_tokens=total.cache_read_tokens,
            web_searches=total.searches,
            usd=round(self.cost_usd(), 6),
            estimate=self.is_estimate or bool(self._unfinished),
            unpriced=self.unpriced(),
        )
        if self._unfinished:
            summary["unfinished"] = self._unfinished
        return summary


def _when(call: Call) -> datetime:
    return call.at


def _worst_case(held: Hold, price: Price) -> Call:
    """A call that was never answered, as the record keeps it: at the most it may have cost —
    its input at the cache-write price (the dearest), all its output tokens, every search."""
    row = ModelUsage(
        calls=1,
        cache_write_tokens=held.input_tokens,
        output_tokens=held.tokens,
        searches=held.searches,
    )
    return Call(
        phase=held.phase,
        model=held.model,
        input_tokens=0,
        output_tokens=held.tokens,
        cache_write_tokens=held.input_tokens,
        cache_read_tokens=0,
        web_searches=held.searches,
        usd=row.cost_usd(price),
        at=datetime.now(UTC),
        asked=held.model,
    )


def usage_count(usage: Any, name: str) -> int:
    """One count of a reply's usage, an SDK object or a dict; junk and negatives read as 0."""
    return _count(_get(usage, name))


def usage_searches(usage: Any) -> int:
    """The web searches a reply's usage reports (`server_tool_use.web_search_requests`)."""
    return _count(_get(_get(usage, "server_tool_use"), "web_search_requests"))


def usage_fetches(usage: Any) -> int:
    """The pages a reply's usage says web fetch read (`server_tool_use.web_fetch_requests`;
    the SDK gives None for a missing count)."""
    return _count(_get(_get(usage, "server_tool_use"), "web_fetch_requests"))


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
