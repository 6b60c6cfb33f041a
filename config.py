"""config.py — settings: every tunable, read at call time and validated.

`settings(overrides)` reads the overrides first (the command line's flags, a key typed at the
prompt: what this process was told, held by the session and never written into os.environ),
then the real environment, then `.env` in AGENTGOD_HOME, then the default, and returns one
frozen snapshot; a run reads it once and passes it down, so a flag or a test can change a
setting between runs but never in the middle of one. A bad value raises `ConfigError`
naming the setting, what is allowed and what it got. The key is read here too, and registered
for redaction the moment it is.

Models: the snapshot holds the fallback chain (MODEL_FALLBACKS, `--fallback`) and the home's
`models.toml` (what AgentGOD may assume about a model, per name or pattern: models.Profile), and
answers for any model its profile (`Settings.profile`), price and effort. A model that is no
Claude model, served somewhere other than the Anthropic API, needs no key.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from agentgod import models, redact
from agentgod.kinds import BUDGET_USD_RANGE, CouncilMode, Effort, SandboxMode, Switch
from agentgod.models import DEFAULT_FAST_MODEL, DEFAULT_MODEL, Price, Profile, ProfileOverride

DEFAULT_BASE_URL = "https://api.anthropic.com"
SETTING_NAMES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "MODEL",
    "FAST_MODEL",
    "DEEP_MODEL",
    "MODEL_FALLBACKS",
    "LLM_EFFORT",
    "MAX_AGENTS",
    "MAX_PARALLEL_AGENTS",
    "AGENT_TIMEOUT_SECONDS",
    "API_TIMEOUT_SECONDS",
    "API_RETRIES",
    "AGENT_REPAIR_ATTEMPTS",
    "GENERATION_ATTEMPTS",
    "TASK_REVISIONS",
    "COUNCIL",
    "SANDBOX",
    "BUDGET_USD",
    "WEB",
    "MAX_SEARCHES_PER_AGENT",
    "ATTACH_MAX_MB",
    "ATTACH_MAX_FILES",
    "ARTIFACTS_MAX_MB",
    "AGENTGOD_HOME",
    "LIBRARY_DIR",
    "AGENTGOD_PLAIN",
    "TRACE_ENDPOINT",
    "TRACE_CONTENT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_SERVICE_NAME",
    "OTEL_SDK_DISABLED",
)
"""Every environment variable that changes what AgentGOD does (tests and benchmarks clear them)."""


AGENTS_DIR = "generated_agents"
"""The home's folder of the agents being built, a folder per run."""
INVENTORY_DIR = "inventory"
"""The home's folder of the library."""
RUNS_DIR = "runs"
"""The home's folder of the runs' records: run files, history.db, event logs, artifacts."""
VENV_DIR = ".agent_venv"
"""The home's venv the agents run on."""
MODELS_FILE = "models.toml"
"""The home's file of model profiles (what AgentGOD may send a model, and its price)."""


MIN_FREE_BYTES = 20 * 2**20
"""The free space a run needs in the home before it spends anything: its agents' files, event
log, run file and history rows take well under this; artifacts are capped on their own."""


class ConfigError(ValueError):
    """A setting holds a value we cannot use; says which, what is allowed and what it got."""

    def __init__(self, setting: str, allowed: str, got: str) -> None:
        self.setting = setting
        self.allowed = allowed
        self.got = got
        super().__init__(f"{setting} must be {allowed}, got {got!r}")


class ModelsFileError(ConfigError):
    """The home's models.toml cannot be used: not TOML, or an entry that says something wrong.

    Its `setting` is the file's name: a read-only command that sets it aside (an empty override
    of that name) goes on as if there were no file."""

    def __init__(self, path: Path, where: str, allowed: str, got: str) -> None:
        super().__init__(MODELS_FILE, allowed, got)
        self.path = path
        self.where = where
        self.args = (f"{path}: {where + ' ' if where else ''}must be {allowed}, got {got!r}",)


class HomeError(RuntimeError):
    """AGENTGOD_HOME cannot hold AgentGOD's files: a file, a folder that cannot be written, or
    one on a disk too full to record a run (`full`)."""

    def __init__(self, path: Path, reason: str, *, full: bool = False) -> None:
        self.path = path
        self.reason = reason
        self.full = full
        super().__init__(f"{path}: {reason}")


