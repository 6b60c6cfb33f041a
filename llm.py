"""llm.py — the one road to the model.

`completion`, `complete`, `complete_structured` and `forward` are the only ways any part of
AgentGOD reaches Claude; `wire` below them is the HTTP they speak (standard library only, no SDK:
its import cost two seconds before a one-shot run's first request). No temperature, ever;
effort goes in `output_config` only for models that accept it; stable system prompts are cached
blocks. Under a ledger with a budget, each call holds its worst case first and records its real
usage after.

Every call has one deadline for all of it (connecting, the first byte, the whole reply, and
every retry with its wait) and a bounded number of retries: a silent server is given up on at
the deadline, a `retry-after` past it is not waited for, and a reply that drips a byte at a time
is cut off when the time is up, not when it finishes.

`completion(..., on_text=...)` streams the reply, so a person can read it as it is written; it is
the same call otherwise (one deadline, the same retries, one hold, usage recorded once). A call
given a `Cancel` streams too, so that when it is stopped the API has already said what it costs
(message_start), and that is what the ledger counts.

Any model (issue 26). Each call is shaped by the profile of the model it goes to
(`Settings.profile`: models.Profile): no effort where the profile has none, no cache hints where
it takes none, and, for a structured call, the ladder (`complete_structured`): native
`output_config.format`, else one forced tool call whose input_schema is the schema, else the
schema in the prompt and the first JSON object of the reply, validated, with one retry that
shows the validation error. A native request answered in prose steps down by itself, and the
step that worked is remembered per endpoint and model (learned.py).

Fallbacks. A call that fails with 429, 529, another 5xx, a timeout, a dropped connection or a
malformed reply after its own retries is made again on the next model of MODEL_FALLBACKS
(`_on_routes`), each with its own deadline and its own request shaped for it; never after a 400,
401, 403, 404, a refusal or a stop. A model that failed is set aside (`COOLDOWN_SECONDS`, or
longer if its `retry-after` says so) by every call of this process — the run's main agent and
every agent through the broker alike — and tried only when nothing else is left. Each call is
recorded under the model that answered it, with the one it was asked of, at the price of the
one that answered.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agentgod import config, jsontext, learned, models, wire
from agentgod.kinds import STRUCTURED_STEPS, BudgetOwner, Structured
from agentgod.ledger import BudgetExhaustedError, Usage, estimate_tokens
from agentgod.signals import shield_from_signals

if TYPE_CHECKING:
    from pydantic import BaseModel

    ModelT = TypeVar("ModelT", bound=BaseModel)

T = TypeVar("T")

MalformedReplyError = wire.MalformedReplyError
"""The API answered 200 with a body that is not a Messages reply; retried like a 5xx."""

DEADLINE_TOKENS = 2048
"""The output a call may ask for within one API_TIMEOUT_SECONDS; more tokens, longer deadline."""
RETRY_STATUSES = frozenset({408, 409, 429})
"""Besides every 5xx, the statuses where the same request may well succeed a moment later."""
RETRY_ERROR_TYPES = frozenset(
    {"rate_limit_error", "api_error", "overloaded_error", "timeout_error"}
)
"""The error types of a stream's `error` event worth another try: once the API has sent its 200,
a failure arrives as an event in the body, raised with status 200."""

TextSink = Callable[[str], None]
"""Where a streamed reply's text goes as it arrives: each delta, in order, never empty. An empty
string means "forget the text so far": the attempt that wrote it failed, and a retry, if one is
taken, streams from the start again."""
BACKOFF_SECONDS = 0.5
"""The wait before the first retry when the API names none; it doubles up to BACKOFF_CAP."""
BACKOFF_CAP = 8.0
COOLDOWN_SECONDS = 300.0
"""How long a model that failed after its retries is set aside (longer when its retry-after
asks): about a run's length, so a run's calls and its agents' calls do not each rediscover it."""
CUT_REASONS = frozenset({"max_tokens", "model_context_window_exceeded"})
"""Stop reasons of a reply that ran out of room: truncated JSON is no sign of a server that
ignores the schema, so the ladder does not step down for it."""
TOOL_PROMPT = "Give your answer by calling this tool; its input is your whole answer."
PROMPT_STEP = (
    "Reply with exactly one JSON object and nothing else: no prose, no code fence. It must "
    "match this JSON schema:\n{schema}"
)
"""The prompt step's request, after the caller's own prompt (the system prompt stays as it is,
so it is still cached and still says who is asking)."""
RETRY_PROMPT = (
    "That reply did not match the schema: {error}\nReply again with only the corrected JSON object."
)

_waiting: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar(
    "agentgod_llm_waiting", default=None
)
"""Work to start once this thread's next request is sent (see while_waiting)."""


