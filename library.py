"""library.py — the reusable agent library and the bookkeeping that keeps it honest. No model calls.

A kept agent lives in `inventory/agents/<name>.py`; reusing it skips the generator, the largest cost
in a run. The library curates itself: every reuse records a win or a loss, and an agent that keeps
losing is retired (see `reliable`) so the next task builds a fresh one instead of paying for the
same crash again.

Storage, from most to least authoritative:
- `<name>.py`   the agent itself. The set of .py files *is* the library.
- `<name>.json` a small sidecar with that agent's record (role, generation, wins, losses, ...).
- `index.json`  every record in one file. A convenience: when it is missing, malformed, disagrees
                with the .py files, or is older than a sidecar, it is rebuilt from the sidecars
                (for an agent whose sidecar is gone or corrupt: from what the old index still held,
                else a fresh record read from the agent's header). No agent is ever lost to it.

A library grows for as long as it is used, so nothing here costs more than one pass over it: the
index is checked against the folder in one directory listing (no path resolved per agent), a run
reads the whole library once (`read`, a `Shelf`) and a listing once, and a question about one agent
(`reliable`, `lookup`) reads that agent's own files only. The planner is shown a bounded view
(`Shelf.describe_for_planner`): the agents most relevant to the task, ranked locally by the words
of their name and role against the task's and by their record, never more than about a thousand
tokens however many agents are kept.

Every write goes to a temporary file in the same folder and is renamed into place, and every
read-modify-write runs under an `fcntl.flock` on `.lock` (plus a thread lock), so two agentgod
processes can share one library without losing a tally.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import json
import math
import os
import re
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentgod import config
from agentgod.kinds import AGENT_NAME

"""What planner.safe_agent_name produces; any other name could point outside the folder."""
RETIRE_AFTER_LOSSES = 3
"""Losses an agent may collect before a losing record retires it."""
INDEX_NAME = "index.json"
LOCK_NAME = ".lock"
INDEX_VERSION = 1
HINT_MAX_CHARS = 3500
"""The most the planner's view of the library may take (at most about 1,000 tokens: ~4
characters a token for prose, fewer for snake_case names and counts), whatever the library's
size: past it, only the agents most relevant to the task."""
HINT_ROLE_CHARS = 200
"""A role longer than this is cut in the planner's view (the library keeps it whole)."""

_thread_lock = threading.Lock()
_notices: list[str] = []
"""What had to be repaired since the last `notices()`: a person is told, never left to guess."""
_notices_lock = threading.Lock()


def notices() -> list[str]:
    """The repairs made since the last call (a damaged index rebuilt), for the person; drains."""
    with _notices_lock:
        taken = list(_notices)
        _notices.clear()
    return taken


@dataclass
class LibraryEntry:
    """One kept agent and its track record."""

    name: str
    """Safe snake_case name: the file stem, the planner's handle and the previous_outputs key."""
    role: str
    """One-line description shown to the planner and in `agentgod library`."""
    generation: int
    """1 for the first source; +1 each time a different source replaces it."""
    wins: int
    """Successful runs of this generation's code when it was handed back from the library."""
    losses: int
    """Failed runs of this generation's code; a replacement resets it with `wins`."""
    uses: int
    """Every time it was handed back from the library, across all generations."""
    created: str
    """When the name was first kept (ISO 8601, UTC)."""
    updated: str
    """When the source or the record last changed (ISO 8601, UTC)."""
    evolved: bool
    """True when the last replacement was a repair of the kept agent rather than a user's choice."""
    path: Path
    """The agent's source file."""

    @property
    def reliable(self) -> bool:
        """Not retired: at least RETIRE_AFTER_LOSSES losses and more losses than wins retire it."""
        return not _retired(self)


