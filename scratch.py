"""scratch.py — clearing the scratch copies a run leaves behind. No model calls.

Each run writes its agents to generated_agents/; once the user has decided what to keep (keeping is
library.remember's job, not this module's), the working copies go. Cleanup runs in `finally` blocks
and after Ctrl-C, so it tolerates files that are already gone and never raises.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import config


def delete_agents(paths: Iterable[Path]) -> int:
    """Unlink each scratch copy and return how many were removed.

    A path that is not a file inside generated_agents/ is skipped without a word, whatever it was
    handed in as: cleanup must never become a way to delete something else. A symlink inside the
    folder is removed itself; its target is never touched. Files already gone, directories, and
    files the filesystem will not let go are skipped too.
    """
    folder = config.settings().agents_dir.resolve()
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
