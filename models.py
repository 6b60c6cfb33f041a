"""models.py — facts about models: what each one takes (its `Profile`) and what it costs.

Pure data and pure functions, no I/O, so the parent, the agents' runtime test and the benchmarks
all agree on one table. When Anthropic ships a model, this is the one file to change.

A `Profile` says what AgentGOD may send a model: structured output natively or by the ladder
(kinds.Structured), which effort levels, the API's server tools (the web), PDF documents, images,
prompt caching, and its price per million tokens. Claude models (`claude-…`) keep the rules below
(effort by family and version, the price table); a model AgentGOD does not know gets safe
defaults — no effort, no server tools, no documents or images, no cache hints, structured output
starting at the top of the ladder and stepping down by itself — and a price of zero when it is
served from this machine or its network (`is_local`), else no price at all: never a guessed
Claude price. The home's `models.toml` (read by config, parsed here: `parse_profiles`) changes
any of that per model or per pattern of names (`resolve`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentgod.kinds import EFFORT_LEVELS, Complexity, Effort, Structured

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_FAST_MODEL = "claude-haiku-5-5"

_VERSIONED = re.compile(r"claude-(opus|sonnet|haiku|fable|mythos)-(\d+)(?:-(\d))?(?:-\d{8})?$")


def is_claude(model: str) -> bool:
    """A Claude model's id (what the rules and the price table below are about)."""
    return model.startswith("claude-")


def supported_efforts(model: str) -> tuple[Effort, ...]:
    """Effort levels the API accepts for `model`; empty when it rejects the parameter.

    Haiku 4.5, Sonnet 4.5 and everything older answer `output_config.effort` with a 400, and
    `xhigh`/`max` exist only on some models. A Claude id the rules do not know is assumed to be a
    new Claude model; a model that is no Claude model gets none (on Ollama an effort turns
    thinking on).
    """
    if not is_claude(model) or model.startswith("claude-3"):
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
    return effort_within(supported_efforts(model), effort)


def effort_within(levels: Sequence[Effort], effort: str) -> Effort | None:
    """The highest of `levels` that does not exceed `effort` (the lowest if all do); None when
    there are none, and the effort is not sent."""
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


FREE = Price(0.0, 0.0, 0.0)
"""What a model served on this machine or its network costs in API dollars."""


def table_price(model: str) -> Price | None:
    """The price table's price for `model` (a dated id priced as its base), or None."""
    return PRICES.get(re.sub(r"-\d{8}$", "", model))


def price_of(model: str) -> tuple[Price, bool]:
    """The model's price in the built-in table, and whether it has none there: an unknown id is
    never priced as another model (it counts $0, flagged: `Profile.price` says more)."""
    price = table_price(model)
    return (price, False) if price is not None else (FREE, True)


# ---- profiles ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """What AgentGOD may send one model, and what it costs; where each fact came from."""

    model: str
    structured: Structured
    """Where a structured call starts on the ladder (it steps down by itself from there)."""
    efforts: tuple[Effort, ...]
    """The effort levels it takes; empty: no effort is ever sent."""
    web: bool
    """It runs the API's server tools (web search and fetch)."""
    documents: bool
    """It reads PDF `document` blocks."""
    images: bool
    """It reads `image` blocks."""
    caching: bool
    """It takes `cache_control` hints (and reports cache tokens)."""
    price: Price | None
    """USD per million tokens; None when unknown (its calls count $0 and are flagged)."""
    source: str
    """Where the profile came from: the Claude rules, models.toml, or an unknown model's
    defaults."""
    price_source: str
    """Where the price came from: the price table, models.toml, a local server, or nowhere."""
    structured_told: bool = False
    """models.toml names the step: the ladder starts there, whatever it learned elsewhere."""


BUILT_IN = "built in (Claude)"
UNKNOWN = "unknown model: safe defaults"
FROM_FILE = "models.toml"
PRICE_TABLE = "the price table"
LOCAL_PRICE = "served locally: free"
NO_PRICE = "unknown"


def builtin_profile(model: str, *, local: bool) -> Profile:
    """The profile AgentGOD assumes for `model` without being told: the Claude rules for a
    Claude id, safe defaults for anything else (free when served `local`ly, else unpriced)."""
    if is_claude(model):
        price = table_price(model)
        return Profile(
            model=model,
            structured=Structured.NATIVE,
            efforts=supported_efforts(model),
            web=True,
            documents=True,
            images=True,
            caching=True,
            price=price,
            source=BUILT_IN,
            price_source=PRICE_TABLE if price is not None else NO_PRICE,
        )
    return Profile(
        model=model,
        structured=Structured.NATIVE,
        efforts=(),
        web=False,
        documents=False,
        images=False,
        caching=False,
        price=FREE if local else None,
        source=UNKNOWN,
        price_source=LOCAL_PRICE if local else NO_PRICE,
    )


@dataclass(frozen=True)
class ProfileOverride:
    """What models.toml says about the models one of its entries names: each field None when the
    entry leaves it as AgentGOD would assume it."""

    pattern: str
    """The entry's name: a model id, or a pattern of ids (`*`, `?`, `[...]`)."""
    structured: Structured | None = None
    efforts: tuple[Effort, ...] | None = None
    web: bool | None = None
    documents: bool | None = None
    images: bool | None = None
    caching: bool | None = None
    price: Price | None = None
    priced: bool = False
    """The entry sets the price (to `price`; None there means "unknown")."""

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model, self.pattern)

    def apply(self, profile: Profile) -> Profile:
        """The profile with what this entry says."""
        changes: dict[str, Any] = {
            name: value
            for name in ("structured", "efforts", "web", "documents", "images", "caching")
            if (value := getattr(self, name)) is not None
        }
        if self.structured is not None:
            changes["structured_told"] = True
        if self.priced:
            changes["price"] = self.price
            changes["price_source"] = FROM_FILE if self.price is not None else NO_PRICE
        if changes:
            changes["source"] = f"{FROM_FILE} [models.{_quoted(self.pattern)}]"
        return replace(profile, **changes)


