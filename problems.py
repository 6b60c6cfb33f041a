"""problems.py — turn any failure into something a person can act on.

`explain(error)` returns a `Problem`: a headline (never a class name), the thing the user can
change, and the raw detail for renderers to dim. Exceptions are matched by type, the most
specific class in the MRO first. The types are looked up in `sys.modules` when an error is
explained, never imported: an error can only be an SDK (or pipeline) error if that module was
loaded, so this module loads fast and a library's unrelated `ValidationError` is not mistaken for
pydantic's. Every field passes through `redact`, so a key never reaches a terminal through one.
"""

from __future__ import annotations

import errno
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from agentgod import redact
from agentgod.kinds import AgentKind, BudgetOwner
from agentgod.models import DEFAULT_FAST_MODEL, DEFAULT_MODEL
from agentgod.text import dollars


@dataclass(frozen=True)
class Problem:
    """A failure, translated."""

    headline: str
    """What went wrong, in one plain sentence."""
    advice: str
    """The thing the user can change to make it work."""
    technical: str
    """The raw error text, for the curious; renderers show it dimmed."""
    kind: str = "error"
    """A stable identifier for scripts (`--json` reports it as error.type)."""
    budget_of: str = ""
    """With kind `budget`: whose budget stopped the run (a kinds.BudgetOwner: its own, or its
    batch's); `--json` reports it as error.budget_of, so a batch resumes only what its own
    budget cut. "" for any other kind."""


def _technical(error: BaseException) -> str:
    """The error's class and message; for an API status error its status and the API's own
    message, never the raw body an API or a proxy sent (a dict's repr, a page of HTML)."""
    name = type(error).__name__
    status = getattr(error, "status_code", None)
    if isinstance(status, int) and hasattr(error, "body"):
        message = _api_message(error).strip()
        raw = not message or message.startswith(("{", "[", "<")) or "\n" in message
        return f"{name}: HTTP {status}" + ("" if raw else f" - {message[:300]}")
    text = str(error).strip()
    return f"{name}: {text}" if text else name


