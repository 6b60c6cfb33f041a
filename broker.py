"""broker.py — each agent's only door to the model: the parent holds the key, meter and rules.

An agent inherits one end of a `socket.socketpair()` (AF_UNIX, SOCK_STREAM: a datagram end could
still send to the host's abstract sockets, whatever namespace the agent is in) and nothing else: no
key, no network. It asks; the broker decides. A request is accepted only as a Messages call with a
model the agent was granted and fields from an allowlist, its max_tokens clamped to what the
agent's share and the run's budget can still pay for. The broker then sends it down the product's
one road to the model (the injected `send`, which adds the key), bills the reply's real usage to
the run's ledger and to the agent, and answers. Whatever an agent prints about its own usage is no
longer evidence of anything.

The wire format is agent_runtime's (a 4-byte big-endian length, then UTF-8 JSON, both ways):

    agent:  {"op": "messages", "request": {...}, "web": false, "files": []}
    broker: {"ok": true, "text": "...", "model": "...", "stop_reason": "...", "max_tokens": N,
             "usage": {"input_tokens": ..., ...}}
       or:  {"ok": false, "error": {"type": "budget", "message": "..."}}

One thread per channel. The runtime keeps one request in flight per connection, so a channel's
thread is always either waiting for its agent or for that agent's one model call: a slow call
delays nobody else, and a request costs no hand-off between threads (bench/broker_roundtrip.py).
Everything the broker depends on is injected, so it can be wired to whichever ledger and road the
product has: nothing here imports config or the SDK.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import agent_runtime
import redact
from kinds import EFFORT_LEVELS
from ledger import tokens_in_bytes
from signals import shield_from_signals

MAX_REQUEST_BYTES = 8 * 1024 * 1024
"""A request frame (or the request built from it, attachments included) larger than this is
refused as too_large; the channel stays open."""
MAX_DRAIN_BYTES = 64 * 1024 * 1024
"""A frame that declares more than this is not read at all: refused as malformed, channel closed."""
MAX_TOKENS_CAP = 21_333
"""The SDK refuses a non-streaming call above this max_tokens, so the broker never asks for more."""
MIN_CALL_TOKENS = 256
"""A call the agent's share cannot give this much output (or its whole max_tokens) is refused."""
FRAME_FIELDS = frozenset({"op", "request", "web", "files"})
REQUEST_FIELDS = frozenset({"model", "max_tokens", "system", "messages", "output_config"})
"""Anything else in a request (tools, temperature, stream, metadata, ...) is refused, not
stripped: an agent that asked for it should learn it cannot have it."""
BLOCK_FIELDS = frozenset({"type", "text", "cache_control"})
USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


class Price(Protocol):
    """USD per million tokens, as config.Price has them."""

    @property
    def input(self) -> float: ...
    @property
    def output(self) -> float: ...
    @property
    def cache_read(self) -> float: ...
    @property
    def cache_write(self) -> float: ...


class HoldLike(Protocol):
    """What a ledger sets aside for one call: `tokens` is the max_tokens it can pay for."""

    @property
    def tokens(self) -> int: ...


HoldT = TypeVar("HoldT", bound=HoldLike)


class Ledger(Protocol[HoldT]):
    """The run's ledger, as config.Usage is: hold the worst case, record the real, release."""

    def hold(self, model: str, *, input_tokens: int, max_tokens: int) -> HoldT: ...
    def record(self, model: str, usage: Any) -> None: ...
    def release(self, hold: HoldT) -> None: ...


class Recorder(Protocol):
    """Anything that counts a reply's usage (an agent's own config.Usage, say)."""

    def record(self, model: str, usage: Any) -> None: ...


Send = Callable[[dict[str, Any]], Any]
"""The road to the model: Messages keyword arguments -> the SDK Message (or the same as a dict)."""


@dataclass(frozen=True)
class Grant:
    """What one agent may ask for."""

    model: str
    """Used when a request names none."""
    allowed_models: frozenset[str]
    """Models a request may name; always includes `model`."""
    effort: str | None = None
    """The ceiling of output_config.effort (lowered per model); None sends no effort."""
    share_tokens: int | None = None
    """Tokens (all four kinds) this agent's calls may use together; None is no share limit."""
    web_allowed: bool = False
    files: Mapping[str, Path] = field(default_factory=dict)
    """Attachments by the name the agent uses for them -> where the broker reads them."""


