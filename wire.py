"""wire.py — the model road's own HTTP: one Messages request out, its reply back. Standard library.

Why not the SDK: `import anthropic` loads about 3,000 modules and takes two seconds or more, longer
than the model takes to begin a plan, and a one-shot run paid it before (or, loaded behind the
first request, in the middle of) every task. What a run says to the API is small — one POST of
JSON, answered by JSON or by a stream of server-sent events — so it is said here, over
`http.client`, with pooled keep-alive connections.

What llm.py relies on:
- `post` sends one request and returns the reply's JSON body: as the API sent it, or, for a
  stream, assembled from its events into the same shape (content blocks, stop_reason, usage).
  It checks that a 200 is a Messages reply (else `MalformedReplyError`), turns every other status
  into an `APIStatusError` of the matching class, a stream's `error` event into one with status
  200, and every network failure into `APIConnectionError` (`APITimeoutError` past the deadline).
- A whole-call deadline: when it passes, the connection is shut under whatever read is waiting,
  so a reply that drips a byte at a time is cut off then, not when it finishes.
- `Exchange.stop()` (another thread): the call ends with `Cancelled` once the API has said what it
  costs (message_start, whose usage `Cancelled.usage` carries), or at once if nothing was sent.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentgod.config import DEFAULT_BASE_URL

if TYPE_CHECKING:
    import http.client

API_VERSION = "2026-10-21"
"""The Messages API version every request names (the `anthropic-version` header)."""
MAX_ERROR_BODY = 1 << 20
"""An error reply is read this far: enough for any error body, never a whole page of junk."""
WARM_WAIT_SECONDS = 10.0
"""The longest a request waits for the connection being opened ahead (warm) to be ready."""
CANCEL_GRACE_SECONDS = 10.0
"""How long a stopped stream waits for message_start (the call's cost) before it is closed
anyway. The reply's first event comes when the model starts writing, well within this."""


# ---- errors, named as the API's clients name them (problems.py and the broker read them so) ----


class APIError(Exception):
    """Anything that went wrong between us and the Messages API."""

    billed: dict[str, Any] | None = None
    """What the API had said this attempt costs before it failed (a stream that broke off after
    message_start): billed whether or not the call is retried."""


class APIConnectionError(APIError):
    """The API could not be reached, or the connection broke before the reply was whole."""

    def __init__(self, message: str = "Connection error.") -> None:
        super().__init__(message)
        self.message = message


class APITimeoutError(APIConnectionError):
    """The call's deadline passed before its reply was whole."""

    def __init__(self, message: str = "Request timed out.") -> None:
        super().__init__(message)


class APIStatusError(APIError):
    """The API answered with an error: a status other than 200, or an `error` event in a
    stream (status_code 200 then: the stream had begun)."""

    def __init__(self, status_code: int, headers: dict[str, str], body: Any) -> None:
        self.status_code = status_code
        self.headers = headers
        self.body = body
        inner = body.get("error") if isinstance(body, dict) else None
        detail = inner.get("message") if isinstance(inner, dict) else None
        self.message = detail if isinstance(detail, str) else str(body)[:500]
        self.type: str | None = None
        if isinstance(inner, dict) and isinstance(inner.get("type"), str):
            self.type = inner["type"]
        super().__init__(f"Error code: {status_code} - {self.message}")


class BadRequestError(APIStatusError):
    pass


class AuthenticationError(APIStatusError):
    pass


class PermissionDeniedError(APIStatusError):
    pass


class NotFoundError(APIStatusError):
    setting = "MODEL"
    """The setting that named the model not found (llm.model_setting fills it in)."""


class RequestTooLargeError(APIStatusError):
    pass


class RateLimitError(APIStatusError):
    pass


class InternalServerError(APIStatusError):
    pass


class OverloadedError(InternalServerError):
    pass


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    413: RequestTooLargeError,
    429: RateLimitError,
    529: OverloadedError,
}


def status_error(status: int, headers: dict[str, str], body: Any) -> APIStatusError:
    """The error for a reply with this status (the most specific class there is)."""
    kind = _BY_STATUS.get(status) or (InternalServerError if status >= 500 else APIStatusError)
    return kind(status, headers, body)


class MalformedReplyError(RuntimeError):
    """The API answered 200 with a body that is not a Messages reply; retried like a 5xx."""

    billed: dict[str, Any] | None = None
    """What a stream had said it costs before it went wrong (see APIError.billed)."""


