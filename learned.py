"""learned.py — what the road has learned about a model where it is served: the step of the
structured-output ladder that works there.

A server that drops `output_config.format` (Ollama, llama.cpp) answers a native structured
request in prose; the road then steps down the ladder (kinds.Structured) by itself, and keeps the
step that worked here, per endpoint and model, so later calls — in this process and the next —
start there instead of paying for the prose again (on a local model, a plan written in prose can
take a minute). Kept in `<home>/learned-models.json`, readable by its owner only; `agentgod
models` shows it, and deleting the file makes the road try the native step again. A file that
cannot be read or written costs the memory, never a call.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agentgod.kinds import Structured
from agentgod.models import Profile

FILE_NAME = "learned-models.json"
DEFAULT_ENDPOINT = "https://api.anthropic.com"


@dataclass(frozen=True)
class Learned:
    """One step that worked: where, for which model, since when."""

    endpoint: str
    model: str
    structured: Structured
    at: str
    """When it was learned (UTC, ISO 8601)."""


_lock = threading.Lock()
_known: dict[Path, dict[tuple[str, str], Learned]] = {}
"""By home: what its file held when first read, with what this process learned since."""


def endpoint(base_url: str | None) -> str:
    """The endpoint as the memory names it: the base URL without a trailing slash."""
    return (base_url or DEFAULT_ENDPOINT).rstrip("/")


def path(home: Path) -> Path:
    return home / FILE_NAME


def step(home: Path, base_url: str | None, model: str) -> Structured | None:
    """The step learned for `model` at `base_url`, if one was."""
    with _lock:
        found = _entries(home).get((endpoint(base_url), model))
    return found.structured if found is not None else None


def remember(home: Path, base_url: str | None, model: str, structured: Structured) -> None:
    """Keep `structured` as the step that works for `model` at `base_url` (here and on disk)."""
    where = endpoint(base_url)
    entry = Learned(where, model, structured, datetime.now(UTC).isoformat(timespec="seconds"))
    with _lock:
        known = _entries(home)
        if (found := known.get((where, model))) is not None and found.structured is structured:
            return
        known.update(_read(path(home)))  # another process may have learned something meanwhile
        known[(where, model)] = entry
        _write(path(home), list(known.values()))


def start(profile: Profile, home: Path, base_url: str | None) -> tuple[Structured, str]:
    """Where a structured call to `profile`'s model at `base_url` starts on the ladder, and
    why: models.toml's word, else the step learned there, else the profile's own."""
    if profile.structured_told:
        return profile.structured, profile.source
    with _lock:
        found = _entries(home).get((endpoint(base_url), profile.model))
    if found is not None:
        return found.structured, f"learned {found.at[:10]} ({path(home)})"
    return profile.structured, "the default: steps down by itself where it does not work"


def everything(home: Path) -> list[Learned]:
    """Every step learned in this home, as its file and this process know them."""
    with _lock:
        return list(_entries(home).values())


def forget_cache() -> None:
    """Read the files again next time (tests: another process wrote them)."""
    with _lock:
        _known.clear()


def _entries(home: Path) -> dict[tuple[str, str], Learned]:
    found = _known.get(home)
    if found is None:
        found = _known[home] = _read(path(home))
    return found


def _read(file: Path) -> dict[tuple[str, str], Learned]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    entries: dict[tuple[str, str], Learned] = {}
    for item in data.get("steps", []) if isinstance(data, dict) else []:
        with contextlib.suppress(AttributeError, KeyError, TypeError, ValueError):
            entry = Learned(
                str(item["endpoint"]),
                str(item["model"]),
                Structured(item["structured"]),
                str(item.get("at", "")),
            )
            entries[(entry.endpoint, entry.model)] = entry
    return entries


def _write(file: Path, entries: list[Learned]) -> None:
    data = {
        "steps": [
            {"endpoint": e.endpoint, "model": e.model, "structured": e.structured.value, "at": e.at}
            for e in entries
        ]
    }
    with contextlib.suppress(OSError):
        file.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=file.parent, prefix=".learned-", suffix=".json")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=1)
            os.replace(temporary, file)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
