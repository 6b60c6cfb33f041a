"""A fake Anthropic Messages API on 127.0.0.1, standard library only.

Both the real `anthropic` SDK (through ANTHROPIC_BASE_URL) and the generated agents' own urllib
calls reach it, so tests exercise the real wire format end to end. Replies are shaped like the real
API's: message ids, content blocks, stop_reason, the four usage fields, and real error bodies with a
tiny `retry-after-ms` so the SDK's retries are instant.

A test scripts replies with a handler (`api.handler = fn`), a queue (`api.queue(...)`), or routes
(`api.route(predicate, reply)`); every request is recorded with its headers, JSON body and the
monotonic times it arrived and was answered, so tests assert on observable state, not on sleeps.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"
"""The only address the fake listens on: nothing beyond this machine can reach it."""

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
ERROR_MESSAGES = {
    401: "invalid x-api-key",
    404: "model: not found",
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error",
    529: "Overloaded",
}


@dataclass
class Reply:
    """One scripted answer. `text` becomes a text block; `status` >= 400 makes it an error."""

    text: str = "ok"
    status: int = 200
    error_message: str | None = None
    latency: float = 0.0
    """Seconds to wait before answering (the model 'thinking')."""
    thinking: bool = False
    """Prepend a thinking block, as a reasoning model does."""
    stop_reason: str = "end_turn"
    usage: dict[str, int] | None = None
    """Override the computed usage."""
    headers: dict[str, str] = field(default_factory=dict)
    silent: bool = False
    """Never answer: hold the connection open until the client gives up or the server stops."""
    drip: float = 0.0
    """Seconds between bytes: the whole HTTP response, status line first, one byte at a time."""
    body: str | None = None
    """The raw response body, sent as it is with this status (a malformed 200, say)."""

    @classmethod
    def json(cls, payload: Any, **kwargs: Any) -> Reply:
        """A structured-output reply: the JSON text in one text block."""
        return cls(text=json.dumps(payload), **kwargs)

    @classmethod
    def error(cls, status: int, message: str | None = None, **kwargs: Any) -> Reply:
        return cls(text="", status=status, error_message=message, **kwargs)


@dataclass
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased header names."""
    body: dict[str, Any]
    arrived: float
    """time.monotonic() when the request was read."""
    replied: float = 0.0
    """time.monotonic() just before the reply was written."""
    status: int = 0
    ended: float = 0.0
    """time.monotonic() when the server stopped writing: the reply was sent, or the client left."""
    sent: int = 0
    """Bytes of the reply written, and the reply's whole length: they differ for a cut drip."""
    length: int = 0

    @property
    def system(self) -> str:
        """The system prompt as text, whether sent as a string or as blocks."""
        system = self.body.get("system", "")
        if isinstance(system, list):
            return "".join(block.get("text", "") for block in system)
        return str(system)

    @property
    def prompt(self) -> str:
        """The text of the last user message."""
        messages = self.body.get("messages") or [{}]
        content = messages[-1].get("content", "")
        if isinstance(content, list):
            return "".join(block.get("text", "") for block in content if isinstance(block, dict))
        return str(content)

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema of a structured-output request, if any."""
        output_config = self.body.get("output_config") or {}
        return (output_config.get("format") or {}).get("schema")

    @property
    def api_key(self) -> str:
        key = self.headers.get("x-api-key", "")
        auth = self.headers.get("authorization", "")
        return key or (auth[len("Bearer ") :] if auth.startswith("Bearer ") else "")


Handler = Callable[[Request], "Reply | str"]


class FakeMessagesAPI:
    """A threaded fake of POST /v1/messages and POST /v1/messages/count_tokens."""

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        latency: float = 0.0,
        valid_keys: set[str] | None = None,
        known_models: set[str] | None = None,
    ) -> None:
        self.handler: Handler = handler or (lambda request: Reply())
        self.latency = latency
        """Default per-request latency, added to each reply's own."""
        self.valid_keys = valid_keys
        """Keys that authenticate; None accepts any non-empty key."""
        self.known_models = known_models
        """Models that exist; None accepts any."""
        self.requests: list[Request] = []
        self._queue: list[Reply | str] = []
        self._routes: list[tuple[Callable[[Request], bool], Handler]] = []
        self._cached_prefixes: set[str] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer((HOST, 0), self._make_handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> FakeMessagesAPI:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.01,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases silent and dripping replies still holding a connection
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeMessagesAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- scripting -------------------------------------------------------------------------

    def queue(self, *replies: Reply | str) -> None:
        """Answer the next requests with these replies, in order, before routes and handler."""
        with self._lock:
            self._queue.extend(replies)

    def route(self, predicate: Callable[[Request], bool], reply: Handler | Reply | str) -> None:
        """Answer requests matching `predicate`; later routes are tried first."""
        handler: Handler = reply if callable(reply) else (lambda request: reply)
        with self._lock:
            self._routes.insert(0, (predicate, handler))

    def forget_cache(self) -> None:
        """Start the prompt cache cold again, as a new day's first request would find it."""
        with self._lock:
            self._cached_prefixes.clear()

    def messages(self) -> list[Request]:
        """Recorded POST /v1/messages requests, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/v1/messages")]

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Request]:
        """Block until `count` message requests have been answered (observable state)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answered = [r for r in self.messages() if r.replied]
            if len(answered) >= count:
                return answered
            time.sleep(0.005)
        raise TimeoutError(f"only {len(self.messages())} of {count} requests arrived")

    def wait_ended(self, count: int, timeout: float = 10.0) -> list[Request]:
        """Block until `count` message requests are over on the server's side, however they ended.

        A silent or dripping reply ends when the client hangs up: this is how a test sees that a
        deadline cut the connection, and not only that the client stopped waiting.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ended = [r for r in self.messages() if r.ended]
            if len(ended) >= count:
                return ended
            time.sleep(0.005)
        raise TimeoutError(f"only {len(self.messages())} of {count} requests ended")

    # ---- answering -------------------------------------------------------------------------

    def _choose(self, request: Request) -> Reply:
        with self._lock:
            scripted = self._queue.pop(0) if self._queue else None
            routes = list(self._routes)
        if scripted is None:
            for predicate, handler in routes:
                if predicate(request):
                    scripted = handler(request)
                    break
            else:
                scripted = self.handler(request)
        return Reply(text=scripted) if isinstance(scripted, str) else scripted

    def _usage(self, request: Request, reply: Reply) -> dict[str, int]:
        """Plausible token counts, emulating prompt caching of cache_control system blocks."""
        if reply.usage is not None:
            return {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                **reply.usage,
            }
        cached = ""
        system = request.body.get("system")
        if isinstance(system, list):
            cached = "".join(b.get("text", "") for b in system if b.get("cache_control"))
        uncached = len(json.dumps(request.body.get("messages", []))) // 4 + 1
        cache_write = cache_read = 0
        if cached:
            with self._lock:
                if cached in self._cached_prefixes:
                    cache_read = len(cached) // 4 + 1
                else:
                    self._cached_prefixes.add(cached)
                    cache_write = len(cached) // 4 + 1
        return {
            "input_tokens": uncached,
            "output_tokens": len(reply.text) // 4 + 1,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
        }

    def _answer(self, request: Request) -> tuple[int, dict[str, str], Any, Reply | None]:
        """Status, headers, the JSON payload (or raw text), and the scripted reply if there was one.

        The scripted reply comes back so the handler can apply its way of being sent: silent,
        dripping, or as given.
        """
        if request.path.endswith("/v1/messages/count_tokens"):
            return 200, {}, {"input_tokens": len(json.dumps(request.body)) // 4 + 1}, None
        if not request.path.endswith("/v1/messages"):
            return (*_error(404, f"Not found: {request.path}"), None)
        if not request.api_key or (
            self.valid_keys is not None and request.api_key not in self.valid_keys
        ):
            return (*_error(401), None)
        model = str(request.body.get("model", ""))
        if self.known_models is not None and model not in self.known_models:
            return (*_error(404, f"model: {model}"), None)
        reply = self._choose(request)
        return (*self._reply(request, reply, model), reply)

    def _reply(self, request: Request, reply: Reply, model: str) -> tuple[int, dict[str, str], Any]:
        delay = self.latency + reply.latency
        if delay:
            time.sleep(delay)
        if reply.body is not None:
            return reply.status, reply.headers, reply.body
        if reply.status >= 400:
            status, headers, body = _error(reply.status, reply.error_message)
            return status, {**headers, **reply.headers}, body
        content: list[dict[str, Any]] = []
        if reply.thinking:
            content.append({"type": "thinking", "thinking": "", "signature": "sig-fake"})
        content.append({"type": "text", "text": reply.text})
        message = {
            "id": f"msg_fake{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": self._usage(request, reply),
        }
        return 200, reply.headers, message

    def _make_handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Without this, a kept-alive connection stalls ~40 ms per reply (Nagle + delayed
                # ACK), which would poison every latency the tests and benchmarks measure.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                """Silence: the test output is for the tests."""

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                request = Request(
                    method="POST",
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    arrived=time.monotonic(),
                )
                with api._lock:
                    api.requests.append(request)
                reply: Reply | None = None
                try:
                    status, headers, payload, reply = api._answer(request)
                except Exception as error:  # a broken test handler must still answer
                    status, headers, payload = _error(500, f"fake handler failed: {error!r}")
                if reply is not None and reply.silent:
                    self._hold_silently()
                else:
                    # Recorded before the write, so a client never holds a reply the record lacks.
                    request.status = status
                    request.replied = time.monotonic()
                    self._send(request, status, headers, payload, drip=reply.drip if reply else 0.0)
                request.ended = time.monotonic()

            def _hold_silently(self) -> None:
                """Say nothing until the client hangs up or the server stops."""
                self.close_connection = True
                while not api._stopping.wait(0.02):
                    readable, _, _ = select.select([self.connection], [], [], 0)
                    if readable and not self.connection.recv(1, socket.MSG_PEEK):
                        return  # the client closed its end

            def _send(
                self,
                request: Request,
                status: int,
                headers: dict[str, str],
                payload: Any,
                *,
                drip: float = 0.0,
            ) -> None:
                text = payload if isinstance(payload, str) else json.dumps(payload)
                data = text.encode()
                lines = [f"HTTP/1.1 {status} {_reason(status)}"]
                all_headers = {
                    "content-type": "application/json",
                    "content-length": str(len(data)),
                    "request-id": f"req_fake{next(api._ids):06d}",
                    **headers,
                }
                lines += [f"{name}: {value}" for name, value in all_headers.items()]
                whole = ("\r\n".join(lines) + "\r\n\r\n").encode() + data
                request.length = len(whole)
                if drip:
                    self._drip(request, whole, drip)
                    return
                # One write for head and body: no partial segments for Nagle to hold back.
                self.wfile.write(whole)
                self.wfile.flush()
                request.sent = len(whole)

            def _drip(self, request: Request, whole: bytes, interval: float) -> None:
                """One byte every `interval` seconds, until it is all sent or the client leaves."""
                self.close_connection = True
                for index in range(len(whole)):
                    try:
                        self.wfile.write(whole[index : index + 1])
                        self.wfile.flush()
                    except OSError:
                        return  # the client hung up: exactly what a deadline should do
                    request.sent = index + 1
                    if api._stopping.wait(interval):
                        return

        return _Handler


def _reason(status: int) -> str:
    from http import HTTPStatus

    with contextlib.suppress(ValueError):
        return HTTPStatus(status).phrase
    return "Overloaded" if status == 529 else "Error"


def _error(status: int, message: str | None = None) -> tuple[int, dict[str, str], dict[str, Any]]:
    """A real-shaped error body, with a tiny retry-after so SDK retries cost nothing."""
    error_type = ERROR_TYPES.get(status, "api_error")
    body = {
        "type": "error",
        "error": {"type": error_type, "message": message or ERROR_MESSAGES.get(status, "Error")},
        "request_id": "req_fake_error",
    }
    headers = {"retry-after-ms": "1", "retry-after": "0"} if status in (429, 500, 529) else {}
    return status, headers, body


@contextlib.contextmanager
def running(handler: Handler | None = None, **kwargs: Any) -> Iterator[FakeMessagesAPI]:
    """`with running() as api:` — a started server that is always stopped."""
    api = FakeMessagesAPI(handler, **kwargs).start()
    try:
        yield api
    finally:
        api.stop()
