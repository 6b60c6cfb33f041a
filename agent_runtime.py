"""agent_runtime.py — the trusted runtime every generated agent starts with.

The text between the two marker lines below is inlined verbatim into every agent file (see
`runtime_source`), and the same text is importable as this module so it can be tested. So it
uses the standard library only: a kept agent runs with nothing installed.

Under AgentGOD an agent holds no key and keeps no meter: the parent's broker (broker.py) hands it
one connected socket, named by AGENTGOD_BROKER_FD, and every model call is a question on it. The
broker decides (model, fields, max_tokens, budget) and bills the real reply; the agent only asks.
Without that variable (a kept agent run on its own) `call_llm` goes to the Messages API over
HTTPS with the key from the environment or a `.env` up the directory tree. Everything is read at
call time, so importing this module does nothing.

The wire, both ways: a 4-byte big-endian length, then that many bytes of UTF-8 JSON (one object).
One request is in flight per connection; a lock lets an agent's threads share it.
"""

# ---- agent runtime: begin ----
import json
import os
import sys  # noqa: F401 (the footer and the agents use it)
import threading
import time
from pathlib import Path

API_VERSION = "2026-10-21"
DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_BASE_URL = "https://api.anthropic.com"
BROKER_FD_VARIABLE = "AGENTGOD_BROKER_FD"
FRAME_HEADER_BYTES = 4
MAX_REPLY_BYTES = 64 * 1024 * 1024
MAX_ATTEMPTS = 4
REFUSAL_TYPES = frozenset({"budget", "forbidden", "invalid", "too_large", "malformed"})
"""Error types the broker gives when it will not make a call; call_llm raises BrokerRefused."""
STATUS_KINDS = {
    400: "invalid_request",
    401: "authentication",
    403: "permission",
    404: "not_found",
    408: "timeout",
    413: "request_too_large",
    429: "rate_limit",
    529: "overloaded",
}
"""Error types for HTTP statuses of the Messages API; any other status >= 500 is api_error."""
_BROKER_LOCK = threading.Lock()
_BROKEN: set[tuple[int, int, int]] = set()
"""Broker connections (fd, device, inode) whose exchange broke off halfway: out of step."""


class LLMError(RuntimeError):
    """A model call failed; `kind` says why (rate_limit, overloaded, timeout, connection, ...)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class BrokerRefused(LLMError):
    """The broker would not make the call: a model, field, file or budget this agent lacks."""


def _setting(name: str) -> str:
    """A setting from the environment, else from the nearest .env up the directory tree."""
    value = os.environ.get(name, "").strip()
    if value:
        return value
    here = Path(__file__).resolve().parent
    for folder in (here, *here.parents):
        try:
            lines = (folder / ".env").read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, found = line.strip().partition("=")
            if key.strip() == name and found.strip():
                return found.strip().strip("\"'")
    return ""


def api_key() -> str:
    """The key for a standalone run: the environment, else a .env up the directory tree."""
    key = _setting("ANTHROPIC_API_KEY")
    if not key:
        raise LLMError(
            "authentication",
            "ANTHROPIC_API_KEY is not set (not in the environment, not in any .env)",
        )
    return key


def encode_frame(message: dict[str, object]) -> bytes:
    """One frame of the broker wire: 4-byte big-endian length, then UTF-8 JSON."""
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return len(data).to_bytes(FRAME_HEADER_BYTES, "big") + data


def _read_exact(fd: int, size: int) -> bytes:
    """Exactly `size` bytes; a short read means the broker hung up."""
    chunks = []
    left = size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise LLMError("connection", "the broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _ask_broker(fd_text: str, message: dict[str, object]) -> dict[str, object]:
    """Send one request on the inherited socket and wait for its answer.

    Plain os.read/os.write on the fd: no socket module, so agent code finds none among the
    runtime's names, and an agent starts a few milliseconds sooner.
    """
    try:
        fd = int(fd_text)
        status = os.fstat(fd)
    except (ValueError, OSError):
        status = None
    if status is None or status.st_mode & 0o170000 != 0o140000:  # S_IFSOCK
        raise LLMError("connection", f"{BROKER_FD_VARIABLE}={fd_text!r} is not an open socket")
    connection = (fd, status.st_dev, status.st_ino)
    if connection in _BROKEN:
        raise LLMError("connection", "an earlier call broke off halfway; the broker is out of step")
    try:
        view = memoryview(encode_frame(message))
        while view:
            view = view[os.write(fd, view) :]
        size = int.from_bytes(_read_exact(fd, FRAME_HEADER_BYTES), "big")
        if size > MAX_REPLY_BYTES:
            raise LLMError("connection", f"the broker sent a {size}-byte reply")
        reply = json.loads(_read_exact(fd, size).decode("utf-8"))
    except BaseException as error:
        _BROKEN.add(connection)  # whatever is left of this exchange would be read as the next's
        if isinstance(error, OSError):
            raise LLMError("connection", f"the broker connection failed: {error}") from None
        if isinstance(error, ValueError):
            raise LLMError("connection", "the broker sent an unreadable reply") from None
        raise
    if not isinstance(reply, dict):
        raise LLMError("connection", "the broker sent an unreadable reply")
    return reply


def _retry_wait(headers: dict[str, str], attempt: int) -> float:
    """Honour retry-after(-ms) up to 30 s, else back off 0.5-8 s with a little jitter."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            wait = float(headers.get(name) or 0) * scale
        except (TypeError, ValueError):
            continue
        if 0 < wait <= 30:
            return wait
    jitter = 1 - (time.time_ns() % 1000) / 4000
    return float(min(0.5 * 2**attempt, 8.0) * jitter)