@contextlib.contextmanager
def while_waiting(work: Callable[[], None]) -> Iterator[None]:
    """Within the block, run `work` once, the moment this thread's first request has been sent.

    The model's thinking time is the product's idle time: work that only has to be done by the
    end of the run (the record's redaction) starts then, rather than before the request, where
    it would delay it. `work` must be quick and must not raise (hand the job to a thread of its
    own): it runs on the calling thread before the reply is read. When the block sends no
    request, `work` never runs.
    """
    pending = [work]
    token = _waiting.set(pending)
    try:
        yield
    finally:
        _waiting.reset(token)


def _sent() -> None:
    """The request is out: what waited for it may start."""
    pending = _waiting.get()
    if pending:
        pending.pop()()


class StructuredReplyError(ValueError):
    """The model's structured reply was empty or refused (validation errors come from pydantic)."""

    def __init__(self, message: str, stop_reason: str | None = None) -> None:
        super().__init__(message)
        self.stop_reason = stop_reason


class UnpricedModelError(RuntimeError):
    """A call under a budget to a model whose price is unknown: the budget could not be kept."""

    def __init__(self, model: str) -> None:
        super().__init__(f"the model {model} has no known price, so a budget cannot be kept")
        self.model = model


class DeadlineExceeded(TimeoutError):
    """A model call did not finish within its deadline, retries included."""

    def __init__(self, seconds: float, attempts: int, model: str) -> None:
        noun = "attempt" if attempts == 1 else "attempts"
        super().__init__(f"no complete reply from {model} within {seconds:g} s ({attempts} {noun})")
        self.seconds = seconds
        self.attempts = attempts
        self.model = model


class Cancelled(Exception):
    """A call stopped on purpose (Cancel) before its reply was whole; what it cost is counted."""


class Cancel:
    """A way for another thread to stop a call: its stream is closed as soon as the API has said
    what the call costs (message_start, within wire.CANCEL_GRACE_SECONDS), or before the request
    leaves if it has not yet. The call then raises Cancelled, and its ledger counts that cost."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._exchange: wire.Exchange | None = None
        self.requested = threading.Event()

    def __call__(self) -> None:
        with self._lock:
            self.requested.set()
            exchange = self._exchange
        if exchange is not None:
            exchange.stop()

    def _attempt(self) -> wire.Exchange:
        """The exchange of the next attempt, stopped at once when the call already is."""
        exchange = wire.Exchange()
        with self._lock:
            self._exchange = exchange
            stop = self.requested.is_set()
        if stop:
            exchange.stop()
        return exchange


@dataclass(frozen=True)
class Completion:
    """A plain call's reply: its text, and why the model stopped writing it."""

    text: str
    stop_reason: str | None
    """end_turn, max_tokens, refusal, ... as the API said (None if it said nothing)."""

    @property
    def cut(self) -> bool:
        """The reply ran out of room: the text ends where the room did, not where it meant to."""
        return self.stop_reason in ("max_tokens", "model_context_window_exceeded")

    @property
    def refused(self) -> bool:
        return self.stop_reason == "refusal"


@dataclass(frozen=True)
class Route:
    """One model where it is served, as a call may go to it: the model asked for, or a
    fallback."""

    model: str
    base_url: str | None
    profile: models.Profile

    @property
    def key(self) -> tuple[str, str]:
        """How the cooldowns and the ladder's memory name it: (endpoint, model)."""
        return learned.endpoint(self.base_url), self.model


def routes(settings: config.Settings, model: str) -> list[Route]:
    """Where a call for `model` may go, in order: `model` itself, then each fallback that is
    another model or another endpoint."""
    first = settings.endpoint_of(model)
    chain = [Route(model, first, settings.profile(model, first))]
    for entry in settings.fallbacks:
        base = entry.base_url or settings.base_url
        if all((each.model, each.base_url) != (entry.model, base) for each in chain):
            chain.append(Route(entry.model, base, settings.profile(entry.model, base)))
    return chain


_cool_lock = threading.Lock()
_cooling: dict[tuple[str, str], tuple[float, str]] = {}
"""By (endpoint, model): until when (time.monotonic) it is set aside, and why."""


def _cool(route: Route, seconds: float, why: str) -> None:
    with _cool_lock:
        until = time.monotonic() + seconds
        _cooling[route.key] = (max(until, _cooling.get(route.key, (0.0, ""))[0]), why)


def _is_cooling(route: Route) -> bool:
    with _cool_lock:
        found = _cooling.get(route.key)
    return found is not None and found[0] > time.monotonic()


def set_aside(model: str, base_url: str | None = None) -> str | None:
    """Why `model` (at `base_url`) is set aside right now ("overloaded (529)", ...), or None
    when it is not."""
    with _cool_lock:
        found = _cooling.get((learned.endpoint(base_url), model))
    return found[1] if found is not None and found[0] > time.monotonic() else None


def forget_cooldowns() -> None:
    """Set nothing aside any more (a test's fresh start)."""
    with _cool_lock:
        _cooling.clear()


