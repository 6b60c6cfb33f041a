"""models.py — facts about Claude models: which effort levels each accepts, and what it costs.

Pure data and pure functions, no I/O, so the parent, the agents' runtime test and the benchmarks
all agree on one table. When Anthropic ships a model, this is the one file to change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgod.kinds import EFFORT_LEVELS, Complexity, Effort

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_FAST_MODEL = "claude-haiku-5-5"

_VERSIONED = re.compile(r"claude-(opus|sonnet|haiku|fable|mythos)-(\d+)(?:-(\d))?(?:-\d{8})?$")


def supported_efforts(model: str) -> tuple[Effort, ...]:
    """Effort levels the API accepts for `model`; empty when it rejects the parameter.

    Haiku 4.5, Sonnet 4.5 and everything older answer `output_config.effort` with a 400, and
    `xhigh`/`max` exist only on some models. Unknown ids are assumed to be new models.
    """
    if model.startswith("claude-3"):
        return ()
    match = _VERSIONED.match(model)
    if not match or match.group(1) in ("fable", "mythos"):
        return EFFORT_LEVELS
    family = match.group(1)
    version = (int(match.group(2)), int(match.group(3) or 0))
    floor = {"opus": (4, 5), "sonnet": (4, 6), "haiku": (5, 5)}[family]
    if version < floor:
        return ()
    levels = [Effort.LOW, Effort.MEDIUM, Effort.HIGH]
    opus_to_5 = family == "opus" and version <= (5, 0)
    if (opus_to_5 and version >= (4, 7)) or (family == "sonnet" and version == (5, 0)):
        levels.append(Effort.XHIGH)
    if (opus_to_5 and version >= (4, 6)) or (family == "sonnet" and version in ((4, 6), (5, 0))):
        levels.append(Effort.MAX)
    return tuple(levels)


def effort_for_model(model: str, effort: str) -> Effort | None:
    """The highest level the model supports that does not exceed `effort`; None to omit it."""
    levels = supported_efforts(model)
    if not levels:
        return None
    wanted = EFFORT_LEVELS.index(Effort(effort))
    allowed = [level for level in levels if EFFORT_LEVELS.index(level) <= wanted]
    return allowed[-1] if allowed else levels[0]


def effort_for(complexity: str, configured: Effort) -> Effort:
    """simple → low, standard → the configured level, deep → at least high."""
    if complexity == Complexity.SIMPLE:
        return Effort.LOW
    if complexity == Complexity.DEEP:
        return max(configured, Effort.HIGH, key=EFFORT_LEVELS.index)
    return configured


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float

    @property
    def cache_write(self) -> float:
        """A 5-minute cache write costs 1.25 times the input price."""
        return self.input * 1.25


PRICES: dict[str, Price] = {
    "claude-opus-5-5": Price(4.0, 20.0, 0.20),
    "claude-sonnet-5-5": Price(2.0, 10.0, 0.10),
    "claude-haiku-5-5": Price(0.10, 0.50, 0.01),
    "claude-fable-5-1": Price(10.0, 50.0, 0.25),
    "claude-opus-5": Price(5.0, 25.0, 0.50),
    "claude-opus-4-8": Price(5.0, 25.0, 0.50),
    "claude-opus-4-7": Price(5.0, 25.0, 0.50),
    "claude-opus-4-6": Price(5.0, 25.0, 0.50),
    "claude-opus-4-5": Price(5.0, 25.0, 0.50),
    "claude-sonnet-4-6": Price(3.0, 15.0, 0.30),
    "claude-sonnet-4-5": Price(3.0, 15.0, 0.30),
    "claude-haiku-4-5": Price(1.0, 5.0, 0.10),
}


WEB_SEARCH_USD_PER_1000 = 10.0
"""What 1,000 server-side web searches cost on top of their tokens (a search that errors is free;
fetching a page costs only the tokens it adds)."""


def price_of(model: str) -> tuple[Price, bool]:
    """The model's price and whether it is an estimate (unknown ids are priced as the default)."""
    bare = re.sub(r"-\d{8}$", "", model)
    if bare in PRICES:
        return PRICES[bare], False
    return PRICES[DEFAULT_MODEL], True
