"""scratch: removing scratch copies in the test's AGENTGOD_HOME, and nothing else."""

from __future__ import annotations

import itertools
import re
import secrets
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from test_runlog import make_record

from agentgod import config, runlog, runrecord, scratch


def scratch_files(*names: str) -> list[Path]:
    folder = config.settings().agents_dir
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.py" for name in names]
    for path in paths:
        path.write_text("def run(task, previous_outputs):\n    return task\n", encoding="utf-8")
    return paths


def test_removes_scratch_copies_and_counts_them() -> None:
    paths = scratch_files("reader_agent", "writer_agent")
    assert scratch.delete_agents(paths) == 2
    assert not any(path.exists() for path in paths)


def test_accepts_any_iterable_and_nothing_at_all() -> None:
    paths = scratch_files("reader_agent", "writer_agent")
    assert scratch.delete_agents(path for path in paths) == 2
    assert scratch.delete_agents([]) == 0


def test_tolerates_copies_already_gone() -> None:
    kept, gone = scratch_files("reader_agent", "writer_agent")
    gone.unlink()
    assert scratch.delete_agents([kept, gone, gone]) == 1
    assert not kept.exists()


def test_relative_paths_inside_the_folder_are_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    [path] = scratch_files("reader_agent")
    monkeypatch.chdir(config.settings().agents_dir)
    assert scratch.delete_agents([Path("reader_agent.py")]) == 1
    assert not path.exists()


def test_refuses_paths_outside_the_agents_folder(tmp_path: Path) -> None:
    [inside] = scratch_files("reader_agent")
    folder = config.settings().agents_dir
    outside = tmp_path / "precious.py"
    outside.write_text("keep me", encoding="utf-8")
    sibling = config.settings().inventory_dir / "kept_agent.py"
    sibling.parent.mkdir(parents=True)
    sibling.write_text("keep me too", encoding="utf-8")
    attempts = [
        outside,
        folder / ".." / "inventory" / "kept_agent.py",
        folder / "nested" / ".." / ".." / "inventory" / "kept_agent.py",
        folder,
        folder / "..",
    ]
    assert scratch.delete_agents(attempts) == 0
    assert outside.read_text(encoding="utf-8") == "keep me"
    assert sibling.read_text(encoding="utf-8") == "keep me too"
    assert inside.exists()
    assert folder.is_dir()


def test_a_link_is_removed_and_its_target_is_not(tmp_path: Path) -> None:
    target = tmp_path / "target.py"
    target.write_text("keep me", encoding="utf-8")
    scratch_files("reader_agent")
    link = config.settings().agents_dir / "linked_agent.py"
    link.symlink_to(target)
    assert scratch.delete_agents([link]) == 1
    assert not link.is_symlink()
    assert target.read_text(encoding="utf-8") == "keep me"


def test_a_link_to_the_outside_is_not_a_way_out(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "victim.py").write_text("keep me", encoding="utf-8")
    scratch_files("reader_agent")
    (config.settings().agents_dir / "door").symlink_to(outside, target_is_directory=True)
    assert scratch.delete_agents([config.settings().agents_dir / "door" / "victim.py"]) == 0
    assert (outside / "victim.py").read_text(encoding="utf-8") == "keep me"


def test_directories_are_skipped_without_raising() -> None:
    scratch_files("reader_agent")
    nested = config.settings().agents_dir / "work_dir"
    nested.mkdir()
    (nested / "note.txt").write_text("x", encoding="utf-8")
    assert scratch.delete_agents([nested]) == 0
    assert (nested / "note.txt").exists()


def test_a_run_space_is_its_own_folder_and_goes_with_its_scratch() -> None:
    first, second = scratch.RunSpace(), scratch.RunSpace()
    assert first.folder != second.folder
    assert first.folder.parent == config.settings().agents_dir.resolve()
    (first.folder / "same_name.py").write_text("one\n", encoding="utf-8")
    (second.folder / "same_name.py").write_text("two\n", encoding="utf-8")
    work = first.scratch_dir("same_name")
    assert work is not None and work.is_dir() and first.id in work.name
    (work / "left.txt").write_text("x", encoding="utf-8")
    first.close()
    assert not first.folder.exists() and not work.exists()
    assert (second.folder / "same_name.py").read_text(encoding="utf-8") == "two\n"
    second.close()
    assert list(config.settings().agents_dir.iterdir()) == []


