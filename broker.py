"""broker.py — each agent's only door to the model: the parent holds the key, meter and rules.

An agent inherits one end of a `socket.socketpair()` (AF_UNIX, SOCK_STREAM: a datagram end could
still send to the host's abstract sockets, whatever namespace the agent is in) and nothing else: no
key, no network. It asks; the broker decides. What request a frame may become (the allowlist, the
granted model and effort, the web's tools and its URL rule, attachments as blocks) is
brokerrequest.py's to say; this module is the rest of the door: the channel and its frames, the
refusals and the per-agent meter, max_tokens clamped to what the agent's share and the run's budget
can still pay for, the call down the product's one road to the model (the injected `send`, which
adds the key), the reply's real usage billed to the run's ledger and to the agent, the answer, and
artifacts kept through the injected `save_artifact`. Whatever an agent prints about its own usage
is no longer evidence of anything.

The wire format is agent_runtime's (a 4-byte big-endian length, then UTF-8 JSON, both ways):

    agent:  {"op": "messages", "request": {...}, "web": false, "files": []}
    broker: {"ok": true, "text": "...", "model": "...", "stop_reason": "...", "max_tokens": N,
             "usage": {"input_tokens": ..., ...}, "searches": N, "sources": [{"title", "url"}]}
    agent:  {"op": "artifact", "name": "report.md", "data": "<base64>", "more": true}
    broker: {"ok": true, "name": "report.md", "bytes": N}
       or:  {"ok": false, "error": {"type": "budget", "message": "..."}}

The operations and their fields are agent_runtime.BROKER_OPS, the one table: the dispatch (a
handler `_op_<name>` per operation) and the field allowlists are derived from it.

The parent's memory and time are the agents' to spend only so far. A frame larger than
MAX_REQUEST_BYTES is refused before a byte of it is parsed (drained in small pieces, the channel
stays), one larger than MAX_DRAIN_BYTES is not read at all (the channel closes), and a frame that
holds more than MAX_FRAME_VALUES JSON values is refused before it is parsed: tiny values cost the
parser far more memory than their bytes. Each agent's frames are paced (FRAMES_PER_SECOND and
BYTES_PER_SECOND, with bursts): a faster agent waits. An artifact larger than a frame comes in
pieces ("more": true on every piece but the last), each appended to a file in the run's artifacts
folder as it arrives, so saving one of any size up to ARTIFACTS_MAX_MB keeps the parent's memory
flat; the run's artifacts are capped in bytes and in count (artifacts.ArtifactStore). The request
built from a messages frame, the attachments inlined, is refused above the API's own
MAX_API_REQUEST_BYTES.

The web (`"web": true`, for an agent whose grant allows it, in a run with the web on): the request
carries the API's server-side web_search and web_fetch tools (the plain versions, which need no
code execution) with `max_uses` the agent's searches left; the broker continues a `pause_turn` with
the paused content sent back as received, bills every leg (searches at their own price, held in
full under a budget), learns the URLs the results brought (brokerrequest.KnownUrls: what a page
can and cannot make an agent do is told there), and answers with the text followed by the cited
sources.

One thread per channel. The runtime keeps one request in flight per connection, so a channel's
thread is always either waiting for its agent or for that agent's one model call: a slow call
delays nobody else, and a request costs no hand-off between threads (bench/broker_roundtrip.py).
Everything the broker depends on is injected, so it can be wired to whichever ledger and road the
product has: nothing here imports config or the SDK.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from agentgod import agent_runtime, brokerrequest, redact
from agentgod.brokerrequest import Grant, KnownUrls, Refusal, checked, listed, shown
from agentgod.kinds import BudgetOwner
from agentgod.ledger import search_usd, tokens_in_bytes, usage_count, usage_searches
from agentgod.models import Profile
from agentgod.replies import TokenUsage
from agentgod.signals import shield_from_signals

MAX_REQUEST_BYTES = 8 * 1024 * 1024
"""Any frame larger than this is refused as too_large before it is parsed (drained in pieces of
DRAIN_PIECE_BYTES; the channel stays open). An artifact's pieces are well under it
(agent_runtime.ARTIFACT_PIECE_BYTES)."""
MAX_DRAIN_BYTES = 64 * 1024 * 1024
"""A frame that declares more than this is not read at all: refused as malformed, channel closed."""
DRAIN_PIECE_BYTES = 1024 * 1024
MAX_FRAME_VALUES = 20_000
"""JSON values (strings, numbers, objects, arrays...) one frame may hold: counted before it is
parsed, since each tiny value costs the parser tens of bytes (36 MB of them took 890 MB). A
messages frame holds a few dozen; an artifact's, three or four."""
FRAMES_PER_SECOND = 100.0
FRAME_BURST = 200.0
BYTES_PER_SECOND = 64.0 * 1024 * 1024
BYTE_BURST = 128.0 * 1024 * 1024
"""How fast one agent's frames are taken: a burst, then a steady rate; a faster agent waits (its
writes block), so no agent can keep the parent busy parsing or writing for it."""
MAX_API_REQUEST_BYTES = 32 * 1024 * 1024
"""The Messages API's own limit on a request: what the broker builds, attachments inlined."""
MAX_TOKENS_CAP = 21_333
"""The SDK refuses a non-streaming call above this max_tokens, so the broker never asks for more."""
MIN_CALL_TOKENS = 256
"""A call the agent's share cannot give this much output (or its whole max_tokens) is refused."""
MAX_CONTINUATIONS = 5
"""A web call's `pause_turn` legs continued at most this often; then the answer so far is sent."""
WEB_USE_TOKENS = 5_000
"""Input held under a budget for each search a call may make: about what one search's results
add (a guess, not a bound: the API has none; the real usage is what is billed)."""
MAX_PAGE_TOKENS = 50_000
"""The most one fetched page may add to a web call (the fetch tool's max_content_tokens), with
no budget too: about 200 kB of text. Under a budget the agent's share and the run's budget lower
it (see `Broker._leg`); the hold always covers every page a call may read at that size."""
MIN_PAGE_TOKENS = 500
"""Below this a page is not worth fetching: a web call that can pay for no more searches only."""
USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
ARTIFACT_REFUSALS = frozenset({"invalid", "too_large", "forbidden"})


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