@dataclass(frozen=True)
class Shelf:
    """The library as one read saw it: what a run offers its planner, what a listing shows."""

    agents: Mapping[str, LibraryEntry]
    """Every kept agent by name, retired ones included."""

    def reliable(self, name: str) -> bool:
        """Whether `name` is kept and not retired, as of this read."""
        entry = self.agents.get(name)
        return entry is not None and entry.reliable

    def describe_for_planner(self, task: str = "") -> str:
        """The reliable agents most relevant to `task` as planner context ("" when none).

        The whole library when it fits HINT_MAX_CHARS (so a small one is shown as it is);
        otherwise the agents whose name or role shares words with the task, best first by
        `rank`, as many as fit. An agent whose role matches the task is offered however many
        others are kept, so the planner can still reuse it rather than design a near-duplicate.
        """
        keep = [entry for entry in self.agents.values() if entry.reliable]
        if not keep:
            return ""
        lines = {entry.name: _hint_line(entry) for entry in keep}
        if len(_HINT_HEADER) + sum(len(line) + 1 for line in lines.values()) > HINT_MAX_CHARS:
            chosen: list[str] = []
            room = HINT_MAX_CHARS - len(_HINT_HEADER_PARTIAL) - 40
            for entry, relevance in rank(keep, task):
                if relevance <= 0:
                    break
                if len(lines[entry.name]) + 1 > room:
                    continue
                chosen.append(entry.name)
                room -= len(lines[entry.name]) + 1
            if not chosen:
                return ""
            header = _HINT_HEADER_PARTIAL.format(shown=len(chosen), kept=len(keep))
            return "\n".join([header, *(lines[name] for name in sorted(chosen))])
        return "\n".join([_HINT_HEADER, *(lines[name] for name in sorted(lines))])


_HINT_HEADER = (
    "Agents already in the library (each exists and works; when one fits a step, reuse it by "
    "giving that step exactly this name instead of designing a new agent):"
)
_HINT_HEADER_PARTIAL = (
    "Agents already in the library that may fit this task ({shown} of the {kept} kept, chosen "
    "by their names and roles; each exists and works; when one fits a step, reuse it by giving "
    "that step exactly this name instead of designing a new agent):"
)


def _hint_line(entry: LibraryEntry) -> str:
    role = entry.role
    if len(role) > HINT_ROLE_CHARS:
        role = role[: HINT_ROLE_CHARS - 1].rstrip() + "…"
    return (
        f"- {entry.name}: {role} "
        f"(used {entry.uses} times, {entry.wins} wins / {entry.losses} losses)"
    )


# ---- relevance --------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")
_STEM = 6
"""Words are compared by their first letters only: a crude stem that makes "summarise",
"summary" and "summaries", or "translate" and "translation", one word."""
_STOP_TEXT = (
    "the and for with from into onto over under about than then that this these those which "
    "what when where who whom whose how why any each every all more most some such not are was "
    "were has have had its their them they you your our ours his her its can could should would "
    "will shall may might must does did done make makes made give gives given use uses using "
    "used get gets one two also only just very agent agents"
)
_STOP_WORDS = frozenset(_STOP_TEXT.split())
"""Words that say nothing about what an agent does (`agent` itself is in half the names)."""


def terms(text: str) -> frozenset[str]:
    """The words of a text that can tell agents apart, stemmed: lower case, split at anything
    not a letter or digit (so snake_case names split into their words), short and stop words
    dropped."""
    return frozenset(
        word[:_STEM]
        for word in _WORD.findall(text.lower())
        if len(word) > 2 and word not in _STOP_WORDS
    )


def rank(entries: list[LibraryEntry], task: str) -> list[tuple[LibraryEntry, float]]:
    """`entries` with their relevance to `task`, most relevant first.

    Relevance sums, over the words an agent's name or role shares with the task, how rare the
    word is among these agents (inverse document frequency), a word of the name counting
    double: a rare shared word says more than a common one. Ties go to the better record (more
    wins than losses, then more uses), then to the name. Local and cheap: no model call.
    """
    wanted = terms(task)
    named = {entry.name: terms(entry.name) for entry in entries}
    described = {entry.name: terms(entry.role) for entry in entries}
    frequency = Counter(word for e in entries for word in named[e.name] | described[e.name])
    total = len(entries)

    def relevance(entry: LibraryEntry) -> float:
        shared = wanted & (named[entry.name] | described[entry.name])
        return sum(
            math.log(1 + total / frequency[word]) * (2 if word in named[entry.name] else 1)
            for word in shared
        )

    scored = [(entry, relevance(entry)) for entry in entries]
    scored.sort(
        key=lambda pair: (-pair[1], pair[0].losses - pair[0].wins, -pair[0].uses, pair[0].name)
    )
    return scored