def _api_message(error: BaseException) -> str:
    """The API's own message from an SDK status error, when it carries one."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            message = inner.get("message")
            if isinstance(message, str):
                return message
    return str(getattr(error, "message", "") or error)


def _missing_key(error: BaseException) -> Problem:
    if getattr(error, "asked", False):  # at the prompt that just asked: no circle back to it
        return Problem(
            "No Anthropic API key was entered.",
            "Paste the key at the prompt (it is not shown as you type), or set "
            "ANTHROPIC_API_KEY in your environment; keys are at "
            "https://console.anthropic.com/settings/keys.",
            "",
            "missing_key",
        )
    return Problem(
        "No Anthropic API key is set.",
        "Create a key at https://console.anthropic.com/settings/keys, then run "
        "`agentgod key set` (or set ANTHROPIC_API_KEY in your environment or in the .env file "
        "in AGENTGOD_HOME; `agentgod` at a terminal asks for it).",
        _technical(error),
        "missing_key",
    )


def _home(error: BaseException) -> Problem:
    path = getattr(error, "path", "AGENTGOD_HOME")
    return Problem(
        f"AgentGOD cannot keep its files in {path}.",
        "Set AGENTGOD_HOME to a folder you can write (it is created if missing), "
        "or unset it to use the default.",
        str(getattr(error, "reason", "")) or _technical(error),
        "home",
    )


def _disk_full(error: BaseException) -> Problem:
    """No space left where AgentGOD writes (ENOSPC, or a HomeError that found the disk full)."""
    where = getattr(error, "path", None) or getattr(error, "filename", None) or "AGENTGOD_HOME"
    return Problem(
        f"The disk holding {where} is full.",
        "Free some space on it, or set AGENTGOD_HOME to a folder on another disk. What the run "
        "had paid for is kept as far as the disk let it be written.",
        _technical(error),
        "disk",
    )


def _wrong_key(error: BaseException) -> Problem:
    return Problem(
        "The Anthropic API rejected the key.",
        "Check ANTHROPIC_API_KEY: it may be mistyped, revoked or for another organisation. "
        "`agentgod key set` replaces it; keys are at https://console.anthropic.com/settings/keys.",
        _technical(error),
        "authentication",
    )


def _permission(error: BaseException) -> Problem:
    return Problem(
        "The API key is not allowed to do this.",
        "Check the key's workspace permissions in the Anthropic console, or try another MODEL.",
        _technical(error),
        "permission",
    )


def _unknown_model(error: BaseException) -> Problem:
    """Named with the setting that held it (FAST_MODEL for the intake, the judge and a key's
    test; DEEP_MODEL for the council; MODEL otherwise), and never suggested as its own fix."""
    message = _api_message(error)
    setting = str(getattr(error, "setting", "") or "MODEL")
    model = message.split("model:", 1)[1].strip() if "model:" in message else ""
    model = model or os.environ.get(setting, "") or "the configured model"
    defaults = (
        (DEFAULT_FAST_MODEL, DEFAULT_MODEL)
        if setting == "FAST_MODEL"
        else (DEFAULT_MODEL, DEFAULT_FAST_MODEL)
    )
    other = next(m for m in defaults if m != model)
    where = "--model or the MODEL setting" if setting == "MODEL" else f"the {setting} setting"
    return Problem(
        f"The model {model} was not found.",
        f"Pick a model your key can use with {where} (for example {other}).",
        _technical(error),
        "unknown_model",
    )


def _rate_limited(error: BaseException) -> Problem:
    return Problem(
        "The Anthropic API is rate-limiting this key.",
        "Wait a minute and retry, or lower MAX_PARALLEL_AGENTS so fewer calls run at once.",
        _technical(error),
        "rate_limit",
    )


def _overloaded(error: BaseException) -> Problem:
    return Problem(
        "The Anthropic API is overloaded right now.",
        "Retry in a little while; each call was already retried (API_RETRIES sets how often).",
        _technical(error),
        "overloaded",
    )


def _server_error(error: BaseException) -> Problem:
    return Problem(
        "The Anthropic API had an internal error.",
        "Retry in a little while; each call was already retried (API_RETRIES sets how often).",
        _technical(error),
        "server_error",
    )


def _bad_request(error: BaseException) -> Problem:
    return Problem(
        "The Anthropic API refused the request.",
        "Check MODEL and LLM_EFFORT are valid together; the detail below says what it disliked.",
        _technical(error),
        "bad_request",
    )


def _connection(error: BaseException) -> Problem:
    base_url = os.environ.get("ANTHROPIC_BASE_URL", "")
    where = f"ANTHROPIC_BASE_URL ({base_url})" if base_url else "api.anthropic.com"
    advice = f"Check your network connection and that {where} is reachable."
    if base_url:
        advice += " Unset ANTHROPIC_BASE_URL to use the public API."
    return Problem("Could not reach the Anthropic API.", advice, _technical(error), "connection")


def _timeout(error: BaseException) -> Problem:
    seconds = getattr(error, "seconds", None)
    within = f" within {seconds:g} s" if isinstance(seconds, int | float) else " in time"
    return Problem(
        f"The Anthropic API did not finish answering{within}.",
        "Retry later; if the API is only slow, raise API_TIMEOUT_SECONDS (the deadline grows "
        "with the room a call asks for) or choose a lower --effort.",
        _technical(error),
        "timeout",
    )


def _malformed(error: BaseException) -> Problem:
    return Problem(
        "The Anthropic API sent a reply that is not a message (a 200 without its content).",
        "Retry in a little while; it was already retried (API_RETRIES). If ANTHROPIC_BASE_URL "
        "points at a proxy, check that it passes the API's replies through unchanged.",
        _technical(error),
        "malformed_reply",
    )


def _invalid_reply(error: BaseException) -> Problem:
    return Problem(
        "The model's structured reply did not match the expected shape.",
        "Retry the task; if it repeats, try another MODEL or a higher --effort.",
        _technical(error),
        "invalid_reply",
    )


def _config(error: BaseException) -> Problem:
    setting = getattr(error, "setting", "a setting")
    return Problem(
        f"The setting {setting} has a value AgentGOD cannot use.",
        f"Set {setting} to {getattr(error, 'allowed', 'a valid value')} "
        "(in the environment, in .env, or with the matching flag).",
        _technical(error),
        "config",
    )


def _attachment(error: BaseException) -> Problem:
    path = getattr(error, "path", "a file")
    reason = getattr(error, "reason", "") or "it cannot be read"
    return Problem(
        f"Cannot attach {path}: {reason}.",
        getattr(error, "advice", "") or "Attach another file, or leave this one out.",
        _technical(error),
        "attachment",
    )


def _interrupted(error: BaseException) -> Problem:
    return Problem(
        "Stopped.",
        "The run was interrupted; nothing more was spent after the interrupt.",
        "",
        "interrupted",
    )


def _sandbox(error: BaseException) -> Problem:
    return Problem(
        "The agent sandbox is not available on this machine.",
        "SANDBOX=strict needs Landlock and seccomp; use SANDBOX=auto to run with the layers "
        "this machine has.",
        _technical(error),
        "sandbox",
    )


def _budget(error: BaseException) -> Problem:
    spent = getattr(error, "spent_usd", None)
    cap = getattr(error, "budget_usd", None)
    needed = getattr(error, "needed_usd", 0.0) or 0.0
    owner = getattr(error, "owner", None)
    owner = owner if isinstance(owner, BudgetOwner) else BudgetOwner.RUN
    needs = f"; the next call needed up to {dollars(needed)}" if needed else ""
    figures = f" (spent {dollars(spent)} of {dollars(cap)})" if spent is not None and cap else ""
    if owner is BudgetOwner.BATCH:
        return Problem(
            f"The batch's budget ran out before this run's answer was ready{figures}{needs}.",
            "Resume the batch with a larger budget (`agentgod batch resume ID --budget USD`, "
            "the whole batch's cap): it runs this task again on what it had paid for.",
            _technical(error),
            "budget",
            owner,
        )
    if spent is not None and cap and spent <= 0:
        headline = f"The budget of {dollars(cap)} cannot pay for the first model call{needs}."
    else:
        headline = f"The budget ran out before any answer was ready{figures}{needs}."
    return Problem(
        headline,
        "Raise --budget or BUDGET_USD, or ask for less at once.",
        _technical(error),
        "budget",
        owner,
    )


# Verb phrases that read right after "1 agent" and "4 agents" alike.
_FAILURE_STORIES: dict[str, str] = {
    AgentKind.TIMEOUT: "timed out after {timeout:g} s",
    AgentKind.CRASH: "crashed",
    AgentKind.SILENT: "printed nothing",
    AgentKind.UNSTARTABLE: "could not start",
    AgentKind.OUTPUT_LIMIT: "printed more output than allowed",
    AgentKind.SANDBOX: "hit a sandbox wall",
    AgentKind.REJECTED: "never passed the code guard",
    AgentKind.BUDGET: "never ran: the budget ran out",
}
_FAILURE_ADVICE: dict[str, str] = {
    AgentKind.TIMEOUT: "Raise AGENT_TIMEOUT_SECONDS, or ask for less work at once.",
    AgentKind.CRASH: "Retry; raise AGENT_REPAIR_ATTEMPTS to give repairs more tries.",
    AgentKind.SILENT: "Retry; the agents returned no output.",
    AgentKind.UNSTARTABLE: "Check that Python can run programs from AGENTGOD_HOME.",
    AgentKind.OUTPUT_LIMIT: "Ask for shorter intermediate results.",
    AgentKind.SANDBOX: "The sandbox blocked what the agents tried (see the detail); "
    "SANDBOX=off disables it, at your own risk.",
    AgentKind.REJECTED: "Retry, or raise GENERATION_ATTEMPTS.",
    AgentKind.BUDGET: "Raise --budget or BUDGET_USD, or ask for less at once.",
}


def _every_agent_failed(error: BaseException) -> Problem:
    """Four identical timeouts are one story, not four: group by cause, lead with the biggest."""
    failures: list[Any] = list(getattr(error, "failures", []) or [])
    timeout = float(getattr(error, "timeout_seconds", 0) or 0)
    kinds = Counter(getattr(f, "kind", "crash") for f in failures).most_common()
    if not kinds:
        kinds = [("crash", 0)]

    def story(kind: str, count: int) -> str:
        noun = "agent" if count == 1 else "agents"
        return f"{count} {noun} " + _FAILURE_STORIES.get(kind, "failed").format(timeout=timeout)

    headline = "; ".join(story(kind, count) for kind, count in kinds)
    headline = headline[0].upper() + headline[1:] + "."
    advice = _FAILURE_ADVICE.get(kinds[0][0], "Retry the task.")
    detail = "; ".join(f"{getattr(f, 'name', '?')}: {getattr(f, 'reason', '')}" for f in failures)
    return Problem(headline, advice, detail or _technical(error), "all_agents_failed")


def _merge_failed(error: BaseException) -> Problem:
    """The agents' work is done and paid for: say what stopped the answer, and where the work is."""
    outputs = getattr(error, "outputs", {}) or {}
    count = f"{len(outputs)} agent" + ("" if len(outputs) == 1 else "s")
    cause = getattr(error, "cause", None)
    if cause is None:
        return Problem(
            f"The agents finished ({count}), but the model declined to write the answer.",
            "Rephrase the task; the agents' outputs are kept in the run file (agentgod history).",
            _technical(error),
            "merge_refused",
        )
    reason = explain(cause)
    lowered = reason.headline[:1].lower() + reason.headline[1:]
    return Problem(
        f"The agents finished ({count}), but merging their outputs failed: {lowered}",
        f"{reason.advice} The agents' outputs are kept in the run file (agentgod history).",
        reason.technical,
        "merge_failed",
    )


