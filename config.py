"""config.py — settings, the one road to Claude, and the token ledger.

This is the only provider-aware module. Everything else asks it for settings (read at call time, so
flags and tests can change them), reaches the model through `complete` / `complete_structured`, and
counts tokens with `Usage`. The SDK is imported lazily: `agentgod --version` must not pay for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import redact

if TYPE_CHECKING:
    import anthropic
    from pydantic import BaseModel

    ModelT = TypeVar("ModelT", bound=BaseModel)

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_FAST_MODEL = "claude-haiku-5-5"
EFFORT_LEVELS = ("low", "medium", "high", "xhigh", "max")
COUNCIL_MODES = ("auto", "always", "off")
SANDBOX_MODES = ("auto", "strict", "off")
COMPLEXITIES = ("simple", "standard", "deep")
DEFAULT_BASE_URL = "https://api.anthropic.com"
SETTING_NAMES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "MODEL",
    "FAST_MODEL",
    "DEEP_MODEL",
    "LLM_EFFORT",
    "MAX_AGENTS",
    "MAX_PARALLEL_AGENTS",
    "AGENT_TIMEOUT_SECONDS",
    "AGENT_REPAIR_ATTEMPTS",
    "GENERATION_ATTEMPTS",
    "TASK_REVISIONS",
    "COUNCIL",
    "SANDBOX",
    "BUDGET_USD",
    "AGENTGOD_HOME",
    "AGENTGOD_PLAIN",
)
"""Every environment variable that changes what AgentGOD does (tests and benchmarks clear them)."""


class ConfigError(ValueError):
    """A setting holds a value we cannot use; says which, what is allowed and what it got."""

    def __init__(self, setting: str, allowed: str, got: str) -> None:
        self.setting = setting
        self.allowed = allowed
        self.got = got
        super().__init__(f"{setting} must be {allowed}, got {got!r}")


class MissingApiKeyError(RuntimeError):
    """No ANTHROPIC_API_KEY in the environment or in .env."""


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Every tunable, validated. Built fresh by `settings()` on each call."""

    model: str
    """Model for planning, code generation, merging and the agents themselves (MODEL)."""
    fast_model: str
    """Cheap model for the judge, the clarifying question and small talk (FAST_MODEL)."""
    deep_model: str
    """Model for the council's review of deep tasks (DEEP_MODEL; defaults to MODEL)."""
    effort: str
    """Configured effort level for standard tasks (LLM_EFFORT)."""
    max_agents: int
    """Upper bound on agents in one plan (MAX_AGENTS)."""
    max_parallel_agents: int
    """Worker threads for generation and each execution wave (MAX_PARALLEL_AGENTS)."""
    agent_timeout_seconds: float
    """Wall-clock limit for one agent process (AGENT_TIMEOUT_SECONDS)."""
    agent_repair_attempts: int
    """Regenerations of a crashed agent before it is excluded (AGENT_REPAIR_ATTEMPTS)."""
    generation_attempts: int
    """Tries to write code that codeguard accepts (GENERATION_ATTEMPTS)."""
    task_revisions: int
    """Extra rounds when the judge finds the answer short (TASK_REVISIONS; 0 disables the judge)."""
    council: str
    """auto: deep tasks only; always; off (COUNCIL)."""
    sandbox: str
    """OS confinement of agents: auto, strict or off (SANDBOX)."""
    budget_usd: float | None
    """Hard cap on a task's spend in dollars (BUDGET_USD); None means no cap."""
    home: Path
    """Where generated_agents/, inventory/, runs/ and .agent_venv/ live (AGENTGOD_HOME)."""
    base_url: str | None
    """ANTHROPIC_BASE_URL, when set (tests and proxies)."""

    @property
    def agents_dir(self) -> Path:
        return self.home / "generated_agents"

    @property
    def inventory_dir(self) -> Path:
        return self.home / "inventory"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def venv_dir(self) -> Path:
        return self.home / ".agent_venv"


def default_home() -> Path:
    """The source checkout when running from one (editable install), otherwise ~/.agentgod."""
    here = Path(__file__).resolve().parent
    if (here / "pyproject.toml").is_file() and (here / "cli.py").is_file():
        return here
    return Path.home() / ".agentgod"


def home() -> Path:
    """AGENTGOD_HOME from the real environment only: it decides where .env itself lives."""
    raw = os.environ.get("AGENTGOD_HOME", "").strip()
    return Path(raw).expanduser().resolve() if raw else default_home()


_dotenv_cache: dict[Path, tuple[int, dict[str, str]]] = {}
_dotenv_lock = threading.Lock()