def _post(body: dict[str, object]) -> dict[str, object]:
    """The standalone road: POST /v1/messages, retrying like the SDK (4 attempts)."""
    import urllib.error  # only here: a brokered agent never pays for the HTTP stack
    import urllib.request

    base = (_setting("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    headers = {
        "content-type": "application/json",
        "x-api-key": api_key(),
        "anthropic-version": API_VERSION,
    }
    data = json.dumps(body).encode("utf-8")
    for attempt in range(MAX_ATTEMPTS):
        request = urllib.request.Request(base + "/v1/messages", data, headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                reply = json.loads(response.read().decode("utf-8"))
                return reply if isinstance(reply, dict) else {}
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")[:500]
            answered = {name.lower(): value for name, value in error.headers.items()}
            verdict = answered.get("x-should-retry", "").lower()
            retry = error.code in (408, 409, 429) or error.code >= 500
            retry = verdict == "true" or (retry and verdict != "false")
            if not retry or attempt == MAX_ATTEMPTS - 1:
                kind = STATUS_KINDS.get(error.code) or (
                    "api_error" if error.code >= 500 else "invalid_request"
                )
                message = f"Messages API answered HTTP {error.code}: {detail}"
                raise LLMError(kind, message) from None
            wait = _retry_wait(answered, attempt)
        except (urllib.error.URLError, OSError) as error:
            if attempt == MAX_ATTEMPTS - 1:
                timed_out = isinstance(error, TimeoutError) or isinstance(
                    getattr(error, "reason", None), TimeoutError
                )
                kind = "timeout" if timed_out else "connection"
                raise LLMError(kind, f"cannot reach the Messages API at {base}: {error}") from None
            wait = _retry_wait({}, attempt)
        time.sleep(wait)
    raise LLMError("connection", "unreachable")


def call_llm(
    prompt: str,
    system: str | None = None,
    max_tokens: int = 4096,
    web: bool = False,
    files: list[str] | tuple[str, ...] = (),
) -> str:
    """One model call; returns the reply's text blocks joined.

    `web` asks for web search and `files` names attachments; both need AgentGOD's broker, which
    decides whether this agent may have them. Raises BrokerRefused when the broker will not make
    the call (its share of the budget is spent, a model or file it may not use) and LLMError when
    the call failed after retries.
    """
    request: dict[str, object] = {
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if system:
        request["system"] = system
    model = os.environ.get("AGENT_MODEL", "").strip()
    fd_text = os.environ.get(BROKER_FD_VARIABLE, "").strip()
    if fd_text:
        if model:
            request["model"] = model
        message = {
            "op": "messages",
            "request": request,
            "web": bool(web),
            "files": [str(name) for name in files],
        }
        with _BROKER_LOCK:
            answer = _ask_broker(fd_text, message)
        if answer.get("ok") is True:
            return str(answer.get("text", ""))
        error = answer.get("error")
        error = error if isinstance(error, dict) else {}
        kind = str(error.get("type") or "api_error")
        text = str(error.get("message") or "the broker refused the call")
        raise (BrokerRefused if kind in REFUSAL_TYPES else LLMError)(kind, text)
    if web or files:
        raise LLMError("unsupported", "web search and attached files need AgentGOD's broker")
    request["model"] = model or DEFAULT_MODEL
    reply = _post(request)
    blocks = reply.get("content")
    blocks = blocks if isinstance(blocks, list) else []
    return "".join(
        str(block.get("text", ""))
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "text"
    )


def format_previous(previous_outputs: dict[str, object]) -> str:
    """Upstream outputs as labelled sections, ready to paste into a prompt."""
    if not previous_outputs:
        return "(no earlier results)"
    return "\n\n".join(f"### {name}\n{text}" for name, text in previous_outputs.items())


# ---- agent runtime: end ----

RUNTIME_BEGIN = "# ---- agent runtime: begin ----"
RUNTIME_END = "# ---- agent runtime: end ----"


def runtime_source() -> str:
    """The runtime exactly as generator.py inlines it: the lines between the two markers."""
    lines = Path(__file__).read_text(encoding="utf-8").splitlines(keepends=True)
    stripped = [line.rstrip("\n") for line in lines]
    start = stripped.index(RUNTIME_BEGIN) + 1
    end = stripped.index(RUNTIME_END)
    return "".join(lines[start:end])