class MissingApiKeyError(RuntimeError):
    """No ANTHROPIC_API_KEY in the environment or in .env."""

    asked = False
    """True when a person was just asked for one and entered none."""


@dataclass(frozen=True)
class Tracing:
    """Where and how each run is exported as an OpenTelemetry trace (otlp.py); on only when an
    endpoint is set."""

    url: str
    """The OTLP/HTTP traces URL: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, else TRACE_ENDPOINT
    or OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended."""
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """OTEL_EXPORTER_OTLP_(TRACES_)HEADERS: key=value pairs (a backend's key: never shown)."""
    timeout_seconds: float = 10.0
    """OTEL_EXPORTER_OTLP_TIMEOUT (milliseconds there): how long one export may take."""


@dataclass(frozen=True)
class ModelRef:
    """A model in the fallback chain: its id, and the endpoint it is served at when that is not
    ANTHROPIC_BASE_URL (`name@http://127.0.0.1:11434`)."""

    model: str
    base_url: str | None = None

    def __str__(self) -> str:
        return f"{self.model}@{self.base_url}" if self.base_url else self.model


@dataclass(frozen=True)
class Settings:
    """Every tunable, validated: one snapshot, read once per run and passed down."""

    model: str
    """Model for planning, code generation, merging and the agents themselves (MODEL)."""
    fast_model: str
    """Cheap model for the judge, the clarifying question and small talk (FAST_MODEL)."""
    deep_model: str
    """Model for the council's review of deep tasks (DEEP_MODEL; defaults to MODEL)."""
    effort: Effort
    """Configured effort level for standard tasks (LLM_EFFORT)."""
    max_agents: int
    """Upper bound on agents in one plan (MAX_AGENTS)."""
    max_parallel_agents: int
    """Worker threads for generation and each execution wave (MAX_PARALLEL_AGENTS)."""
    agent_timeout_seconds: float
    """Wall-clock limit for one agent process (AGENT_TIMEOUT_SECONDS)."""
    api_timeout_seconds: float
    """Deadline of one model call of up to 2,048 output tokens, retries included; a call allowed
    more tokens gets proportionally longer (API_TIMEOUT_SECONDS; see llm.deadline_seconds)."""
    api_retries: int
    """Retries of a model call that failed in a way worth retrying, within its deadline
    (API_RETRIES)."""
    agent_repair_attempts: int
    """Regenerations of a crashed agent before it is excluded (AGENT_REPAIR_ATTEMPTS)."""
    generation_attempts: int
    """Tries to write code that codeguard accepts (GENERATION_ATTEMPTS)."""
    task_revisions: int
    """Extra rounds when the judge finds the answer short (TASK_REVISIONS; 0 disables the judge)."""
    council: CouncilMode
    """auto: deep tasks only; always; off (COUNCIL)."""
    sandbox: SandboxMode
    """OS confinement of agents: auto, strict or off (SANDBOX)."""
    budget_usd: float | None
    """Hard cap on a task's spend in dollars (BUDGET_USD); None means no cap."""
    web: bool
    """Whether agents the planner marks for the web may search and fetch pages (WEB=on|off)."""
    max_searches_per_agent: int
    """Web searches one agent's calls may make together (MAX_SEARCHES_PER_AGENT)."""
    attach_max_bytes: int
    """Largest file a task may attach (ATTACH_MAX_MB, in megabytes)."""
    attach_max_files: int
    """Most files one task may attach, a folder's files counted one by one (ATTACH_MAX_FILES)."""
    artifacts_max_bytes: int
    """What all of one run's artifacts may hold together (ARTIFACTS_MAX_MB, in megabytes)."""
    home: Path
    """Where generated_agents/, inventory/, runs/ and .agent_venv/ live (AGENTGOD_HOME)."""
    base_url: str | None
    """ANTHROPIC_BASE_URL, when set (tests and proxies)."""
    api_key: str | None = field(default=None, repr=False)
    """ANTHROPIC_API_KEY, when there is one; `llm` builds its client with it. Never shown."""
    tracing: Tracing | None = None
    """Where each run's trace goes (TRACE_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT); None: off,
    and nothing of the exporter is imported."""
    trace_content: bool = False
    """TRACE_CONTENT=on: a trace (sent, or written by `show --trace`) holds the task, the answer,
    the agents' inputs and outputs and the plan too."""
    service_name: str = "agentgod"
    """OTEL_SERVICE_NAME: the service a trace is filed under."""
    fallbacks: tuple[ModelRef, ...] = ()
    """MODEL_FALLBACKS (or --fallback): the models tried in order when a call fails with 429,
    529, 5xx, a timeout or a dropped connection after its own retries."""
    profiles: tuple[ProfileOverride, ...] = ()
    """The home's models.toml entries, in the file's order (models.resolve reads them)."""
    library_dir: Path | None = None
    """LIBRARY_DIR: a library of its own instead of the home's inventory/ (an eval gives each
    arm one, so its runs neither see nor change yours)."""

    def endpoint_of(self, model: str) -> str | None:
        """Where `model` is served: the endpoint its fallback entry names, else
        ANTHROPIC_BASE_URL (None: the Anthropic API)."""
        for entry in self.fallbacks:
            if entry.model == model and entry.base_url:
                return entry.base_url
        return self.base_url

    def profile(self, model: str, base_url: str | None = None) -> Profile:
        """What may be sent to `model` (at `base_url`, else where it is served) and its price."""
        where = base_url if base_url is not None else self.endpoint_of(model)
        return models.resolve(model, local=models.is_local(where), overrides=self.profiles)

    def price_of(self, model: str) -> Price | None:
        """`model`'s price per million tokens; None when unknown."""
        return self.profile(model).price

    def effort_for(self, model: str, effort: str) -> str | None:
        """The effort to send `model` for a wanted level (lowered to what its profile takes);
        None: send none."""
        level = models.profile_efforts(self.profile(model), effort)
        return level.value if level is not None else None

    def models_in_use(self) -> list[ModelRef]:
        """The models this snapshot may call, each once: MODEL, FAST_MODEL, DEEP_MODEL, then the
        fallbacks."""
        found: list[ModelRef] = []
        for ref in (
            ModelRef(self.model),
            ModelRef(self.fast_model),
            ModelRef(self.deep_model),
            *self.fallbacks,
        ):
            if ref not in found:
                found.append(ref)
        return found

    @property
    def agents_dir(self) -> Path:
        return self.home / AGENTS_DIR

    @property
    def inventory_dir(self) -> Path:
        return self.library_dir or self.home / INVENTORY_DIR

    @property
    def runs_dir(self) -> Path:
        return self.home / RUNS_DIR

    @property
    def venv_dir(self) -> Path:
        return self.home / VENV_DIR


