"""agent_runtime.py — the trusted runtime every generated agent starts with.

The text between the two "agent runtime" marker lines below is inlined verbatim into every agent
file (see `runtime_source`), and the same text is importable as this module so it can be tested
(and so brokerrequest.py shares its rules for files, web tools and sources). So it uses the
standard library only: a kept agent runs with nothing installed.

Under AgentGOD an agent holds no key and keeps no meter: the parent's broker (broker.py) hands it
one connected socket, named by AGENTGOD_BROKER_FD, and every model call is a question on it. The
broker decides (model, fields, max_tokens, budget, web, files) and bills the real reply; the agent
only asks. That inlined part holds no road to a key or to the network at all: no .env lookup, no
HTTP, nothing an agent's code could call to get past the broker, whatever walls the machine has.

The standalone road — the key from the environment or a `.env` up the directory tree, the
Messages API over HTTPS, artifacts written into a folder — is the text between the two
"standalone road" marker lines (`standalone_source`). generator.py adds it only to a kept agent's
file in the library, for a person to run by hand; an agent the pipeline runs (a kept one too) is
given the inlined part alone. Everything is read at call time, so importing this module does
nothing.

The contract agents rely on (exact names; the generator's prompt shows the same signatures):
- `call_llm(prompt, system=None, max_tokens=4096, web=False, files=()) -> str`: one model call.
  `web=True` lets the model search and read the web (the Messages API's server tools, see
  `web_tools`); the answer ends with its sources (`answer_with_sources`). `files` names
  attachments (keys of `input_files()`; standalone also plain paths), shown to the model as
  `file_block` makes them. Raises `BrokerRefused` when the broker will not make the call and
  `LLMError` when it failed.
- `input_files() -> dict[str, str]`: {attachment name: absolute path} from AGENTGOD_INPUT_FILES
  (a JSON object; {} when unset). The agent reads them itself, with open(path); only reading is
  possible.
- `save_artifact(name, data) -> str`: hands a file (str as UTF-8, or bytes) back to the user and
  returns the name it was stored under. Under AgentGOD the broker stores it ("artifact" frames,
  in pieces of ARTIFACT_PIECE_BYTES); standalone it is written into AGENTGOD_ARTIFACTS, else
  ./artifacts. The name is a plain file name (`artifact_name_problem` is the one rule, shared
  with artifacts.py).
- `format_previous(previous_outputs) -> str`: upstream outputs as labelled sections.

The wire, both ways: a 4-byte big-endian length, then that many bytes of UTF-8 JSON (one object).
One request is in flight per connection; a lock lets an agent's threads share it. The frames are
BROKER_OPS, the one table the broker's dispatch and field checks are derived from:
  {"op": "messages", "request": {...}, "web": bool, "files": [names]}
      -> {"ok": true, "text", "model", "stop_reason", "max_tokens", "usage", "searches", "sources"}
  {"op": "artifact", "name": str, "data": base64, "more": true (every piece but the last)}
      -> {"ok": true, "name": stored, "bytes": n}
  any refusal -> {"ok": false, "error": {"type", "message"}}
"""

# ---- agent runtime: begin ----
import json
import os
import sys  # noqa: F401 (the footer and the agents use it)
import threading
import time  # the agents (and the standalone road) use it
from pathlib import Path