def fallback_reason(error: BaseException) -> str | None:
    """Why another model may answer instead, after `error` (its retries spent): a rate limit, an
    overload, another 5xx, a timeout, a dropped connection, a malformed reply. None for anything
    another model would fail the same way or that must not be hidden (400, 401, 403, 404, 413, a
    refusal, a stop)."""
    if isinstance(error, wire.Cancelled | Cancelled):
        return None
    if isinstance(error, DeadlineExceeded):
        return f"no reply within {error.seconds:g} s"
    if isinstance(error, MalformedReplyError):
        return "a malformed reply"
    if isinstance(error, wire.APITimeoutError):
        return "timed out"
    if isinstance(error, wire.APIConnectionError):
        return "unreachable"
    if isinstance(error, wire.APIStatusError):
        status = error.status_code
        if status == 200:
            return f"{error.type} in its reply" if error.type in RETRY_ERROR_TYPES else None
        if status == 429:
            return "rate-limited (429)"
        if status == 529:
            return "overloaded (529)"
        if status == 408:
            return "timed out (408)"
        if status >= 500:
            return f"a server error ({status})"
    return None


def _cooldown(error: BaseException) -> float:
    headers = getattr(error, "headers", None)
    asked = _retry_after(headers) if isinstance(headers, dict) else None
    return max(COOLDOWN_SECONDS, asked or 0.0)


def _on_routes(
    settings: config.Settings,
    model: str,
    work: Callable[[Route], T],
    *,
    eligible: Callable[[Route], bool] | None = None,
) -> T:
    """`work` on `model`'s route, and on each fallback in turn while the one before failed in a
    way another model may not (fallback_reason). Models set aside go last; `eligible` says
    which fallbacks may take this call at all. The error raised, when all fail, is the first
    model's (with a note naming what each other one did)."""
    chain = routes(settings, model)
    first = chain[0]
    order = [r for r in chain if not _is_cooling(r)] + [r for r in chain if _is_cooling(r)]
    failed: list[tuple[Route, Exception]] = []
    for route in order:
        if route is not first and (
            not _has_key(settings, route) or (eligible is not None and not eligible(route))
        ):
            continue
        try:
            return work(route)
        except Exception as error:
            why = fallback_reason(error)
            if why is None:
                raise
            _cool(route, _cooldown(error), why)
            failed.append((route, error))
    if not failed:  # unreachable: the first route is always tried
        raise RuntimeError(f"no route to {model}")
    failed.sort(key=lambda pair: pair[0] is not first)
    raised = failed[0][1]
    for route, other in failed[1:]:
        raised.add_note(f"{route.model} (a fallback) did not answer either: {other}")
    raise raised


def _has_key(settings: config.Settings, route: Route) -> bool:
    try:
        config.key_for(settings, route.model, route.base_url)
    except config.MissingApiKeyError:
        return False
    return True


def _payable(usage: Usage | None) -> Callable[[Route], bool]:
    """Under a budget, a fallback whose price is unknown cannot take a call."""
    return lambda route: usage is None or not usage.capped or route.profile.price is not None


def deadline_seconds(max_tokens: int, settings: config.Settings | None = None) -> float:
    """The whole-call deadline: API_TIMEOUT_SECONDS per DEADLINE_TOKENS of max_tokens, at least one.

    A non-streaming reply arrives only once it is entirely written, so a call allowed 16,000
    tokens needs far longer before its first byte can come than one allowed 2,048.
    """
    seconds = (settings or config.settings()).api_timeout_seconds
    return seconds * max(1.0, max_tokens / DEADLINE_TOKENS)


def connect_ahead(settings: config.Settings) -> None:
    """Open a connection to the API in the background while start-up goes on: the first
    request then finds its TCP (and TLS) handshake done."""
    wire.warm(settings.base_url)


def response_text(message: Any) -> str:
    """Join the text blocks of a reply (a JSON body, or an object with `.content`); a reasoning
    model's first block is thinking, not text."""
    content = message.get("content") if isinstance(message, dict) else message.content
    parts: list[str] = []
    for block in content or []:
        kind = block.get("type") if isinstance(block, dict) else getattr(block, "type", None)
        text = block.get("text") if isinstance(block, dict) else getattr(block, "text", "")
        if kind == "text" and isinstance(text, str):
            parts.append(text)
    return "".join(parts).strip()


Prompt = str | list[dict[str, Any]]
"""A user message's content: its text, or content blocks (files as the API reads them, then
the text)."""


