"""llm.py — the one road to the model.

`complete` and `complete_structured` are the only two ways any part of AgentGOD reaches Claude,
and `get_client` the only place an SDK client is built. No temperature, ever; effort goes in
`output_config` only for models that accept it; stable system prompts are cached blocks. Under a
ledger with a budget, each call holds its worst case first and records its real usage after.
The SDK is imported lazily: `agentgod --version` must not pay for it.

Every call has one deadline for all of it (connecting, the first byte, the whole reply, and
every retry with its wait) and a bounded number of retries, both ours rather than the SDK's: its
defaults wait 10 minutes for a silent server, sleep whatever `retry-after` says, and a per-read
timeout never ends a reply that drips a byte at a time. The deadline reaches the sockets through
the client's network backend, so a drip is cut off when the time is up, not when it finishes.

`completion(..., on_text=...)` streams the reply, so a person can read it as it is written; it is
the same call otherwise (one deadline, the same retries, one hold, usage recorded once).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agentgod import config, models
from agentgod.ledger import BudgetExhaustedError, Usage, estimate_tokens
from agentgod.signals import shield_from_signals

if TYPE_CHECKING:
    import anthropic
    from pydantic import BaseModel

    ModelT = TypeVar("ModelT", bound=BaseModel)

_clients: dict[tuple[str, str | None], anthropic.Anthropic] = {}
_clients_lock = threading.Lock()
client_ready = threading.Event()
"""Set once an SDK client exists: the expensive import is over and requests can leave."""


DEADLINE_TOKENS = 2048
"""The output a call may ask for within one API_TIMEOUT_SECONDS; more tokens, longer deadline."""
RETRY_STATUSES = frozenset({408, 409, 429})
"""Besides every 5xx, the statuses where the same request may well succeed a moment later."""
RETRY_ERROR_TYPES = frozenset(
    {"rate_limit_error", "api_error", "overloaded_error", "timeout_error"}
)
"""The error types of a stream's `error` event worth another try: once the API has sent its 200,
a failure arrives as an event in the body, and the SDK raises it with status 200."""

TextSink = Callable[[str], None]
"""Where a streamed reply's text goes as it arrives: each delta, in order, never empty. An empty
string means "forget the text so far": the attempt that wrote it failed, and a retry, if one is
taken, streams from the start again."""
BACKOFF_SECONDS = 0.5
"""The wait before the first retry when the API names none; it doubles up to BACKOFF_CAP."""
BACKOFF_CAP = 8.0

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "agentgod_llm_deadline", default=None
)
"""time.monotonic() by which the call running on this thread must be over."""
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
    own): it runs inside the read of the reply. When the block sends no request, `work` never
    runs.
    """
    pending = [work]
    token = _waiting.set(pending)
    try:
        yield
    finally:
        _waiting.reset(token)


class StructuredReplyError(ValueError):
    """The model's structured reply was empty or refused (validation errors come from pydantic)."""

    def __init__(self, message: str, stop_reason: str | None = None) -> None:
        super().__init__(message)
        self.stop_reason = stop_reason


class MalformedReplyError(RuntimeError):
    """The API answered 200 with a body that is not a Messages reply; retried like a 5xx."""


class DeadlineExceeded(TimeoutError):
    """A model call did not finish within its deadline, retries included."""

    def __init__(self, seconds: float, attempts: int, model: str) -> None:
        noun = "attempt" if attempts == 1 else "attempts"
        super().__init__(f"no complete reply from {model} within {seconds:g} s ({attempts} {noun})")
        self.seconds = seconds
        self.attempts = attempts
        self.model = model


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