BROKER_FD_VARIABLE = "AGENTGOD_BROKER_FD"
INPUT_FILES_VARIABLE = "AGENTGOD_INPUT_FILES"
"""JSON object {attachment name: absolute path}: the user's files this agent may read."""
ARTIFACT_NAME_MAX_BYTES = 128
"""Longest artifact name, in UTF-8 bytes: with a "-N" variant it still fits any file system."""
ARTIFACT_PIECE_BYTES = 4 * 1024 * 1024
"""An artifact goes to the broker in pieces of at most this many bytes (about 5.6 MB of base64,
well inside a frame), so one of any size up to the run's cap travels without a frame over it."""
MAX_CONTINUATIONS = 4
"""How often a turn the API paused (stop_reason "pause_turn") is continued before giving up."""
IMAGE_TYPES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
"""Magic bytes of the images the Messages API takes (WebP is checked apart: RIFF....WEBP)."""
MAX_FETCHES_PER_CALL = 3
"""Pages one web call may read: each is thousands of input tokens."""
MAX_IMAGE_BASE64 = 10_000_000
"""The API's limit for one image, base64-encoded."""
MAX_DOCUMENT_BYTES = 32_000_000
"""The API's limit for a whole request: no single file may be larger (base64 or text)."""
FRAME_HEADER_BYTES = 4
MAX_REPLY_BYTES = 64 * 1024 * 1024
REFUSAL_TYPES = frozenset({"budget", "forbidden", "invalid", "too_large", "malformed"})
"""Error types the broker gives when it will not make a call; call_llm raises BrokerRefused."""


class BrokerOp:
    """One operation of the broker wire: the fields its frame may hold (besides "op"), those it
    must hold, the fields of the answer when it succeeds, and the runtime function that sends it.

    BROKER_OPS is the one table: the broker derives its dispatch and field allowlists from it,
    and the tests check the generator's prompt, ARCHITECTURE.md and this module's docstring
    against it and against the functions' real signatures.
    """

    __slots__ = ("answer", "fields", "function", "required")

    def __init__(
        self,
        function: str,
        fields: tuple[str, ...],
        required: tuple[str, ...],
        answer: tuple[str, ...],
    ) -> None:
        self.function = function
        self.fields = fields
        self.required = required
        self.answer = answer


BROKER_OPS = {
    "messages": BrokerOp(
        "call_llm",
        fields=("request", "web", "files"),
        required=("request",),
        answer=("text", "model", "stop_reason", "max_tokens", "usage", "searches", "sources"),
    ),
    "artifact": BrokerOp(
        "save_artifact",
        fields=("name", "data", "more"),
        required=("name", "data"),
        answer=("name", "bytes"),
    ),
}
"""Every frame an agent may send, by its "op"."""
_BROKER_LOCK = threading.Lock()
_BROKEN: set[tuple[int, int, int]] = set()
"""Broker connections (fd, device, inode) whose exchange broke off halfway: out of step."""
_standalone: "_Standalone | None" = None
"""The road of a kept agent run by hand: set only by the standalone part, which generator.py
adds to a library file alone. None in every agent AgentGOD runs: without the broker such an
agent has no road to the model at all."""


class LLMError(RuntimeError):
    """A model call failed; `kind` says why (rate_limit, overloaded, timeout, connection, ...)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class FileTooLarge(ValueError):
    """A file over what the Messages API takes in one request (file_block refuses it)."""


class BrokerRefused(LLMError):
    """The broker would not make the call: a model, field, file or budget this agent lacks."""


def encode_frame(message: dict[str, object]) -> bytes:
    """One frame of the broker wire: 4-byte big-endian length, then UTF-8 JSON."""
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return len(data).to_bytes(FRAME_HEADER_BYTES, "big") + data


def _frame(op: str, **fields: object) -> dict[str, object]:
    """A request frame of the table's `op`, refusing (here, before anything is sent) a field
    the table does not give it: the runtime speaks exactly the wire the broker reads."""
    known = BROKER_OPS[op]
    unknown = sorted(set(fields) - set(known.fields))
    if unknown or not set(known.required) <= set(fields):
        raise ValueError(f"a {op!r} frame holds {sorted(fields)}, not {known.fields}")
    return {"op": op, **fields}


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


def _refused(answer: dict[str, object], default: str, fallback: str) -> LLMError:
    """The exception for a broker's {"ok": false, "error": {...}} answer."""
    error = answer.get("error")
    error = error if isinstance(error, dict) else {}
    kind = str(error.get("type") or default)
    text = str(error.get("message") or fallback)
    return (BrokerRefused if kind in REFUSAL_TYPES else LLMError)(kind, text)