class Cancelled(APIError):
    """The call was stopped on purpose (Exchange.stop) before its reply was whole.

    `usage` is what the API had said the call costs (message_start's, output raised to what had
    arrived), or None when it had said nothing yet; `sent` whether the request had gone out.
    """

    def __init__(self, usage: dict[str, Any] | None, sent: bool) -> None:
        super().__init__("the call was cancelled")
        self.usage = usage
        self.sent = sent


# ---- one request in flight ---------------------------------------------------------------------


class Exchange:
    """One request in flight, which its deadline or another thread may end.

    Ending it shuts the socket down under the reader, which then finds out why (`ended`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.ended: str | None = None
        """"deadline" or "cancel" once the exchange was ended from outside."""
        self.stop_wanted = False
        self.sent = False
        self.started: dict[str, Any] | None = None
        """The usage message_start reported, once it has arrived."""
        self.output_chars = 0
        """Characters of text and JSON received so far (an estimate of output for a stop)."""
        self._grace: threading.Timer | None = None

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.ended is not None:
                _shut(sock)

    def end(self, reason: str) -> None:
        """Close the connection now, for `reason`."""
        with self._lock:
            if self.ended is None:
                self.ended = reason
            _shut(self._sock)

    def stop(self) -> None:
        """Cancel: at once when nothing is sent or the cost is known, else at message_start
        (within CANCEL_GRACE_SECONDS), so what the call cost is known when it ends."""
        with self._lock:
            self.stop_wanted = True
            now = not self.sent or self.started is not None
        if now:
            self.end("cancel")
            return
        self._grace = threading.Timer(CANCEL_GRACE_SECONDS, self.end, args=("cancel",))
        self._grace.daemon = True
        self._grace.start()

    def close_timers(self) -> None:
        if self._grace is not None:
            self._grace.cancel()


def _shut(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


# ---- connections -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Origin:
    """Where requests go: scheme, host and port, the path prefix, and a proxy if one is set."""

    scheme: str
    host: str
    port: int
    prefix: str
    proxy: tuple[str, str, int] | None = None
    """(scheme, host, port) of the proxy the environment names for this host, if any."""

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        import http.client

        if self.proxy is None:
            if self.scheme == "https":
                return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        _, host, port = self.proxy
        if self.scheme == "https":  # a tunnel through the proxy, TLS to the API inside it
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=timeout
            )
            conn.set_tunnel(self.host, self.port)
            return conn
        return http.client.HTTPConnection(host, port, timeout=timeout)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.prefix}/v1/messages"

    @property
    def path(self) -> str:
        """The request target: the path, or the whole URL when a plain-HTTP proxy forwards it."""
        if self.proxy is not None and self.scheme == "http":
            return self.url
        return f"{self.prefix}/v1/messages"


_origins: dict[str, Origin] = {}


def origin(base_url: str | None) -> Origin:
    """The parsed base URL (ANTHROPIC_BASE_URL, else the API's), with the environment's proxy."""
    from urllib.parse import urlsplit

    base = base_url or DEFAULT_BASE_URL
    found = _origins.get(base)
    if found is None:
        parts = urlsplit(base)
        scheme = parts.scheme or "https"
        host = parts.hostname or "api.anthropic.com"
        port = parts.port or (443 if scheme == "https" else 80)
        found = Origin(scheme, host, port, parts.path.rstrip("/"), _proxy_for(scheme, host))
        _origins[base] = found
    return found


def _proxy_for(scheme: str, host: str) -> tuple[str, str, int] | None:
    """The proxy the environment sets for `scheme` (HTTPS_PROXY, ...), unless NO_PROXY spares
    `host`; as urllib reads them."""
    import urllib.request
    from urllib.parse import urlsplit

    proxies = urllib.request.getproxies_environment()
    url = proxies.get(scheme)
    if not url or urllib.request.proxy_bypass(host):
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if not parts.hostname:
        return None
    return parts.scheme or "http", parts.hostname, parts.port or 8080


class _Pool:
    """Idle keep-alive connections by origin, shared by every thread."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._idle: dict[Origin, list[http.client.HTTPConnection]] = {}
        self._warming: dict[Origin, int] = {}
        """Connections being opened ahead (warm), by origin."""

    def take(self, where: Origin, wait: float = 0.0) -> http.client.HTTPConnection | None:
        """An idle connection the server has not closed, else None. One being opened ahead is
        waited for (at most `wait` seconds): its handshake began earlier than a new one would."""
        until = time.monotonic() + wait
        with self._lock:
            while True:
                idle = self._idle.get(where)
                while idle:
                    conn = idle.pop()
                    if _alive(conn):
                        return conn
                    conn.close()
                left = until - time.monotonic()
                if not self._warming.get(where) or left <= 0:
                    return None
                self._lock.wait(left)

    def give(self, where: Origin, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.setdefault(where, []).append(conn)
            self._lock.notify_all()

    def warm(self, where: Origin, timeout: float) -> None:
        """One connection opened ahead (TCP, and TLS for https), for the next request to use."""
        with self._lock:
            self._warming[where] = self._warming.get(where, 0) + 1
        conn = where.connection(timeout)
        opened = False
        try:
            conn.connect()
            opened = True
        except OSError:
            conn.close()
        finally:
            with self._lock:
                self._warming[where] -= 1
                if opened:
                    self._idle.setdefault(where, []).append(conn)
                self._lock.notify_all()


def _alive(conn: http.client.HTTPConnection) -> bool:
    """An idle connection is usable when the server has not closed it: nothing is readable."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


_pool = _Pool()


def warm(base_url: str | None, timeout: float = 10.0) -> threading.Thread:
    """Open a connection to the API on a thread of its own, while start-up goes on.

    The handshake (TCP, and TLS to the real API: a few round trips) then happens beside the work
    that builds the first request instead of after it.
    """

    def connect() -> None:
        with contextlib.suppress(Exception):
            _pool.warm(origin(base_url), timeout)

    thread = threading.Thread(target=connect, name="agentgod-connect", daemon=True)
    thread.start()
    return thread


# ---- the call ----------------------------------------------------------------------------------

TextSink = Callable[[str], None]


def post(
    base_url: str | None,
    key: str,
    body: dict[str, Any],
    *,
    deadline: float,
    headers: dict[str, str] | None = None,
    exchange: Exchange | None = None,
    on_sent: Callable[[], None] | None = None,
    on_text: TextSink | None = None,
) -> dict[str, Any]:
    """POST `body` to /v1/messages; the reply's JSON body (a stream's, assembled).

    `deadline` is a time.monotonic() by which all of it must be over. `on_sent` runs once the
    request is written, `on_text` gets each text delta of a streamed reply as it arrives.
    """
    where = origin(base_url)
    exchange = exchange or Exchange()
    payload, sent_headers = _request(key, body, headers)
    timer = _deadline_timer(deadline, exchange)
    try:
        conn, response = _send(where, payload, sent_headers, exchange, deadline, on_sent)
        try:
            reply = _read(response, exchange, on_text)
        except BaseException:
            conn.close()
            raise
        if not (response.will_close or exchange.ended is not None):
            _finish(response)
        if response.will_close or exchange.ended is not None or not response.isclosed():
            conn.close()
        else:
            _pool.give(where, conn)
        return reply
    finally:
        timer.cancel()
        exchange.close_timers()


def _request(
    key: str, body: dict[str, Any], headers: dict[str, str] | None
) -> tuple[bytes, dict[str, str]]:
    """A Messages request's bytes and headers (the key's only when there is one: a local
    server's own model needs none; `headers` last, so a caller's own win)."""
    payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
    sent = {
        "content-type": "application/json",
        "accept": "application/json",
        "anthropic-version": API_VERSION,
        **({"x-api-key": key} if key else {}),
        "user-agent": "agentgod",
        **(headers or {}),
    }
    return payload, sent


def _deadline_timer(deadline: float, exchange: Exchange) -> threading.Timer:
    """A started timer that ends `exchange` when `deadline` passes (APITimeoutError if it has
    already): the call's connection is shut under whatever is reading it."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise APITimeoutError()
    timer = threading.Timer(left, exchange.end, args=("deadline",))
    timer.daemon = True
    timer.start()
    return timer