def _gateway(error: BaseException) -> Problem:
    """A batch's gateway refused a run's call (its capability, not the API, said no)."""
    kind = _api_error_type(error)
    said = _api_message(error)
    headlines = {
        "capability_expired": f"The batch's gateway refused this run: {said}.",
        "capability_invalid": f"The gateway refused this run's key: {said}.",
        "model_not_allowed": f"The gateway refused this call: {said}.",
    }
    advice = {
        "capability_expired": "Resume the batch (agentgod batch resume ID): each run it starts "
        "gets a fresh capability.",
        "capability_invalid": "Run the task through agentgod batch, which gives each run its "
        "capability; the gateway takes no other key.",
        "model_not_allowed": "Run the batch with the model its runs should use (--model).",
    }
    return Problem(headlines[kind], advice[kind], _technical(error), kind)


_GATEWAY_REFUSALS = frozenset({"capability_expired", "capability_invalid", "model_not_allowed"})
"""The error types only a batch's gateway answers (gateway.py): told apart from the API's own
401 and 403 by their type, not their status."""


def _task_too_large(error: BaseException) -> Problem:
    return Problem(
        str(getattr(error, "headline", "") or error),
        "Save the text to a file and attach it instead (`@notes.txt` in a short task, or --file): "
        "the planner sees a sample of it, and the agents' own code reads it whole. Nothing was "
        "spent.",
        "",
        "task_too_large",
    )


