"""A fake Anthropic Messages API on 127.0.0.1, standard library only.

Both the real `anthropic` SDK (through ANTHROPIC_BASE_URL) and the generated agents' own urllib
calls reach it, so tests exercise the real wire format end to end. Replies are shaped like the real
API's: message ids, content blocks, stop_reason, the four usage fields, and real error bodies with a
tiny `retry-after-ms` so the SDK's retries are instant.

A test scripts replies with a handler (`api.handler = fn`), a queue (`api.queue(...)`), or routes
(`api.route(predicate, reply)`); every request is recorded with its headers, JSON body and the
monotonic times it arrived and was answered, so tests assert on observable state, not on sleeps.

Server tools are emulated as the real API runs them (../shared/reference/anthropic_tools.md §9):
a request carrying the web_search / web_fetch tools is answered, unless scripted otherwise, with
`server_tool_use` blocks (srvtoolu_ ids), their `web_search_tool_result` / `web_fetch_tool_result`
blocks (opaque encrypted_content), cited text blocks and `usage.server_tool_use`. `Reply(web=
WebTurn(...))` scripts the searches and fetches, `pause_after` splits the turn with `pause_turn`,
and a continuation must resend the paused content unchanged with the same tools or get the API's
400. Tool errors are 200s with error objects (max_uses_exceeded, url_not_in_prior_context, ...);
invalid tool definitions, edited server blocks, bad images and PDFs are 400s; a body over 32 MB
is a 413. Documents and images a request carries are on `Request.documents` / `Request.images`,
and the default reply names them.

A request with `"stream": true` is answered as the API streams (§9 "Streaming order"): a
`text/event-stream` of message_start, ping, content_block_start / _delta / _stop for every block
(text_delta, thinking_delta and signature_delta, input_json_delta, citations_delta), message_delta
with the stop_reason and the whole usage, message_stop. `Reply(stream_delay=...)` paces the deltas,
`pieces` splits the text, `hold` keeps the reply open after `hold_after` text deltas until a test
lets it go, and `stream_error` / `stream_cut` end it after `fail_after` text deltas as the API
does once its 200 is sent: an `error` event, or a connection dropped mid-body.

A forced tool call (`tool_choice: {"type": "tool", "name": N}`) is answered as the model answers
it: a scripted reply whose text is a JSON object becomes the `tool_use` block of N with that
object as its input (stop_reason `tool_use`).

`FakeMessagesAPI(mode=...)` behaves as another server that speaks the Messages API does, per
../shared/reference/models.md (MODES):
- "ollama" (Ollama ≥ 0.14; llama.cpp's llama-server with --jinja behaves alike for what matters
  here): `output_config.format` is dropped silently, so a structured request is answered in
  prose with no JSON in it; a JSON reply to a plain request comes back as people write it
  (prose, a fenced block, a closing remark); an effort turns thinking on (a thinking block comes
  first); forced tools work; usage has input and output tokens only; no key is needed. (Ollama
  also drops document blocks unread; AgentGOD never sends them one, so the fake does not say.)
- "vllm" (vLLM ≥ 0.22): structured output and effort work; a tool without `input_schema` (the
  API's server tools) and a `document` block are 400s; usage has no server-tool counts.
- "bare" (llama-server started without --jinja): neither the format nor tools are honoured,
  every reply is prose (a JSON reply to a plain request as people write it); usage has input
  and output tokens only, no cache and no server-tool counts.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import itertools
import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

HOST = "127.0.0.1"
"""The only address the fake listens on: nothing beyond this machine can reach it."""
MODES = ("anthropic", "ollama", "vllm", "bare")
"""The servers the fake can behave as (see the module's docstring)."""

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
MAX_BODY_BYTES = 32 * 1024 * 1024
"""The real API's request limit: a larger body is a 413."""
MAX_IMAGE_BASE64_BYTES = 10 * 1024 * 1024
MAX_IMAGES = 100
SEARCH_TOOLS = frozenset({"web_search_20250305", "web_search_20260209", "web_search_20260318"})
FETCH_TOOLS = frozenset(
    {"web_fetch_20250910", "web_fetch_20260209", "web_fetch_20260309", "web_fetch_20260318"}
)
CODE_TOOLS = frozenset(
    {
        "code_execution_20250522",
        "code_execution_20250825",
        "code_execution_20260120",
        "code_execution_20260521",
    }
)
_COMMON_TOOL_FIELDS = frozenset(
    {"type", "name", "max_uses", "allowed_domains", "blocked_domains", "allowed_callers"}
    | {"cache_control", "defer_loading", "strict", "response_inclusion"}
)
TOOL_FIELDS = {
    "web_search": _COMMON_TOOL_FIELDS | {"user_location"},
    "web_fetch": _COMMON_TOOL_FIELDS
    | {"citations", "max_content_tokens", "url_sources", "use_cache"},
}
"""The fields each server tool takes (the SDK's params); anything else is the API's 400."""
SERVER_BLOCKS = frozenset({"server_tool_use", "web_search_tool_result", "web_fetch_tool_result"})
IMAGE_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}
URL_PATTERN = re.compile(r"https?://[^\s<>\"'`]+")