def _request(
    prompt: Prompt, *, route: Route, effort: str | None, system: str | None, max_tokens: int
) -> dict[str, Any]:
    """The Messages request body for `route`'s model, as its profile allows: an effort only
    where it takes one (lowered to what it has), a cache hint only where it takes them. Never a
    temperature."""
    request: dict[str, Any] = {
        "model": route.model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if system:
        block: dict[str, Any] = {"type": "text", "text": system}
        if route.profile.caching:
            block["cache_control"] = {"type": "ephemeral"}
        request["system"] = [block]
    level = models.profile_efforts(route.profile, effort)
    if level:
        request["output_config"] = {"effort": level.value}
    return request


SERVER_TOOL_TYPES = ("web_search_", "web_fetch_", "code_execution_")


def _adapted(request: dict[str, Any], route: Route, *, strict: bool) -> dict[str, Any] | None:
    """Someone else's request (the broker's, an agent's) made fit for `route`'s model: its
    effort lowered or dropped, its cache hints dropped where the profile takes none. With
    `strict` (a fallback), None when it carries what the model cannot take at all: the API's
    server tools, PDF documents, images."""
    out = {**request, "model": route.model}
    profile = route.profile
    options = dict(out.get("output_config") or {})
    if "effort" in options:
        level = models.profile_efforts(profile, str(options["effort"]))
        if level is None:
            del options["effort"]
        else:
            options["effort"] = level.value
    if options:
        out["output_config"] = options
    else:
        out.pop("output_config", None)
    if not profile.caching:
        out = _without_cache_hints(out)
    if strict:
        tools = out.get("tools") or []
        servers = any(
            isinstance(t, dict) and str(t.get("type", "")).startswith(SERVER_TOOL_TYPES)
            for t in tools
        )
        kinds = {
            block.get("type")
            for message in out.get("messages") or []
            if isinstance(message, dict) and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict)
        }
        if (
            (servers and not profile.web)
            or ("document" in kinds and not profile.documents)
            or ("image" in kinds and not profile.images)
        ):
            return None
    return out


def _without_cache_hints(request: dict[str, Any]) -> dict[str, Any]:
    """The request with no cache_control on its system prompt or its messages' blocks."""

    def blocks(content: Any) -> Any:
        if not isinstance(content, list):
            return content
        return [
            {k: v for k, v in block.items() if k != "cache_control"}
            if isinstance(block, dict)
            else block
            for block in content
        ]

    out = dict(request)
    if "system" in out:
        out["system"] = blocks(out["system"])
    if isinstance(out.get("messages"), list):
        out["messages"] = [
            {**m, "content": blocks(m.get("content"))} if isinstance(m, dict) else m
            for m in out["messages"]
        ]
    return out


def _retry_wait(error: Exception, retries_taken: int) -> float | None:
    """How long to wait before trying again after `error`; None when retrying is pointless."""
    if isinstance(error, MalformedReplyError):
        pass
    elif isinstance(error, wire.APIStatusError) and error.status_code == 200:
        if error.type not in RETRY_ERROR_TYPES:  # an error event in a stream
            return None
    elif isinstance(error, wire.APIStatusError):
        verdict = error.headers.get("x-should-retry")
        status = error.status_code
        if verdict == "false" or (
            verdict != "true" and status not in RETRY_STATUSES and status < 500
        ):
            return None
        asked = _retry_after(error.headers)
        if asked is not None:
            return asked
    elif not isinstance(error, wire.APIConnectionError):
        return None  # a bug, a bad request, a stop: the same again fails the same way
    backoff: float = min(BACKOFF_SECONDS * 2.0**retries_taken, BACKOFF_CAP)
    return backoff * (1 - 0.25 * random.random())


def _retry_after(headers: dict[str, str]) -> float | None:
    """The API's own wait (retry-after-ms, else retry-after in seconds), when it names one."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        with contextlib.suppress(TypeError, ValueError):
            seconds: float = float(headers.get(name)) * scale  # type: ignore[arg-type]
            if seconds > 0:
                return seconds
    return None


Attempt = Callable[[float, dict[str, str]], dict[str, Any]]
"""One try at a call: (the deadline, extra headers) -> the reply's JSON body."""


def _within_deadline(
    attempt: Attempt,
    request: dict[str, Any],
    settings: config.Settings,
    stop: threading.Event | None = None,
) -> Any:
    """One call, retried as API_RETRIES allows, all of it over by its deadline.

    A malformed 200 is retried like a 5xx. A retry whose wait would end past the deadline is not
    taken: the error at hand is the more useful one to report. A connection cut by the deadline
    becomes DeadlineExceeded, naming the deadline. A wait between attempts ends early when
    `stop` is set (the call was cancelled: its next attempt stops before it is sent).
    """
    seconds = deadline_seconds(request["max_tokens"], settings)
    deadline = time.monotonic() + seconds
    attempts = 0
    while True:
        attempts += 1
        try:
            left = max(deadline - time.monotonic(), 0.001)
            headers = {
                "x-stainless-retry-count": str(attempts - 1),
                "x-stainless-timeout": f"{left:.3f}",
            }
            return attempt(deadline, headers)
        except wire.Cancelled:
            raise
        except Exception as error:
            if isinstance(error, wire.NotFoundError):
                error.setting = model_setting(str(request.get("model", "")), settings)
            if time.monotonic() >= deadline and isinstance(error, wire.APIConnectionError):
                raise DeadlineExceeded(seconds, attempts, request["model"]) from error
            spent = gateway_budget_refusal(error)
            if spent is not None:
                raise spent from error
            wait = _retry_wait(error, attempts - 1)
            if wait is None or attempts > settings.api_retries:
                raise
            if time.monotonic() + wait >= deadline:
                raise
        if stop is not None:
            stop.wait(wait)
        else:
            time.sleep(wait)