def _no_broker() -> LLMError:
    """Why an agent without the broker's socket (and without the standalone road) cannot ask."""
    return LLMError(
        "connection",
        f"{BROKER_FD_VARIABLE} is not set: this agent reaches the model only through AgentGOD's "
        "broker (a kept agent in the library, which holds the standalone road, runs on its own)",
    )


def input_files() -> dict[str, str]:
    """The user's attached files and folders, {name: absolute path}; {} when none.

    Read them with open(path) (or os.listdir for a folder): they are mounted read-only, and
    nothing else of the user's is visible. Raises ValueError if the variable is malformed.
    """
    raw = os.environ.get(INPUT_FILES_VARIABLE, "").strip()
    if not raw:
        return {}
    try:
        found = json.loads(raw)
    except ValueError:
        found = None
    if not isinstance(found, dict) or not all(
        isinstance(name, str) and isinstance(path, str) and os.path.isabs(path)
        for name, path in found.items()
    ):
        raise ValueError(
            f"{INPUT_FILES_VARIABLE} must be a JSON object of attachment name -> absolute path, "
            f"not {raw[:200]!r}"
        )
    return dict(found)


def artifact_name_problem(name: str) -> str | None:
    """Why `name` cannot name an artifact, or None: a plain file name such as report.md.

    The one rule, for the agent's side and the parent's (artifacts.py): no folder part, nothing
    hidden or invisible, so any accepted name is a new entry directly inside the artifacts folder.
    """
    if not isinstance(name, str):
        return f"must be a string, not {type(name).__name__}"
    if not name:
        return "is empty"
    if "/" in name or "\\" in name:
        return "contains a path separator: give a plain file name such as report.md"
    if name.startswith("."):
        return "starts with a dot"
    if not name.isprintable():  # control, format (bidi), separator and surrogate characters
        return "contains a control or invisible character"
    if name != name.strip():
        return "starts or ends with a space"
    if len(name.encode("utf-8")) > ARTIFACT_NAME_MAX_BYTES:
        return f"is longer than {ARTIFACT_NAME_MAX_BYTES} bytes"
    return None


def save_artifact(name: str, data: str | bytes) -> str:
    """Hand a file back to the user (a CSV, an SVG chart, a Markdown report); returns its name.

    `data` is text (stored as UTF-8) or bytes. Under AgentGOD the broker stores it in the run's
    artifacts folder (the only place an agent can write), a large one sent in pieces, and may
    store it under another name when another agent took this one: use the name returned. Raises
    ValueError for a name that is not a plain file name, and BrokerRefused when the broker will
    not keep it (too_large: the run's artifacts cap; forbidden). A kept agent run by hand writes
    it into the folder AGENTGOD_ARTIFACTS names, else ./artifacts.
    """
    problem = artifact_name_problem(name)
    if problem:
        raise ValueError(f"artifact name {str(name)[:80]!r} {problem}")
    if isinstance(data, str):
        payload = data.encode("utf-8")
    elif isinstance(data, bytes | bytearray | memoryview):
        payload = bytes(data)
    else:
        raise TypeError(f"save_artifact takes str or bytes, not {type(data).__name__}")
    fd_text = os.environ.get(BROKER_FD_VARIABLE, "").strip()
    if not fd_text:
        if _standalone is None:
            raise _no_broker()
        return _standalone.save(name, payload)
    import base64

    answer: dict[str, object] = {}
    with _BROKER_LOCK:  # the pieces of one artifact follow each other on the connection
        start = 0
        while True:
            piece = payload[start : start + ARTIFACT_PIECE_BYTES]
            start += ARTIFACT_PIECE_BYTES
            fields: dict[str, object] = {"name": name, "data": base64.b64encode(piece).decode()}
            if start < len(payload):
                fields["more"] = True
            answer = _ask_broker(fd_text, _frame("artifact", **fields))
            if answer.get("ok") is not True or start >= len(payload):
                break
    if answer.get("ok") is True:
        return str(answer.get("name") or name)
    raise _refused(answer, "forbidden", "the broker refused the artifact")