def default_home() -> Path:
    """~/.agentgod, however AgentGOD was installed.

    Never the source checkout of an editable install: the key and the library would sit in the
    source tree, where `git clean -fdx` deletes them and a commit may carry them away.
    """
    return Path.home() / ".agentgod"


def home() -> Path:
    """AGENTGOD_HOME from the real environment only: it decides where .env itself lives."""
    raw = os.environ.get("AGENTGOD_HOME", "").strip()
    return Path(raw).expanduser().resolve() if raw else default_home()


def runs_dir() -> Path:
    """The home's runs folder, from AGENTGOD_HOME alone: reading the records needs no other
    setting, so a bad one elsewhere never hides the history."""
    return home() / RUNS_DIR


def agents_dir() -> Path:
    """The home's folder of agents being built, from AGENTGOD_HOME alone."""
    return home() / AGENTS_DIR


def inventory_dir() -> Path:
    """The library's folder: LIBRARY_DIR when set, else the home's inventory/."""
    return _library_dir() or home() / INVENTORY_DIR


def _library_dir() -> Path | None:
    raw = env("LIBRARY_DIR")
    return Path(raw).expanduser().resolve() if raw else None


def check_home() -> Path:
    """The home, created if missing and proven writable, with room for a run's records; raises
    HomeError naming the path.

    Called before a run spends anything: a home in /proc, on a file or on a full disk would
    otherwise be found out by the first agent file written, after the plan was paid for (an
    empty probe file fits on a full disk, so the free space is measured).
    """
    where = home()
    if where.exists() and not where.is_dir():
        raise HomeError(where, "it is a file, not a folder")
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=where, prefix=".agentgod-probe-"):
            pass
        free = shutil.disk_usage(where).free
    except OSError as error:
        full = error.errno in (errno.ENOSPC, errno.EDQUOT)
        raise HomeError(where, error.strerror or type(error).__name__, full=full) from None
    if free < MIN_FREE_BYTES:
        raise HomeError(
            where,
            f"the disk holding it has {free / 2**20:.1f} MB free; a run needs at least "
            f"{MIN_FREE_BYTES // 2**20} MB to keep its agents and records",
            full=True,
        )
    # The folders a run writes into, each proven writable too: a `runs/` that is a file or
    # read-only would otherwise be found by the archive, after the run was paid for.
    for folder, mode in ((where / "runs", 0o700), (where / "generated_agents", 0o777)):
        if folder.exists() and not folder.is_dir():
            raise HomeError(folder, "it is a file, not a folder")
        try:
            folder.mkdir(mode=mode, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder, prefix=".agentgod-probe-"):
                pass
        except OSError as error:
            full = error.errno in (errno.ENOSPC, errno.EDQUOT)
            raise HomeError(folder, error.strerror or type(error).__name__, full=full) from None
    return where


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