def _finish(response: http.client.HTTPResponse) -> None:
    """Read what is left of a reply read to its end (a stream's, to message_stop: the last chunk
    of its body still to come), so the connection can carry the next request. A connection
    reused with a reply unread would send that request, then fail before reading its answer
    (ResponseNotReady): a call sent twice and paid twice. Within the call's deadline."""
    import http.client

    with contextlib.suppress(OSError, http.client.HTTPException):
        response.read()


def _send(
    where: Origin,
    payload: bytes,
    headers: dict[str, str],
    exchange: Exchange,
    deadline: float,
    on_sent: Callable[[], None] | None,
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """Write the request and read the status line and headers; a pooled connection the server
    had already closed is replaced once by a fresh one (nothing reached the API on it)."""
    import http.client

    reused = _pool.take(where, wait=min(max(deadline - time.monotonic(), 0.0), WARM_WAIT_SECONDS))
    for conn in (reused, None):
        fresh = conn is None
        left = max(deadline - time.monotonic(), 0.001)
        if conn is None:
            conn = where.connection(left)
        try:
            if conn.sock is None:
                conn.timeout = left
                exchange.attach(None)
                if exchange.ended is not None:
                    raise _ended(exchange)
                conn.connect()
            conn.sock.settimeout(left)
            exchange.attach(conn.sock)
            conn.request("POST", where.path, body=payload, headers=headers)
            exchange.sent = True
            if on_sent is not None:
                on_sent()
            return conn, conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as error:
            conn.close()
            if fresh or exchange.ended is not None:
                raise _broken(error, exchange) from error
            exchange.sent = False
        except (OSError, http.client.HTTPException) as error:
            conn.close()
            raise _broken(error, exchange) from error
    raise APIConnectionError()  # unreachable: the fresh connection returns or raises


def _ended(exchange: Exchange) -> APIError:
    if exchange.ended == "cancel":
        return Cancelled(_spent(exchange), exchange.sent)
    return APITimeoutError()


def _broken(error: BaseException, exchange: Exchange) -> APIError:
    """What a network failure means: a stop, the deadline, or a broken connection."""
    if exchange.ended is not None:
        return _ended(exchange)
    if isinstance(error, TimeoutError | socket.timeout):
        return APITimeoutError()
    return APIConnectionError(f"Connection error: {error or type(error).__name__}")


def _spent(exchange: Exchange) -> dict[str, Any] | None:
    """What a stopped call had cost, as far as the API had said: message_start's usage, with
    output no less than the text that had arrived (about four characters a token)."""
    if exchange.started is None:
        return None
    usage = dict(exchange.started)
    written = exchange.output_chars // 4
    if written > int(usage.get("output_tokens") or 0):
        usage["output_tokens"] = written
    return usage


def _read(
    response: http.client.HTTPResponse, exchange: Exchange, on_text: TextSink | None
) -> dict[str, Any]:
    import http.client

    headers = {name.lower(): value for name, value in response.getheaders()}
    try:
        if response.status != 200:
            raw = response.read(MAX_ERROR_BODY)
            if exchange.ended is not None:  # what was read is what was left when it was cut
                raise _ended(exchange)
            try:
                body: Any = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                body = raw.decode("utf-8", "replace")
            raise status_error(response.status, headers, body)
        if headers.get("content-type", "").startswith("text/event-stream"):
            return _stream(response, headers, exchange, on_text)
        raw = response.read()
    except (OSError, http.client.HTTPException) as error:
        raise _broken(error, exchange) from error
    if exchange.ended is not None:
        raise _ended(exchange)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise MalformedReplyError("a 200 reply whose body is not JSON") from None
    problem = shape_problem(body)
    if problem:
        raise MalformedReplyError(f"a 200 reply {problem}")
    reply: dict[str, Any] = body
    return reply


def shape_problem(body: Any) -> str:
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


def _stream(
    response: http.client.HTTPResponse,
    headers: dict[str, str],
    exchange: Exchange,
    on_text: TextSink | None,
) -> dict[str, Any]:
    """Read server-sent events until message_stop; the message they describe. An attempt that
    goes wrong after message_start carries what it was billed (`billed`)."""
    message = _Message(exchange, on_text)
    try:
        return _events(response, headers, exchange, message)
    except (APIError, MalformedReplyError) as error:
        if not isinstance(error, Cancelled) and exchange.started is not None:
            error.billed = _spent(exchange)
        raise


def _events(
    response: http.client.HTTPResponse,
    headers: dict[str, str],
    exchange: Exchange,
    message: _Message,
) -> dict[str, Any]:
    import http.client

    name = ""
    data: list[bytes] = []
    try:
        while not message.stopped:
            line = response.readline()
            if not line:
                break
            line = line.rstrip(b"\r\n")
            if line:
                field, _, value = line.partition(b":")
                value = value[1:] if value.startswith(b" ") else value
                if field == b"event":
                    name = value.decode("utf-8", "replace")
                elif field == b"data":
                    data.append(value)
                continue
            if data:
                try:
                    event = json.loads(b"\n".join(data))
                except (ValueError, UnicodeDecodeError):
                    raise MalformedReplyError("a streamed event that is not JSON") from None
                message.apply(name or str(event.get("type", "")), event, headers)
            name, data = "", []
            if exchange.stop_wanted and exchange.started is not None:
                exchange.end("cancel")
                raise Cancelled(_spent(exchange), True)
    except (OSError, http.client.HTTPException) as error:
        if exchange.ended is not None:
            raise _ended(exchange) from error
        raise APIConnectionError(f"the stream broke off: {error!r}") from error
    if exchange.ended is not None:
        raise _ended(exchange)
    if not message.stopped:
        raise MalformedReplyError("a streamed reply that ended before message_stop")
    return message.body()


class _Message:
    """A streamed reply put together, event by event, into the shape of a whole reply.

    Each block's text (and tool input, and thinking) is kept as the pieces that arrived and
    joined once: appending to one string would copy the whole answer at every piece, which
    takes minutes for a few megabytes.
    """

    def __init__(self, exchange: Exchange, on_text: TextSink | None) -> None:
        self.exchange = exchange
        self.on_text = on_text
        self.head: dict[str, Any] = {}
        self.content: list[dict[str, Any]] = []
        self.pieces: dict[tuple[int, str], list[str]] = {}
        """By (block, field): "text", "thinking" or "input" (a tool's JSON), as it arrived."""
        self.usage: dict[str, Any] = {}
        self.stopped = False

    def apply(self, name: str, event: dict[str, Any], headers: dict[str, str]) -> None:
        if name == "error":
            raise APIStatusError(200, headers, event)
        if name == "message_start":
            self.head = dict(event.get("message") or {})
            self.usage = dict(self.head.get("usage") or {})
            self.exchange.started = dict(self.usage)
        elif name == "content_block_start":
            self.content.append(dict(event.get("content_block") or {}))
        elif name == "content_block_delta":
            self._delta(int(event.get("index", len(self.content) - 1)), event.get("delta") or {})
        elif name == "content_block_stop":
            index = int(event.get("index", len(self.content) - 1))
            pieces = self.pieces.pop((index, "input"), None)
            if pieces is not None and 0 <= index < len(self.content):
                text = "".join(pieces)
                try:
                    self.content[index]["input"] = json.loads(text) if text else {}
                except ValueError:
                    raise MalformedReplyError("a tool input that is not JSON") from None
        elif name == "message_delta":
            delta = event.get("delta") or {}
            for field in ("stop_reason", "stop_sequence"):
                if field in delta:
                    self.head[field] = delta[field]
            self.usage.update(event.get("usage") or {})
        elif name == "message_stop":
            self.stopped = True

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        if not 0 <= index < len(self.content):
            raise MalformedReplyError("a streamed delta for a block that never started")
        block = self.content[index]
        kind = delta.get("type")
        if kind == "text_delta":
            text = str(delta.get("text") or "")
            self._add(index, block, "text", text)
            self.exchange.output_chars += len(text)
            if text and self.on_text is not None:
                self.on_text(text)
        elif kind == "input_json_delta":
            piece = str(delta.get("partial_json") or "")
            self.pieces.setdefault((index, "input"), []).append(piece)
            self.exchange.output_chars += len(piece)
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))
        elif kind == "thinking_delta":
            self._add(index, block, "thinking", str(delta.get("thinking") or ""))
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature", "")

    def _add(self, index: int, block: dict[str, Any], field: str, piece: str) -> None:
        """One more piece of a block's `field`; what the block started with comes first."""
        kept = self.pieces.setdefault((index, field), [str(block.get(field) or "")])
        kept.append(piece)

    def body(self) -> dict[str, Any]:
        for (index, field), pieces in self.pieces.items():
            if field != "input":
                self.content[index][field] = "".join(pieces)
        body = {**self.head, "content": self.content, "usage": self.usage}
        problem = shape_problem(body)
        if problem:
            raise MalformedReplyError(f"a streamed reply {problem}")
        return body