def file_block(name: str, data: bytes) -> dict[str, object]:
    """A file as one content block the model can read: a PDF as a `document`, a PNG, JPEG, GIF
    or WebP as an `image` (both base64, the type told by magic bytes, never by the name), UTF-8
    text inlined as a `text` block that names the file.

    Raises ValueError naming the file when it is none of these or is over the API's limits.
    """
    import base64

    media_type = next((kind for magic, kind in IMAGE_TYPES if data.startswith(magic)), None)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        media_type = "image/webp"
    if data.startswith(b"%PDF-"):
        media_type = "application/pdf"
    if media_type is not None:
        encoded = base64.b64encode(data).decode("ascii")
        limit = MAX_DOCUMENT_BYTES if media_type == "application/pdf" else MAX_IMAGE_BASE64
        if len(encoded) > limit:
            raise FileTooLarge(f"{name}: too large to show the model ({len(data)} bytes)")
        source = {"type": "base64", "media_type": media_type, "data": encoded}
        if media_type == "application/pdf":
            return {"type": "document", "source": source, "title": name}
        return {"type": "image", "source": source}
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = "\x00"
    if "\x00" in text:
        raise ValueError(
            f"{name}: not UTF-8 text, a PDF or a PNG, JPEG, GIF or WebP image, "
            "so the model cannot be shown it (read it in the agent's own code instead)"
        )
    if len(data) > MAX_DOCUMENT_BYTES:
        raise FileTooLarge(f"{name}: too large to show the model ({len(data)} bytes)")
    label = json.dumps(name, ensure_ascii=False)
    return {"type": "text", "text": f"<file name={label}>\n{text}\n</file>"}


def web_tools(max_searches: int, page_tokens: int | None = None) -> list[dict[str, object]]:
    """The Messages API's server tools for one web call: search, and fetch with citations.

    The plain versions (web_search_20250305, web_fetch_20250910), which every model that
    searches accepts; search may be used `max_searches` times in the call, fetch
    MAX_FETCHES_PER_CALL times (each page read is input the call pays for), each page cut to
    about `page_tokens` tokens when given (the tool's max_content_tokens). Fetching reaches only
    URLs already in the conversation (the API's rule): the prompt's, or earlier results'.
    """
    if max_searches < 1:
        raise ValueError(f"max_searches must be at least 1, not {max_searches}")
    fetch: dict[str, object] = {
        "type": "web_fetch_20250910",
        "name": "web_fetch",
        "max_uses": MAX_FETCHES_PER_CALL,
        "citations": {"enabled": True},
    }
    if page_tokens is not None:
        fetch["max_content_tokens"] = page_tokens
    return [{"type": "web_search_20250305", "name": "web_search", "max_uses": max_searches}, fetch]


def _cited_page(citation: dict[str, object], fetched: list[tuple[str, str]]) -> tuple[str, str]:
    """The (url, title) a citation points at; ("", "") when it is not a web page."""
    kind = citation.get("type")
    if kind == "web_search_result_location":
        return str(citation.get("url") or ""), str(citation.get("title") or "")
    if kind not in ("char_location", "page_location"):
        return "", ""
    named, index = citation.get("document_title"), citation.get("document_index")
    if named:
        return next((page for page in fetched if page[1] == named), ("", ""))
    return fetched[index] if isinstance(index, int) and 0 <= index < len(fetched) else ("", "")