def _dotenv(path: Path) -> dict[str, str]:
    """Parsed .env values, re-read only when the file changes."""
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return {}
    with _dotenv_lock:
        cached = _dotenv_cache.get(path)
        if cached and cached[0] == stamp:
            return cached[1]
        from dotenv import dotenv_values

        values = {k: v for k, v in dotenv_values(path).items() if v is not None}
        _dotenv_cache[path] = (stamp, values)
        return values


def env(name: str, default: str = "") -> str:
    """A setting's raw text: the real environment, else `<home>/.env`, else the default."""
    value = os.environ.get(name)
    if value is None:
        value = _dotenv(home() / ".env").get(name)
    return default if value is None or value.strip() == "" else value.strip()


def _number(name: str, default: str, low: float, high: float, cast: type = int) -> Any:
    """Parse a numeric setting and check its range; the error says what would have worked."""
    raw = env(name, default)
    unit = "a whole number" if cast is int else "a number"
    allowed = f"{unit} from {low:g} to {high:g}"
    try:
        value = cast(raw)
    except ValueError:
        raise ConfigError(name, allowed, raw) from None
    if not low <= value <= high:
        raise ConfigError(name, allowed, raw)
    return value


def _choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = env(name, default).lower()
    if raw not in allowed:
        raise ConfigError(name, "one of " + ", ".join(allowed), raw)
    return raw


def _model(name: str, default: str) -> str:
    raw = env(name, default)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:@/\-]{1,99}", raw):
        raise ConfigError(name, "a model id such as claude-sonnet-5-5", raw)
    return raw


def _budget() -> float | None:
    if not env("BUDGET_USD"):
        return None
    return float(_number("BUDGET_USD", "", 0.000001, 1_000_000, float))


def settings() -> Settings:
    """Read and validate every setting now; raises ConfigError naming the first bad one."""
    model = _model("MODEL", DEFAULT_MODEL)
    return Settings(
        model=model,
        fast_model=_model("FAST_MODEL", DEFAULT_FAST_MODEL),
        deep_model=_model("DEEP_MODEL", model),
        effort=_choice("LLM_EFFORT", "medium", EFFORT_LEVELS),
        max_agents=_number("MAX_AGENTS", "6", 1, 12),
        max_parallel_agents=_number("MAX_PARALLEL_AGENTS", "4", 1, 32),
        agent_timeout_seconds=float(_number("AGENT_TIMEOUT_SECONDS", "300", 1, 3600, float)),
        agent_repair_attempts=_number("AGENT_REPAIR_ATTEMPTS", "2", 0, 5),
        generation_attempts=_number("GENERATION_ATTEMPTS", "3", 1, 6),
        task_revisions=_number("TASK_REVISIONS", "1", 0, 3),
        council=_choice("COUNCIL", "auto", COUNCIL_MODES),
        sandbox=_choice("SANDBOX", "auto", SANDBOX_MODES),
        budget_usd=_budget(),
        home=home(),
        base_url=env("ANTHROPIC_BASE_URL") or None,
    )


def api_key() -> str:
    """The key, from the environment or .env; registered for redaction the moment it is read."""
    key = env("ANTHROPIC_API_KEY")
    if not key:
        raise MissingApiKeyError("ANTHROPIC_API_KEY is not set")
    redact.register(key)
    return key


# --------------------------------------------------------------------------------------------
# Models: effort support and prices
# --------------------------------------------------------------------------------------------

_VERSIONED = re.compile(r"claude-(opus|sonnet|haiku|fable|mythos)-(\d+)(?:-(\d))?(?:-\d{8})?$")


def supported_efforts(model: str) -> tuple[str, ...]:
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
    levels = ["low", "medium", "high"]
    opus_to_5 = family == "opus" and version <= (5, 0)
    if (opus_to_5 and version >= (4, 7)) or (family == "sonnet" and version == (5, 0)):
        levels.append("xhigh")
    if (opus_to_5 and version >= (4, 6)) or (family == "sonnet" and version in ((4, 6), (5, 0))):
        levels.append("max")
    return tuple(levels)


def effort_for_model(model: str, effort: str) -> str | None:
    """The highest level the model supports that does not exceed `effort`; None to omit it."""
    levels = supported_efforts(model)
    if not levels:
        return None
    wanted = EFFORT_LEVELS.index(effort)
    allowed = [level for level in levels if EFFORT_LEVELS.index(level) <= wanted]
    return allowed[-1] if allowed else levels[0]


def effort_for(complexity: str) -> str:
    """simple → low, standard → the configured level, deep → at least high."""
    configured = settings().effort
    if complexity == "simple":
        return "low"
    if complexity == "deep":
        return max(configured, "high", key=EFFORT_LEVELS.index)
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


