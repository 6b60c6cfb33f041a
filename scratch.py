"""scratch.py — each run's own scratch space, and clearing what a run leaves behind. No model calls.

Every run gets a `RunSpace`: its own folder generated_agents/<run id>/ for the agents it writes,
and its agents' scratch directories (cwd, HOME, TMPDIR) named for the run. Two runs in one
AGENTGOD_HOME that plan agents of the same name therefore never run each other's code nor delete
each other's files; the library is the only state runs share. Once the user has decided what to
keep (keeping is library.remember's job, not this module's), the space goes. Cleanup runs in
`finally` blocks and after Ctrl-C, so it tolerates files that are already gone and never raises.
"""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from agentgod import config, history, journal
from agentgod.runrecord import new_run_id

OWNER_FILE = ".owner"
"""In a run's agent folder: the process running it (journal.Owner) and where its scratch
directories are, so a later command can sweep what a killed run left behind."""
RUN_ID_DRAWS = 64
"""How many ids RunSpace draws before it gives up: a clash is a one-in-four-billion event, so
running out means the random source is broken, not that the home is full."""


class RunSpace:
    """One run's agent folder and its agents' scratch directories; `close` removes them all.

    Once closed, no scratch directory can be had any more, so an agent a worker thread was
    about to start when the run stopped never starts.
    """

    def __init__(self, run_id: str | None = None) -> None:
        """A new run's space; `run_id` is drawn (new_run_id) unless given, and a given one
        whose folder exists already raises FileExistsError."""
        root = config.agents_dir()
        root.mkdir(parents=True, exist_ok=True)
        if not run_id:
            run_id, folder = _claim(root.resolve())
        else:
            folder = root.resolve() / run_id
            folder.mkdir()
        self.id = run_id
        self.folder = folder
        _own(folder)
        """generated_agents/<run id>/: this run's agent files, and where its standby agents wait."""
        self._lock = threading.Lock()
        self._scratch: set[Path] = set()
        self._closed = False
        self._released: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._remover: threading.Thread | None = None

    def scratch_dir(self, name: str) -> Path | None:
        """A fresh scratch directory for agent `name`, or None once the run is over."""
        with self._lock:
            if self._closed:
                return None
            made = Path(tempfile.mkdtemp(prefix=f"agentgod-{self.id}-{name}-"))
            self._scratch.add(made)
            return made

    def release(self, path: Path) -> None:
        """Have one agent's scratch directory removed: its process is gone.

        Removed on the space's own thread, not the caller's: the caller is handing the agent's
        answer on, and deleting a tree is dozens of system calls, each of which must win the
        interpreter lock back from the run's other threads. `close` waits for what is queued.
        """
        with self._lock:
            if self._closed:
                return  # close removes it with the rest
            if self._remover is None:
                self._remover = threading.Thread(
                    target=self._remove_released, name="agentgod-scratch", daemon=True
                )
                self._remover.start()
            self._released.put(path)  # under the lock: always ahead of close's end marker

    def _remove_released(self) -> None:
        while (path := self._released.get()) is not None:
            shutil.rmtree(path, ignore_errors=True)
            with self._lock:
                self._scratch.discard(path)

    def close(self, *, keep_files: bool = False) -> None:
        """The run is over: every scratch directory goes, and the agent folder unless kept.

        Call it after the agents' processes are killed; `keep_files` leaves the agent files
        (a person asked to read a failed run's code).
        """
        with self._lock:
            self._closed = True
            remover = self._remover
        if remover is not None:
            self._released.put(None)
            remover.join()
        with self._lock:
            leftovers = list(self._scratch)
            self._scratch.clear()
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)
        if keep_files:
            return
        delete_agents(self.folder.iterdir() if self.folder.is_dir() else ())
        # Already gone, or something we did not write is in it: the folder is never rmtree'd.
        with contextlib.suppress(OSError):
            self.folder.rmdir()


def _claim(root: Path) -> tuple[str, Path]:
    """A run id no run in this home has had, and its agent folder, made here and now.

    The folder is created exclusively, so two runs that drew the same id at once cannot both
    have it: the second draws again.
    """
    runs = config.runs_dir()
    for _ in range(RUN_ID_DRAWS):
        run_id = new_run_id()
        if (runs / run_id).exists() or history.known(run_id):
            continue
        folder = root / run_id
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return run_id, folder
    raise FileExistsError(f"no free run id after {RUN_ID_DRAWS} draws in {root}")


def _own(folder: Path) -> None:
    """Name this process as the folder's owner (best effort: without it, a killed run's folder
    is simply never swept)."""
    owner = json.loads(journal.Owner.this_process().to_json())
    with contextlib.suppress(OSError):
        (folder / OWNER_FILE).write_text(
            json.dumps({**owner, "scratch": tempfile.gettempdir()}), encoding="utf-8"
        )


def sweep() -> list[str]:
    """What runs whose process is gone left behind: their history rows are finished as crashed
    (journal.finish_dead_runs), their agent folders and scratch directories removed. A live run's
    are never touched, nor a folder whose owner is unknown. Returns the runs finished; never
    raises (it runs at the start of every command)."""
    finished = journal.finish_dead_runs()
    root = config.agents_dir()
    with contextlib.suppress(OSError):
        for folder in list(root.iterdir()) if root.is_dir() else []:
            if _left_behind(folder):
                _remove_run_folder(folder)
    return finished


def _left_behind(folder: Path) -> bool:
    try:
        text = (folder / OWNER_FILE).read_text(encoding="utf-8")
    except OSError:
        return False
    owner = journal.Owner.parse(text)
    return owner is not None and not owner.alive()


def _remove_run_folder(folder: Path) -> None:
    """A dead run's agent folder and its scratch directories (agentgod-<id>-*)."""
    with contextlib.suppress(OSError, ValueError):
        scratch_root = Path(json.loads((folder / OWNER_FILE).read_text())["scratch"])
        for made in scratch_root.glob(f"agentgod-{folder.name}-*"):
            shutil.rmtree(made, ignore_errors=True)
    delete_agents(folder.iterdir())
    with contextlib.suppress(OSError):
        folder.rmdir()


def delete_agents(paths: Iterable[Path]) -> int:
    """Unlink each scratch copy and return how many were removed.

    A path that is not a file inside generated_agents/ is skipped without a word, whatever it was
    handed in as: cleanup must never become a way to delete something else. A symlink inside the
    folder is removed itself; its target is never touched. Files already gone, directories, and
    files the filesystem will not let go are skipped too.
    """
    folder = config.agents_dir().resolve()
    removed = 0
    for path in paths:
        target = _inside(Path(path), folder)
        if target is None:
            continue
        try:
            target.unlink()
        except OSError:
            continue
        removed += 1
    return removed


def _inside(path: Path, folder: Path) -> Path | None:
    """The path with its directory resolved, when that directory is `folder` or below it.

    Only the parent is resolved, so a link named in the folder is judged by where it sits, not by
    where it points; `unlink` removes the link and never follows it.
    """
    if path.name in ("", ".", ".."):
        return None
    try:
        parent = path.parent.resolve()
    except OSError:
        return None
    return parent / path.name if parent.is_relative_to(folder) else None