GATEWAY_BUDGET_ERROR = "budget_exhausted"
"""The error type a batch's gateway answers when a call would pass the batch's budget or the
run's share of it (gateway.py): for the run it is a budget running out, as its own does."""
GATEWAY_BUDGET_OF = "budget_of"
"""The field of that refusal naming whose budget it was (kinds.BudgetOwner; gateway.BUDGET_OF)."""


def gateway_budget_refusal(error: BaseException) -> BudgetExhaustedError | None:
    """A gateway's budget refusal as the run's own BudgetExhaustedError, so the run stops the way
    a spent budget stops it (keeping what was paid for); None for any other error.

    The error says whose budget it was, as the refusal names it: the run's share (its own cap)
    or the batch's. A refusal that names neither (a gateway from before it did) is taken as
    the batch's, the reading under which a batch resumes the run, as it always did.
    """
    body = getattr(error, "body", None)
    inner = body.get("error") if isinstance(body, dict) else None
    if not isinstance(inner, dict) or inner.get("type") != GATEWAY_BUDGET_ERROR:
        return None

    def number(name: str) -> float:
        value = inner.get(name)
        return float(value) if isinstance(value, int | float) else 0.0

    named = inner.get(GATEWAY_BUDGET_OF)
    owner = BudgetOwner.RUN if named == BudgetOwner.RUN.value else BudgetOwner.BATCH
    return BudgetExhaustedError(
        number("spent_usd"), number("budget_usd"), number("needed_usd"), owner
    )


def model_setting(model: str, settings: config.Settings) -> str:
    """The setting that named `model` for this call: FAST_MODEL (the intake, the judge, a key's
    test), DEEP_MODEL (the council), else MODEL; so a model that was not found is changed where
    it was set."""
    if model != settings.model:
        if model == settings.fast_model:
            return "FAST_MODEL"
        if model == settings.deep_model:
            return "DEEP_MODEL"
    return "MODEL"


def _send(
    request: dict[str, Any],
    usage: Usage | None,
    settings: config.Settings,
    *,
    route: Route | None = None,
    asked: str = "",
    on_text: TextSink | None = None,
    cancel: Cancel | None = None,
) -> dict[str, Any]:
    """Make the call to `route` (else the request's model where it is served) within the
    budget (if any) and its deadline, and count what it spent, as a call made for `asked`.

    Streamed when someone reads the text as it comes (`on_text`) or may stop the call
    (`cancel`); a stopped call records what the API had said it cost and raises Cancelled.
    """
    if route is None:
        route = routes(settings, request["model"])[0]
    key = config.key_for(settings, route.model, route.base_url)
    if usage is not None:
        usage.set_price(route.model, route.profile.price)
        if usage.capped and route.profile.price is None:
            raise UnpricedModelError(route.model)
    stream = on_text is not None or cancel is not None
    stop = cancel.requested if cancel is not None else None
    body_extra: dict[str, Any] = {"stream": True} if stream else {}

    def attempt(max_tokens: int, count: Callable[[dict[str, Any]], None] | None = None) -> Attempt:
        """One try of the call; `count` is told what a try that broke off had been billed."""

        def once(deadline: float, headers: dict[str, str]) -> dict[str, Any]:
            shown = False

            def show(text: str) -> None:
                nonlocal shown
                shown = True
                if on_text is not None:
                    on_text(text)

            exchange = cancel._attempt() if cancel is not None else None
            try:
                return wire.post(
                    route.base_url,
                    key,
                    {**request, "max_tokens": max_tokens, **body_extra},
                    deadline=deadline,
                    headers=headers,
                    exchange=exchange,
                    on_sent=_sent,
                    on_text=show if stream else None,
                )
            except Exception as error:
                if shown and on_text is not None:
                    on_text("")
                billed = getattr(error, "billed", None)
                if billed is not None and count is not None:
                    count(billed)  # the API bills a broken attempt whether or not it is retried
                raise

        return once

    if usage is None:
        try:
            reply: dict[str, Any] = _within_deadline(
                attempt(request["max_tokens"]), request, settings, stop
            )
        except wire.Cancelled as stopped:
            raise Cancelled(str(stopped)) from None
        return reply
    sent = json.dumps(request, default=str)
    hold = usage.hold(
        request["model"], input_tokens=estimate_tokens(sent), max_tokens=request["max_tokens"]
    )
    model = request["model"]
    count = functools.partial(usage.record, model, asked=asked or model)
    try:
        began = time.monotonic()
        try:
            reply = _within_deadline(
                attempt(hold.tokens, count),
                request,
                settings,
                stop,
            )
        except wire.Cancelled as stopped:
            if stopped.usage is not None:
                count(stopped.usage)
            elif stopped.sent:  # said nothing yet, but may have begun: count the input
                count({"input_tokens": estimate_tokens(sent)})
            raise Cancelled(str(stopped)) from None
        count(reply.get("usage") or {}, seconds=time.monotonic() - began)
        return reply
    finally:
        usage.release(hold)