def _generic(error: BaseException) -> Problem:
    return Problem(
        "Something went wrong and the task did not finish.",
        "Retry the task; if it keeps failing, the detail below says where.",
        _technical(error),
        "error",
    )


def _models_file(error: BaseException) -> Problem:
    path = getattr(error, "path", "models.toml")
    where = getattr(error, "where", "")
    return Problem(
        f"The models file {path} cannot be used.",
        f"Fix {where or 'the file'}: it must be {getattr(error, 'allowed', 'valid')} "
        "(README: Local models and fallbacks), or move the file aside.",
        _technical(error),
        "config",
    )


def _unpriced(error: BaseException) -> Problem:
    model = getattr(error, "model", "the model")
    return Problem(
        f"The model {model} has no known price, so the budget cannot be kept.",
        f"Give {model} a price in models.toml in AgentGOD's home (price = [input, output] in "
        "USD per million tokens; [0, 0] if it costs nothing), or run without --budget.",
        _technical(error),
        "unpriced",
    )


Translator = Callable[[BaseException], Problem]

# (module, class) → translator. The most specific class in the MRO wins, so OverloadedError is
# not mistaken for its parent InternalServerError, nor APITimeoutError for APIConnectionError.
_BY_TYPE: tuple[tuple[str, str, Translator], ...] = (
    ("agentgod.config", "MissingApiKeyError", _missing_key),
    ("agentgod.config", "ModelsFileError", _models_file),
    ("agentgod.config", "ConfigError", _config),
    ("agentgod.llm", "UnpricedModelError", _unpriced),
    ("agentgod.config", "HomeError", _home),
    ("agentgod.attachments", "AttachmentError", _attachment),
    ("agentgod.session", "TaskTooLargeError", _task_too_large),
    ("agentgod.wire", "AuthenticationError", _wrong_key),
    ("agentgod.wire", "PermissionDeniedError", _permission),
    ("agentgod.wire", "NotFoundError", _unknown_model),
    ("agentgod.wire", "RateLimitError", _rate_limited),
    ("agentgod.wire", "OverloadedError", _overloaded),
    ("agentgod.wire", "InternalServerError", _server_error),
    ("agentgod.wire", "BadRequestError", _bad_request),
    ("agentgod.wire", "RequestTooLargeError", _bad_request),
    ("agentgod.wire", "APITimeoutError", _timeout),
    ("agentgod.wire", "MalformedReplyError", _malformed),
    ("agentgod.wire", "APIConnectionError", _connection),
    ("anthropic", "AuthenticationError", _wrong_key),
    ("anthropic", "PermissionDeniedError", _permission),
    ("anthropic", "NotFoundError", _unknown_model),
    ("anthropic", "RateLimitError", _rate_limited),
    ("anthropic", "OverloadedError", _overloaded),
    ("anthropic", "InternalServerError", _server_error),
    ("anthropic", "BadRequestError", _bad_request),
    ("anthropic", "APITimeoutError", _timeout),
    ("agentgod.llm", "DeadlineExceeded", _timeout),
    ("agentgod.llm", "MalformedReplyError", _malformed),
    ("anthropic", "APIConnectionError", _connection),
    ("pydantic", "ValidationError", _invalid_reply),
    ("agentgod.llm", "StructuredReplyError", _invalid_reply),
    ("builtins", "KeyboardInterrupt", _interrupted),
    ("agentgod.sandbox", "SandboxUnavailable", _sandbox),
    ("agentgod.ledger", "BudgetExhaustedError", _budget),
    ("agentgod.results", "AllAgentsFailedError", _every_agent_failed),
    ("agentgod.merger", "MergeFailedError", _merge_failed),
)