# ---- a reply passed on as it came (a gateway's) ------------------------------------------------

RELAYED_HEADERS = ("content-type", "retry-after", "retry-after-ms", "x-should-retry", "request-id")
"""The reply headers a client of a gateway needs: the body's type, and what its retries read."""
RELAY_PIECE_BYTES = 65536
"""The most one piece of a relayed body holds: a stream's events pass on as they arrive."""


@dataclass
class Relayed:
    """An upstream reply exactly as the API sent it: its status, the headers worth passing on,
    its body in pieces as they arrive (a stream stays a stream), and `close`, which ends the
    call (the connection goes back to the pool when the body was read to its end)."""

    status: int
    headers: dict[str, str]
    chunks: Iterator[bytes]
    close: Callable[[], None]


def relay(
    base_url: str | None,
    key: str,
    body: dict[str, Any],
    *,
    deadline: float,
    headers: dict[str, str] | None = None,
) -> Relayed:
    """POST `body` once and hand the reply back unread, for a gateway to pass on.

    Nothing is checked or assembled: an error status comes back as a reply like any other (its
    body and retry headers are the client's to read), and the body is read piece by piece as the
    caller iterates `chunks`. The deadline covers all of it, as for `post`: when it passes, the
    connection is shut under the reader. A network failure raises APIConnectionError
    (APITimeoutError past the deadline), before the status or while the body is read.
    """
    import http.client

    where = origin(base_url)
    exchange = Exchange()
    payload, sent_headers = _request(key, body, headers)
    timer = _deadline_timer(deadline, exchange)
    try:
        conn, response = _send(where, payload, sent_headers, exchange, deadline, None)
    except BaseException:
        timer.cancel()
        raise
    received = {name.lower(): value for name, value in response.getheaders()}
    passed = {name: received[name] for name in RELAYED_HEADERS if name in received}
    whole = False

    def chunks() -> Iterator[bytes]:
        nonlocal whole
        try:
            while piece := response.read1(RELAY_PIECE_BYTES):
                yield piece
            response.read()  # the end of the body: the response is closed, the connection free
        except (OSError, http.client.HTTPException) as error:
            raise _broken(error, exchange) from error
        whole = exchange.ended is None

    def close() -> None:
        timer.cancel()
        if whole and response.isclosed() and not response.will_close:
            _pool.give(where, conn)
        else:
            conn.close()

    return Relayed(response.status, passed, chunks(), close)