def resolve(model: str, *, local: bool, overrides: Sequence[ProfileOverride] = ()) -> Profile:
    """`model`'s profile: the built-in one, changed by the models.toml entry naming it exactly,
    else by the first entry whose pattern it matches."""
    profile = builtin_profile(model, local=local)
    exact = next((entry for entry in overrides if entry.pattern == model), None)
    chosen = exact or next((entry for entry in overrides if entry.matches(model)), None)
    return chosen.apply(profile) if chosen is not None else profile


def profile_efforts(profile: Profile, effort: str | None) -> Effort | None:
    """The effort to send `profile`'s model for a wanted level: lowered to what it takes, None
    when it takes none (or none was wanted)."""
    return effort_within(profile.efforts, effort) if effort else None


PROFILE_KEYS = ("structured", "effort", "web", "documents", "images", "caching", "price")
"""What a models.toml entry may say."""


class ProfileError(ValueError):
    """A models.toml entry that cannot be used: `where` names it, `allowed` what would do."""

    def __init__(self, where: str, allowed: str, got: object) -> None:
        super().__init__(f"{where} must be {allowed}, got {got!r}")
        self.where = where
        self.allowed = allowed
        self.got = got


def parse_profiles(data: Mapping[str, Any]) -> tuple[ProfileOverride, ...]:
    """The entries of a parsed models.toml, in the file's order; ProfileError names the first
    thing wrong (an unknown key, a value of the wrong kind), so nothing is silently ignored."""
    extra = sorted(set(data) - {"models"})
    if extra:
        raise ProfileError("a top-level key", 'only [models."NAME"] tables', extra[0])
    entries = data.get("models", {})
    if not isinstance(entries, Mapping):
        raise ProfileError("models", 'tables such as [models."qwen3:8b"]', entries)
    return tuple(_entry(str(name), body) for name, body in entries.items())


def _entry(name: str, body: object) -> ProfileOverride:
    where = f"[models.{_quoted(name)}]"
    if not name.strip():
        raise ProfileError(where, "a model id or a pattern of ids", name)
    if not isinstance(body, Mapping):
        raise ProfileError(where, "a table of " + ", ".join(PROFILE_KEYS), body)
    unknown = sorted(set(body) - set(PROFILE_KEYS))
    if unknown:
        raise ProfileError(f"a key of {where}", "one of " + ", ".join(PROFILE_KEYS), unknown[0])
    fields: dict[str, Any] = {"pattern": name}
    if "structured" in body:
        raw = body["structured"]
        try:
            fields["structured"] = Structured(raw)
        except ValueError:
            raise ProfileError(
                f"{where} structured", "one of " + ", ".join(Structured), raw
            ) from None
    if "effort" in body:
        fields["efforts"] = _efforts(f"{where} effort", body["effort"])
    for flag in ("web", "documents", "images", "caching"):
        if flag in body:
            if not isinstance(body[flag], bool):
                raise ProfileError(f"{where} {flag}", "true or false", body[flag])
            fields[flag] = body[flag]
    if "price" in body:
        fields["priced"] = True
        fields["price"] = _price(f"{where} price", body["price"])
    return ProfileOverride(**fields)


def _efforts(where: str, raw: object) -> tuple[Effort, ...]:
    allowed = 'false, true (every level) or a list of levels such as ["low", "high"]'
    if raw is False:
        return ()
    if raw is True:
        return EFFORT_LEVELS
    if not isinstance(raw, list) or not all(isinstance(level, str) for level in raw):
        raise ProfileError(where, allowed, raw)
    try:
        chosen = {Effort(level) for level in raw}
    except ValueError:
        raise ProfileError(where, allowed, raw) from None
    return tuple(level for level in EFFORT_LEVELS if level in chosen)


def _price(where: str, raw: object) -> Price | None:
    allowed = '"unknown", or [input, output] or [input, output, cache read] in USD per million'
    if raw == "unknown":
        return None
    numbers = raw if isinstance(raw, list) else None
    if (
        numbers is None
        or not 2 <= len(numbers) <= 3
        or not all(
            isinstance(n, int | float) and not isinstance(n, bool) and 0 <= n < 1e6 for n in numbers
        )
    ):
        raise ProfileError(where, allowed, raw)
    values = [float(n) for n in numbers]
    cache_read = values[2] if len(values) == 3 else values[0] / 10
    return Price(values[0], values[1], cache_read)


def _quoted(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---- where a model is served -----------------------------------------------------------------


def is_local(base_url: str | None) -> bool:
    """Whether an endpoint is on this machine or its network: localhost, a loopback, private or
    link-local address, a `.local` or `.localhost` name. A model served there costs no API
    dollars (models.toml can say otherwise). None is the Anthropic API: not local."""
    import ipaddress
    from urllib.parse import urlsplit

    if not base_url:
        return False
    try:
        host = (urlsplit(base_url).hostname or "").lower().rstrip(".")
    except ValueError:
        return False
    if host == "localhost" or host.endswith((".localhost", ".local")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local