def price_of(model: str) -> tuple[Price, bool]:
    """The model's price and whether it is an estimate (unknown ids are priced as the default)."""
    bare = re.sub(r"-\d{8}$", "", model)
    if bare in PRICES:
        return PRICES[bare], False
    return PRICES[DEFAULT_MODEL], True


# --------------------------------------------------------------------------------------------
# Usage
# --------------------------------------------------------------------------------------------


@dataclass
class ModelUsage:
    """Token totals for one model."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0

    def cost_usd(self, price: Price) -> float:
        return (
            self.input_tokens * price.input
            + self.output_tokens * price.output
            + self.cache_write_tokens * price.cache_write
            + self.cache_read_tokens * price.cache_read
        ) / 1_000_000


MIN_OUTPUT_TOKENS = 1024
"""Under a budget, a call that cannot afford this much output is not worth starting."""


class BudgetExhaustedError(RuntimeError):
    """The next model call would cross the budget, so it was not made."""

    def __init__(self, spent_usd: float, budget_usd: float) -> None:
        super().__init__(f"the ${budget_usd:g} budget is spent (${spent_usd:.4f} so far)")
        self.spent_usd = spent_usd
        self.budget_usd = budget_usd


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
    cache-write price plus max_tokens of output); holds and spending together never exceed the
    budget, so a run can stop short but never overspend.
    """

    by_model: dict[str, ModelUsage] = field(default_factory=dict)
    budget_usd: float | None = None
    """Hard cap in dollars; None means no cap."""
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
        calls: int = 1,
    ) -> None:
        with self._lock:
            row = self.by_model.setdefault(model, ModelUsage())
            row.calls += calls
            row.input_tokens += input_tokens
            row.output_tokens += output_tokens
            row.cache_write_tokens += cache_write_tokens
            row.cache_read_tokens += cache_read_tokens

    def record(self, model: str, usage: Any) -> None:
        """Count one API reply's `usage` (an SDK object or the raw dict an agent reports)."""

        def read(name: str) -> int:
            value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
            try:
                return max(0, int(value or 0))
            except (TypeError, ValueError):
                return 0

        self.add(
            model,
            input_tokens=read("input_tokens"),
            output_tokens=read("output_tokens"),
            cache_write_tokens=read("cache_creation_input_tokens"),
            cache_read_tokens=read("cache_read_input_tokens"),
        )

    def merge(self, other: Usage) -> None:
        """Fold another ledger (one agent's reported usage) into this one."""
        for model, row in other.snapshot().items():
            self.add(
                model,
                input_tokens=row.input_tokens,
                output_tokens=row.output_tokens,
                cache_write_tokens=row.cache_write_tokens,
                cache_read_tokens=row.cache_read_tokens,
                calls=row.calls,
            )

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
    ) -> Hold:
        """Set aside the worst case of a call; lower max_tokens to what the budget can pay for.

        While other holds are in flight their money may come back, so this waits for them;
        it raises BudgetExhaustedError only when nothing is in flight and the call still
        cannot afford `min_tokens` of output (or its whole max_tokens, if that is smaller).
        """
        if self.budget_usd is None:
            return Hold(max_tokens, 0.0)
        price = price_of(model)[0]
        input_usd = input_tokens * price.cache_write / 1_000_000
        with self._lock:
            while True:
                room = self.budget_usd - self.cost_usd() - self._held_usd - input_usd
                tokens = min(max_tokens, int(room * 1_000_000 / price.output)) if room > 0 else 0
                if tokens >= min(min_tokens, max_tokens):
                    usd = input_usd + tokens * price.output / 1_000_000
                    self._held_usd += usd
                    return Hold(tokens, usd)
                if self._held_usd <= 1e-12:
                    raise BudgetExhaustedError(self.cost_usd(), self.budget_usd)
                self._lock.wait()

    def release(self, hold: Hold) -> None:
        """The call is over and its spending recorded: free what was held for it."""
        if not hold.usd:
            return
        with self._lock:
            self._held_usd = max(0.0, self._held_usd - hold.usd)
            self._lock.notify_all()

    @property
    def is_estimate(self) -> bool:
        """True when some model's price was not in the table."""
        return any(price_of(model)[1] for model in self.snapshot())

    def cost_summary(self) -> dict[str, Any]:
        """Plain numbers for displays, JSON output and the run archive."""
        total = self.totals()
        return {
            "llm_calls": total.calls,
            "input_tokens": total.input_tokens,
            "output_tokens": total.output_tokens,
            "cache_write_tokens": total.cache_write_tokens,
            "cache_read_tokens": total.cache_read_tokens,
            "usd": round(self.cost_usd(), 6),
            "estimate": self.is_estimate,
        }


