"""gateway.py — one key holder for many runs: a small Messages-API endpoint with one ledger.

A batch's runs (on this machine, or on Ray workers elsewhere) never hold the real key. Each run
gets a *capability*: a short-lived token, signed (HMAC-SHA256) by the gateway that issued it,
that names the run and its batch, the models it may use, its share of the budget and its expiry.
The run uses it as its API key against the gateway (`ANTHROPIC_BASE_URL`), which checks it, holds
the call's worst case against the run's share and the batch's ledger (the same holds a run's own
budget uses, `ledger.Usage`), lowers `max_tokens` to what both can pay for, sends the call with
the real key through the road it was handed (`llm.relay_for`: the gateway never reaches the
model itself, as the broker does not), passes the reply on — a stream as a stream — and bills
the real usage. A web fetch's pages are held at their cap (the fetch tool's max_content_tokens),
lowered with `max_tokens` when the budget cannot pay for them whole, as the broker does for an
agent's. So a batch budget binds exactly across every run and worker, and a capability that has
expired, names another model, or whose share is spent is refused with an error that says so; a
refusal for money also names whose budget it was (the run's share or the batch's), so the batch
can tell a run its own cap stopped from one its own budget did.

The gateway listens on loopback unless told otherwise; across machines it must be reached over
TLS or a tunnel (README, security model). `agentgod gateway` runs one on its own; then
capabilities are minted over HTTP with the admin token it prints (`/agentgod/v1/capabilities`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from agentgod import redact
from agentgod.broker import MAX_PAGE_TOKENS, MIN_PAGE_TOKENS, WEB_USE_TOKENS
from agentgod.kinds import BudgetOwner
from agentgod.ledger import BudgetExhaustedError, Hold, Usage, tokens_in_bytes
from agentgod.replies import CostSummary

PREFIX = "agc1"
"""Every capability starts with this, so one is recognisable (and redactable) as such."""
DEFAULT_TTL_SECONDS = 6 * 3600.0
"""How long a capability lives unless its minter says otherwise: long enough for a slow run."""
MAX_BODY_BYTES = 33 * 1024 * 1024
"""The largest request the gateway reads: the API's own 32 MB, and a little room."""
FETCHES_WITHOUT_LIMIT = 10
"""The fetches held for a web_fetch tool that names no max_uses."""
BUDGET_ERROR = "budget_exhausted"
"""The error type of a refusal for money (llm.GATEWAY_BUDGET_ERROR reads it in the run)."""
BUDGET_OF = "budget_of"
"""The field of a refusal for money that names whose budget it was (kinds.BudgetOwner: the
run's share, or the batch's budget), so the run can tell its batch which stopped it
(llm.GATEWAY_BUDGET_OF reads it)."""
ADMIN_PATH = "/agentgod/v1/"
"""Where a standalone gateway mints capabilities and reports its ledger (admin token only)."""
STOP_PATH = "/agentgod/v1/stop"
"""Where a run's worker asks, with the run's capability, whether to stop it: the answer comes
when the batch is stopped (Ctrl-C), or `{"stop": false}` after STOP_WAIT_SECONDS, to ask
again. So a run on another machine (a Ray worker's) is stopped as a run here is: it archives
itself as interrupted and comes back with what it paid for."""
STOP_WAIT_SECONDS = 20.0


class RelayedReply(Protocol):
    """What the road hands back (wire.Relayed): status, headers worth passing, the body."""

    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> dict[str, str]: ...
    @property
    def chunks(self) -> Iterator[bytes]: ...
    @property
    def close(self) -> Callable[[], None]: ...


Relay = Callable[[dict[str, Any], dict[str, str]], RelayedReply]
"""Sends a checked, metered request upstream with the real key, once (llm.relay_for's): the
request, and the headers its client sent (lowercase names; the road passes on the API version
and betas it asked for)."""


class CapabilityError(Exception):
    """A request the gateway refuses before anything is spent; `kind` is the error type the
    client sees and `status` the HTTP status."""

    def __init__(self, kind: str, status: int, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True)