ERROR_MESSAGES = {
    401: "invalid x-api-key",
    404: "model: not found",
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error",
    529: "Overloaded",
}


@dataclass(frozen=True)
class Page:
    """A page of the fake's web: what a search finds and a fetch reads."""

    url: str
    title: str
    text: str = ""
    page_age: str | None = None


@dataclass(frozen=True)
class Search:
    """One web search the model runs. `results` None: what `api.search` finds for the query."""

    query: str
    results: Sequence[Page] | None = None
    error: str | None = None
    """An error_code (unavailable, too_many_requests, ...): a 200 with an error object, unbilled."""


@dataclass(frozen=True)
class Fetch:
    """One page the model fetches: found in `api.pages`, else made up from the URL."""

    url: str
    error: str | None = None
    """An error_code (url_not_accessible, ...); url_not_in_prior_context comes by itself."""


@dataclass(frozen=True)
class WebTurn:
    """One turn of the server's tool loop: the tool uses in order, then a cited answer.

    `uses` empty: what the fake does by default (fetch the URLs in the prompt if the request
    has web_fetch, else search the prompt). `cite` True cites every result and fetched page
    once, in order; a list of URLs cites those, in that order (repeats allowed). `pause_after`
    ends a leg with `pause_turn` once that many uses have run (the continuation runs the rest).
    """

    uses: Sequence[Search | Fetch] = ()
    answer: str = "Here is what I found. "
    cite: bool | Sequence[str] = True
    pause_after: Sequence[int] = ()