@functools.cache
def _output_format(output_format: type[Any]) -> dict[str, Any]:
    """An output format as sent: the same class always gives the same schema, and deriving it
    costs milliseconds on every structured call."""
    return {"type": "json_schema", "schema": wire.strict_schema(output_format.model_json_schema())}


def forward(
    request: dict[str, Any], settings: config.Settings | None = None, *, dearer: bool = True
) -> dict[str, Any]:
    """Send a request someone else has already decided and metered: the broker's, for an agent.

    The broker validates the agent's request, clamps it to the budget and bills the reply
    itself, so this only adds the key, the retries, the deadline and the fallbacks: the request
    is fitted to each model's profile (`_adapted`), and a fallback that cannot take what it
    carries (the web's tools, a PDF, an image) is passed over. `dearer=False` (a budget held
    the call at its model's price) passes over a fallback dearer than the model asked for. The
    reply is the JSON body as the API sent it (its shape checked), its `model` the one that
    answered as it was asked for: the broker bills that one.
    """
    settings = settings or config.settings()
    asked = request["model"]
    asked_price = settings.profile(asked).price

    def eligible(route: Route) -> bool:
        if dearer:
            return True
        price = route.profile.price
        return (
            price is not None
            and asked_price is not None
            and price.input <= asked_price.input
            and price.output <= asked_price.output
            and price.cache_read <= asked_price.cache_read
        )

    def work(route: Route) -> dict[str, Any]:
        first = route.model == asked and route.base_url == settings.endpoint_of(asked)
        fitted = _adapted(request, route, strict=not first)
        if fitted is None:  # eligible() let it through: `_takes` below keeps such routes out
            raise RuntimeError(f"{route.model} cannot take this request")
        reply = _send(fitted, None, settings, route=route)
        return {**reply, "model": route.model}

    def takes(route: Route) -> bool:
        return eligible(route) and _adapted(request, route, strict=True) is not None

    return _on_routes(settings, asked, work, eligible=takes)


RELAYED_REQUEST_HEADERS = ("anthropic-version", "anthropic-beta")
"""What a gateway's client said about the API it speaks: passed on with its request as sent."""


def relay_for(
    settings: config.Settings,
) -> Callable[[dict[str, Any], dict[str, str]], wire.Relayed]:
    """The road a gateway sends through: the key and base URL of `settings`, kept, so what the
    process's environment says later can never redirect it or change its key.

    The relay sends a request the gateway has already checked and metered, once, with the real
    key: no retries here, since the caller's own road retries through the gateway, which holds
    the budget again for each attempt. The reply comes back as the API sent it (wire.relay): an
    error with its body and retry headers, a stream as the stream it is.
    """
    key = config.key_of(settings)
    base_url = settings.base_url

    def relay(request: dict[str, Any], headers: dict[str, str]) -> wire.Relayed:
        seconds = deadline_seconds(int(request.get("max_tokens") or DEADLINE_TOKENS), settings)
        passed = {name: headers[name] for name in RELAYED_REQUEST_HEADERS if headers.get(name)}
        return wire.relay(
            base_url, key, request, deadline=time.monotonic() + seconds, headers=passed
        )

    return relay


def prepare_forks(output_formats: Iterable[type[BaseModel]] = ()) -> None:
    """Build, in a process that forks runs (the batch's fork server), what every run's first
    requests would otherwise build for itself: the road's HTTP modules and the schema each
    structured output is sent with. Nothing is sent and no key is read."""
    import http.client  # noqa: F401  (wire imports it with the first request)
    import urllib.request  # noqa: F401  (wire reads the environment's proxies with it)

    for output_format in output_formats:
        with contextlib.suppress(Exception):  # one that cannot be built is each run's to build
            _output_format(output_format)


def completion(
    prompt: Prompt,
    *,
    model: str,
    effort: str | None,
    system: str | None = None,
    max_tokens: int = 4096,
    usage: Usage | None = None,
    settings: config.Settings | None = None,
    on_text: TextSink | None = None,
    cancel: Cancel | None = None,
) -> Completion:
    """One plain call; returns its text and stop_reason. `effort=None` sends no effort at all.

    With `on_text` the reply is streamed, and each piece of its text is passed on as it arrives
    (see TextSink: "" when what was passed is void); the Completion is the same either way.
    `cancel` lets another thread stop it (see Cancel): it then raises Cancelled.
    """
    settings = settings or config.settings()
    payable = _payable(usage)

    def work(route: Route) -> dict[str, Any]:
        request = _request(prompt, route=route, effort=effort, system=system, max_tokens=max_tokens)
        return _send(
            request, usage, settings, route=route, asked=model, on_text=on_text, cancel=cancel
        )

    def eligible(route: Route) -> bool:
        """A fallback must be payable and read the files (documents, images) the prompt holds."""
        bare = _request(prompt, route=route, effort=None, system=None, max_tokens=1)
        return payable(route) and _adapted(bare, route, strict=True) is not None

    reply = _on_routes(settings, model, work, eligible=eligible)
    return Completion(response_text(reply), _stop_reason(reply))