def answer_with_sources(
    content_blocks: list[dict[str, object]],
) -> tuple[str, list[dict[str, str]]]:
    """A reply's text (every text block, joined with "") and the web sources it cites.

    `content_blocks` is the whole turn: every response of a continued pause_turn, in order. A
    web_search_result_location citation names its page; a char_location or page_location one
    points at a fetched page (a web_fetch_tool_result), found by its title when it has one, else
    by its index among the turn's fetched pages; other documents (attachments) are no web
    source. Each distinct URL counts once, in first-cited order, appended as
    "\n\nSources:\n- Title — URL" lines (the URL stands in for a missing title).
    """
    blocks = [block for block in content_blocks if isinstance(block, dict)]
    fetched: list[tuple[str, str]] = []  # (url, title) of each page fetched, in order
    for block in blocks:
        result = block.get("content") if block.get("type") == "web_fetch_tool_result" else None
        if isinstance(result, dict) and result.get("type") == "web_fetch_result":
            document = result.get("content")
            title = document.get("title") if isinstance(document, dict) else None
            fetched.append((str(result.get("url") or ""), str(title or "")))
    parts: list[str] = []
    sources: dict[str, str] = {}  # url -> title, in first-cited order
    for block in blocks:
        if block.get("type") != "text":
            continue
        parts.append(str(block.get("text") or ""))
        citations = block.get("citations")
        for citation in citations if isinstance(citations, list) else ():
            url, title = _cited_page(citation, fetched) if isinstance(citation, dict) else ("", "")
            url = url.strip()
            if url.startswith(("https://", "http://")) and url.isprintable() and " " not in url:
                sources.setdefault(url, " ".join(title.split()) or url)
    text = "".join(parts)
    if sources:
        text += "\n\nSources:\n" + "\n".join(f"- {title} — {url}" for url, title in sources.items())
    return text, [{"title": title, "url": url} for url, title in sources.items()]