@dataclass
class Reply:
    """One scripted answer. `text` becomes a text block; `status` >= 400 makes it an error.

    `web` answers with a server-tool turn instead; `content` sends these blocks as they are.
    """

    text: str = "ok"
    status: int = 200
    error_message: str | None = None
    latency: float = 0.0
    """Seconds to wait before answering (the model 'thinking')."""
    thinking: bool = False
    """Prepend a thinking block, as a reasoning model does."""
    stop_reason: str = "end_turn"
    usage: dict[str, Any] | None = None
    """Override the computed usage."""
    web: WebTurn | None = None
    content: list[dict[str, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    silent: bool = False
    """Never answer: hold the connection open until the client gives up or the server stops."""
    drip: float = 0.0
    """Seconds between bytes: the whole HTTP response, status line first, one byte at a time
    (a streamed one too, every event of it)."""
    body: str | None = None
    """The raw response body, sent as it is with this status (a malformed 200, say)."""
    stream_delay: float = 0.0
    """Streamed: seconds before each content_block_delta event."""
    pieces: Sequence[str] | None = None
    """Streamed: the text deltas of a plain reply, in order (joined, they must be `text`);
    None splits every text block into words, each with the whitespace after it."""
    hold: threading.Event | None = None
    """Streamed: after `hold_after` text deltas, send nothing more until this is set."""
    hold_after: int = 1
    stream_error: int | None = None
    """Streamed: after `fail_after` text deltas, an `error` event of this status's type
    (529: overloaded_error) ends the stream, as the API reports a failure once its 200 is sent."""
    stream_cut: bool = False
    """Streamed: after `fail_after` text deltas, the connection drops with the body unfinished."""
    fail_after: int = 0

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
    size: int = 0
    """Bytes of the request body."""
    reply: Any = None
    """The JSON payload the fake answered (a message or an error body)."""
    billed: dict[str, Any] = field(default_factory=dict)
    """The usage the client was told of, as the API bills it: a reply's whole usage, or, for a
    stream, its message_start's as updated by any message_delta that got out before it broke."""
    connection: int = 0
    """The order in which the server accepted the connection it came on (1 for the first):
    read on the server's one accepting thread, so it is the order the clients connected in."""

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
    def tools(self) -> list[dict[str, Any]]:
        tools = self.body.get("tools")
        return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []

    def tool(self, name: str) -> dict[str, Any] | None:
        """The request's tool named `name` (web_search, web_fetch, ...), if it has one."""
        return next((tool for tool in self.tools if tool.get("name") == name), None)

    @property
    def documents(self) -> list[dict[str, Any]]:
        """The document blocks of every message, in order."""
        return self._blocks("document")

    @property
    def images(self) -> list[dict[str, Any]]:
        """The image blocks of every message, in order."""
        return self._blocks("image")

    def _blocks(self, kind: str) -> list[dict[str, Any]]:
        return [
            block
            for message in self.body.get("messages") or []
            if isinstance(message, dict) and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == kind
        ]

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
        mode: str = "anthropic",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        """Which server the fake behaves as (MODES)."""
        self.handler: Handler = handler or default_reply
        self.latency = latency
        """Default per-request latency, added to each reply's own."""
        self.valid_keys = valid_keys
        """Keys that authenticate; None accepts any non-empty key."""
        self.known_models = known_models
        """Models that exist; None accepts any."""
        self.requests: list[Request] = []
        self.keep_streams_alive = False
        """Keep a stream's connection open after its last chunk, as the API does; off by
        default, where tests count on a closed connection after a stream."""
        self.honour_max_tokens = False
        """Cut a plain reply at the request's max_tokens (stop_reason max_tokens), as the API
        does; off by default, where tests script replies without thinking of room."""
        self.pages: list[Page] = []
        """The fake's web: what searches find (by a shared word) and fetches read."""
        self.search_results: dict[str, list[Page]] = {}
        """What a search for exactly this query finds."""
        self._issued: set[str] = set()
        """Every server tool block sent, canonical JSON: only these may be sent back."""
        self._paused: dict[str, _Paused] = {}
        """Paused legs by their content's canonical JSON."""
        self._queue: list[Reply | str] = []
        self._routes: list[tuple[Callable[[Request], bool], Handler]] = []
        self._cached_prefixes: set[str] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server = _Server((HOST, 0), self._make_handler())
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

    def _usage(self, request: Request, reply: Reply) -> dict[str, Any]:
        """Plausible token counts, emulating prompt caching of cache_control system blocks;
        tool results count as input, and a request with server tools gets server_tool_use.

        `reply.content` is what is being sent (the text block for a plain reply)."""
        content = reply.content if reply.content is not None else [{"text": reply.text}]
        server = _server_counts(request, content)
        if reply.usage is not None:
            return self._as_reported(
                {
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    **({"server_tool_use": server} if server else {}),
                    **reply.usage,
                }
            )
        cached = ""
        system = request.body.get("system")
        if isinstance(system, list):
            cached = "".join(b.get("text", "") for b in system if b.get("cache_control"))
        results = [block for block in content if block.get("type") in SERVER_BLOCKS]
        uncached = len(json.dumps(request.body.get("messages", []))) // 4 + 1
        uncached += len(json.dumps(results)) // 4 if results else 0
        cache_write = cache_read = 0
        if cached:
            with self._lock:
                if cached in self._cached_prefixes:
                    cache_read = len(cached) // 4 + 1
                else:
                    self._cached_prefixes.add(cached)
                    cache_write = len(cached) // 4 + 1
        text = "".join(str(block.get("text") or "") for block in content)
        return self._as_reported(
            {
                "input_tokens": uncached,
                "output_tokens": len(text) // 4 + 1,
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
                **({"server_tool_use": server} if server else {}),
            }
        )

    def _as_reported(self, usage: dict[str, Any]) -> dict[str, Any]:
        """Usage as this mode's server reports it: input and output only (ollama, bare), no
        server-tool counts (vllm)."""
        if self.mode in ("ollama", "bare"):
            return {"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"]}
        if self.mode == "vllm":
            return {name: value for name, value in usage.items() if name != "server_tool_use"}
        return usage

    def _answer(self, request: Request) -> tuple[int, dict[str, str], Any, Reply | None]:
        """Status, headers, the JSON payload (or raw text), and the scripted reply if there was one.

        The scripted reply comes back so the handler can apply its way of being sent: silent,
        dripping, or as given. A paused server-tool turn is continued by the fake itself.
        """
        if request.path.endswith("/v1/messages/count_tokens"):
            return 200, {}, {"input_tokens": len(json.dumps(request.body)) // 4 + 1}, None
        if not request.path.endswith("/v1/messages"):
            return (*_error(404, f"Not found: {request.path}"), None)
        if (not request.api_key and self.mode == "anthropic") or (
            self.valid_keys is not None and request.api_key not in self.valid_keys
        ):
            return (*_error(401), None)
        model = str(request.body.get("model", ""))
        if self.known_models is not None and model not in self.known_models:
            return (*_error(404, f"model: {model}"), None)
        if request.size > MAX_BODY_BYTES:
            return (*_error(413, "Request exceeds the maximum allowed number of bytes."), None)
        problem = self._problem(request) or self._continued(request)
        if isinstance(problem, str):
            return (*_error(400, problem), None)
        if problem is not None and problem.web is not None:
            return (*self._reply(request, Reply(web=problem.web.turn), model, problem.web), None)
        reply = self._as_server(request, self._choose(request))
        return (*self._reply(request, reply, model), reply)

    def _as_server(self, request: Request, reply: Reply) -> Reply:
        """The scripted reply as this mode's server would send it (see the module's docstring):
        a JSON answer to a forced tool call as that tool's use, and what a server that drops the
        format or the tools makes of the rest."""
        if reply.status >= 400 or reply.content is not None or reply.web is not None:
            return reply
        if reply.body is not None:
            return reply
        payload = _json_object(reply.text)
        choice = request.body.get("tool_choice")
        forced = (
            choice.get("name")
            if isinstance(choice, dict) and choice.get("type") == "tool"
            else None
        )
        tools_heard = self.mode != "bare"
        thinking = self.mode == "ollama" and bool(
            (request.body.get("output_config") or {}).get("effort")
        )
        head = (
            [{"type": "thinking", "thinking": "Thinking it over.", "signature": ""}]
            if thinking
            else []
        )
        if payload is not None and forced and tools_heard:
            use = {
                "type": "tool_use",
                "id": f"toolu_fake{next(self._ids):06d}",
                "name": forced,
                "input": payload,
            }
            return replace(reply, content=[*head, use], stop_reason="tool_use")
        if payload is not None and self.mode in ("ollama", "bare"):
            if request.schema is not None or forced:
                text = _in_words(payload)  # it never saw the schema: it answers in prose
            else:
                text = _as_people_write(payload)
            return replace(
                reply, text=text, content=[*head, {"type": "text", "text": text}] if head else None
            )
        if head:
            return replace(reply, content=[*head, {"type": "text", "text": reply.text}])
        return reply

    def _reply(
        self, request: Request, reply: Reply, model: str, resume: _WebState | None = None
    ) -> tuple[int, dict[str, str], Any]:
        delay = self.latency + reply.latency
        if delay:
            time.sleep(delay)
        if reply.body is not None:
            return reply.status, reply.headers, reply.body
        if reply.status >= 400:
            status, headers, body = _error(reply.status, reply.error_message)
            return status, {**headers, **reply.headers}, body
        stop_reason = reply.stop_reason
        web: _WebState | None = None
        if reply.content is not None:
            content = [dict(block) for block in reply.content]
        elif reply.web is not None:
            web = resume or self._start_turn(request, reply.web)
            content, paused = self._web_leg(request, web)
            stop_reason = "pause_turn" if paused else "end_turn"
        else:
            content = []
            if reply.thinking:
                content.append({"type": "thinking", "thinking": "", "signature": "sig-fake"})
            text = reply.text
            limit = request.body.get("max_tokens")
            if self.honour_max_tokens and isinstance(limit, int) and len(text) // 4 + 1 > limit:
                text = text[: max(0, limit - 1) * 4]  # the API stops where the room ends
                stop_reason = "max_tokens"
            content.append({"type": "text", "text": text})
        with self._lock:
            self._issued.update(_canonical(b) for b in content if b.get("type") in SERVER_BLOCKS)
            if stop_reason == "pause_turn":
                ids = {b.get("id") for b in content if b.get("type") == "server_tool_use"}
                self._paused[_canonical(content)] = _Paused(request.tools, ids - {None}, web)
        message = {
            "id": f"msg_fake{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": self._usage(request, replace(reply, content=content)),
        }
        return 200, reply.headers, message

    # ---- the API's own checks ----------------------------------------------------------------

    def _problem(self, request: Request) -> str | None:
        """What the real API would answer 400 about: tools, resent server blocks, media."""
        names: set[str] = set()
        tools = request.body.get("tools")
        if tools is not None:
            if not isinstance(tools, list):
                return "tools: Input should be a valid list"
            for index, tool in enumerate(tools):
                if self.mode == "vllm" and not (
                    isinstance(tool, dict) and isinstance(tool.get("input_schema"), dict)
                ):
                    return f"tools.{index}.input_schema: Field required"
                problem = _tool_problem(index, tool)
                if problem:
                    return problem
                if tool.get("name") in names:
                    return "tools: Tool names must be unique."
                names.add(str(tool.get("name")))
        messages = request.body.get("messages")
        for m, message in enumerate(messages if isinstance(messages, list) else []):
            content = message.get("content") if isinstance(message, dict) else None
            for b, block in enumerate(content if isinstance(content, list) else []):
                kind = block.get("type") if isinstance(block, dict) else None
                if kind not in SERVER_BLOCKS:
                    continue
                where = f"messages.{m}.content.{b}"
                with self._lock:
                    issued = _canonical(block) in self._issued
                if message.get("role") != "assistant":
                    return f"{where}: {kind} blocks may only appear in assistant messages"
                if not issued:
                    return (
                        f"{where}: the {kind} block was modified or never issued "
                        "(server tool blocks, encrypted content included, must be passed back "
                        "unchanged)"
                    )
                if kind == "server_tool_use" and block.get("name") not in names:
                    return (
                        f"{where}: tool {block.get('name')!r} is used in the conversation but "
                        "is not in tools"
                    )
        if self.mode == "vllm":
            for m, message in enumerate(messages if isinstance(messages, list) else []):
                content = message.get("content") if isinstance(message, dict) else None
                for b, block in enumerate(content if isinstance(content, list) else []):
                    if isinstance(block, dict) and block.get("type") == "document":
                        return (
                            f"messages.{m}.content.{b}: Input tag 'document' found using 'type' "
                            "does not match any of the expected tags: 'text', 'image', "
                            "'tool_use', 'tool_result', 'thinking'"
                        )
        return _media_problem(request)

    def _continued(self, request: Request) -> _Paused | str | None:
        """The paused turn this request continues, a 400's message if it continues one wrongly,
        or None when it continues none."""
        messages = request.body.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else None
        if not isinstance(last, dict) or last.get("role") != "assistant":
            return None
        content = last.get("content")
        if not isinstance(content, list):
            return None
        with self._lock:
            paused = self._paused.get(_canonical(content))
            known = [p for p in self._paused.values() if p.ids]
        if paused is None:
            ids = {b.get("id") for b in content if isinstance(b, dict)}
            if any(p.ids & ids for p in known):
                return "a paused turn must be continued with its content unchanged"
            return None
        if request.tools != paused.tools:
            return "a paused turn must be continued with the same tools"
        return paused

    # ---- the web -----------------------------------------------------------------------------

    def search(self, query: str) -> list[Page]:
        """What a search finds: `search_results[query]`, else the `pages` sharing a word with
        it (4 letters or more), else one page made up for it."""
        with self._lock:
            exact = self.search_results.get(query)
            pages = list(self.pages)
        if exact is not None:
            return list(exact)
        words = set(re.findall(r"\w{4,}", query.lower()))
        found = [p for p in pages if words & set(re.findall(r"\w{4,}", _words(p)))]
        if found:
            return found[:5]
        slug = re.sub(r"\W+", "-", query.lower()).strip("-")[:40] or "page"
        return [Page(f"https://example.com/{slug}", query[:60], f"Facts about {query[:60]}.")]

    def page(self, url: str) -> Page:
        """What a fetch reads: the page with this URL in `pages` or `search_results`, else one
        made up for it."""
        wanted = url.split("#", 1)[0]
        with self._lock:
            pages = [*self.pages, *(p for found in self.search_results.values() for p in found)]
        for page in pages:
            if page.url.split("#", 1)[0] == wanted:
                return page
        return Page(url, urlsplit(url).netloc or url, f"The page at {url}.")

    def _start_turn(self, request: Request, turn: WebTurn) -> _WebState:
        uses = list(turn.uses)
        if not uses:
            prompt = request.prompt
            urls = [url.rstrip(".,;:!?)]}") for url in URL_PATTERN.findall(prompt)]
            if urls and request.tool("web_fetch"):
                uses = [Fetch(url) for url in dict.fromkeys(urls)]
            elif request.tool("web_search"):
                uses = [Search(" ".join(prompt.split())[:80] or "search")]
        return _WebState(turn, uses)

    def _web_leg(self, request: Request, state: _WebState) -> tuple[list[dict[str, Any]], bool]:
        """Run the turn's next tool uses; the leg's content and whether it paused."""
        start = state.done
        stops = [n for n in state.turn.pause_after if start < n <= len(state.uses)]
        end = min(stops, default=len(state.uses))
        content: list[dict[str, Any]] = []
        found = list(state.found)
        for position in range(start, end):
            use = state.uses[position]
            name = "web_search" if isinstance(use, Search) else "web_fetch"
            tool = request.tool(name)
            if tool is None:
                raise ValueError(f"the turn uses {name}, which the request does not have")
            tool_id = f"srvtoolu_fake{next(self._ids):06d}"
            asked = {"query": use.query} if isinstance(use, Search) else {"url": use.url}
            content.append({"type": "server_tool_use", "id": tool_id, "name": name, "input": asked})
            limit = tool.get("max_uses")
            before = sum(1 for u in state.uses[:position] if type(u) is type(use))
            error = "max_uses_exceeded" if isinstance(limit, int) and before >= limit else use.error
            if isinstance(use, Search):
                content.append(self._search_result(tool_id, use, error, found))
            else:
                context = json.dumps(request.body.get("messages"), ensure_ascii=False)
                context += " ".join(page.url for _, page in found)
                if error is None and use.url not in context:
                    error = "url_not_in_prior_context"
                cite = bool((tool.get("citations") or {}).get("enabled"))
                limit = tool.get("max_content_tokens")
                limit = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
                content.append(self._fetch_result(tool_id, use, error, found, cite, limit))
        paused = bool(stops)
        if not paused:
            content += _answer_blocks(state.turn, found)
        state.done, state.found = end, found
        return content, paused

    def _search_result(
        self, tool_id: str, use: Search, error: str | None, found: list[tuple[str, Page]]
    ) -> dict[str, Any]:
        result: Any
        if error is not None:
            result = {"type": "web_search_tool_result_error", "error_code": error}
        else:
            pages = list(use.results) if use.results is not None else self.search(use.query)
            found += [("search", page) for page in pages]
            result = [
                {
                    "type": "web_search_result",
                    "url": page.url,
                    "title": page.title,
                    "encrypted_content": _opaque("content", page.url, page.text),
                    "page_age": page.page_age,
                }
                for page in pages
            ]
        return {"type": "web_search_tool_result", "tool_use_id": tool_id, "content": result}

    def _fetch_result(
        self,
        tool_id: str,
        use: Fetch,
        error: str | None,
        found: list[tuple[str, Page]],
        cite: bool,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """A fetched page as the API gives it; cut to `limit` tokens (the tool's
        max_content_tokens, four characters each here, as this fake counts tokens)."""
        result: dict[str, Any]
        if error is not None:
            result = {"type": "web_fetch_tool_result_error", "error_code": error}
        else:
            page = self.page(use.url)
            found.append(("fetch" if cite else "page", page))
            text = page.text if limit is None else page.text[: limit * 4]
            document: dict[str, Any] = {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": text},
                "title": page.title,
            }
            if cite:
                document["citations"] = {"enabled": True}
            result = {
                "type": "web_fetch_result",
                "url": use.url,
                "retrieved_at": "2026-01-01T00:00:00Z",
                "content": document,
            }
        return {"type": "web_fetch_tool_result", "tool_use_id": tool_id, "content": result}

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
                    size=len(raw),
                    connection=api._server.accepted.get(self.client_address, 0),
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
                elif _streamed(request, status, payload):
                    request.status = status
                    request.reply = payload
                    request.replied = time.monotonic()
                    self._stream(request, headers, payload, reply or Reply())
                else:
                    # Recorded before the write, so a client never holds a reply the record lacks.
                    request.status = status
                    request.reply = payload
                    if status == 200 and isinstance(payload, dict):
                        request.billed = dict(payload.get("usage") or {})
                    request.replied = time.monotonic()
                    self._send(request, status, headers, payload, drip=reply.drip if reply else 0.0)
                request.ended = time.monotonic()

            def _hold_silently(self) -> None:
                """Say nothing until the client hangs up or the server stops."""
                self.close_connection = True
                while not api._stopping.wait(0.02):
                    if self._client_left():
                        return

            def _client_left(self) -> bool:
                """The client closed its end (it sends nothing more once its request is out)."""
                readable, _, _ = select.select([self.connection], [], [], 0)
                return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)

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

            def _stream(
                self, request: Request, headers: dict[str, str], message: Any, reply: Reply
            ) -> None:
                """The message as server-sent events, one chunk each, paced and cut as scripted."""
                self.close_connection = not api.keep_streams_alive
                head = [
                    "HTTP/1.1 200 OK",
                    "content-type: text/event-stream; charset=utf-8",
                    "cache-control: no-cache",
                    "transfer-encoding: chunked",
                    f"request-id: req_fake{next(api._ids):06d}",
                    *(f"{name}: {value}" for name, value in headers.items()),
                ]
                try:
                    events = list(stream_events(message, reply.pieces))
                except ValueError as error:  # a broken script must still be answered
                    status, error_headers, body = _error(500, f"fake handler failed: {error!r}")
                    request.status, request.reply = status, body
                    self._send(request, status, error_headers, body)
                    return
                start = ("\r\n".join(head) + "\r\n\r\n").encode()
                if reply.drip:  # the whole stream, a byte at a time
                    whole = start + b"".join(_chunk(*event) for event in events) + b"0\r\n\r\n"
                    request.length = len(whole)
                    self._drip(request, whole, reply.drip)
                    return
                texts = 0
                try:
                    self._write(start, request)
                    for event, data in events:
                        ending = reply.stream_error is not None or reply.stream_cut
                        if ending and texts == reply.fail_after and event != "message_start":
                            if reply.stream_cut:
                                return  # no last chunk: the client sees the body cut short
                            failure = _error(reply.stream_error or 500, reply.error_message)[2]
                            request.reply = failure
                            self._write(_chunk("error", failure), request)
                            break
                        if reply.hold is not None and texts == reply.hold_after:
                            while not (reply.hold.wait(0.02) or api._stopping.is_set()):
                                if self._client_left():
                                    return
                        if event == "content_block_delta" and api._stopping.wait(
                            reply.stream_delay
                        ):
                            return
                        self._write(_chunk(event, data), request)
                        if event == "message_start":
                            request.billed = dict(data["message"]["usage"])
                        elif event == "message_delta":
                            request.billed = {**request.billed, **data["usage"]}
                        texts += data.get("delta", {}).get("type") == "text_delta"
                    self._write(b"0\r\n\r\n", request)
                except OSError:
                    return  # the client hung up mid-stream

            def _write(self, data: bytes, request: Request) -> None:
                self.wfile.write(data)
                self.wfile.flush()
                request.sent += len(data)
                request.length = request.sent

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


@dataclass
class _WebState:
    """A server-tool turn in progress: its uses, how many have run, what they found."""

    turn: WebTurn
    uses: list[Search | Fetch]
    done: int = 0
    found: list[tuple[str, Page]] = field(default_factory=list)
    """(search | fetch | page, page): results and fetched pages; `page` is not citable."""


@dataclass(frozen=True)
class _Paused:
    """A leg that ended in pause_turn: the tools its continuation must carry again."""

    tools: list[dict[str, Any]]
    ids: set[Any]
    web: _WebState | None


class _Server(ThreadingHTTPServer):
    """Numbers each connection as it is accepted (Request.connection)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accepted: dict[Any, int] = {}
        self._count = itertools.count(1)

    def get_request(self) -> tuple[Any, Any]:
        connection, address = super().get_request()
        self.accepted[address] = next(self._count)
        return connection, address


def default_reply(request: Request) -> Reply:
    """The unscripted answer: a web turn for a request with web tools, else "ok" (naming the
    documents and images the request carried)."""
    if request.tool("web_search") or request.tool("web_fetch"):
        return Reply(web=WebTurn())
    seen = [
        f"{d.get('title') or 'a document'} ({(d.get('source') or {}).get('media_type')})"
        for d in request.documents
    ] + [f"an image ({(i.get('source') or {}).get('media_type')})" for i in request.images]
    return Reply("ok" + (f"; I saw {', '.join(seen)}" if seen else ""))


def _streamed(request: Request, status: int, payload: Any) -> bool:
    """Whether this answer goes out as an event stream: a message, to a request that asked."""
    return (
        request.body.get("stream") is True
        and status == 200
        and isinstance(payload, dict)
        and payload.get("type") == "message"
    )


def _pieces(text: str) -> list[str]:
    """Text as the API streams it, in small pieces: here a word and the whitespace after it."""
    return re.findall(r"\A\s+|\S+\s*", text)


def _chunk(event: str, data: dict[str, Any]) -> bytes:
    """One server-sent event as one HTTP chunk."""
    body = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
    return f"{len(body):x}\r\n".encode() + body + b"\r\n"


def stream_events(
    message: dict[str, Any], pieces: Sequence[str] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The events the API streams for `message`, in its order: (event name, data) each.

    message_start carries the input side of the usage and one output token, message_delta the
    stop_reason and the whole usage (its counts are totals, not increments). `pieces` are the
    text deltas when the message has one text block; they must join to its text.
    """
    usage = dict(message["usage"])
    started = {key: usage[key] for key in usage if key.endswith("input_tokens")}
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                **message,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {**started, "output_tokens": 1},
            },
        },
    )
    yield "ping", {"type": "ping"}
    texts = [block for block in message["content"] if block.get("type") == "text"]
    if pieces is not None and (len(texts) != 1 or "".join(pieces) != texts[0].get("text")):
        raise ValueError("Reply.pieces must join to the text of the reply's one text block")
    for index, block in enumerate(message["content"]):
        split = list(pieces) if pieces is not None else None
        for data in _block_events(index, block, split):
            yield data["type"], data
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": usage,
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _block_events(
    index: int, block: dict[str, Any], pieces: list[str] | None
) -> Iterator[dict[str, Any]]:
    """content_block_start, the block's deltas, content_block_stop."""

    def delta(**data: Any) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": data}

    kind = block.get("type")
    if kind == "text":
        # The start holds no text and no citations: both arrive as deltas.
        start = {key: value for key, value in block.items() if key != "citations"}
        yield {
            "type": "content_block_start",
            "index": index,
            "content_block": {**start, "text": ""},
        }
        for citation in block.get("citations") or []:
            yield delta(type="citations_delta", citation=citation)
        for piece in pieces if pieces is not None else _pieces(str(block.get("text") or "")):
            yield delta(type="text_delta", text=piece)
    elif kind == "thinking":
        start = {**block, "thinking": "", "signature": ""}
        yield {"type": "content_block_start", "index": index, "content_block": start}
        if block.get("thinking"):
            yield delta(type="thinking_delta", thinking=block["thinking"])
        yield delta(type="signature_delta", signature=block.get("signature", ""))
    elif kind in ("tool_use", "server_tool_use"):
        start = {**block, "input": {}}
        yield {"type": "content_block_start", "index": index, "content_block": start}
        yield delta(type="input_json_delta", partial_json=json.dumps(block.get("input", {})))
    else:
        yield {"type": "content_block_start", "index": index, "content_block": block}
    yield {"type": "content_block_stop", "index": index}