def _stop_reason(reply: dict[str, Any]) -> str | None:
    stop_reason = reply.get("stop_reason")
    return stop_reason if isinstance(stop_reason, str) else None


def complete(
    prompt: str,
    *,
    model: str,
    effort: str | None,
    system: str | None = None,
    max_tokens: int = 4096,
    usage: Usage | None = None,
    settings: config.Settings | None = None,
) -> str:
    """One plain call; returns the reply's text, for callers with no use for why it stopped."""
    return completion(
        prompt,
        model=model,
        effort=effort,
        system=system,
        max_tokens=max_tokens,
        usage=usage,
        settings=settings,
    ).text


def complete_structured(
    prompt: str,
    output_format: type[ModelT],
    *,
    model: str,
    effort: str | None,
    system: str | None = None,
    max_tokens: int = 4096,
    usage: Usage | None = None,
    settings: config.Settings | None = None,
    cancel: Cancel | None = None,
) -> ModelT:
    """One call whose reply is an `output_format`, validated on arrival, whatever the model.

    Down the ladder from where this model starts (its profile, else the step learned for it
    here, else native): native structured output; one forced tool call; the schema in the
    prompt. A step the server does not honour — prose back for a native request, no tool call
    for a forced one, a 400 for either — steps down by itself, and the step that worked is
    remembered (learned.py). A refusal raises StructuredReplyError; a reply that does not fit
    the schema raises pydantic's ValidationError. `cancel` lets another thread stop it (see
    Cancel): it then raises Cancelled.
    """
    settings = settings or config.settings()
    ask = _Ask(prompt, output_format, effort, system, max_tokens)

    def work(route: Route) -> ModelT:
        def call(request: dict[str, Any]) -> dict[str, Any]:
            return _send(request, usage, settings, route=route, asked=model, cancel=cancel)

        return _ladder(settings, route, ask, call)

    return _on_routes(settings, model, work, eligible=_payable(usage))


# ---- the ladder --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ask(Generic[T]):
    """What a structured call asks, whichever step asks it."""

    prompt: str
    output_format: type[T]
    effort: str | None
    system: str | None
    max_tokens: int


class _StepDown(Exception):
    """This step does not work here; `answer` is what its reply held anyway, if it fits."""

    def __init__(self, why: str, answer: Any = None) -> None:
        super().__init__(why)
        self.answer = answer


Call = Callable[[dict[str, Any]], dict[str, Any]]


def _ladder(settings: config.Settings, route: Route, ask: _Ask[ModelT], call: Call) -> ModelT:
    start, _ = learned.start(route.profile, settings.home, route.base_url)
    steps = STRUCTURED_STEPS[STRUCTURED_STEPS.index(start) :]
    for index, step in enumerate(steps):
        try:
            result: ModelT = _STEPS[step](route, ask, call)
        except _StepDown as down:
            below = steps[index + 1] if index + 1 < len(steps) else step
            if down.answer is not None:  # what the reply held fits: kept, and the step below
                learned.remember(settings.home, route.base_url, route.model, below)
                return down.answer  # type: ignore[no-any-return]
            continue
        if step is not start:
            learned.remember(settings.home, route.base_url, route.model, step)
        return result
    raise StructuredReplyError(f"{ask.output_format.__name__}: no step of the ladder answered")


def _native(route: Route, ask: _Ask[ModelT], call: Call) -> ModelT:
    """output_config.format: the API holds the reply to the schema."""
    from pydantic import ValidationError

    request = _request(
        ask.prompt, route=route, effort=ask.effort, system=ask.system, max_tokens=ask.max_tokens
    )
    request["output_config"] = {
        **request.get("output_config", {}),
        "format": _output_format(ask.output_format),
    }
    try:
        reply = call(request)
    except wire.BadRequestError as error:
        raise _StepDown(f"the native request was refused: {error}") from error
    text, stop = _answer(reply, ask)
    try:
        return ask.output_format.model_validate_json(text)
    except ValidationError:
        if _is_json(text) or stop in CUT_REASONS:
            raise  # JSON that misses the schema, or a cut reply: not a server ignoring it
        found, _ = _first_fitting(text, ask.output_format)
        if found is not None:
            return found
        raise _StepDown("the reply was prose, not JSON") from None