# --------------------------------------------------------------------------------------------
# The one road to the model
# --------------------------------------------------------------------------------------------

_clients: dict[tuple[str, str | None], anthropic.Anthropic] = {}
_clients_lock = threading.Lock()
client_ready = threading.Event()
"""Set once an SDK client exists: the expensive import is over and requests can leave."""


def shield_from_signals() -> None:
    """Run first in every background thread: Ctrl-C must reach the main thread.

    The kernel hands a process's SIGINT to any thread that does not block it; Python only acts on
    it in the main thread, so one delivered to a busy worker would leave the main thread asleep
    in a wait or at the prompt, and Ctrl-C would seem to do nothing.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


def preload_sdk() -> threading.Thread:
    """Import the SDK on a background thread while start-up (or a person typing) goes on.

    `import anthropic` costs about two seconds; overlapping it with everything else start-up does
    is the difference between a first request that leaves at once and one that waits for it.
    """

    def load() -> None:
        shield_from_signals()
        with contextlib.suppress(Exception):
            import anthropic  # noqa: F401

            get_client()  # the HTTP stack loads with the client; needs the key, so may not yet

    thread = threading.Thread(target=load, name="agentgod-preload", daemon=True)
    thread.start()
    return thread


def get_client() -> anthropic.Anthropic:
    """The only place an SDK client is built; one per (key, base URL), shared across threads."""
    key = api_key()
    base_url = settings().base_url
    with _clients_lock:
        client = _clients.get((key, base_url))
        if client is None:
            import anthropic

            client = anthropic.Anthropic(api_key=key, base_url=base_url)
            _clients[(key, base_url)] = client
            client_ready.set()
        return client


def response_text(message: Any) -> str:
    """Join the text blocks of a reply; a reasoning model's first block is thinking, not text."""
    return "".join(
        getattr(block, "text", "") for block in message.content if block.type == "text"
    ).strip()


def _request(
    prompt: str,
    *,
    system: str | None,
    max_tokens: int,
    effort: str | None,
    model: str | None,
) -> dict[str, Any]:
    """Keyword arguments for messages.create/parse. Never a temperature."""
    chosen = model or settings().model
    request: dict[str, Any] = {
        "model": chosen,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if system:
        request["system"] = [
            {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
        ]
    level = effort_for_model(chosen, effort or settings().effort)
    if level:
        request["output_config"] = {"effort": level}
    return request


def _send(send: Callable[..., Any], request: dict[str, Any], usage: Usage | None) -> Any:
    """Make the call within the budget (if any) and count what it spent."""
    if usage is None:
        return send(**request)
    sent = json.dumps(request, default=str)
    schema = request.get("output_format")
    if schema is not None:
        sent += json.dumps(schema.model_json_schema())
    hold = usage.hold(
        request["model"], input_tokens=estimate_tokens(sent), max_tokens=request["max_tokens"]
    )
    try:
        reply = send(**{**request, "max_tokens": hold.tokens})
        usage.record(request["model"], reply.usage)
        return reply
    finally:
        usage.release(hold)


def estimate_tokens(text: str) -> int:
    """A generous token count for budgeting: about three UTF-8 bytes per token."""
    return len(text.encode("utf-8")) // 3 + 1


def complete(
    prompt: str,
    *,
    system: str | None = None,
    max_tokens: int = 4096,
    effort: str | None = None,
    model: str | None = None,
    usage: Usage | None = None,
) -> str:
    """One plain call; returns the reply's text."""
    request = _request(prompt, system=system, max_tokens=max_tokens, effort=effort, model=model)
    reply = _send(get_client().messages.create, request, usage)
    return response_text(reply)


def complete_structured(
    prompt: str,
    output_format: type[ModelT],
    *,
    system: str | None = None,
    max_tokens: int = 4096,
    effort: str | None = None,
    model: str | None = None,
    usage: Usage | None = None,
) -> ModelT:
    """One call constrained to `output_format`'s JSON schema, parsed and validated by the SDK."""
    request = _request(prompt, system=system, max_tokens=max_tokens, effort=effort, model=model)
    reply = _send(get_client().messages.parse, {**request, "output_format": output_format}, usage)
    parsed = reply.parsed_output
    if parsed is None:
        raise StructuredReplyError(
            f"{output_format.__name__}: the reply held no parsable JSON "
            f"(stop_reason={reply.stop_reason})"
        )
    return parsed


class StructuredReplyError(ValueError):
    """The model's structured reply was empty or refused (validation errors come from pydantic)."""