Overrides = Mapping[str, str]
"""Settings this process was told (flags, a key typed at the prompt), by variable name; they
win over the environment and `.env`, and an empty value means the setting's default."""

_reading: ContextVar[tuple[Path, dict[str, str], Overrides] | None] = ContextVar(
    "_reading", default=None
)
"""The home, its .env and the overrides while `settings` reads them, so a snapshot is read from
one of each."""


@contextlib.contextmanager
def _one_reading(overrides: Overrides) -> Iterator[Path]:
    """Resolve the home and read its .env once for every setting read inside (this thread
    only): a snapshot is then consistent, and ~20 times cheaper than a lookup per setting."""
    where = home()
    token = _reading.set((where, _dotenv(where / ".env"), overrides))
    try:
        yield where
    finally:
        _reading.reset(token)


def env(name: str, default: str = "", overrides: Overrides | None = None) -> str:
    """A setting's raw text: the overrides, else the real environment, else `<home>/.env`, else
    the default."""
    reading = _reading.get()
    told = overrides if overrides is not None else (reading[2] if reading else {})
    value = told[name] if name in told else os.environ.get(name)
    if value is None:
        value = (reading[1] if reading else _dotenv(home() / ".env")).get(name)
    return default if value is None or value.strip() == "" else value.strip()


NumberT = TypeVar("NumberT", int, float)
ChoiceT = TypeVar("ChoiceT", bound=StrEnum)


def _number(name: str, default: str, low: float, high: float, cast: type[NumberT]) -> NumberT:
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


def _choice(name: str, default: ChoiceT, choices: type[ChoiceT]) -> ChoiceT:
    raw = env(name, default).lower()
    try:
        return choices(raw)
    except ValueError:
        raise ConfigError(name, "one of " + ", ".join(choices), raw) from None


def _model(name: str, default: str) -> str:
    raw = env(name, default)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:@/\-]{1,99}", raw):
        raise ConfigError(name, "a model id such as claude-sonnet-5-5", raw)
    return raw


def _fallbacks() -> tuple[ModelRef, ...]:
    """MODEL_FALLBACKS: model ids separated by commas or spaces, each optionally with its own
    endpoint after an @ (`qwen3:8b@http://127.0.0.1:11434`)."""
    raw = env("MODEL_FALLBACKS")
    allowed = "model ids separated by commas, each optionally name@http://host:port"
    found: list[ModelRef] = []
    for item in re.split(r"[\s,]+", raw) if raw else ():
        if not item:
            continue
        name, at, url = item.rpartition("@")
        if not (at and re.match(r"https?://", url, re.IGNORECASE)):
            name, url = item, ""
        if "://" in name or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:@/\-]{1,99}", name):
            raise ConfigError("MODEL_FALLBACKS", allowed, item)
        if url:
            _url("MODEL_FALLBACKS", url)
        ref = ModelRef(name, url.rstrip("/") or None)
        if ref not in found:
            found.append(ref)
    return tuple(found)