@dataclass
class AgentUsage:
    """What one agent's channel cost, counted by the broker from real replies only."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    usd: float = 0.0
    refusals: dict[str, int] = field(default_factory=dict)
    """Requests the broker would not make, by error type (budget, forbidden, invalid, ...)."""
    failures: dict[str, int] = field(default_factory=dict)
    """Calls that went to the model and failed, by error type (rate_limit, overloaded, ...)."""

    @property
    def tokens(self) -> int:
        """All four kinds: what an agent's share is spent in."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_write_tokens
            + self.cache_read_tokens
        )

    def merge(self, other: AgentUsage) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.usd += other.usd
        for mine, theirs in ((self.refusals, other.refusals), (self.failures, other.failures)):
            for kind, count in theirs.items():
                mine[kind] = mine.get(kind, 0) + count


class _Refusal(Exception):
    """The broker will not make this call; `kind` is one of agent_runtime.REFUSAL_TYPES."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class _Malformed(Exception):
    """The frame cannot be read as a request: answer once, then close the channel."""


def _field(value: Any, name: str) -> Any:
    """A reply's field, whether it came back as an SDK object or as a dict."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _count(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


class Channel:
    """One agent's connection to the broker: its grant, its socket pair and its meter.

    The child's end (`child_fd`) goes to the agent with `pass_fds` and the variable in
    `child_env()`; close the parent's copy of it (`close_child_end`) right after the agent has
    started, or its death will not be seen. The channel ends when the agent closes its end.
    """

    def __init__(self, broker: Broker, name: str, grant: Grant, meter: Recorder | None) -> None:
        self.name = name
        """Whose channel this is; may be renamed (an agent started ahead learns its name late)."""
        self._broker = broker
        self._grant = grant
        self._meter = meter
        self._usage = AgentUsage()
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._child: socket.socket | None = child
        self._child_fd = child.fileno()
        self._thread = threading.Thread(target=self._serve, name=f"broker-{name}", daemon=True)
        self._thread.start()

    @property
    def child_fd(self) -> int:
        """The agent's end, to pass with `pass_fds=(channel.child_fd,)`."""
        return self._child_fd

    def child_env(self) -> dict[str, str]:
        """The one variable the agent's runtime needs to find its end."""
        return {agent_runtime.BROKER_FD_VARIABLE: str(self._child_fd)}

    def close_child_end(self) -> None:
        """Drop the parent's copy of the agent's end (once the agent holds it, or never will)."""
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            child.close()

    @property
    def grant(self) -> Grant:
        with self._lock:
            return self._grant

    def update_grant(self, **changes: Any) -> Grant:
        """Change what the agent may ask for from its next request on (e.g. a late effort);
        `changes` are Grant's fields."""
        with self._lock:
            self._grant = _checked(replace(self._grant, **changes))
            return self._grant

    @property
    def usage(self) -> AgentUsage:
        """A copy of what this agent has cost so far."""
        with self._lock:
            copy = AgentUsage()
            copy.merge(self._usage)
            return copy

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def wait_ended(self, timeout: float | None = None) -> bool:
        """Wait until the channel's thread is done (the agent hung up, or close())."""
        return self._ended.wait(timeout)

    def close(self) -> None:
        """End the channel; a call in flight still finishes and is billed, its answer dropped."""
        self.close_child_end()
        with contextlib.suppress(OSError):
            self._parent.shutdown(socket.SHUT_RDWR)  # wakes the thread; it closes the socket

    # ---- serving ---------------------------------------------------------------------------

    def _serve(self) -> None:
        shield_from_signals()  # a stop signal must reach the main thread, never a channel's
        try:
            while True:
                try:
                    read = self._read_frame()
                except _Refusal as refusal:
                    reply = self._refuse(refusal)
                except _Malformed as error:
                    self._send(self._refuse(_Refusal("malformed", str(error))))
                    return
                else:
                    if read is None:
                        return
                    reply = self._broker._handle(self, *read)
                if not self._send(reply):
                    return
        except OSError:
            return  # close() shut the socket down under us
        finally:
            self._parent.close()
            self._ended.set()

    def _read_exact(self, size: int) -> bytearray | None:
        """Exactly `size` bytes, or None if the agent hung up first."""
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            count = self._parent.recv_into(view[got:])
            if not count:
                return None
            got += count
        return buffer

    def _read_frame(self) -> tuple[dict[str, Any], int] | None:
        """The next request and its size in bytes, or None if the agent hung up."""
        header = self._read_exact(agent_runtime.FRAME_HEADER_BYTES)
        if header is None:
            return None
        size = int.from_bytes(header, "big")
        limit = self._broker.max_request_bytes
        if size == 0:
            raise _Malformed("an empty frame")
        if size > max(limit, MAX_DRAIN_BYTES):
            raise _Malformed(f"a frame of {size} bytes (the limit is {limit})")
        if size > limit:
            left = size
            scrap = bytearray(min(size, 1 << 20))
            while left:
                count = self._parent.recv_into(scrap, min(left, len(scrap)))
                if not count:
                    return None
                left -= count
            raise _Refusal("too_large", f"the request is {size} bytes; the limit is {limit}")
        body = self._read_exact(size)
        if body is None:
            return None
        try:
            frame = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise _Malformed("a frame that is not UTF-8 JSON") from None
        if not isinstance(frame, dict):
            raise _Malformed("a frame that is not a JSON object")
        return frame, size

    def _send(self, reply: dict[str, Any]) -> bool:
        try:
            self._parent.sendall(agent_runtime.encode_frame(reply))
        except OSError:
            return False
        return True

    def _refuse(self, refusal: _Refusal) -> dict[str, Any]:
        with self._lock:
            self._usage.refusals[refusal.kind] = self._usage.refusals.get(refusal.kind, 0) + 1
        return self._error(refusal.kind, refusal.message)

    def _fail(self, kind: str, message: str) -> dict[str, Any]:
        with self._lock:
            self._usage.failures[kind] = self._usage.failures.get(kind, 0) + 1
        return self._error(kind, message)

    def _error(self, kind: str, message: str) -> dict[str, Any]:
        """Every error an agent sees passes through redaction, whatever it came from."""
        text = redact.redact(message, secrets=self._broker.secrets)
        return {"ok": False, "error": {"type": kind, "message": text}}

    def _bill(self, model: str, usage: Any, price: Price) -> dict[str, int]:
        counts = {name: _count(_field(usage, name)) for name in USAGE_FIELDS}
        if self._meter is not None:
            self._meter.record(model, usage)
        usd = (
            counts["input_tokens"] * price.input
            + counts["output_tokens"] * price.output
            + counts["cache_creation_input_tokens"] * price.cache_write
            + counts["cache_read_input_tokens"] * price.cache_read
        ) / 1_000_000
        with self._lock:
            self._usage.calls += 1
            self._usage.input_tokens += counts["input_tokens"]
            self._usage.output_tokens += counts["output_tokens"]
            self._usage.cache_write_tokens += counts["cache_creation_input_tokens"]
            self._usage.cache_read_tokens += counts["cache_read_input_tokens"]
            self._usage.usd += usd
        return counts