def rehearse(examples: Iterable[Any] = ()) -> None:
    """Take the SDK through every kind of reply once, offline, with nothing sent anywhere.

    The SDK builds its reply classes (and a structured output's validators) lazily, on first
    use: about a second and a half of CPU in every process, more than a run's own work. A
    process that forks runs (the batch's fork server) rehearses first, so its runs fork with
    those classes built: a plain reply, a raw one, a stream, and each structured output of
    `examples` (instances of the output formats a run asks for, whose JSON the rehearsal's
    replies carry). The replies come from a transport in this process; the client holds no key
    of anyone's, and a rehearsal that fails only leaves the work to the runs.
    """
    import anthropic
    import httpx2

    def client_answering(text: str) -> anthropic.Anthropic:
        message = {
            "id": "msg_rehearsal",
            "type": "message",
            "role": "assistant",
            "model": "rehearsal",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 1,
                "output_tokens": 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

        def answer(request: Any) -> Any:
            if json.loads(request.content).get("stream"):
                headers = {"content-type": "text/event-stream"}
                return httpx2.Response(200, headers=headers, content=_rehearsal_stream(message))
            return httpx2.Response(200, json=message)

        return anthropic.Anthropic(
            api_key="rehearsal",
            base_url="http://rehearsal.invalid",
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
            middleware=[_check_shape],
        )

    asked: dict[str, Any] = {
        "model": "rehearsal",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "rehearsal"}],
    }
    with contextlib.suppress(Exception):
        client = client_answering("rehearsal")
        client.messages.create(**asked)
        client.messages.with_raw_response.create(**asked).http_response.read()
        with client.messages.stream(**asked) as stream:
            for _ in stream:
                pass
            stream.get_final_message()
        client.close()
    for example in examples:
        with contextlib.suppress(Exception):
            output_format: Any = type(example)
            client = client_answering(example.model_dump_json())
            _schema_text(output_format)
            client.messages.parse(**asked, output_format=output_format)
            client.close()


