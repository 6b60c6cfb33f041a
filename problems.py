"""problems.py — turn any failure into something a person can act on.

`explain(error)` returns a `Problem`: a headline (never a class name), the thing the user can
change, and the raw detail for renderers to dim. Exceptions are matched by class name across the
MRO instead of by imported type, so this module loads without the SDK and survives its renames.
Every field passes through `redact`, so a key never reaches a terminal through an error.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redact


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


def _technical(error: BaseException) -> str:
    text = str(error).strip()
    name = type(error).__name__
    return f"{name}: {text}" if text else name


def _api_message(error: BaseException) -> str:
    """The API's own message from an SDK status error, when it carries one."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
    return str(getattr(error, "message", "") or error)


def _missing_key(error: BaseException) -> Problem:
    return Problem(
        "No Anthropic API key is set.",
        "Set ANTHROPIC_API_KEY in your environment or in the .env file in AGENTGOD_HOME "
        "(run `agentgod` at a terminal to be asked for it).",
        _technical(error),
        "missing_key",
    )


def _wrong_key(error: BaseException) -> Problem:
    return Problem(
        "The Anthropic API rejected the key.",
        "Check ANTHROPIC_API_KEY: it may be mistyped, revoked or for another organisation.",
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
    message = _api_message(error)
    model = message.split("model:", 1)[1].strip() if "model:" in message else ""
    model = model or os.environ.get("MODEL", "") or "the configured model"
    return Problem(
        f"The model {model} was not found.",
        "Pick a model your key can use with --model or the MODEL setting "
        "(for example claude-sonnet-5-5).",
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
        "Retry in a little while; the calls were already retried automatically.",
        _technical(error),
        "overloaded",
    )


def _server_error(error: BaseException) -> Problem:
    return Problem(
        "The Anthropic API had an internal error.",
        "Retry in a little while; the calls were already retried automatically.",
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
    return Problem(
        "The Anthropic API did not answer in time.",
        "Retry; if it keeps happening, choose a lower effort with --effort or LLM_EFFORT.",
        _technical(error),
        "timeout",
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


def _interrupted(error: BaseException) -> Problem:
    return Problem(
        "Stopped.",
        "The run was interrupted; nothing more was spent after the interrupt.",
        "interrupted",
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
    figures = f" (spent ${spent:.4f} of ${cap:.4f})" if spent is not None and cap else ""
    return Problem(
        f"The budget ran out before any answer was ready{figures}.",
        "Raise --budget or BUDGET_USD, or ask for less at once.",
        _technical(error),
        "budget",
    )


# Verb phrases that read right after "1 agent" and "4 agents" alike.
_FAILURE_STORIES = {
    "timeout": "timed out after {timeout:g} s",
    "crash": "crashed",
    "silent": "printed nothing",
    "unstartable": "could not start",
    "output_limit": "printed more output than allowed",
    "sandbox": "hit a sandbox wall",
    "rejected": "never passed the code guard",
    "skipped": "never ran",
}
_FAILURE_ADVICE = {
    "timeout": "Raise AGENT_TIMEOUT_SECONDS, or ask for less work at once.",
    "crash": "Retry; raise AGENT_REPAIR_ATTEMPTS to give repairs more tries.",
    "silent": "Retry; the agents returned no output.",
    "unstartable": "Check that Python can run programs from AGENTGOD_HOME.",
    "output_limit": "Ask for shorter intermediate results.",
    "sandbox": "The sandbox blocked what the agents tried (see the detail); "
    "SANDBOX=off disables it, at your own risk.",
    "rejected": "Retry, or raise GENERATION_ATTEMPTS.",
    "skipped": "Retry the task.",
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


def _generic(error: BaseException) -> Problem:
    return Problem(
        "Something went wrong and the task did not finish.",
        "Retry the task; if it keeps failing, the detail below says where.",
        _technical(error),
        "error",
    )


# Class name → translator. The most specific class in the MRO wins, so OverloadedError is not
# mistaken for its parent InternalServerError, nor APITimeoutError for APIConnectionError.
_BY_CLASS: dict[str, Callable[[BaseException], Problem]] = {
    "MissingApiKeyError": _missing_key,
    "AuthenticationError": _wrong_key,
    "PermissionDeniedError": _permission,
    "NotFoundError": _unknown_model,
    "RateLimitError": _rate_limited,
    "OverloadedError": _overloaded,
    "InternalServerError": _server_error,
    "BadRequestError": _bad_request,
    "APITimeoutError": _timeout,
    "APIConnectionError": _connection,
    "ValidationError": _invalid_reply,
    "StructuredReplyError": _invalid_reply,
    "ConfigError": _config,
    "KeyboardInterrupt": _interrupted,
    "SandboxUnavailable": _sandbox,
    "BudgetExhaustedError": _budget,
    "AllAgentsFailedError": _every_agent_failed,
}


def explain(error: BaseException) -> Problem:
    """Translate `error` into a Problem with every field redacted."""
    translate = _generic
    for cls in type(error).__mro__:
        if cls.__name__ in _BY_CLASS:
            translate = _BY_CLASS[cls.__name__]
            break
    else:
        if "Could not resolve authentication method" in str(error):
            translate = _missing_key
        elif getattr(error, "status_code", None) == 529:
            translate = _overloaded
    problem = translate(error)
    return Problem(
        redact.redact(problem.headline),
        redact.redact(problem.advice),
        redact.redact(problem.technical),
        problem.kind,
    )
