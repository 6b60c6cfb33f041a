"""artifacts.py — the files a run's agents hand back to the user: named, capped, kept, copied.

An agent can write nowhere but its own scratch directory, which is removed when it ends. To hand
a file back (a CSV, an SVG chart, a Markdown report) it calls `save_artifact(name, data)` in its
runtime, which sends the bytes to the broker; the broker passes them to `ArtifactStore.save`,
the parent's half, which keeps them in the run's artifacts folder. The rules:

- **Names** follow `agent_runtime.artifact_name_problem`, the one rule both sides apply: a plain
  file name (no folder part, no leading dot, nothing invisible, bounded length), so every name
  accepted is a new entry directly inside the folder.
- **The same agent saving the same name again replaces its earlier file** (a rerun or a repair
  of that agent updates its own report). A name another agent's artifact already holds gets the
  first free variant, `report.md` → `report-2.md`, `report-3.md`, …: nothing an agent saves can
  replace another's, and the order of saves decides the names, so a run names them the same way
  every time. The stored name is what `save` returns and what the agent is told.
- **One cap for the whole run** (ARTIFACTS_MAX_MB): every artifact counts as it stands now (a
  replaced one only with its new size); a save that would pass it is refused (`too_large`) and
  changes nothing, so earlier artifacts stay intact.
- **On disk**: the folder (0700) is made by the first save, so a run without artifacts leaves no
  empty folder; each file (0600) is written to a temporary name and renamed into place, so a
  reader never sees half a file.
- **`copy_out(artifacts, DIR)`** (`--out DIR`) never overwrites: a name already present in DIR
  gets the same kind of variant, and the paths it returns say where each artifact went.
"""

from __future__ import annotations

import itertools
import os
import shutil
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from agentgod.agent_runtime import artifact_name_problem
from agentgod.replies import ArtifactReply

_MIB = 1024 * 1024


class ArtifactError(ValueError):
    """An artifact the run will not keep; `kind` is "invalid" (its name) or "too_large" (the
    run's cap), and the broker turns it into a refusal of that type."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Artifact:
    """One file an agent handed back, as the run reports it (`--json`'s artifacts rows)."""

    name: str
    """The stored file name, unique in the run (possibly a variant of the name asked for)."""
    path: Path
    """Where it is: inside the run's artifacts folder."""
    bytes: int
    """Its size now."""
    agent: str
    """The agent that saved it."""

    def reply(self) -> ArtifactReply:
        """As `--json`, the display and the run file show it."""
        return ArtifactReply(
            name=self.name, path=str(self.path), bytes=self.bytes, agent=self.agent
        )


def _variants(name: str) -> Iterator[str]:
    """`name`, then name-2, name-3, ... before its extension: report.md, report-2.md, ..."""
    stem, extension = os.path.splitext(name)
    yield name
    for number in itertools.count(2):
        yield f"{stem}-{number}{extension}"


class ArtifactStore:
    """One run's artifacts: thread-safe, as the broker serves each agent on its own thread."""

    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = Path(folder)
        """The run's artifacts folder (created by the first save)."""
        self.max_bytes = max_bytes
        """What all the run's artifacts together may hold."""
        self._lock = threading.Lock()
        self._artifacts: dict[str, Artifact] = {}  # stored name -> artifact, in save order
        self._stored: dict[tuple[str, str], str] = {}  # (agent, name asked for) -> stored name

    def save(self, agent: str, name: str, data: bytes) -> str:
        """Keep `data` as an artifact of `agent`; returns the name it is stored under.

        Raises ArtifactError ("invalid" for a name that is not a plain file name, "too_large"
        past the run's cap); either way nothing changes.
        """
        problem = artifact_name_problem(name)
        if problem:
            raise ArtifactError("invalid", f"artifact name {str(name)[:80]!r} {problem}")
        with self._lock:
            stored = self._stored.get((agent, name)) or next(
                candidate
                for candidate in _variants(name)
                if candidate not in self._artifacts and not os.path.lexists(self.folder / candidate)
            )
            earlier = self._artifacts.get(stored)
            total = sum(artifact.bytes for artifact in self._artifacts.values())
            total += len(data) - (earlier.bytes if earlier else 0)
            if total > self.max_bytes:
                raise ArtifactError(
                    "too_large",
                    f"artifact {name!r} ({len(data):,} bytes) would take this run's artifacts to "
                    f"{total:,} bytes, over their cap of {self.max_bytes / _MIB:g} MB "
                    "(ARTIFACTS_MAX_MB); the artifacts saved so far are kept",
                )
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.folder.chmod(0o700)
            path = self.folder / stored
            temporary = self.folder / f".{stored}.{os.getpid()}.{threading.get_ident()}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(temporary, path)
            except BaseException:
                temporary.unlink(missing_ok=True)
                raise
            self._stored[(agent, name)] = stored
            self._artifacts[stored] = Artifact(stored, path, len(data), agent)
        return stored

    def list(self) -> list[Artifact]:
        """Every artifact, in the order each name was first saved."""
        with self._lock:
            return list(self._artifacts.values())


def copy_out(made: Iterable[Artifact], destination: Path) -> list[Path]:
    """Copy artifacts into `destination` (created if need be), for --out; the new paths, in order.

    Nothing there is overwritten: a name already taken gets a variant (report-2.md), chosen and
    created in one step, so a file appearing meanwhile is not overwritten either. Copies are
    0600, like the originals: the user decides who else may read them.
    """
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    copied = []
    for artifact in made:
        for candidate in _variants(artifact.name):
            target = destination / candidate
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            break
        with os.fdopen(fd, "wb") as sink, artifact.path.open("rb") as source:
            shutil.copyfileobj(source, sink)
        copied.append(target)
    return copied