def web_reply(
    results: Sequence[tuple[str, str, str]],
    *,
    query: str = "search",
    answer: str = "Here is what I found. ",
    cite: bool | Sequence[str] = True,
    pause: bool = False,
) -> Reply:
    """One search finding `results` ((title, url, page text) each), then the cited answer;
    `pause` ends the first leg after the search with pause_turn."""
    pages = [Page(url, title, text) for title, url, text in results]
    turn = WebTurn([Search(query, pages)], answer, cite, (1,) if pause else ())
    return Reply(web=turn)


def _answer_blocks(turn: WebTurn, found: list[tuple[str, Page]]) -> list[dict[str, Any]]:
    """The answer's text blocks: the answer, then one cited sentence per cited source."""
    blocks = [{"type": "text", "text": turn.answer}] if turn.answer else []
    fetched = [page for kind, page in found if kind != "search"]
    if turn.cite is True:
        cited_sources = [(kind, page) for kind, page in found if kind != "page"]
    else:
        cited_sources = []
        for url in list(turn.cite) if turn.cite else []:
            match = next(((kind, page) for kind, page in found if page.url == url), None)
            if match is None:
                raise ValueError(f"the turn cites {url}, which none of its results has")
            cited_sources.append(match)
    for kind, page in cited_sources:
        cited = (page.text or page.title)[:150]
        block: dict[str, Any] = {"type": "text", "text": cited + " "}
        citation: dict[str, Any]
        if kind == "search":
            citation = {
                "type": "web_search_result_location",
                "url": page.url,
                "title": page.title,
                "encrypted_index": _opaque("index", page.url),
                "cited_text": cited,
            }
            block["citations"] = [citation]
        elif kind == "fetch":
            citation = {
                "type": "char_location",
                "document_index": fetched.index(page),
                "document_title": page.title,
                "start_char_index": 0,
                "end_char_index": len(cited),
                "cited_text": cited,
            }
            block["citations"] = [citation]
        blocks.append(block)
    return blocks