def test_released_scratch_is_removed_off_the_caller_s_thread_and_all_of_it_by_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent's answer goes on while its scratch is deleted; close still leaves none."""
    removing: list[str] = []
    real_rmtree = shutil.rmtree

    def recording_rmtree(path: Any, **options: Any) -> None:
        removing.append(threading.current_thread().name)
        real_rmtree(path, **options)

    monkeypatch.setattr(shutil, "rmtree", recording_rmtree)
    space = scratch.RunSpace()
    made = [space.scratch_dir(f"agent_{n}") for n in range(20)]
    for work in made:
        assert work is not None
        (work / "deep" / "er").mkdir(parents=True)
        (work / "deep" / "er" / "file.txt").write_text("x", encoding="utf-8")
    for work in made[:15]:
        assert work is not None
        space.release(work)
    space.close()
    assert not any(work is not None and work.exists() for work in made)
    assert removing[:15] == ["agentgod-scratch"] * 15, "released ones on the space's thread"
    late = made[0]
    assert late is not None
    space.release(late)  # after close: nothing to do, and no error


def test_a_closed_run_space_gives_no_more_scratch() -> None:
    space = scratch.RunSpace()
    space.close()
    assert space.scratch_dir("late_agent") is None


def test_a_run_space_can_keep_its_files_but_never_its_scratch() -> None:
    space = scratch.RunSpace()
    kept = space.folder / "failed_agent.py"
    kept.write_text("raise SystemExit(1)\n", encoding="utf-8")
    work = space.scratch_dir("failed_agent")
    assert work is not None
    space.close(keep_files=True)
    assert kept.exists() and not work.exists()


def test_a_run_space_removes_only_files_and_never_what_it_did_not_make(tmp_path: Path) -> None:
    space = scratch.RunSpace()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me", encoding="utf-8")
    (space.folder / "link.py").symlink_to(outside)
    (space.folder / "planted").mkdir()
    space.close()
    assert outside.read_text(encoding="utf-8") == "keep me"
    assert space.folder.is_dir() and [p.name for p in space.folder.iterdir()] == ["planted"]


# ---- run ids -----------------------------------------------------------------------------------


def test_a_run_id_is_eight_lowercase_hex_characters() -> None:
    ids = {runrecord.new_run_id() for _ in range(200)}
    assert all(re.fullmatch(r"[0-9a-f]{8}", run_id) for run_id in ids)
    assert len(ids) == 200


def drawn(monkeypatch: pytest.MonkeyPatch, *tokens: str) -> None:
    """The random source hands out `tokens`, in order."""
    supply = iter(tokens)
    monkeypatch.setattr(secrets, "token_hex", lambda size: next(supply))


def test_a_run_never_takes_an_id_an_earlier_run_has(monkeypatch: pytest.MonkeyPatch) -> None:
    config.settings().runs_dir.mkdir(parents=True)
    runlog.archive(make_record(run_id="aaaa0001"))  # in the history
    (config.settings().runs_dir / "aaaa0002").mkdir()  # an old run's artifacts
    drawn(monkeypatch, "aaaa0001", "aaaa0002", "aaaa0003")
    space = scratch.RunSpace()
    assert space.id == "aaaa0003"
    assert space.folder == config.settings().agents_dir.resolve() / "aaaa0003"
    space.close()


def test_two_runs_that_draw_the_same_id_at_once_never_share_a_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    draws = threading.local()
    others = itertools.count(1)

    def token_hex(size: int) -> str:
        """Every thread's first draw is the same id; any later one is new."""
        first = not hasattr(draws, "done")
        draws.done = True
        return "aaaaaaaa" if first else f"{next(others):08x}"

    monkeypatch.setattr(secrets, "token_hex", token_hex)
    start = threading.Barrier(8)
    spaces: list[scratch.RunSpace] = []
    lock = threading.Lock()

    def open_space() -> None:
        start.wait()
        space = scratch.RunSpace()
        with lock:
            spaces.append(space)

    threads = [threading.Thread(target=open_space) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({space.folder for space in spaces}) == len(spaces) == 8
    assert [space.id for space in spaces].count("aaaaaaaa") == 1
    for space in spaces:
        space.close()


def test_a_broken_random_source_is_an_error_not_a_shared_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = scratch.RunSpace()
    drawn(monkeypatch, *[first.id] * scratch.RUN_ID_DRAWS)
    with pytest.raises(FileExistsError, match="no free run id"):
        scratch.RunSpace()
    first.close()


def test_a_given_run_id_that_is_taken_is_refused() -> None:
    first = scratch.RunSpace("feedbeef")
    assert first.id == "feedbeef"
    with pytest.raises(FileExistsError):
        scratch.RunSpace("feedbeef")
    first.close()