def call_llm(
    prompt: str,
    system: str | None = None,
    max_tokens: int = 4096,
    web: bool = False,
    files: list[str] | tuple[str, ...] = (),
) -> str:
    """One model call; returns the reply's text blocks joined.

    `web=True` lets the model search and fetch pages for this call (server tools); the answer
    then ends with the sources it cited. `files` names attachments (keys of input_files()) to
    show the model: text inlined, PDFs as documents, images as images. Under AgentGOD the broker
    decides whether this agent may have them; a kept agent run by hand may also name plain
    paths. Raises BrokerRefused when the broker will not make the call (its share of the budget
    is spent, the web, a model or a file it may not use), ValueError for a file the model cannot
    be shown, and LLMError when the call failed after retries.
    """
    request: dict[str, object] = {
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if system:
        request["system"] = system
    model = os.environ.get("AGENT_MODEL", "").strip()
    fd_text = os.environ.get(BROKER_FD_VARIABLE, "").strip()
    if not fd_text:
        if _standalone is None:
            raise _no_broker()
        return _standalone.call(request, prompt, model, bool(web), [str(n) for n in files])
    if model:
        request["model"] = model
    message = _frame(
        "messages", request=request, web=bool(web), files=[str(name) for name in files]
    )
    with _BROKER_LOCK:
        answer = _ask_broker(fd_text, message)
    if answer.get("ok") is True:
        return str(answer.get("text", ""))
    raise _refused(answer, "api_error", "the broker refused the call")


def format_previous(previous_outputs: dict[str, object]) -> str:
    """Upstream outputs as labelled sections, ready to paste into a prompt."""
    if not previous_outputs:
        return "(no earlier results)"
    return "\n\n".join(f"### {name}\n{text}" for name, text in previous_outputs.items())


# ---- agent runtime: end ----

# ---- standalone road: begin ----
# A kept agent run by hand (no broker): the key from the environment or a .env up the directory
# tree, the Messages API over HTTPS, artifacts into a folder. Never in an agent AgentGOD runs.
API_VERSION = "2026-10-21"
DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_BASE_URL = "https://api.anthropic.com"
ARTIFACTS_VARIABLE = "AGENTGOD_ARTIFACTS"
"""The folder save_artifact writes into (else ./artifacts)."""
DEFAULT_MAX_SEARCHES = 5
"""web=True: searches (and fetches) per call unless MAX_SEARCHES_PER_AGENT says."""
MAX_ATTEMPTS = 4
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


def _api_key() -> str:
    """The key: the environment, else a .env up the directory tree."""
    key = _setting("ANTHROPIC_API_KEY")
    if not key:
        raise LLMError(
            "authentication",
            "ANTHROPIC_API_KEY is not set (not in the environment, not in any .env)",
        )
    return key


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
    """POST /v1/messages, retrying like the SDK (4 attempts)."""
    import urllib.error
    import urllib.request

    base = (_setting("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    headers = {
        "content-type": "application/json",
        "x-api-key": _api_key(),
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


def _read_files(files: list[str]) -> list[dict[str, object]]:
    """`files=`: attachment names (input_files()) or plain paths, as content blocks."""
    attached = input_files()
    blocks = []
    for entry in files:
        path = attached.get(entry, entry)
        if os.path.isdir(path):
            raise ValueError(f"{entry} is a folder: name the files in it")
        with open(path, "rb") as handle:
            data = handle.read()
        blocks.append(file_block(entry if entry in attached else os.path.basename(path), data))
    return blocks


class _Standalone:
    """call_llm and save_artifact without a broker, for a person running a kept agent."""

    @staticmethod
    def call(
        request: dict[str, object], prompt: str, model: str, web: bool, files: list[str]
    ) -> str:
        question: dict[str, object] = {"role": "user", "content": prompt}
        if files:
            question["content"] = [*_read_files(files), {"type": "text", "text": prompt}]
        request["messages"] = [question]
        if web:
            searches = _setting("MAX_SEARCHES_PER_AGENT")
            count = int(searches) if searches.isdigit() else DEFAULT_MAX_SEARCHES
            request["tools"] = web_tools(count)
        request["model"] = model or DEFAULT_MODEL
        blocks: list[dict[str, object]] = []
        for _ in range(1 + MAX_CONTINUATIONS):
            reply = _post(request)
            content = reply.get("content")
            if isinstance(content, list):
                blocks += [block for block in content if isinstance(block, dict)]
            if reply.get("stop_reason") != "pause_turn":
                break
            # The server's tool loop paused: send the turn so far back, unchanged, to go on.
            request["messages"] = [question, {"role": "assistant", "content": list(blocks)}]
        return answer_with_sources(blocks)[0]

    @staticmethod
    def save(name: str, payload: bytes) -> str:
        folder = Path(os.environ.get(ARTIFACTS_VARIABLE, "").strip() or "artifacts").absolute()
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
            os.replace(temporary, folder / name)  # replaces a symlink itself, never its target
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        return name


_standalone = _Standalone()
# ---- standalone road: end ----

RUNTIME_BEGIN = "# ---- agent runtime: begin ----"
RUNTIME_END = "# ---- agent runtime: end ----"
HEADER_MARK = "# ---- runtime header (trusted) ----"
BODY_START = "# ---- agent code (written by the model; checked by codeguard) ----"
BODY_END = "# ---- runtime footer (trusted) ----"
"""The lines an assembled agent file holds between its trusted header, the model's code and its
trusted footer (generator writes them; a run's page shows the model's part apart by them)."""
STANDALONE_BEGIN = "# ---- standalone road: begin ----"
STANDALONE_END = "# ---- standalone road: end ----"


def _between(begin: str, end: str, *, inclusive: bool) -> str:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines(keepends=True)
    stripped = [line.rstrip("\n") for line in lines]
    start = stripped.index(begin) + (0 if inclusive else 1)
    stop = stripped.index(end) + (1 if inclusive else 0)
    return "".join(lines[start:stop])


def runtime_source() -> str:
    """The runtime exactly as generator.py inlines it into every agent: the lines between the
    two runtime markers. It holds no road to a key or to the network."""
    return _between(RUNTIME_BEGIN, RUNTIME_END, inclusive=False)


def standalone_source() -> str:
    """The standalone road, marker lines included, as generator.py adds it after the runtime in
    a kept agent's library file (never in one the pipeline runs)."""
    return _between(STANDALONE_BEGIN, STANDALONE_END, inclusive=True)