def _tool(route: Route, ask: _Ask[ModelT], call: Call) -> ModelT:
    """One forced tool call whose input_schema is the schema; its input validated, and shown
    its validation error once if it does not fit."""
    from pydantic import ValidationError

    name = re.sub(r"[^A-Za-z0-9_-]", "_", ask.output_format.__name__)[:64] or "answer"
    request = _request(
        ask.prompt, route=route, effort=ask.effort, system=ask.system, max_tokens=ask.max_tokens
    )
    request["tools"] = [
        {
            "name": name,
            "description": TOOL_PROMPT,
            "input_schema": ask.output_format.model_json_schema(),
        }
    ]
    request["tool_choice"] = {"type": "tool", "name": name}
    try:
        reply = call(request)
    except wire.BadRequestError as error:
        raise _StepDown(f"the tool request was refused: {error}") from error
    for attempt in range(2):
        block = _tool_use(reply, name)
        if block is None:
            text, _ = _answer(reply, ask, empty_ok=True)
            found, _ = _first_fitting(text, ask.output_format)
            raise _StepDown("no tool call came back", answer=found)
        try:
            return ask.output_format.model_validate(block.get("input"))
        except ValidationError as error:
            if attempt:
                raise
            told = {
                "type": "tool_result",
                "tool_use_id": block.get("id", ""),
                "is_error": True,
                "content": RETRY_PROMPT.format(error=_short(error)),
            }
            request = {
                **request,
                "messages": [
                    *request["messages"],
                    {"role": "assistant", "content": reply.get("content")},
                    {"role": "user", "content": [told]},
                ],
            }
            reply = call(request)
    raise AssertionError("unreachable")


def _prompt(route: Route, ask: _Ask[ModelT], call: Call) -> ModelT:
    """The schema in the prompt, the first JSON object of the reply that fits it, and one more
    try shown the validation error."""
    import pydantic

    schema = json.dumps(ask.output_format.model_json_schema(), ensure_ascii=False)
    asked = f"{ask.prompt}\n\n{PROMPT_STEP.format(schema=schema)}"
    request = _request(
        asked, route=route, effort=ask.effort, system=ask.system, max_tokens=ask.max_tokens
    )
    reply = call(request)
    for attempt in range(2):
        text, _ = _answer(reply, ask, empty_ok=True)
        found, error = _first_fitting(text, ask.output_format)
        if found is not None:
            return found
        if attempt:
            if isinstance(error, pydantic.ValidationError):
                raise error
            raise StructuredReplyError(
                f"{ask.output_format.__name__}: the reply held no JSON object",
                _stop_reason(reply),
            )
        request = {
            **request,
            "messages": [
                *request["messages"],
                {"role": "assistant", "content": text or "(no reply)"},
                {"role": "user", "content": RETRY_PROMPT.format(error=_short(error))},
            ],
        }
        reply = call(request)
    raise AssertionError("unreachable")


_STEPS: dict[Structured, Callable[[Route, _Ask[Any], Call], Any]] = {
    Structured.NATIVE: _native,
    Structured.TOOL: _tool,
    Structured.PROMPT: _prompt,
}


def _answer(reply: dict[str, Any], ask: _Ask[Any], *, empty_ok: bool = False) -> tuple[str, str]:
    """The reply's text and stop reason; a refusal (or, unless `empty_ok`, no text at all)
    raises StructuredReplyError."""
    stop = _stop_reason(reply)
    text = response_text(reply)
    if stop == "refusal" or (not text and not empty_ok):
        raise StructuredReplyError(
            f"{ask.output_format.__name__}: the reply held no parsable JSON (stop_reason={stop})",
            stop,
        )
    return text, stop or ""


def _tool_use(reply: dict[str, Any], name: str) -> dict[str, Any] | None:
    for block in reply.get("content") or []:
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_use"
            and block.get("name") == name
            and isinstance(block.get("input"), dict)
        ):
            return block
    return None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _first_fitting(text: str, output_format: type[ModelT]) -> tuple[ModelT | None, Exception]:
    """The first JSON object in `text` that fits `output_format`; else None and why not (the
    validation error of the largest object there, or that there was none)."""
    from pydantic import ValidationError

    why: Exception = StructuredReplyError("the reply held no JSON object")
    largest = -1
    for found in jsontext.objects(text):
        try:
            return output_format.model_validate(found), why
        except ValidationError as error:
            size = len(json.dumps(found))
            if size > largest:
                largest, why = size, error
    return None, why


def _short(error: Exception) -> str:
    """A validation error as the model is shown it: its text, bounded."""
    text = str(error)
    return text if len(text) <= 2000 else text[:2000] + " ..."


class Ahead(Generic[T]):
    """A call made on a thread of its own, so the caller can do something else meanwhile.

    `sent` is set once the thread's request is out (or the work is over without one);
    `result()` waits for the work and returns its value or raises its error.
    """

    def __init__(self, work: Callable[[], T], name: str = "agentgod-ahead") -> None:
        self._work = work
        self.sent = threading.Event()
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        shield_from_signals()
        try:
            with while_waiting(self.sent.set):
                self._value = self._work()
        except BaseException as error:  # handed to whoever asks for the result
            self._error = error
        finally:
            self.sent.set()
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def result(self) -> T:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