_profiles_cache: dict[Path, tuple[int, tuple[ProfileOverride, ...]]] = {}


def _profiles(where: Path) -> tuple[ProfileOverride, ...]:
    """The home's models.toml, parsed (re-read only when it changes); none without the file."""
    path = where / MODELS_FILE
    reading = _reading.get()
    if reading is not None and reading[2].get(MODELS_FILE) == "":
        return ()  # set aside for this command (a read-only one, despite a broken file)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return ()
    with _dotenv_lock:
        cached = _profiles_cache.get(path)
        if cached and cached[0] == stamp:
            return cached[1]
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ModelsFileError(path, "", "a readable file", error.strerror or str(error)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ModelsFileError(path, "", "valid TOML", str(error)) from None
    try:
        parsed = models.parse_profiles(data)
    except models.ProfileError as error:
        raise ModelsFileError(path, error.where, error.allowed, str(error.got)) from None
    with _dotenv_lock:
        _profiles_cache[path] = (stamp, parsed)
    return parsed


def _budget() -> float | None:
    if not env("BUDGET_USD"):
        return None
    return _number("BUDGET_USD", "", *BUDGET_USD_RANGE, float)


def _megabytes(name: str, default: str) -> int:
    return int(_number(name, default, 0.001, 100_000, float) * 1024 * 1024)


def _url(name: str, raw: str) -> str:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(raw)
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(name, "an http:// or https:// URL such as http://localhost:4318", raw)
    return raw


def _headers(name: str) -> tuple[tuple[str, str], ...]:
    """OTLP exporter headers: comma-separated key=value pairs, values percent-encoded."""
    from urllib.parse import unquote

    raw = env(name)
    pairs = []
    for item in raw.split(",") if raw else ():
        key, equals, value = item.partition("=")
        key, value = key.strip(), unquote(value.strip())
        if not equals or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", key):
            raise ConfigError(name, "comma-separated key=value pairs", "(not shown)")
        if value:
            redact.register(value)
        pairs.append((key, value))
    return tuple(pairs)


def _tracing() -> Tracing | None:
    """The export of each run as a trace: off unless an endpoint is set (and OTEL_SDK_DISABLED
    is not true)."""
    if env("OTEL_SDK_DISABLED").lower() in ("true", "1", "yes", "on"):
        return None
    traces = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if traces:
        url = _url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces)
    else:
        name = "TRACE_ENDPOINT" if env("TRACE_ENDPOINT") else "OTEL_EXPORTER_OTLP_ENDPOINT"
        base = env(name)
        if not base:
            return None
        url = _url(name, base).rstrip("/") + "/v1/traces"
    headers = dict(_headers("OTEL_EXPORTER_OTLP_HEADERS"))
    headers.update(_headers("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
    return Tracing(
        url=url,
        headers=tuple(headers.items()),
        timeout_seconds=_number("OTEL_EXPORTER_OTLP_TIMEOUT", "10000", 1, 600_000, float) / 1000,
    )


def settings(overrides: Overrides | None = None) -> Settings:
    """Read and validate every setting now; raises ConfigError naming the first bad one."""
    with _one_reading(overrides or {}) as where:
        return _read_settings(where)


def _read_settings(where: Path) -> Settings:
    model = _model("MODEL", DEFAULT_MODEL)
    base_url = env("ANTHROPIC_BASE_URL") or None
    profiles = _profiles(where)
    main = models.resolve(model, local=models.is_local(base_url), overrides=profiles)
    return Settings(
        model=model,
        # Beside a model that is no Claude model (a local one), the fast jobs use it too.
        fast_model=_model("FAST_MODEL", DEFAULT_FAST_MODEL if models.is_claude(model) else model),
        deep_model=_model("DEEP_MODEL", model),
        effort=_choice("LLM_EFFORT", Effort.MEDIUM, Effort),
        max_agents=_number("MAX_AGENTS", "6", 1, 12, int),
        max_parallel_agents=_number("MAX_PARALLEL_AGENTS", "4", 1, 32, int),
        agent_timeout_seconds=_number("AGENT_TIMEOUT_SECONDS", "300", 1, 3600, float),
        api_timeout_seconds=_number("API_TIMEOUT_SECONDS", "30", 1, 3600, float),
        api_retries=_number("API_RETRIES", "2", 0, 10, int),
        agent_repair_attempts=_number("AGENT_REPAIR_ATTEMPTS", "2", 0, 5, int),
        generation_attempts=_number("GENERATION_ATTEMPTS", "3", 1, 6, int),
        task_revisions=_number("TASK_REVISIONS", "1", 0, 3, int),
        council=_choice("COUNCIL", CouncilMode.AUTO, CouncilMode),
        sandbox=_choice("SANDBOX", SandboxMode.AUTO, SandboxMode),
        budget_usd=_budget(),
        # A model without the API's server tools gets none: the planner is told the web is off.
        web=_choice("WEB", Switch.ON, Switch) is Switch.ON and main.web,
        max_searches_per_agent=_number("MAX_SEARCHES_PER_AGENT", "5", 0, 100, int),
        attach_max_bytes=_megabytes("ATTACH_MAX_MB", "100"),
        attach_max_files=_number("ATTACH_MAX_FILES", "50", 1, 1000, int),
        artifacts_max_bytes=_megabytes("ARTIFACTS_MAX_MB", "100"),
        home=where,
        base_url=base_url,
        api_key=_registered(env("ANTHROPIC_API_KEY")) or None,
        tracing=_tracing(),
        trace_content=_choice("TRACE_CONTENT", Switch.OFF, Switch) is Switch.ON,
        service_name=env("OTEL_SERVICE_NAME", "agentgod"),
        fallbacks=_fallbacks(),
        profiles=profiles,
        library_dir=_library_dir(),
    )


def _registered(key: str) -> str:
    """A key, known to redaction from the moment it is read."""
    if key:
        redact.register(key)
    return key


def needs_key(model: str, base_url: str | None) -> bool:
    """Whether calling `model` at `base_url` needs the Anthropic key: always on the Anthropic
    API, and for a Claude model anywhere (a proxy to it); a local server's own model needs none."""
    return is_anthropic(base_url) or models.is_claude(model)


def is_anthropic(base_url: str | None) -> bool:
    """Whether an endpoint is the Anthropic API itself (None: the default, which is)."""
    from urllib.parse import urlsplit

    if not base_url:
        return True
    try:
        return (urlsplit(base_url).hostname or "").lower() == "api.anthropic.com"
    except ValueError:
        return False


def api_key(overrides: Overrides | None = None) -> str:
    """The key, from the overrides, the environment or .env; registered for redaction the moment
    it is read. "" when none is set and none is needed (a local server's own model)."""
    key = _registered(env("ANTHROPIC_API_KEY", overrides=overrides))
    if not key:
        model = env("MODEL", DEFAULT_MODEL, overrides=overrides)
        if not needs_key(model, env("ANTHROPIC_BASE_URL", overrides=overrides) or None):
            return ""
        raise MissingApiKeyError("ANTHROPIC_API_KEY is not set")
    return key


def key_of(snapshot: Settings) -> str:
    """The snapshot's key, or MissingApiKeyError: what a model call needs first ("" when its main
    model needs none)."""
    return key_for(snapshot, snapshot.model, snapshot.base_url)


def key_for(snapshot: Settings, model: str, base_url: str | None) -> str:
    """The key to send with a call to `model` at `base_url`: the snapshot's to ANTHROPIC_BASE_URL
    and to the Anthropic API; none to any other endpoint (a fallback's own local server never
    sees it). MissingApiKeyError when one is needed and there is none."""
    ours = base_url == snapshot.base_url or is_anthropic(base_url)
    if ours and snapshot.api_key:
        return snapshot.api_key
    if ours and needs_key(model, base_url):
        raise MissingApiKeyError("ANTHROPIC_API_KEY is not set")
    return ""