def _rehearsal_stream(message: dict[str, Any]) -> bytes:
    """`message` as the API streams it, as one body."""
    text = message["content"][0]["text"]
    events = [
        ("message_start", {"type": "message_start", "message": {**message, "content": []}}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": message["usage"],
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def get_client() -> anthropic.Anthropic:
    """The only place an SDK client is built; one per (key, base URL), shared across threads."""
    return _client_for(config.api_key(), config.env("ANTHROPIC_BASE_URL") or None)


def _client_for(key: str, base_url: str | None) -> anthropic.Anthropic:
    with _clients_lock:
        client = _clients.get((key, base_url))
        if client is None:
            import anthropic

            client = anthropic.Anthropic(
                api_key=key,
                base_url=base_url,
                max_retries=0,
                http_client=_http_client(),
                middleware=[_check_shape],
            )
            _clients[(key, base_url)] = client
            client_ready.set()
        return client


def _http_client() -> Any:
    """The SDK's own HTTP client, over a transport whose sockets keep the call's deadline."""
    import anthropic
    import httpcore2
    import httpx2

    transport = httpx2.HTTPTransport(
        limits=anthropic.DEFAULT_CONNECTION_LIMITS, verify=tls_context()
    )
    # The one private reach: httpx builds its connection pool with no way to pass a network
    # backend, and the backend is the only layer that sees every read, header bytes included.
    pool = transport._pool
    pool._network_backend = cast(
        "httpcore2.NetworkBackend", _DeadlineBackend(pool._network_backend)
    )
    return anthropic.DefaultHttpxClient(transport=transport, verify=tls_context())


@functools.cache
def tls_context() -> Any:
    """The TLS settings every client of this process shares: reading the CA bundle costs a
    tenth of a second or more per client, and a forked run inherits this one already read."""
    import httpx2

    return httpx2.create_ssl_context()


def _remaining(timeout: float | None, expired: Callable[[], Exception]) -> float | None:
    """`timeout` cut to what is left of this thread's deadline; raises once nothing is."""
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired()
    return left if timeout is None else min(timeout, left)


def _read_expired() -> Exception:
    import httpcore2

    return httpcore2.ReadTimeout("the call's deadline passed")


def _write_expired() -> Exception:
    import httpcore2

    return httpcore2.WriteTimeout("the call's deadline passed")


def _connect_expired() -> Exception:
    import httpcore2

    return httpcore2.ConnectTimeout("the call's deadline passed")


class _DeadlineStream:
    """A connection whose every read and write ends by the deadline of the call using it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        pending = _waiting.get()
        if pending:  # the request is out; what waited for it may start
            pending.pop()()
        data: bytes = self._inner.read(max_bytes, _remaining(timeout, _read_expired))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _remaining(timeout, _write_expired))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _DeadlineStream:
        inner = self._inner.start_tls(
            ssl_context, server_hostname, _remaining(timeout, _connect_expired)
        )
        return _DeadlineStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend:
    """httpcore's network backend, handing out connections that keep the call's deadline."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> _DeadlineStream:
        stream = self._inner.connect_tcp(
            host, port, _remaining(timeout, _connect_expired), local_address, socket_options
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> _DeadlineStream:
        stream = self._inner.connect_unix_socket(
            path, _remaining(timeout, _connect_expired), socket_options
        )
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _check_shape(request: Any, call_next: Callable[[Any], Any]) -> Any:
    """SDK middleware: a 200 from /v1/messages must be a Messages reply, or it is malformed.

    Checked on the raw body, before the SDK builds (without validating) a Message from whatever
    arrived, so that no reader meets a reply without content, and a broken proxy's page is
    retried like a 5xx instead of surfacing as a JSONDecodeError or a TypeError.
    """
    response = call_next(request)
    http = getattr(response, "http_response", response)  # a relay asks for the raw response
    if http.status_code != 200 or not str(request.url).endswith("/messages"):
        return response
    if http.headers.get("content-type", "").startswith("text/event-stream"):
        return response  # read as it arrives; _streaming checks that it ended properly
    try:
        body = json.loads(http.read())
    except (ValueError, UnicodeDecodeError):
        raise MalformedReplyError("a 200 reply whose body is not JSON") from None
    problem = _shape_problem(body)
    if problem:
        raise MalformedReplyError(f"a 200 reply {problem}")
    return response


def _shape_problem(body: Any) -> str:
    """What is wrong with a Messages reply body; "" when nothing a reader relies on is."""
    if not isinstance(body, dict):
        return "whose body is not a JSON object"
    content = body.get("content")
    if not isinstance(content, list):
        return "without a list of content blocks"
    if not all(isinstance(block, dict) and isinstance(block.get("type"), str) for block in content):
        return "with a content block that has no type"
    if not isinstance(body.get("usage"), dict):
        return "without usage"
    return ""


def response_text(message: Any) -> str:
    """Join the text blocks of a reply; a reasoning model's first block is thinking, not text."""
    return "".join(
        getattr(block, "text", "") for block in message.content if block.type == "text"
    ).strip()


def _request(
    prompt: str, *, model: str, effort: str | None, system: str | None, max_tokens: int
) -> dict[str, Any]:
    """Keyword arguments for messages.create/parse. Never a temperature."""
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
    import anthropic

    if isinstance(error, MalformedReplyError):
        pass
    elif isinstance(error, anthropic.APIStatusError) and error.status_code == 200:
        if error.type not in RETRY_ERROR_TYPES:  # an error event in a stream
            return None
    elif isinstance(error, anthropic.APIStatusError):
        verdict = error.response.headers.get("x-should-retry")
        status = error.status_code
        if verdict == "false" or (
            verdict != "true" and status not in RETRY_STATUSES and status < 500
        ):
            return None
        asked = _retry_after(error.response.headers)
        if asked is not None:
            return asked
    elif not isinstance(error, anthropic.APIConnectionError):
        return None  # a bug, a bad request, a missing key: the same again fails the same way
    backoff: float = min(BACKOFF_SECONDS * 2.0**retries_taken, BACKOFF_CAP)
    return backoff * (1 - 0.25 * random.random())


def _retry_after(headers: Any) -> float | None:
    """The API's own wait (retry-after-ms, else retry-after in seconds), when it names one."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        with contextlib.suppress(TypeError, ValueError):
            seconds: float = float(headers.get(name)) * scale
            if seconds > 0:
                return seconds
    return None


def _within_deadline(
    send: Callable[..., Any], request: dict[str, Any], settings: config.Settings | None
) -> Any:
    """One call, retried as API_RETRIES allows, all of it over by its deadline.

    A malformed 200 is retried like a 5xx. A retry whose wait would end past the deadline is not
    taken: the error at hand is the more useful one to report. A connection cut by the deadline
    becomes DeadlineExceeded, naming the deadline, whatever the SDK called it.
    """
    import anthropic

    settings = settings or config.settings()
    seconds = deadline_seconds(request["max_tokens"], settings)
    deadline = time.monotonic() + seconds
    attempts = 0
    while True:
        attempts += 1
        token = _deadline.set(deadline)
        try:
            left = max(deadline - time.monotonic(), 0.001)
            retry_count = {"x-stainless-retry-count": str(attempts - 1)}
            return send(**request, timeout=left, extra_headers=retry_count)
        except Exception as error:
            if time.monotonic() >= deadline and isinstance(error, anthropic.APIConnectionError):
                raise DeadlineExceeded(seconds, attempts, request["model"]) from error
            spent = gateway_budget_refusal(error)
            if spent is not None:
                raise spent from error
            wait = _retry_wait(error, attempts - 1)
            if wait is None or attempts > settings.api_retries:
                raise
            if time.monotonic() + wait >= deadline:
                raise
        finally:
            _deadline.reset(token)
        time.sleep(wait)


GATEWAY_BUDGET_ERROR = "budget_exhausted"
"""The error type a batch gateway answers when a call would pass the batch's budget or the
run's share of it (gateway.py): for the run it is its own budget running out."""


def gateway_budget_refusal(error: BaseException) -> BudgetExhaustedError | None:
    """A gateway's budget refusal as the run's own BudgetExhaustedError, so the run stops the way
    a spent budget stops it (keeping what was paid for); None for any other error."""
    body = getattr(error, "body", None)
    inner = body.get("error") if isinstance(body, dict) else None
    if not isinstance(inner, dict) or inner.get("type") != GATEWAY_BUDGET_ERROR:
        return None

    def number(name: str) -> float:
        value = inner.get(name)
        return float(value) if isinstance(value, int | float) else 0.0

    return BudgetExhaustedError(number("spent_usd"), number("budget_usd"), number("needed_usd"))


def _send(
    send: Callable[..., Any],
    request: dict[str, Any],
    usage: Usage | None,
    settings: config.Settings | None = None,
) -> Any:
    """Make the call within the budget (if any) and its deadline, and count what it spent."""
    if usage is None:
        return _within_deadline(send, request, settings)
    sent = json.dumps(request, default=str)
    schema = request.get("output_format")
    if schema is not None:
        sent += _schema_text(schema)
    hold = usage.hold(
        request["model"], input_tokens=estimate_tokens(sent), max_tokens=request["max_tokens"]
    )
    try:
        reply = _within_deadline(send, {**request, "max_tokens": hold.tokens}, settings)
        usage.record(request["model"], reply.usage)
        return reply
    finally:
        usage.release(hold)


@functools.cache
def _schema_text(output_format: type[Any]) -> str:
    """An output format's JSON schema as sent, for the hold's estimate: the same class always
    gives the same schema, and deriving it costs milliseconds on every structured call."""
    return json.dumps(output_format.model_json_schema())


def _streaming(client: anthropic.Anthropic, on_text: TextSink) -> Callable[..., Any]:
    """A `send` that streams: each text delta goes to on_text as it arrives; returns the message.

    The SDK checks a stream's HTTP status and raises its `error` events, but a connection that
    breaks mid-body surfaces as the HTTP library's own error, turned here into the SDK's
    connection errors so the retries and the deadline treat it as they treat one before the
    reply. A stream that ends without message_stop is malformed, and retried like one. When an
    attempt that showed text fails, on_text("") says so before the error goes on.
    """

    def send(**request: Any) -> Any:
        import anthropic
        import httpx2

        shown = False
        try:
            with client.messages.stream(**request) as stream:
                stopped = False
                try:
                    for event in stream:
                        if event.type == "text" and event.text:
                            shown = True
                            on_text(event.text)
                        elif event.type == "message_stop":
                            stopped = True
                except httpx2.TimeoutException as error:
                    raise anthropic.APITimeoutError(stream.response.request) from error
                except httpx2.TransportError as error:
                    raise anthropic.APIConnectionError(
                        message=f"the stream broke off: {error}", request=stream.response.request
                    ) from error
                if not stopped:
                    raise MalformedReplyError("a streamed reply that ended before message_stop")
                return stream.get_final_message()
        except Exception:
            if shown:
                on_text("")
            raise

    return send


def forward(request: dict[str, Any], settings: config.Settings | None = None) -> dict[str, Any]:
    """Send a request someone else has already decided and metered: the broker's, for an agent.

    The broker validates the agent's request, clamps it to the budget and bills the reply
    itself, so this only adds the key (through the client), the retries and the deadline. The
    reply is the JSON body as the API sent it (its shape checked by `_check_shape`): the broker
    wants plain data to pass on, and building the SDK's classes only to take them apart again
    costs about a quarter of a millisecond per agent call.
    """
    raw = _within_deadline(get_client().messages.with_raw_response.create, request, settings)
    body: dict[str, Any] = json.loads(raw.http_response.read())
    return body


@dataclass
class Relayed:
    """An upstream reply as the API sent it, for a gateway to pass on: its status, the headers
    worth passing, and its body in pieces as they arrive (a stream stays a stream)."""

    status: int
    headers: dict[str, str]
    chunks: Iterator[bytes]
    close: Callable[[], None]


RELAYED_HEADERS = ("content-type", "retry-after", "retry-after-ms", "x-should-retry", "request-id")
"""The upstream headers a client of the gateway needs (its retries read the last three)."""


def relay_for(settings: config.Settings) -> Callable[[dict[str, Any]], Relayed]:
    """The road a gateway sends through: the key and base URL as they are now, kept, so what
    the process's environment says later (a run's capability) can never redirect it."""
    key = config.api_key()
    base_url = settings.base_url

    def relay(request: dict[str, Any]) -> Relayed:
        return _relay(_client_for(key, base_url), request, settings)

    return relay


def _relay(
    client: anthropic.Anthropic, request: dict[str, Any], settings: config.Settings
) -> Relayed:
    """Send a request a gateway has already checked and metered, once, with the real key.

    No retries here: the caller's own client retries through the gateway, which holds the
    budget again for each attempt. An error status comes back as it is (its body and its
    retry headers), so the client sees what the API said; a `"stream": true` request's reply
    is passed on as the event stream it is, piece by piece.
    """
    import anthropic
    import httpx2

    seconds = deadline_seconds(int(request.get("max_tokens") or DEADLINE_TOKENS), settings)
    streamed = request.get("stream") is True
    try:
        response = client.post(
            "/v1/messages",
            cast_to=httpx2.Response,
            body=request,
            stream=True,
            options={"timeout": seconds, "max_retries": 0},
        )
    except anthropic.APIStatusError as error:
        response = error.response
    if not streamed:
        response.read()
    headers = {
        name: value for name in RELAYED_HEADERS if (value := response.headers.get(name)) is not None
    }
    return Relayed(response.status_code, headers, response.iter_bytes(), response.close)


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
    client = get_client()
    send = client.messages.create if on_text is None else _streaming(client, on_text)
    reply = _send(send, request, usage, settings)
    stop_reason = getattr(reply, "stop_reason", None)
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
) -> ModelT:
    """One call constrained to `output_format`'s JSON schema, parsed and validated by the SDK."""
    request = _request(prompt, model=model, effort=effort, system=system, max_tokens=max_tokens)
    request["output_format"] = output_format
    reply = _send(get_client().messages.parse, request, usage, settings)
    parsed: ModelT | None = reply.parsed_output
    if parsed is None:
        raise StructuredReplyError(
            f"{output_format.__name__}: the reply held no parsable JSON "
            f"(stop_reason={reply.stop_reason})",
            reply.stop_reason,
        )
    return parsed