def _server_counts(request: Request, content: list[dict[str, Any]]) -> dict[str, int] | None:
    """usage.server_tool_use for a request with web tools: searches that ran (an error is not
    billed) and fetches that read a page."""
    if not (request.tool("web_search") or request.tool("web_fetch")):
        return None
    results = [(b.get("type"), b.get("content")) for b in content]
    return {
        "web_search_requests": sum(
            1 for kind, got in results if kind == "web_search_tool_result" and isinstance(got, list)
        ),
        "web_fetch_requests": sum(
            1
            for kind, got in results
            if kind == "web_fetch_tool_result"
            and isinstance(got, dict)
            and got.get("type") == "web_fetch_result"
        ),
    }


def _json_object(text: str) -> dict[str, Any] | None:
    """The reply's text as a JSON object, when that is all it is (a structured answer)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _in_words(payload: dict[str, Any]) -> str:
    """What a model that never saw the schema writes instead: prose, no JSON object in it."""
    words = " ".join(_words_of(payload)) or "nothing to add"
    return f"Sure! Here is what I think, in a few words: {words}. Let me know what else you need."


def _words_of(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [word for item in value.values() for word in _words_of(item)]
    if isinstance(value, list):
        return [word for item in value for word in _words_of(item)]
    return [str(value).replace("{", "(").replace("}", ")")]


def _as_people_write(payload: dict[str, Any]) -> str:
    """A JSON answer as a chatty model writes one: prose around a fenced block."""
    return (
        "Here is the JSON you asked for {as requested}:\n\n```json\n"
        + json.dumps(payload, indent=2)
        + "\n```\n\nHope this helps! Tell me if you want any field changed }."
    )


def _tool_problem(index: int, tool: Any) -> str | None:
    """Why the API would refuse this tool definition, if it would."""
    where = f"tools.{index}"
    if not isinstance(tool, dict):
        return f"{where}: Input should be a valid dictionary"
    kind, name = tool.get("type"), tool.get("name")
    if kind in SEARCH_TOOLS or kind in FETCH_TOOLS:
        family = "web_search" if kind in SEARCH_TOOLS else "web_fetch"
        if name != family:
            return f"{where}.{kind}.name: Input should be '{family}'"
        extra = sorted(set(tool) - TOOL_FIELDS[family])
        if extra:
            return f"{where}.{kind}.{extra[0]}: Extra inputs are not permitted"
        if "allowed_domains" in tool and "blocked_domains" in tool:
            return f"{where}.{kind}: only one of allowed_domains and blocked_domains may be set"
        uses = tool.get("max_uses", 1)
        if not isinstance(uses, int) or isinstance(uses, bool) or uses < 1:
            return f"{where}.{kind}.max_uses: Input should be greater than or equal to 1"
        return None
    if kind in CODE_TOOLS:
        return None
    if kind in (None, "custom"):
        if not isinstance(name, str) or not isinstance(tool.get("input_schema"), dict):
            return f"{where}.custom.input_schema: Field required"
        return None
    return f"{where}: Input tag {kind!r} found using 'type' does not match any of the expected tags"


def _media_problem(request: Request) -> str | None:
    """Why the API would refuse the request's images or PDFs, if it would."""
    images = request.images
    if len(images) > MAX_IMAGES:
        return f"messages: too many images ({len(images)}); at most {MAX_IMAGES} are allowed"
    for block in images:
        source = block.get("source") or {}
        if source.get("type") != "base64":
            continue
        data = str(source.get("data") or "")
        if len(data) > MAX_IMAGE_BASE64_BYTES:
            return "messages: image exceeds 10 MB maximum"
        media_type = source.get("media_type")
        if media_type not in (*IMAGE_MAGIC, "image/webp"):
            return f"messages: image media_type {media_type!r} is not supported"
        actual = _image_type(_decoded(data))
        if actual != media_type:
            return (
                f"messages: the image was specified using the {media_type} media type, but it "
                f"does not appear to be a valid {media_type} image"
            )
    for block in request.documents:
        source = block.get("source") or {}
        if source.get("type") == "base64":
            if source.get("media_type") != "application/pdf":
                return "messages: a base64 document must be application/pdf"
            if not _decoded(str(source.get("data") or "")).startswith(b"%PDF-"):
                return "messages: The PDF specified was not valid."
    return None


def _words(page: Page) -> str:
    return f"{page.title} {page.text}".lower()


def _decoded(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return b""


def _image_type(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for kind, magic in IMAGE_MAGIC.items() if data.startswith(magic)), None)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _opaque(*parts: str) -> str:
    """An encrypted-looking field: opaque, stable for the same parts."""
    digest = hashlib.sha256("|".join(parts).encode()).digest()
    return "Eq" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


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