class Capability:
    """What a capability grants, as signed."""

    run: str
    """The run it was minted for (the run id the child is started with)."""
    batch: str
    models: tuple[str, ...]
    """The models its calls may name; empty: any."""
    usd: float | None
    """Its share of the budget, in dollars; None: only the batch's budget binds it."""
    expires: float
    """Unix time after which it is refused."""

    @property
    def key(self) -> tuple[str, str]:
        """What its spending is counted under: one share per run of a batch."""
        return (self.batch, self.run)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Minter:
    """Signs and checks capabilities with a secret only the gateway holds (random per gateway,
    so a capability outlives neither its expiry nor the gateway that issued it)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def _sign(self, payload: str) -> str:
        digest = hmac.new(self._secret, f"{PREFIX}.{payload}".encode(), hashlib.sha256).digest()
        return _b64(digest)

    def mint(
        self,
        run: str,
        batch: str,
        *,
        models: Collection[str] = (),
        usd: float | None = None,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> str:
        """A capability for `run` of `batch`: `models` (empty: any), a share of `usd`."""
        claims = {
            "run": run,
            "batch": batch,
            "models": sorted(models),
            "usd": usd,
            "exp": round(time.time() + ttl_seconds, 3),
            "n": secrets.token_hex(4),
        }
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        token = f"{PREFIX}.{payload}.{self._sign(payload)}"
        redact.register(token)  # never in a log, an archive or an error of ours
        return token

    def verify(self, token: str, now: float | None = None) -> Capability:
        """The capability `token` grants; raises CapabilityError when it is not one of ours
        (or was altered) or has expired."""
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != PREFIX:
            raise CapabilityError(
                "capability_invalid",
                401,
                "the gateway accepts only the capability it issued for this run as the API key",
            )
        if not hmac.compare_digest(self._sign(parts[1]), parts[2]):
            raise CapabilityError(
                "capability_invalid",
                401,
                "the capability was not issued by this gateway, or was altered",
            )
        try:
            claims = json.loads(_unb64(parts[1]))
            capability = Capability(
                run=str(claims["run"]),
                batch=str(claims["batch"]),
                models=tuple(str(model) for model in claims["models"]),
                usd=None if claims["usd"] is None else float(claims["usd"]),
                expires=float(claims["exp"]),
            )
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise CapabilityError(
                "capability_invalid", 401, "the capability is malformed"
            ) from None
        moment = time.time() if now is None else now
        if moment >= capability.expires:
            ago = moment - capability.expires
            raise CapabilityError(
                "capability_expired",
                401,
                f"the capability for run {capability.run} expired {ago:.0f} s ago",
            )
        return capability


def _token_of(headers: Any) -> str:
    """The key a client sent: x-api-key (our road sends it), else a Bearer token (as an
    auth-token client sends it)."""
    key = str(headers.get("x-api-key") or "").strip()
    auth = str(headers.get("authorization") or "").strip()
    if not key and auth.lower().startswith("bearer "):
        key = auth[len("bearer ") :].strip()
    return key


@dataclass(frozen=True)
class _Priced:
    """A request's worst case, as the holds need it."""

    model: str
    max_tokens: int
    input_tokens: int
    searches: int
    fetches: int = 0
    """The most pages its web_fetch tools may read."""
    pages: int = 0
    """The most those pages may add to its input (each cut at its max_content_tokens)."""
    budgeted: bool = False
    """Whether a budget binds the call (the run's share or the batch's)."""


def _priced(body: Any, size: int, budgeted: bool) -> _Priced:
    """What the request may cost at most: its input (from its size), output, tool uses, and
    the pages its fetches may read."""
    if not isinstance(body, dict):
        raise CapabilityError("invalid_request_error", 400, "the body must be a JSON object")
    model, max_tokens = body.get("model"), body.get("max_tokens")
    if not isinstance(model, str) or not model:
        raise CapabilityError("invalid_request_error", 400, "model: Field required")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise CapabilityError("invalid_request_error", 400, "max_tokens: a positive integer")
    searches = fetches = pages = 0
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        uses = tool.get("max_uses")
        if tool.get("name") == "web_search":
            if not isinstance(uses, int) and budgeted:
                raise CapabilityError(
                    "invalid_request_error",
                    400,
                    "under a budget the gateway needs web_search to name its max_uses",
                )
            searches += uses if isinstance(uses, int) else 0
        elif tool.get("name") == "web_fetch":
            count = max(0, uses) if isinstance(uses, int) else FETCHES_WITHOUT_LIMIT
            cap = tool.get("max_content_tokens")
            page = cap if isinstance(cap, int) and not isinstance(cap, bool) else MAX_PAGE_TOKENS
            fetches += count
            pages += count * max(0, page)
    input_tokens = tokens_in_bytes(size) + WEB_USE_TOKENS * (searches + fetches)
    return _Priced(model, max_tokens, input_tokens, searches, fetches, pages, budgeted)


