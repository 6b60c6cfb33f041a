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
- **Two caps for the whole run**: ARTIFACTS_MAX_MB of bytes, where every artifact counts as it
  stands now (a replaced one only with its new size, one still arriving with what has come), and
  MAX_FILES artifacts; a save that would pass either is refused (`too_large`) and changes
  nothing, so earlier artifacts stay intact.
- **In pieces**: an artifact larger than one broker frame arrives in pieces (`begin`, then
  `ArtifactUpload.write` for each, then `finish`), each written to disk as it comes, so keeping
  one of any size up to the cap holds no more than a piece in memory.
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
MAX_FILES = 1000
"""Most artifacts one run keeps: an agent saving thousands of empty files is refused past it."""


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

    def __init__(self, folder: Path, max_bytes: int, max_files: int = MAX_FILES) -> None:
        self.folder = Path(folder)
        """The run's artifacts folder (created by the first save)."""
        self.max_bytes = max_bytes
        """What all the run's artifacts together may hold."""
        self.max_files = max_files
        """How many artifacts the run may keep (a replaced one counts once)."""
        self._lock = threading.Lock()
        self._artifacts: dict[str, Artifact] = {}  # stored name -> artifact, in save order
        self._stored: dict[tuple[str, str], str] = {}  # (agent, name asked for) -> stored name
        self._open: set[ArtifactUpload] = set()  # uploads begun and not yet finished
        self._uploads = itertools.count(1)

    def save(self, agent: str, name: str, data: bytes) -> str:
        """Keep `data` as an artifact of `agent`; returns the name it is stored under.

        Raises ArtifactError ("invalid" for a name that is not a plain file name, "too_large"
        past the run's caps); either way nothing changes.
        """
        upload = self.begin(agent, name)
        try:
            upload.write(data)
            return upload.finish()
        except BaseException:
            upload.abort()
            raise

    def begin(self, agent: str, name: str) -> ArtifactUpload:
        """Start keeping an artifact of `agent` that arrives in pieces (`ArtifactUpload`).

        Raises ArtifactError ("invalid" for the name, "too_large" when the run keeps as many
        artifacts as it may) before anything is written.
        """
        problem = artifact_name_problem(name)
        if problem:
            raise ArtifactError("invalid", f"artifact name {str(name)[:80]!r} {problem}")
        with self._lock:
            replacing = (agent, name) in self._stored
            coming = sum(1 for upload in self._open if not upload.replaces)
            if not replacing and len(self._artifacts) + coming >= self.max_files:
                raise ArtifactError(
                    "too_large",
                    f"this run already keeps {self.max_files:,} artifacts, the most one run "
                    f"may; artifact {name!r} was not saved, the others are kept",
                )
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.folder.chmod(0o700)
            temporary = self.folder / f".upload-{next(self._uploads)}.{os.getpid()}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            upload = ArtifactUpload(self, agent, name, temporary, fd, replacing)
            self._open.add(upload)
        return upload

    def list(self) -> list[Artifact]:
        """Every artifact, in the order each name was first saved."""
        with self._lock:
            return list(self._artifacts.values())

    # ---- for ArtifactUpload, under the store's lock ------------------------------------------

    def _reserve(self, upload: ArtifactUpload, size: int) -> None:
        """Count `size` more bytes for `upload`, or refuse them past the run's byte cap."""
        with self._lock:
            earlier = self._artifacts.get(self._stored.get((upload.agent, upload.name), ""))
            total = sum(artifact.bytes for artifact in self._artifacts.values())
            total += sum(other.size for other in self._open) + size
            total -= earlier.bytes if earlier else 0
            if total > self.max_bytes:
                raise ArtifactError(
                    "too_large",
                    f"artifact {upload.name!r} ({upload.size + size:,} bytes so far) would take "
                    f"this run's artifacts to {total:,} bytes, over their cap of "
                    f"{self.max_bytes / _MIB:g} MB (ARTIFACTS_MAX_MB); the artifacts saved so "
                    "far are kept",
                )
            upload.size += size

    def _keep(self, upload: ArtifactUpload) -> str:
        """Move a written upload into place under its stored name; that name."""
        with self._lock:
            self._open.discard(upload)
            stored = self._stored.get((upload.agent, upload.name)) or next(
                candidate
                for candidate in _variants(upload.name)
                if candidate not in self._artifacts and not os.path.lexists(self.folder / candidate)
            )
            path = self.folder / stored
            os.replace(upload.temporary, path)
            self._stored[(upload.agent, upload.name)] = stored
            self._artifacts[stored] = Artifact(stored, path, upload.size, upload.agent)
        return stored

    def _forget(self, upload: ArtifactUpload) -> None:
        with self._lock:
            self._open.discard(upload)


class ArtifactUpload:
    """One artifact being written into a temporary file of the folder, piece by piece: its
    bytes counted against the run's cap as they arrive, never held in memory together."""

    def __init__(
        self,
        store: ArtifactStore,
        agent: str,
        name: str,
        temporary: Path,
        fd: int,
        replaces: bool,
    ) -> None:
        self.agent = agent
        self.name = name
        self.temporary = temporary
        self.replaces = replaces
        """Whether it replaces an artifact this agent saved under this name (no new count)."""
        self.size = 0
        self._store = store
        self._fd: int | None = fd

    def write(self, data: bytes) -> None:
        """Append one piece; ArtifactError ("too_large") past the run's cap, writing nothing."""
        if self._fd is None:
            raise ArtifactError("invalid", f"artifact {self.name!r} is already finished")
        self._store._reserve(self, len(data))
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def finish(self) -> str:
        """Put the artifact in place (a reader never sees half of it); its stored name."""
        if self._fd is None:
            raise ArtifactError("invalid", f"artifact {self.name!r} is already finished")
        os.close(self._fd)
        self._fd = None
        try:
            return self._store._keep(self)
        except BaseException:
            self.temporary.unlink(missing_ok=True)
            self._store._forget(self)
            raise

    def abort(self) -> None:
        """Throw the artifact away: nothing of it stays, and its bytes no longer count."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self.temporary.unlink(missing_ok=True)
        self._store._forget(self)


def copy_out(made: Iterable[Artifact], destination: Path) -> list[Path]:
    """Copy artifacts into `destination` (created if need be), for --out; the new paths, in order.

    Nothing there is overwritten: a name already taken gets a variant (report-2.md), chosen and
    created in one step, so a file appearing meanwhile is not overwritten either. A copy is the
    user's own file in a folder they chose, made as any program makes one (0666 less their
    umask); the originals in the run's folder stay 0600.
    """
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    copied = []
    for artifact in made:
        for candidate in _variants(artifact.name):
            target = destination / candidate
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                continue
            break
        with os.fdopen(fd, "wb") as sink, artifact.path.open("rb") as source:
            shutil.copyfileobj(source, sink)
        copied.append(target)
    return copied