@dataclass(frozen=True)
class _Free:
    """The price of a model whose price is unknown: its tokens are billed at $0."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


_FREE = _Free()


class HoldLike(Protocol):
    """What a ledger sets aside for one call: `tokens` is the max_tokens it can pay for,
    `extra_input` the input beyond the call's own it can pay for (the pages a fetch reads)."""

    @property
    def tokens(self) -> int: ...
    @property
    def extra_input(self) -> int: ...


HoldT = TypeVar("HoldT", bound=HoldLike)


class Ledger(Protocol[HoldT]):
    """The run's ledger, as ledger.Usage is: hold the worst case, record the real, release."""

    def hold(
        self,
        model: str,
        *,
        input_tokens: int,
        max_tokens: int,
        searches: int = 0,
        extra_input: int = 0,
    ) -> HoldT: ...
    def record(
        self, model: str, usage: Any, *, agent: str = "", seconds: float = 0.0, asked: str = ""
    ) -> None: ...
    def release(self, hold: HoldT) -> None: ...


class Recorder(Protocol):
    """Anything that counts a reply's usage (an agent's own ledger.Usage, say)."""

    def record(self, model: str, usage: Any) -> None: ...


Send = Callable[[dict[str, Any]], Any]
"""The road to the model: Messages keyword arguments -> the reply's JSON body (llm.forward),
its `model` the one that answered (a fallback's, when the road fell back)."""


class Upload(Protocol):
    """One artifact being written, piece by piece (artifacts.ArtifactUpload is one). `write` and
    `finish` raise ValueError (with a `kind` of invalid, too_large or forbidden) to refuse."""

    @property
    def size(self) -> int: ...
    def write(self, data: bytes) -> None: ...
    def finish(self) -> str: ...
    def abort(self) -> None: ...