class Broker:
    """The parent's side: grants, validation, the budget, the road to the model, the bills.

    One per run, sharing the run's ledger. `open_channel` once per agent process; `close` at the
    end of the run ends every channel still open.
    """

    def __init__(
        self,
        send: Send,
        ledger: Ledger[Any],
        *,
        price: Callable[[str], Price],
        effort_for_model: Callable[[str, str], str | None],
        budget_error: type[BaseException],
        web_tools: Sequence[Mapping[str, Any]] = (),
        secrets: Sequence[str] = (),
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_tokens_cap: int = MAX_TOKENS_CAP,
    ) -> None:
        """`send` is the road (it adds the key and retries transient errors); `ledger.hold`
        raises `budget_error` when the run's budget is spent. `price(model)` prices the bills,
        `effort_for_model(model, level)` lowers an effort to what the model accepts (None: omit).
        `web_tools` are the server tools a web-allowed agent's request gets; `secrets` are
        redacted from every error an agent sees, on top of redact.py's own rules.
        """
        self._send = send
        self._ledger = ledger
        self._price = price
        self._effort_for_model = effort_for_model
        self._budget_error = budget_error
        self._web_tools = [dict(tool) for tool in web_tools]
        self.secrets = tuple(secrets)
        self.max_request_bytes = max_request_bytes
        self.max_tokens_cap = max_tokens_cap
        self._channels: list[Channel] = []
        self.budget_needed = 0.0
        """The largest worst case of an agent call the run's budget refused, in dollars."""
        self._lock = threading.Lock()
        self._closed = False

    def open_channel(
        self,
        agent_name: str,
        *,
        model: str,
        allowed_models: Collection[str] = (),
        effort: str | None = None,
        share_tokens: int | None = None,
        web_allowed: bool = False,
        files: Mapping[str, Path] | None = None,
        meter: Recorder | None = None,
    ) -> Channel:
        """A served channel for one agent process; `meter` also records each real reply."""
        grant = _checked(
            Grant(
                model=model,
                allowed_models=frozenset(allowed_models),
                effort=effort,
                share_tokens=share_tokens,
                web_allowed=web_allowed,
                files=dict(files or {}),
            )
        )
        with self._lock:
            if self._closed:
                raise RuntimeError("the broker is closed")
            channel = Channel(self, agent_name, grant, meter)
            self._channels.append(channel)
        return channel

    def usage_of(self, agent_name: str) -> AgentUsage:
        """What every channel opened under this name has cost (an agent and its repairs)."""
        total = AgentUsage()
        with self._lock:
            channels = [c for c in self._channels if c.name == agent_name]
        for channel in channels:
            total.merge(channel.usage)
        return total

    def close(self, timeout: float = 5.0) -> None:
        """End every channel and wait up to `timeout` for their threads (a call in flight
        finishes on its own and is still billed)."""
        with self._lock:
            self._closed = True
            channels = list(self._channels)
        for channel in channels:
            channel.close()
        deadline = time.monotonic() + timeout
        for channel in channels:
            channel.wait_ended(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- one request -----------------------------------------------------------------------

    def _handle(self, channel: Channel, frame: dict[str, Any], size: int) -> dict[str, Any]:
        grant = channel.grant
        try:
            request, added = self._build(grant, frame)
            return self._call(channel, grant, request, size + added)
        except _Refusal as refusal:
            return channel._refuse(refusal)
        except Exception as error:  # a bug here must not leave the agent waiting forever
            detail = f"{type(error).__name__}: {error}"[:500]
            return channel._fail("internal", f"the broker failed: {detail}")

    def _build(self, grant: Grant, frame: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The Messages request to send, from what the agent asked and what it was granted,
        and how many bytes the broker added to it (tools, attachments)."""
        unknown = sorted(set(frame) - FRAME_FIELDS)
        if unknown:
            raise _Refusal("invalid", f"unknown frame fields: {_names(unknown)}")
        if frame.get("op") != "messages":
            raise _Refusal("invalid", "the only operation is 'messages'")
        asked = frame.get("request")
        if not isinstance(asked, dict):
            raise _Refusal("invalid", "'request' must be an object")
        unknown = sorted(set(asked) - REQUEST_FIELDS)
        if unknown:
            allowed = ", ".join(sorted(REQUEST_FIELDS))
            raise _Refusal("invalid", f"fields not allowed: {_names(unknown)} (allowed: {allowed})")
        model = asked.get("model", grant.model)
        if not isinstance(model, str) or model not in grant.allowed_models:
            allowed = ", ".join(sorted(grant.allowed_models))
            raise _Refusal(
                "forbidden", f"model {_shown(model)} is not allowed (allowed: {allowed})"
            )
        max_tokens = asked.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _Refusal("invalid", "'max_tokens' must be a positive integer")
        messages = asked.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _Refusal("invalid", "'messages' must be a non-empty list")
        request: dict[str, Any] = {
            "model": model,
            "max_tokens": min(max_tokens, self.max_tokens_cap),
            "messages": [_message(item) for item in messages],
        }
        if "system" in asked:
            request["system"] = _content(asked["system"], "system")
        level = self._effort(grant, model, asked.get("output_config"))
        if level:
            request["output_config"] = {"effort": level}
        added = 0
        web = frame.get("web", False)
        if not isinstance(web, bool):
            raise _Refusal("invalid", "'web' must be true or false")
        if web:
            if not grant.web_allowed:
                raise _Refusal("forbidden", "web search is not allowed for this agent")
            if not self._web_tools:
                raise _Refusal("forbidden", "web search is not available in this run")
            request["tools"] = [dict(tool) for tool in self._web_tools]
            added += len(json.dumps(request["tools"]))
        names = frame.get("files", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _Refusal("invalid", "'files' must be a list of names")
        if names:
            documents = [_document(grant, name) for name in dict.fromkeys(names)]
            _attach(request, documents)
            added += len(json.dumps(documents))
        return request, added

    def _effort(self, grant: Grant, model: str, asked: Any) -> str | None:
        """The grant's effort, or less if the agent asked for less, lowered for the model."""
        wanted = grant.effort
        if asked is not None:
            if not isinstance(asked, dict) or set(asked) - {"effort"}:
                raise _Refusal("invalid", "'output_config' may hold only 'effort'")
            level = asked.get("effort")
            if level not in EFFORT_LEVELS:
                raise _Refusal("invalid", f"effort must be one of {', '.join(EFFORT_LEVELS)}")
            if wanted is not None:
                wanted = min(wanted, level, key=EFFORT_LEVELS.index)
        return self._effort_for_model(model, wanted) if wanted else None

    def _call(
        self, channel: Channel, grant: Grant, request: dict[str, Any], size: int
    ) -> dict[str, Any]:
        """Clamp to the share and the budget, send, bill; the answer the agent gets.

        `size` (the frame's bytes plus what the broker added) bounds the request's JSON from
        above, so it serves for the size limit and the input estimate without encoding again.
        """
        model = request["model"]
        if size > self.max_request_bytes:
            limit = self.max_request_bytes
            raise _Refusal("too_large", f"with its attachments the request exceeds {limit} bytes")
        estimate = tokens_in_bytes(size)
        max_tokens = request["max_tokens"]
        if grant.share_tokens is not None:
            used = channel.usage.tokens
            left = grant.share_tokens - used - estimate
            if left < min(MIN_CALL_TOKENS, max_tokens):
                raise _Refusal(
                    "budget",
                    f"this agent's share of the budget is spent ({used} of "
                    f"{grant.share_tokens} tokens used, this prompt needs about {estimate}); "
                    "no further model calls",
                )
            max_tokens = min(max_tokens, left)
        try:
            hold = self._ledger.hold(model, input_tokens=estimate, max_tokens=max_tokens)
        except self._budget_error as error:
            with self._lock:
                self.budget_needed = max(self.budget_needed, getattr(error, "needed_usd", 0.0))
            raise _Refusal("budget", f"the run's budget is spent: {error}") from None
        try:
            try:
                reply = self._send({**request, "max_tokens": hold.tokens})
            except Exception as error:
                return channel._fail(*_failure(error))
            usage = _field(reply, "usage") or {}
            self._ledger.record(model, usage)
            counts = channel._bill(model, usage, self._price(model))
        finally:
            self._ledger.release(hold)
        return {
            "ok": True,
            "text": _text(reply),
            "model": model,
            "stop_reason": _field(reply, "stop_reason"),
            "max_tokens": hold.tokens,
            "usage": counts,
        }


# ---- validation ----------------------------------------------------------------------------


def _checked(grant: Grant) -> Grant:
    """A grant as the broker keeps it: its own model always allowed, its effort a real level."""
    if grant.effort is not None and grant.effort not in EFFORT_LEVELS:
        raise ValueError(f"effort must be one of {', '.join(EFFORT_LEVELS)}, got {grant.effort!r}")
    models = frozenset(grant.allowed_models) | {grant.model}
    return replace(grant, allowed_models=models, files=dict(grant.files))


def _names(names: list[str]) -> str:
    shown = ", ".join(_shown(name) for name in names[:10])
    return shown + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def _shown(value: Any) -> str:
    """An agent's value, quoted and short, for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _block(block: Any, where: str) -> dict[str, Any]:
    """A text block, the only kind an agent may write itself."""
    if not isinstance(block, dict) or block.get("type") != "text":
        raise _Refusal("invalid", f"{where}: only text blocks are allowed")
    unknown = sorted(set(block) - BLOCK_FIELDS)
    if unknown:
        raise _Refusal("invalid", f"{where}: block fields not allowed: {_names(unknown)}")
    if not isinstance(block.get("text"), str):
        raise _Refusal("invalid", f"{where}: a text block's 'text' must be a string")
    if "cache_control" in block and block["cache_control"] != {"type": "ephemeral"}:
        raise _Refusal("invalid", f"{where}: cache_control may only be {{'type': 'ephemeral'}}")
    return dict(block)


def _content(content: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        return [_block(block, where) for block in content]
    raise _Refusal("invalid", f"{where}: content must be a string or a list of text blocks")


def _message(message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or set(message) != {"role", "content"}:
        raise _Refusal("invalid", "each message must be exactly {'role', 'content'}")
    if message["role"] not in ("user", "assistant"):
        raise _Refusal("invalid", "a message's role must be 'user' or 'assistant'")
    return {"role": message["role"], "content": _content(message["content"], "messages")}


def _document(grant: Grant, name: str) -> dict[str, Any]:
    """An attachment the agent was granted, as a document block: PDF as base64, else text."""
    path = grant.files.get(name)
    if path is None:
        raise _Refusal("forbidden", f"no file named {_shown(name)} was given to this agent")
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise _Refusal("invalid", f"file {_shown(name)} cannot be read: {error.strerror}") from None
    if data.startswith(b"%PDF-"):
        source = {
            "type": "base64",
            "media_type": "application/pdf",
            "data": base64.b64encode(data).decode("ascii"),
        }
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise _Refusal("invalid", f"file {_shown(name)} is neither text nor PDF") from None
        source = {"type": "text", "media_type": "text/plain", "data": text}
    return {"type": "document", "source": source, "title": name}


def _attach(request: dict[str, Any], documents: list[dict[str, Any]]) -> None:
    """Put the documents in front of the last user message's text."""
    for message in reversed(request["messages"]):
        if message["role"] == "user":
            content = message["content"]
            text = [{"type": "text", "text": content}] if isinstance(content, str) else content
            message["content"] = [*documents, *text]
            return
    raise _Refusal("invalid", "attachments need a user message to go with")


# ---- replies -------------------------------------------------------------------------------


def _text(reply: Any) -> str:
    """The reply's text blocks joined (thinking and tool blocks are not the answer)."""
    blocks = _field(reply, "content") or []
    return "".join(
        str(_field(block, "text") or "") for block in blocks if _field(block, "type") == "text"
    )


def _failure(error: BaseException) -> tuple[str, str]:
    """The error type and message an agent sees for a failed call (redacted on the way out).

    Read by shape, not by class, so any road works: the SDK's status errors carry
    `status_code`, its timeouts and connection errors are named so.
    """
    status = getattr(error, "status_code", None)
    names = {kind.__name__ for kind in type(error).__mro__}
    if isinstance(status, int):
        kind = agent_runtime.STATUS_KINDS.get(status) or (
            "api_error" if status >= 500 else "invalid_request"
        )
        detail = getattr(error, "message", None) or str(error)
        return kind, f"the Messages API answered HTTP {status}: {str(detail)[:500]}"
    if "APITimeoutError" in names or isinstance(error, TimeoutError):
        return "timeout", "the Messages API did not answer in time"
    if "APIConnectionError" in names or isinstance(error, OSError):
        return "connection", "cannot reach the Messages API"
    return "api_error", f"the call failed: {type(error).__name__}: {str(error)[:500]}"