# ---- structured output -------------------------------------------------------------------------

STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
"""The string formats the API's structured output accepts; any other is said in words."""


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema in the form the API's structured output accepts.

    Every object is closed (`additionalProperties: false`); what the API does not enforce
    (lengths, bounds, patterns, other string formats, a minItems above 1) is not dropped but
    written into the description, so the model still reads it — the reply is validated against
    the full schema on arrival anyway.
    """
    rest = dict(schema)
    out: dict[str, Any] = {}
    defs = rest.pop("$defs", None)
    if defs is not None:
        out["$defs"] = {name: strict_schema(each) for name, each in defs.items()}
    ref = rest.pop("$ref", None)
    if ref is not None:
        out["$ref"] = ref
        return out
    kind = rest.pop("type", None)
    any_of, one_of, all_of = (
        rest.pop("anyOf", None),
        rest.pop("oneOf", None),
        rest.pop("allOf", None),
    )
    enum = rest.get("enum")
    if isinstance(enum, list) and enum and all(_primitive(v) for v in enum):
        out["enum"] = list(rest.pop("enum"))
    if "const" in rest and _primitive(rest["const"]):
        out["const"] = rest.pop("const")
    literal = "enum" in out or "const" in out
    if literal:
        kind = None
    if isinstance(any_of, list):
        out["anyOf"] = [strict_schema(each) for each in any_of]
    elif isinstance(one_of, list):
        out["anyOf"] = [strict_schema(each) for each in one_of]
    elif isinstance(all_of, list):
        out["allOf"] = [strict_schema(each) for each in all_of]
    elif not literal:
        if kind is None:
            raise ValueError("a schema needs a type, anyOf, oneOf, allOf, const or enum")
        out["type"] = kind
    for word in ("description", "title"):
        if word in rest:
            out[word] = rest.pop(word)
    if kind == "object":
        out["properties"] = {
            name: strict_schema(each) for name, each in rest.pop("properties", {}).items()
        }
        rest.pop("additionalProperties", None)
        out["additionalProperties"] = False
        if "required" in rest:
            required = rest.pop("required")
            out["required"] = list(required) if isinstance(required, list) else required
    elif kind == "string":
        form = rest.pop("format", None)
        if form in STRING_FORMATS:
            out["format"] = form
        elif form:
            rest["format"] = form
    elif kind == "array":
        if "items" in rest:
            out["items"] = strict_schema(rest.pop("items"))
        least = rest.pop("minItems", None)
        if least in (0, 1):
            out["minItems"] = least
        elif least is not None:
            rest["minItems"] = least
    if rest:
        said = "{" + ", ".join(f"{name}: {value}" for name, value in rest.items()) + "}"
        described = out.get("description")
        out["description"] = f"{described}\n\n{said}" if described is not None else said
    return out


def _primitive(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