# ---- public API ------------------------------------------------------------------------------


def lookup(name: str, *, settings: config.Settings | None = None) -> str | None:
    """The stored source of `name`, or None for an unknown, unreadable or unsafe name."""
    path = _agent_path(_folder(settings), name)
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def remember(
    name: str,
    role: str,
    source: str,
    *,
    evolved: bool = False,
    settings: config.Settings | None = None,
) -> LibraryEntry:
    """Keep `source` as agent `name`, or replace the agent already kept under that name.

    Different source advances the generation and clears wins and losses, because the code that
    earned them is gone; `evolved=True` says a repair did it, not the user. The same source only
    refreshes the role. Raises ValueError for an unsafe name and OSError when the disk refuses.
    """
    if not _is_safe(name):
        raise ValueError(f"unsafe agent name {name!r}")
    role = _one_line(role)
    folder = _folder(settings)
    path = folder / f"{name}.py"
    with _locked(folder, create=True):
        records = _load(folder)
        now = _now()
        current = records.get(name)
        new_source = current is None or _read_text(path) != source
        if current is None:
            entry = LibraryEntry(name, role, 1, 0, 0, 0, now, now, False, path)
        elif new_source:
            entry = replace(
                current,
                role=role,
                generation=current.generation + 1,
                wins=0,
                losses=0,
                updated=now,
                evolved=evolved,
            )
        elif current.role != role:
            entry = replace(current, role=role, updated=now)
        else:
            return current
        if new_source:
            _write_atomic(path, source)
        _save(folder, entry, records)
        return entry


def record_outcome(name: str, won: bool, *, settings: config.Settings | None = None) -> None:
    """Count one use of a library agent and whether it won; unknown names are ignored.

    Bookkeeping only: a write the disk refuses loses this one tally rather than failing a run
    whose answer is already on the screen.
    """
    folder = _folder(settings)
    if not _is_safe(name) or not folder.is_dir():
        return
    with contextlib.suppress(OSError), _locked(folder, create=True):
        records = _load(folder)
        current = records.get(name)
        if current is None:
            return
        entry = replace(
            current,
            wins=current.wins + (1 if won else 0),
            losses=current.losses + (0 if won else 1),
            uses=current.uses + 1,
            updated=_now(),
        )
        _save(folder, entry, records)


def reliable(name: str, *, settings: config.Settings | None = None) -> bool:
    """False once an agent has lost at least RETIRE_AFTER_LOSSES times and more often than it won.

    An unknown name is not reliable either: there is nothing to reuse. Reads this agent's own
    record (its sidecar), not the library: the whole library is read only when that record is
    gone or damaged, and then rebuilt.
    """
    folder = _folder(settings)
    if _agent_path(folder, name) is None:
        return False
    entry = _entry(name, _read_json(folder / f"{name}.json"), folder)
    if entry is None:
        entry = _snapshot(settings).get(name)
    return entry is not None and entry.reliable


def read(*, settings: config.Settings | None = None) -> Shelf:
    """The whole library, read once: what a run plans with, what a listing shows."""
    return Shelf(_snapshot(settings))


def describe_for_planner(task: str = "", *, settings: config.Settings | None = None) -> str:
    """The reliable agents most relevant to `task` as planner context (see Shelf), or ""."""
    return read(settings=settings).describe_for_planner(task)


def entries() -> list[LibraryEntry]:
    """Every kept agent, retired ones included, sorted by name."""
    return sorted(_snapshot().values(), key=lambda entry: entry.name)