def _with_pages(body: dict[str, Any], priced: _Priced, held: Hold) -> dict[str, Any]:
    """The request as sent: max_tokens as held and, under a budget, each fetched page cut to
    what the hold covers (max_content_tokens: a fetch tool that named no cap, which would read
    a page whole, gets one), or no fetch tool at all below MIN_PAGE_TOKENS a page."""
    sent = {**body, "max_tokens": held.tokens}
    if not priced.fetches or not priced.budgeted:
        return sent
    page = held.extra_input // priced.fetches
    tools = [tool for tool in body["tools"] if isinstance(tool, dict)]
    if page < MIN_PAGE_TOKENS:
        sent["tools"] = [tool for tool in tools if tool.get("name") != "web_fetch"]
        return sent

    def capped(tool: dict[str, Any]) -> dict[str, Any]:
        cap = tool.get("max_content_tokens")
        if tool.get("name") != "web_fetch" or (isinstance(cap, int) and 0 <= cap <= page):
            return tool
        return {**tool, "max_content_tokens": page}

    sent["tools"] = [capped(tool) for tool in tools]
    return sent


class _Usage:
    """A streamed reply's usage, read off its events as they pass: message_start gives the
    input side, message_delta the totals."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] = {}
        self.final = False
        self._buffer = b""

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            for line in event.splitlines():
                if line.startswith(b"data:"):
                    self._data(line[5:].strip())

    def _data(self, raw: bytes) -> None:
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            data = json.loads(raw)
            if not isinstance(data, dict):
                return
            if data.get("type") == "message_start":
                usage = (data.get("message") or {}).get("usage")
                if isinstance(usage, dict):
                    self.usage.update(usage)
            elif data.get("type") == "message_delta" and isinstance(data.get("usage"), dict):
                self.usage.update(data["usage"])
                self.final = True


class Gateway:
    """The key holder: an HTTP server on `host`:`port` (0: any free port) that checks
    capabilities, meters every call against `ledger` (the batch's budget) and each capability's
    share, and sends through `relay`.

    `admin_token`, when given, lets a caller mint capabilities and read the ledger over HTTP
    (the standalone `agentgod gateway`); a batch that runs its own gateway mints in-process.
    """

    def __init__(
        self,
        relay: Relay,
        ledger: Usage,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        minter: Minter | None = None,
        admin_token: str | None = None,
    ) -> None:
        self._relay = relay
        self.ledger = ledger
        self.minter = minter or Minter()
        self._admin = admin_token
        self._shares: dict[tuple[str, str], Usage] = {}
        self._lock = threading.Lock()
        self._server = _Server((host, port), self._handler())
        self._thread: threading.Thread | None = None
        self.refusals: dict[str, int] = {}
        """How many requests were refused, by error type (for the batch's record and tests)."""
        self._stopping = threading.Event()

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """The base URL clients on this machine use (a wildcard address is reached on loopback)."""
        host, port = self.address
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"

    def start(self) -> Gateway:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="agentgod-gateway", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # a worker still asking is answered, not left hanging
        self._server.shutdown()
        self._server.server_close()

    def stop_runs(self) -> None:
        """Tell every run's worker that asks (STOP_PATH) to stop its run."""
        self._stopping.set()

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- capabilities and shares -----------------------------------------------------------

    def mint(
        self,
        run: str,
        batch: str,
        *,
        models: Collection[str] = (),
        usd: float | None = None,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> str:
        """A capability for one run, valid at this gateway only."""
        return self.minter.mint(run, batch, models=models, usd=usd, ttl_seconds=ttl_seconds)

    def share(self, capability: Capability) -> Usage:
        """The ledger of one run's share (its own budget, `capability.usd`)."""
        with self._lock:
            found = self._shares.get(capability.key)
            if found is None:
                found = self._shares[capability.key] = Usage(
                    budget_usd=capability.usd, keep_calls=False
                )
            return found

    def spent_by(self, batch: str, run: str) -> float:
        """What the gateway billed for one run, in dollars (0.0 if it made no call)."""
        with self._lock:
            found = self._shares.get((batch, run))
        return found.cost_usd() if found is not None else 0.0

    def forget(self, batch: str, run: str) -> CostSummary:
        """The run is over: what was billed for it (its calls, tokens and dollars; the record
        of a run lost with its worker has nothing else), and its share is dropped (a batch of
        any size keeps one share per run in flight, not one per run it ever had)."""
        with self._lock:
            found = self._shares.pop((batch, run), None)
        return (found or Usage(keep_calls=False)).cost_summary()

    def _refused(self, kind: str) -> None:
        with self._lock:
            self.refusals[kind] = self.refusals.get(kind, 0) + 1

    # ---- one call ----------------------------------------------------------------------------

    def _holds(self, share: Usage, priced: _Priced) -> tuple[Hold, Hold]:
        """Hold the call's worst case against the run's share, then the batch's budget (which
        may lower max_tokens further); raises CapabilityError for money."""
        share_hold: Hold | None = None
        try:
            share_hold = share.hold(
                priced.model,
                input_tokens=priced.input_tokens,
                max_tokens=priced.max_tokens,
                searches=priced.searches,
                extra_input=priced.pages,
            )
            batch_hold = self.ledger.hold(
                priced.model,
                input_tokens=priced.input_tokens,
                max_tokens=share_hold.tokens,
                searches=priced.searches,
                extra_input=share_hold.extra_input,
            )
        except BudgetExhaustedError as error:
            if share_hold is not None:
                share.release(share_hold)
            owner = BudgetOwner.RUN if share_hold is None else BudgetOwner.BATCH
            raise _BudgetRefusal(owner, error) from None
        return share_hold, batch_hold

    def _bill(self, share: Usage, model: str, usage: dict[str, Any]) -> None:
        share.record(model, usage)
        self.ledger.record(model, usage)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: a request line may carry nothing secret, but it is noise."""

            def do_GET(self) -> None:
                if self.path == ADMIN_PATH + "ledger" and self._is_admin():
                    ledger = gateway.ledger
                    self._json(200, {**ledger.cost_summary(), "budget_usd": ledger.budget_usd})
                elif self.path.rstrip("/").endswith(STOP_PATH):
                    try:
                        gateway.minter.verify(_token_of(self.headers))
                    except CapabilityError as refusal:
                        gateway._refused(refusal.kind)
                        self._error(refusal.status, refusal.kind, str(refusal), refusal)
                        return
                    self._json(200, {"stop": gateway._stopping.wait(STOP_WAIT_SECONDS)})
                else:
                    self._error(404, "not_found_error", f"Not found: {self.path}")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length > MAX_BODY_BYTES:
                    self.close_connection = True
                    self._error(413, "request_too_large", "the request is too large")
                    return
                raw = self.rfile.read(length) if length else b""
                try:
                    if self.path.startswith(ADMIN_PATH):
                        self._admin_post(raw)
                    elif self.path.rstrip("/").endswith("/v1/messages"):
                        self._messages(raw)
                    else:
                        self._error(404, "not_found_error", "the gateway serves /v1/messages")
                except CapabilityError as refusal:
                    gateway._refused(refusal.kind)
                    self._error(refusal.status, refusal.kind, str(refusal), refusal)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            # ---- admin --------------------------------------------------------------------

            def _is_admin(self) -> bool:
                token = _token_of(self.headers)
                return gateway._admin is not None and hmac.compare_digest(
                    token.encode(), gateway._admin.encode()
                )

            def _admin_post(self, raw: bytes) -> None:
                if self.path != ADMIN_PATH + "capabilities" or not self._is_admin():
                    self._error(404, "not_found_error", f"Not found: {self.path}")
                    return
                try:
                    asked = json.loads(raw or b"{}")
                    run, batch = str(asked["run"]), str(asked.get("batch", ""))
                    usd = asked.get("usd")
                    token = gateway.mint(
                        run,
                        batch,
                        models=[str(model) for model in asked.get("models") or []],
                        usd=None if usd is None else float(usd),
                        ttl_seconds=float(asked.get("ttl_seconds") or DEFAULT_TTL_SECONDS),
                    )
                except (ValueError, KeyError, TypeError):
                    self._error(400, "invalid_request_error", "expected {run, batch?, usd?, ...}")
                    return
                self._json(200, {"capability": token})

            # ---- the Messages API -----------------------------------------------------------

            def _messages(self, raw: bytes) -> None:
                capability = gateway.minter.verify(_token_of(self.headers))
                try:
                    body = json.loads(raw)
                except ValueError:
                    raise CapabilityError(
                        "invalid_request_error", 400, "the body is not JSON"
                    ) from None
                share = gateway.share(capability)
                budgeted = capability.usd is not None or gateway.ledger.budget_usd is not None
                priced = _priced(body, len(raw), budgeted)
                if capability.models and priced.model not in capability.models:
                    raise CapabilityError(
                        "model_not_allowed",
                        403,
                        f"the capability for run {capability.run} does not allow the model "
                        f"{priced.model} (allowed: {', '.join(capability.models)})",
                    )
                try:
                    share_hold, batch_hold = gateway._holds(share, priced)
                except _BudgetRefusal as refusal:
                    gateway._refused(BUDGET_ERROR)
                    self._error(402, BUDGET_ERROR, str(refusal), extra=refusal.numbers())
                    return
                try:
                    self._send_on(share, priced, _with_pages(body, priced, batch_hold))
                finally:
                    gateway.ledger.release(batch_hold)
                    share.release(share_hold)

            def _send_on(self, share: Usage, priced: _Priced, body: dict[str, Any]) -> None:
                """The call itself: relayed, passed on, billed (a failed one costs nothing)."""
                asked = {name.lower(): value for name, value in self.headers.items()}
                try:
                    reply = gateway._relay(body, asked)
                except Exception as error:
                    detail = redact.redact(f"{type(error).__name__}: {error}")[:500]
                    self._error(502, "api_error", f"the gateway could not reach the API: {detail}")
                    return
                try:
                    if reply.status != 200:
                        self._whole(reply.status, reply.headers, b"".join(reply.chunks))
                    elif reply.headers.get("content-type", "").startswith("text/event-stream"):
                        self._stream(share, priced, body["max_tokens"], reply)
                    else:
                        data = b"".join(reply.chunks)
                        with contextlib.suppress(ValueError, AttributeError):
                            usage = json.loads(data).get("usage")
                            if isinstance(usage, dict):
                                gateway._bill(share, priced.model, usage)
                        self._whole(200, reply.headers, data)
                finally:
                    reply.close()

            def _stream(
                self, share: Usage, priced: _Priced, max_tokens: int, reply: RelayedReply
            ) -> None:
                """Pass an event stream on piece by piece, reading its usage as it goes. The
                call is billed the moment its final usage passes (before the client can have
                the end of the stream, so a run that has its reply finds it counted); a stream
                that ends without it is billed its whole max_tokens of output."""
                seen = _Usage()
                billed = False
                self.send_response(200)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in reply.chunks:
                        seen.feed(chunk)
                        if seen.final and not billed:
                            billed = True
                            gateway._bill(share, priced.model, dict(seen.usage))
                        if chunk:
                            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                            self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    self.close_connection = True  # the client left: the bill stands
                except Exception:  # the API's side broke off: so does the client's stream
                    self.close_connection = True
                finally:
                    if not billed:  # at its worst: the API took the call
                        gateway._bill(
                            share, priced.model, {**seen.usage, "output_tokens": max_tokens}
                        )

            # ---- replies ---------------------------------------------------------------------

            def _whole(self, status: int, headers: dict[str, str], data: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

            def _json(
                self, status: int, payload: Any, headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self._whole(status, {"content-type": "application/json", **(headers or {})}, data)

            def _error(
                self,
                status: int,
                kind: str,
                message: str,
                refusal: CapabilityError | None = None,
                extra: dict[str, float | str] | None = None,
            ) -> None:
                """A real-shaped error body; refusals are final (x-should-retry: false)."""
                error = {"type": kind, "message": redact.redact(message), **(extra or {})}
                headers = {"x-should-retry": "false"} if status in (401, 402, 403) else {}
                self._json(status, {"type": "error", "error": error}, headers)

        return _Handler


class _Server(ThreadingHTTPServer):
    """The gateway's HTTP server: a client that left (its run ended with a connection kept
    alive, or was stopped mid-call) is nothing to report."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)  # a bug of ours: said, not hidden


class _BudgetRefusal(Exception):
    """A hold the run's share or the batch budget could not make."""

    def __init__(self, owner: BudgetOwner, error: BudgetExhaustedError) -> None:
        whose = "the run's share of the budget" if owner is BudgetOwner.RUN else "the batch budget"
        super().__init__(f"{whose} is spent: {error}")
        self.owner = owner
        self.error = error

    def numbers(self) -> dict[str, float | str]:
        """The figures, and whose budget it was (BUDGET_OF), for the refusal's body."""
        return {
            "spent_usd": round(self.error.spent_usd, 6),
            "budget_usd": self.error.budget_usd,
            "needed_usd": round(self.error.needed_usd, 6),
            BUDGET_OF: self.owner.value,
        }