class Artifacts(Protocol):
    """Where the run keeps its agents' files (artifacts.ArtifactStore is one): `begin(agent,
    name)` starts one, or raises ValueError (with a `kind`) to refuse it."""

    def begin(self, agent: str, name: str) -> Upload: ...


@dataclass
class AgentUsage:
    """What one agent's channel cost, counted by the broker from real replies only."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    searches: int = 0
    """Web searches its replies reported (usage.server_tool_use.web_search_requests)."""
    usd: float = 0.0
    """Tokens and searches together."""
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

    def reply(self) -> TokenUsage:
        """The counts as a record keeps them (`--json`, the history)."""
        return TokenUsage(
            llm_calls=self.calls,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_write_tokens=self.cache_write_tokens,
            cache_read_tokens=self.cache_read_tokens,
            web_searches=self.searches,
        )

    def merge(self, other: AgentUsage) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.searches += other.searches
        self.usd += other.usd
        for mine, theirs in ((self.refusals, other.refusals), (self.failures, other.failures)):
            for kind, count in theirs.items():
                mine[kind] = mine.get(kind, 0) + count


class _Malformed(Exception):
    """The frame cannot be read as a request: answer once, then close the channel."""


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
        self._closing = threading.Event()
        self._pace = _Pace(broker.pacing)
        self.upload: tuple[str, Upload] | None = None
        """The artifact whose pieces are arriving (the name the agent asked for), if any."""
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
            self._grant = checked(replace(self._grant, **changes))
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
        self._closing.set()
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
                except Refusal as refusal:
                    reply = self._refuse(refusal)
                except _Malformed as error:
                    self._send(self._refuse(Refusal("malformed", str(error))))
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
            if self.upload is not None:  # an artifact left half sent is no artifact
                self.upload[1].abort()
                self.upload = None
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
        self._pace.wait(size, self._closing)
        if size > limit:  # refused unparsed: its bytes pass through one small buffer, no more
            left = size
            scrap = bytearray(min(size, DRAIN_PIECE_BYTES))
            while left:
                count = self._parent.recv_into(scrap, min(left, len(scrap)))
                if not count:
                    return None
                left -= count
            raise Refusal(
                "too_large",
                f"the frame is {size} bytes; the limit is {limit} (save_artifact sends a large "
                "file in pieces by itself)",
            )
        body = self._read_exact(size)
        if body is None:
            return None
        if _too_many_values(body, MAX_FRAME_VALUES):
            raise Refusal(
                "too_large", f"the frame holds more than {MAX_FRAME_VALUES:,} JSON values"
            )
        try:
            frame = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # ValueError: JSON, int digits
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

    def _refuse(self, refusal: Refusal) -> dict[str, Any]:
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

    def _bill(self, model: str, usage: Any, price: Price | None) -> tuple[dict[str, int], int]:
        """Count one reply's usage (a dict) for this agent; its token counts and searches (a
        model without a known price bills its tokens at $0; its searches still cost)."""
        if price is None:
            price = _FREE
        counts = {name: usage_count(usage, name) for name in USAGE_FIELDS}
        searches = usage_searches(usage)
        if self._meter is not None:
            self._meter.record(model, usage)
        usd = (
            counts["input_tokens"] * price.input
            + counts["output_tokens"] * price.output
            + counts["cache_creation_input_tokens"] * price.cache_write
            + counts["cache_read_input_tokens"] * price.cache_read
        ) / 1_000_000 + search_usd(searches)
        with self._lock:
            self._usage.calls += 1
            self._usage.searches += searches
            self._usage.input_tokens += counts["input_tokens"]
            self._usage.output_tokens += counts["output_tokens"]
            self._usage.cache_write_tokens += counts["cache_creation_input_tokens"]
            self._usage.cache_read_tokens += counts["cache_read_input_tokens"]
            self._usage.usd += usd
        return counts, searches


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
        price: Callable[[str], Price | None],
        effort_for_model: Callable[[str, str], str | None],
        budget_error: type[BaseException],
        profile: Callable[[str], Profile] | None = None,
        web: bool = False,
        known_urls: Collection[str] = (),
        artifacts: Artifacts | None = None,
        secrets: Sequence[str] = (),
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_api_bytes: int = MAX_API_REQUEST_BYTES,
        max_tokens_cap: int = MAX_TOKENS_CAP,
        pacing: tuple[float, float, float, float] = (
            FRAMES_PER_SECOND,
            FRAME_BURST,
            BYTES_PER_SECOND,
            BYTE_BURST,
        ),
    ) -> None:
        """`send` is the road (it adds the key, retries transient errors and falls back);
        `ledger.hold` raises `budget_error` when the run's budget is spent. `price(model)`
        prices the bills (None: unknown, billed $0), `effort_for_model(model, level)` lowers an
        effort to what the model accepts (None: omit), `profile(model)` says what else it takes
        (the web, documents, images, cache hints; None: all of them).
        `web` turns the server tools on for the run (a grant must still allow them);
        `known_urls` are the URLs of the task and its attached text, the ones a web request may
        hold besides those results brought; `artifacts` keeps the agents' files (None: this
        run keeps none). `secrets` are redacted from every error an agent sees, on top of
        redact.py's own rules. `pacing` is (frames per second, frame burst, bytes per second,
        byte burst) for each agent's channel; `max_request_bytes` the largest frame taken.
        """
        self._send = send
        self._ledger = ledger
        self._price = price
        self._effort_for_model = effort_for_model
        self._profile = profile
        self._budget_error = budget_error
        self.web = web
        self._artifacts = artifacts
        self.secrets = tuple(secrets)
        self.max_request_bytes = max_request_bytes
        self.pacing = pacing
        self.max_api_bytes = max_api_bytes
        self.max_tokens_cap = max_tokens_cap
        self._channels: list[Channel] = []
        self.budget_needed = 0.0
        """The largest worst case of an agent call the run's budget refused, in dollars."""
        self._budget_owners: set[BudgetOwner] = set()
        self._lock = threading.Lock()
        self._known = KnownUrls(known_urls)
        self._closed = False

    def budget_owners(self) -> frozenset[BudgetOwner]:
        """Whose budgets refused the agents' calls so far: the run's own (its ledger, an agent's
        share of it, or its share at a batch's gateway), or a batch's (ledger.stopped_by)."""
        with self._lock:
            return frozenset(self._budget_owners)

    def open_channel(
        self,
        agent_name: str,
        *,
        model: str,
        allowed_models: Collection[str] = (),
        effort: str | None = None,
        share_tokens: int | None = None,
        web_allowed: bool = False,
        max_searches: int = 0,
        files: Mapping[str, Path] | None = None,
        file_ids: Mapping[Path, tuple[int, int, int]] | None = None,
        meter: Recorder | None = None,
    ) -> Channel:
        """A served channel for one agent process; `meter` also records each real reply.
        `files` are the attachments it may show the model, `file_ids` what each one was when it
        was vetted (attachments.file_identity): one that is another file now is refused."""
        grant = checked(
            Grant(
                model=model,
                allowed_models=frozenset(allowed_models),
                effort=effort,
                share_tokens=share_tokens,
                web_allowed=web_allowed,
                max_searches=max_searches,
                files=dict(files or {}),
                file_ids=dict(file_ids or {}),
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
        """One frame, dispatched by its "op" as agent_runtime.BROKER_OPS says, fields checked."""
        try:
            op = frame.get("op")
            known = agent_runtime.BROKER_OPS.get(op) if isinstance(op, str) else None
            if known is None:
                ops = " and ".join(repr(name) for name in agent_runtime.BROKER_OPS)
                raise Refusal("invalid", f"the operations are {ops}")
            unknown = sorted(set(frame) - {"op", *known.fields})
            if unknown:
                raise Refusal("invalid", f"unknown {op} fields: {listed(unknown)}")
            missing = [name for name in known.required if name not in frame]
            if missing:
                raise Refusal("invalid", f"an {op!r} frame needs {listed(missing)}")
            handler: Callable[[Channel, dict[str, Any], int], dict[str, Any]]
            handler = getattr(self, f"_op_{op}")
            return handler(channel, frame, size)
        except Refusal as refusal:
            return channel._refuse(refusal)
        except Exception as error:  # a bug here must not leave the agent waiting forever
            detail = f"{type(error).__name__}: {error}"[:500]
            return channel._fail("internal", f"the broker failed: {detail}")

    def _op_messages(self, channel: Channel, frame: dict[str, Any], size: int) -> dict[str, Any]:
        """A Messages call: the request brokerrequest builds, sent and billed."""
        grant = channel.grant
        request, added = brokerrequest.build(
            frame,
            grant,
            searches_used=channel.usage.searches,
            web=self.web,
            known=self._known,
            max_tokens_cap=self.max_tokens_cap,
            max_api_bytes=self.max_api_bytes,
            effort_for_model=self._effort_for_model,
            profile=self._profile,
        )
        return self._call(channel, grant, request, size + added)

    def _op_artifact(self, channel: Channel, frame: dict[str, Any], size: int) -> dict[str, Any]:
        """Keep a file the agent made (or one piece of it), through the run's `artifacts`.

        A piece with "more" is appended to the artifact being written under that name; the
        piece without it finishes the artifact. A piece of another name first throws away an
        artifact left unfinished, so one channel has at most one upload open.
        """
        name, data, more = frame.get("name"), frame.get("data"), frame.get("more", False)
        if not isinstance(name, str) or not name:
            raise Refusal("invalid", "an artifact's 'name' must be a non-empty string")
        if not isinstance(data, str):
            raise Refusal("invalid", "an artifact's 'data' must be a base64 string")
        if not isinstance(more, bool):
            raise Refusal("invalid", "an artifact's 'more' must be true or false")
        if self._artifacts is None:
            raise Refusal("forbidden", "this run keeps no artifacts")
        try:
            content = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise Refusal("invalid", f"artifact {shown(name)}: 'data' is not base64") from None
        open_upload, channel.upload = channel.upload, None
        upload = None
        if open_upload is not None and open_upload[0] == name:
            upload = open_upload[1]
        elif open_upload is not None:
            open_upload[1].abort()
        try:
            if upload is None:
                upload = self._artifacts.begin(channel.name, name)
            upload.write(content)
            if more:
                channel.upload = (name, upload)
                return {"ok": True, "name": name, "bytes": upload.size}
            stored = upload.finish()
        except ValueError as error:
            if upload is not None:
                upload.abort()
            kind = getattr(error, "kind", "invalid")
            raise Refusal(kind if kind in ARTIFACT_REFUSALS else "invalid", str(error)) from None
        return {"ok": True, "name": stored, "bytes": upload.size}

    def _call(
        self, channel: Channel, grant: Grant, request: dict[str, Any], size: int
    ) -> dict[str, Any]:
        """Send the request, continuing a paused web turn; the answer the agent gets.

        `size` (the frame's bytes plus what the broker added) bounds the request's JSON from
        above, so it serves for the size limit and the input estimate without encoding again;
        each continuation adds the content it sends back. A web call's first leg decides how
        much of a page its fetches may read (`_leg`); the continuations send the same tools.
        """
        if size > self.max_api_bytes:
            raise Refusal(
                "too_large",
                f"with its attachments the request is about {size} bytes; the API takes at "
                f"most {self.max_api_bytes}",
            )
        legs: list[dict[str, Any]] = []
        usage = dict.fromkeys(USAGE_FIELDS, 0)
        searches = 0
        max_tokens = request["max_tokens"]
        pages: int | None = None
        for _ in range(MAX_CONTINUATIONS + 1):
            reply, held, request, pages = self._leg(channel, grant, request, size, pages)
            if reply.get("ok") is False:
                return reply  # a failure: every leg before it is billed
            legs.append(reply)
            max_tokens = min(max_tokens, held)
            for name in USAGE_FIELDS:
                usage[name] += reply["counts"][name]
            searches += reply["searches"]
            self._known.learn(reply["content"])
            if reply["stop_reason"] != "pause_turn" or "tools" not in request:
                break
            turn = {"role": "assistant", "content": reply["content"]}
            request = {**request, "messages": [*request["messages"], turn]}
            size += len(json.dumps(turn))
        content = [block for leg in legs for block in leg["content"]]
        text, sources = agent_runtime.answer_with_sources(content)
        return {
            "ok": True,
            "text": text,
            "model": legs[-1]["model"],
            "stop_reason": legs[-1]["stop_reason"],
            "max_tokens": max_tokens,
            "usage": usage,
            "searches": searches,
            "sources": sources,
        }

    def _leg(
        self,
        channel: Channel,
        grant: Grant,
        request: dict[str, Any],
        size: int,
        pages: int | None,
    ) -> tuple[dict[str, Any], int, dict[str, Any], int]:
        """One Messages call: clamped to the share and the budget, sent, billed.

        Its content (as a plain dict, to be sent back unchanged), stop_reason, counts and
        searches, or the failure the agent gets; the max_tokens it was sent with; the request
        as sent; and the tokens each fetched page may hold (`pages`). The hold covers what the
        call can cost: the prompt, the searches' results (a guess, WEB_USE_TOKENS each), the
        output, and every page a fetch may read, each cut to `pages` tokens by the fetch tool's
        max_content_tokens. The first leg of a web call (`pages` None) chooses that from what
        the agent's share has left (half of it at most, the rest for output) and what the
        budget can pay (`Usage.hold`'s extra_input), at most MAX_PAGE_TOKENS; below
        MIN_PAGE_TOKENS it sends no fetch tool at all.
        """
        model = request["model"]
        estimate = tokens_in_bytes(size)
        max_tokens = request["max_tokens"]
        uses = {tool["name"]: tool["max_uses"] for tool in request.get("tools", ())}
        searches, fetches = uses.get("web_search", 0), uses.get("web_fetch", 0)
        fixed = estimate + WEB_USE_TOKENS * searches
        choosing = pages is None and fetches > 0
        wanted = fetches * (MAX_PAGE_TOKENS if pages is None else pages)
        if grant.share_tokens is not None:
            used = channel.usage.tokens
            left = grant.share_tokens - used - fixed - (0 if choosing else wanted)
            if left < min(MIN_CALL_TOKENS, max_tokens):
                with self._lock:
                    self._budget_owners.add(BudgetOwner.RUN)
                raise Refusal(
                    "budget",
                    f"this agent's share of the budget is spent ({used} of "
                    f"{grant.share_tokens} tokens used, this call needs about "
                    f"{grant.share_tokens - used - left}); no further model calls",
                )
            if choosing:
                wanted = max(0, min(wanted, left - min(max_tokens, left // 2)))
                left -= wanted
            max_tokens = min(max_tokens, left)
        try:
            hold = self._ledger.hold(
                model,
                input_tokens=fixed + (0 if choosing else wanted),
                max_tokens=max_tokens,
                searches=searches,
                extra_input=wanted if choosing else 0,
            )
        except self._budget_error as error:
            with self._lock:
                self.budget_needed = max(self.budget_needed, getattr(error, "needed_usd", 0.0))
                self._budget_owners.add(BudgetOwner.RUN)
            raise Refusal("budget", f"the run's budget is spent: {error}") from None
        try:
            began = time.monotonic()
            if choosing:
                pages = min(MAX_PAGE_TOKENS, hold.extra_input // fetches)
                request = {**request, "tools": _with_pages(request["tools"], pages)}
            try:
                sent = self._send({**request, "max_tokens": hold.tokens})
            except self._budget_error as error:  # a gateway above holds a budget of its own
                owner = getattr(error, "owner", BudgetOwner.BATCH)
                with self._lock:
                    self.budget_needed = max(self.budget_needed, getattr(error, "needed_usd", 0.0))
                    self._budget_owners.add(owner)
                whose = "the run's" if owner is BudgetOwner.RUN else "the batch's"
                raise Refusal("budget", f"{whose} budget is spent: {error}") from None
            except Exception as error:
                return channel._fail(*_failure(error)), hold.tokens, request, pages or 0
            reply = _plain(sent)  # junk from the road is the broker's bug: an internal failure
            usage = reply.get("usage") or {}
            took = time.monotonic() - began
            answered = reply.get("model")  # a fallback, when the road fell back
            by = answered if isinstance(answered, str) and answered else model
            self._ledger.record(by, usage, agent=channel.name, seconds=took, asked=model)
            counts, searched = channel._bill(by, usage, self._price(by))
        finally:
            self._ledger.release(hold)
        content = reply.get("content")
        leg = {
            "content": content if isinstance(content, list) else [],
            "stop_reason": reply.get("stop_reason"),
            "counts": counts,
            "searches": searched,
            "model": by,
        }
        return leg, hold.tokens, request, pages or 0


def _with_pages(tools: list[dict[str, Any]], pages: int) -> list[dict[str, Any]]:
    """The web call's tools with each fetched page cut to `pages` tokens (max_content_tokens),
    or without the fetch tool when that is too little to be worth a fetch."""
    if pages < MIN_PAGE_TOKENS:
        return [tool for tool in tools if tool["name"] != "web_fetch"]
    return [
        {**tool, "max_content_tokens": pages} if tool["name"] == "web_fetch" else tool
        for tool in tools
    ]


_UNHANDLED = [op for op in agent_runtime.BROKER_OPS if not hasattr(Broker, f"_op_{op}")]
if _UNHANDLED:  # the table grew an operation the broker cannot serve: fail at once, not per frame
    raise ImportError(f"broker.Broker has no handler for the operations {_UNHANDLED}")


# ---- replies -------------------------------------------------------------------------------


def _plain(reply: Any) -> dict[str, Any]:
    """The road's answer, which must be a Messages reply's JSON body as the API sent it.

    Sent back unchanged on a continuation, so content is exactly what was received (encrypted
    fields intact, no nulls added), and the broker needs none of the SDK's classes.
    """
    if not isinstance(reply, dict):
        raise TypeError(f"the road answered a {type(reply).__name__}, not a message")
    return reply


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


# ---- frames --------------------------------------------------------------------------------

_VALUE_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{,]')
"""A JSON string, or a character that starts another value outside strings."""


def _too_many_values(body: bytes | bytearray, limit: int) -> bool:
    """Whether the JSON text in `body` holds more than `limit` values, told without parsing it.

    The cheap count (every comma and opening bracket, in strings too) settles almost every frame;
    only past it are the strings told apart, and the count stops as soon as it passes `limit`,
    so a hostile frame of millions of tiny values costs a few milliseconds.
    """
    if body.count(b",") + body.count(b"[") + body.count(b"{") < limit:
        return False
    tokens = enumerate(_VALUE_TOKENS.finditer(body), start=1)
    return any(count > limit for count, _ in tokens)


class _Pace:
    """One channel's pacing: token buckets of frames and bytes that refill at a steady rate.

    A frame that finds a bucket short waits until it is even again (or the channel closes).
    A bucket may go below zero by one frame, so a large frame is never refused, only waited for.
    """

    def __init__(self, pacing: tuple[float, float, float, float]) -> None:
        self._frame_rate, self._frame_burst, self._byte_rate, self._byte_burst = pacing
        self._frames = self._frame_burst
        self._bytes = self._byte_burst
        self._at = time.monotonic()

    def wait(self, size: int, closing: threading.Event) -> None:
        now = time.monotonic()
        elapsed, self._at = now - self._at, now
        self._frames = min(self._frame_burst, self._frames + elapsed * self._frame_rate) - 1
        self._bytes = min(self._byte_burst, self._bytes + elapsed * self._byte_rate) - size
        delay = max(-self._frames / self._frame_rate, -self._bytes / self._byte_rate, 0.0)
        if delay > 0:
            closing.wait(delay)