def forget(name: str) -> bool:
    """Remove an agent and its record; False when there was no such agent."""
    folder = _folder()
    if not _is_safe(name) or not folder.is_dir():
        return False
    with _locked(folder, create=True):
        records = _load(folder)
        known = records.pop(name, None) is not None
        for path in (folder / f"{name}.py", folder / f"{name}.json"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        _write_index(folder, records)
    return known


# ---- records ---------------------------------------------------------------------------------

_RECORD_FIELDS: dict[str, type] = {
    "role": str,
    "generation": int,
    "wins": int,
    "losses": int,
    "uses": int,
    "created": str,
    "updated": str,
    "evolved": bool,
}


def _retired(entry: LibraryEntry) -> bool:
    return entry.losses >= RETIRE_AFTER_LOSSES and entry.losses > entry.wins


def _record(entry: LibraryEntry) -> dict[str, Any]:
    return {field: getattr(entry, field) for field in _RECORD_FIELDS}


def _entry(name: str, data: Any, folder: Path) -> LibraryEntry | None:
    """A record read back from JSON, or None when any field is missing or has the wrong type."""
    if not isinstance(data, dict):
        return None
    # `type(...) is` rather than isinstance: JSON true must not pass for a count.
    if any(type(data.get(field)) is not kind for field, kind in _RECORD_FIELDS.items()):
        return None
    if data["generation"] < 1 or min(data["wins"], data["losses"], data["uses"]) < 0:
        return None
    values = {field: data[field] for field in _RECORD_FIELDS}
    return LibraryEntry(name=name, path=folder / f"{name}.py", **values)


def _fresh_entry(folder: Path, name: str) -> LibraryEntry:
    """A first-generation record for an agent file that arrived without one."""
    path = folder / f"{name}.py"
    try:
        stamp = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")
    except OSError:
        stamp = _now()
    return LibraryEntry(name, _declared_role(path), 1, 0, 0, 0, stamp, stamp, False, path)


def _declared_role(path: Path) -> str:
    """AGENT_ROLE from the agent's trusted header, read as a literal (the file is never run)."""
    text = _read_text(path)
    if text is None:
        return ""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ""
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "AGENT_ROLE"
        ):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                return ""
            return _one_line(value) if isinstance(value, str) else ""
    return ""


# ---- the folder ------------------------------------------------------------------------------


def _folder(settings: config.Settings | None = None) -> Path:
    """The kept agents' folder, from the run's snapshot of the settings when there is one (else
    from the home alone: listing the library needs no other setting)."""
    return (settings.inventory_dir if settings else config.inventory_dir()) / "agents"


def _is_safe(name: str) -> bool:
    return isinstance(name, str) and AGENT_NAME.fullmatch(name) is not None


def _agent_path(folder: Path, name: str) -> Path | None:
    """`<folder>/<name>.py` when the name is safe and the file really lives in the folder."""
    if not _is_safe(name):
        return None
    path = folder / f"{name}.py"
    try:
        inside = path.resolve().parent == folder.resolve()
    except OSError:
        return None
    return path if inside and path.is_file() else None


def _listing(folder: Path) -> tuple[set[str], dict[str, os.DirEntry[str]]]:
    """(the agents' names, each sidecar's directory entry by name) from one directory listing.

    A plain file named like an agent is one; only a link is resolved (it counts when it stays in
    the folder, as `_agent_path` says), so listing costs no path resolution per agent.
    """
    names: set[str] = set()
    sidecars: dict[str, os.DirEntry[str]] = {}
    with os.scandir(folder) as listing:
        for entry in listing:
            stem, dot, suffix = entry.name.rpartition(".")
            if not dot or not _is_safe(stem):
                continue
            if suffix == "py":
                try:
                    plain = entry.is_file(follow_symlinks=False)
                except OSError:
                    plain = False
                if plain or (entry.is_symlink() and _agent_path(folder, stem)):
                    names.add(stem)
            elif suffix == "json":
                sidecars[stem] = entry
    return names, sidecars


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _read_json(path: Path) -> Any:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _write_atomic(path: Path, text: str) -> None:
    """Write beside the target and rename over it, so a reader sees the old file or the new one.

    The new file's bytes reach the disk before the rename, and the rename before we return: after
    a crash or a power cut the name holds the old content or the new, never an empty file.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def _sync_directory(folder: Path) -> None:
    """Make a rename in `folder` durable; a filesystem that cannot sync a directory is let be."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _one_line(text: str) -> str:
    """Collapse whitespace so a role can never add lines of its own to the planner's prompt."""
    return " ".join(text.split())