# The API's own error types. A failure inside a streamed reply arrives after the HTTP 200 as an
# `error` event, which the SDK raises as a plain APIStatusError: only the type it names says what
# went wrong.
_BY_ERROR_TYPE: dict[str, Translator] = {
    "authentication_error": _wrong_key,
    "permission_error": _permission,
    "not_found_error": _unknown_model,
    "rate_limit_error": _rate_limited,
    "overloaded_error": _overloaded,
    "api_error": _server_error,
    "invalid_request_error": _bad_request,
    "request_too_large": _bad_request,
    "timeout_error": _timeout,
}


def _disk_is_full(error: BaseException) -> bool:
    """ENOSPC (or a quota) anywhere in the error's chain: SQLite's "disk is full" too."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if getattr(seen, "full", False) or getattr(seen, "sqlite_errorname", "") == "SQLITE_FULL":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _api_error_type(error: BaseException) -> str:
    """The `error.type` of an API error body (`{"type": "error", "error": {"type": ...}}`)."""
    body = getattr(error, "body", None)
    inner = body.get("error") if isinstance(body, dict) else None
    kind = inner.get("type") if isinstance(inner, dict) else None
    return kind if isinstance(kind, str) else ""


def _translator(error: BaseException) -> Translator:
    """The translator of the most specific loaded type `error` is an instance of; a full disk
    is told as one whichever call ran into it."""
    if _disk_is_full(error):
        return _disk_full
    if _api_error_type(error) in _GATEWAY_REFUSALS:
        return _gateway
    known: dict[type, Translator] = {}
    for module, name, translate in _BY_TYPE:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            known.setdefault(cls, translate)
    for cls in type(error).__mro__:
        if cls in known:
            return known[cls]
    if "Could not resolve authentication method" in str(error):
        return _missing_key  # the SDK's TypeError when no key reached the client
    by_error_type = _BY_ERROR_TYPE.get(_api_error_type(error))
    if by_error_type is not None:
        return by_error_type
    if getattr(error, "status_code", None) == 529:
        return _overloaded
    return _generic


def explain(error: BaseException) -> Problem:
    """Translate `error` into a Problem with every field redacted."""
    problem = _translator(error)(error)
    return replace(
        problem,
        headline=redact.redact(problem.headline),
        advice=redact.redact(problem.advice),
        technical=redact.redact(problem.technical),
    )
