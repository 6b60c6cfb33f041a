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
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agentgod import config, models, wire
from agentgod.ledger import Usage, estimate_tokens
from agentgod.signals import shield_from_signals

if TYPE_CHECKING:
    from pydantic import BaseModel

    ModelT = TypeVar("ModelT", bound=BaseModel)

T = TypeVar("T")

client_ready = threading.Event()
"""Set: nothing has to load before a request can leave (the road needs no SDK import). Kept for
the agent pool, which waits on it so as never to compete with such a load."""
client_ready.set()

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


def _request(
    prompt: str, *, model: str, effort: str | None, system: str | None, max_tokens: int
) -> dict[str, Any]:
    """The Messages request body. Never a temperature."""
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if system:
        request["system"] = [
            {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
        ]
    level = models.effort_for_model(model, effort) if effort else None
    if level:
        request["output_config"] = {"effort": level.value}
    return request


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
            wait = _retry_wait(error, attempts - 1)
            if wait is None or attempts > settings.api_retries:
                raise
            if time.monotonic() + wait >= deadline:
                raise
        if stop is not None:
            stop.wait(wait)
        else:
            time.sleep(wait)


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
    on_text: TextSink | None = None,
    cancel: Cancel | None = None,
) -> dict[str, Any]:
    """Make the call within the budget (if any) and its deadline, and count what it spent.

    Streamed when someone reads the text as it comes (`on_text`) or may stop the call
    (`cancel`); a stopped call records what the API had said it cost and raises Cancelled.
    """
    key = config.key_of(settings)
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
                    settings.base_url,
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
    try:
        began = time.monotonic()
        try:
            reply = _within_deadline(
                attempt(hold.tokens, functools.partial(usage.record, model)),
                request,
                settings,
                stop,
            )
        except wire.Cancelled as stopped:
            if stopped.usage is not None:
                usage.record(model, stopped.usage)
            elif stopped.sent:  # said nothing yet, but may have begun: count the input
                usage.record(model, {"input_tokens": estimate_tokens(sent)})
            raise Cancelled(str(stopped)) from None
        usage.record(model, reply.get("usage") or {}, seconds=time.monotonic() - began)
        return reply
    finally:
        usage.release(hold)


@functools.cache
def _output_format(output_format: type[Any]) -> dict[str, Any]:
    """An output format as sent: the same class always gives the same schema, and deriving it
    costs milliseconds on every structured call."""
    return {"type": "json_schema", "schema": wire.strict_schema(output_format.model_json_schema())}


def forward(request: dict[str, Any], settings: config.Settings | None = None) -> dict[str, Any]:
    """Send a request someone else has already decided and metered: the broker's, for an agent.

    The broker validates the agent's request, clamps it to the budget and bills the reply
    itself, so this only adds the key, the retries and the deadline. The reply is the JSON body
    as the API sent it (its shape checked): the broker wants plain data to pass on.
    """
    return _send(request, None, settings or config.settings())


def completion(
    prompt: str,
    *,
    model: str,
    effort: str | None,
    system: str | None = None,
    max_tokens: int = 4096,
    usage: Usage | None = None,
    settings: config.Settings | None = None,
    on_text: TextSink | None = None,
) -> Completion:
    """One plain call; returns its text and stop_reason. `effort=None` sends no effort at all.

    With `on_text` the reply is streamed, and each piece of its text is passed on as it arrives
    (see TextSink: "" when what was passed is void); the Completion is the same either way.
    """
    request = _request(prompt, model=model, effort=effort, system=system, max_tokens=max_tokens)
    reply = _send(request, usage, settings or config.settings(), on_text=on_text)
    stop_reason = reply.get("stop_reason")
    return Completion(response_text(reply), stop_reason if isinstance(stop_reason, str) else None)


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
    """One call constrained to `output_format`'s JSON schema, parsed and validated on arrival.

    `cancel` lets another thread stop it (see Cancel): it then raises Cancelled.
    """
    request = _request(prompt, model=model, effort=effort, system=system, max_tokens=max_tokens)
    request["output_config"] = {
        **request.get("output_config", {}),
        "format": _output_format(output_format),
    }
    reply = _send(request, usage, settings or config.settings(), cancel=cancel)
    text = response_text(reply)
    if not text:
        stop_reason = reply.get("stop_reason")
        raise StructuredReplyError(
            f"{output_format.__name__}: the reply held no parsable JSON "
            f"(stop_reason={stop_reason})",
            stop_reason if isinstance(stop_reason, str) else None,
        )
    return output_format.model_validate_json(text)


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