@contextlib.contextmanager
def _locked(folder: Path, *, create: bool) -> Iterator[None]:
    """Hold the library for one read-modify-write, against threads and other processes.

    A reader that cannot create the lock file (a read-only library) goes ahead unlocked: every
    write is a rename, so each file it reads is whole.
    """
    with _thread_lock:
        descriptor: int | None = None
        try:
            if create:
                folder.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            if create:
                raise
        try:
            if descriptor is not None:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            if descriptor is not None:
                os.close(descriptor)  # closing the descriptor releases the flock


# ---- index -----------------------------------------------------------------------------------


def _snapshot(settings: config.Settings | None = None) -> dict[str, LibraryEntry]:
    """Every record, read under the lock; an absent library is empty and is not created."""
    folder = _folder(settings)
    if not folder.is_dir():
        return {}
    with _locked(folder, create=False):
        return _load(folder)


def _load(folder: Path) -> dict[str, LibraryEntry]:
    """The index when it is current, otherwise a rebuilt one. Call with the lock held."""
    try:
        names, sidecars = _listing(folder)
    except OSError:
        return {}
    index_path = folder / INDEX_NAME
    salvaged, intact = _index_entries(_read_json(index_path), folder)
    if intact and set(salvaged) == names and _newer_than_sidecars(index_path, names, sidecars):
        return salvaged
    damaged = not intact and index_path.is_file()  # not merely behind: unreadable, or broken
    rebuilt = _rebuild(folder, names, salvaged)
    if damaged:
        count = f"{len(rebuilt)} agent" + ("" if len(rebuilt) == 1 else "s")
        with _notices_lock:
            _notices.append(
                f"the library's index ({index_path}) was damaged and has been rebuilt from the "
                f"agents' own records ({count}; none lost)"
            )
    return rebuilt


def _index_entries(raw: Any, folder: Path) -> tuple[dict[str, LibraryEntry], bool]:
    """The well-formed records in an index, and whether the whole index was well-formed."""
    agents = raw.get("agents") if isinstance(raw, dict) else None
    if not isinstance(agents, dict):
        return {}, False
    found: dict[str, LibraryEntry] = {}
    for name, data in agents.items():
        entry = _entry(name, data, folder) if _is_safe(name) else None
        if entry is not None:
            found[name] = entry
    return found, raw.get("version") == INDEX_VERSION and len(found) == len(agents)


def _newer_than_sidecars(
    index_path: Path, names: set[str], sidecars: Mapping[str, os.DirEntry[str]]
) -> bool:
    """Sidecars are written before the index, so a newer sidecar means the index missed a write
    (and a missing one that it must be rebuilt, to write it again)."""
    try:
        stamp = index_path.stat().st_mtime_ns
        return all(
            name in sidecars and sidecars[name].stat().st_mtime_ns <= stamp for name in names
        )
    except OSError:
        return False


def _rebuild(
    folder: Path, names: set[str], salvaged: dict[str, LibraryEntry]
) -> dict[str, LibraryEntry]:
    """Records for exactly the agent files present: sidecar, else old index, else fresh.

    Persisting the result is best effort, so a read-only library can still be listed.
    """
    rebuilt: dict[str, LibraryEntry] = {}
    lost_sidecar: list[str] = []
    for name in sorted(names):
        entry = _entry(name, _read_json(folder / f"{name}.json"), folder)
        if entry is None:
            entry = salvaged.get(name) or _fresh_entry(folder, name)
            lost_sidecar.append(name)
        rebuilt[name] = entry
    with contextlib.suppress(OSError):
        for name in lost_sidecar:
            _write_atomic(folder / f"{name}.json", _dump(_record(rebuilt[name])))
        _write_index(folder, rebuilt)
    return rebuilt


def _save(folder: Path, entry: LibraryEntry, records: dict[str, LibraryEntry]) -> None:
    """Persist one changed record: its sidecar first, then the index that aggregates it."""
    _write_atomic(folder / f"{entry.name}.json", _dump(_record(entry)))
    records[entry.name] = entry
    _write_index(folder, records)


def _write_index(folder: Path, records: dict[str, LibraryEntry]) -> None:
    agents = {name: _record(records[name]) for name in sorted(records)}
    _write_atomic(folder / INDEX_NAME, _dump({"version": INDEX_VERSION, "agents": agents}))


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
