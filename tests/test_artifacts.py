"""artifacts: the parent's store of the files agents hand back, on real files."""

from __future__ import annotations

import stat
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgod import agent_runtime, artifacts
from agentgod.artifacts import Artifact, ArtifactError, ArtifactStore


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_saved_artifact_is_a_private_file_in_a_private_folder(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "run-1" / "artifacts"
    store = ArtifactStore(folder, max_bytes=1024)
    assert store.list() == []
    assert not folder.exists(), "no empty folder for a run without artifacts"
    assert store.save("report_agent", "report.md", "# Totals ✓\n".encode()) == "report.md"
    path = folder / "report.md"
    assert path.read_text(encoding="utf-8") == "# Totals ✓\n"
    assert (mode(folder), mode(path)) == (0o700, 0o600)
    assert store.list() == [Artifact("report.md", path, 13, "report_agent")]
    assert [p.name for p in folder.iterdir()] == ["report.md"], "no temporary file is left"


def test_the_same_agent_saving_a_name_again_replaces_its_own_file(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "a", max_bytes=1024)
    store.save("maker", "report.md", b"first draft")
    store.save("maker", "chart.svg", b"<svg/>")
    assert store.save("maker", "report.md", b"final") == "report.md"
    assert (tmp_path / "a" / "report.md").read_bytes() == b"final"
    assert [(a.name, a.bytes) for a in store.list()] == [("report.md", 5), ("chart.svg", 6)]


def test_a_name_another_agent_holds_gets_the_next_free_variant(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "a", max_bytes=1024)
    assert store.save("one", "report.md", b"1") == "report.md"
    assert store.save("two", "report.md", b"2") == "report-2.md"
    assert store.save("three", "report.md", b"3") == "report-3.md"
    assert store.save("four", "report-2.md", b"4") == "report-2-2.md"
    assert store.save("five", "notes", b"5") == "notes"
    assert store.save("six", "notes", b"6") == "notes-2"
    assert store.save("two", "report.md", b"2 again") == "report-2.md", "its own, replaced"
    names = {a.name: (a.agent, a.path.read_bytes()) for a in store.list()}
    assert names == {
        "report.md": ("one", b"1"),
        "report-2.md": ("two", b"2 again"),
        "report-3.md": ("three", b"3"),
        "report-2-2.md": ("four", b"4"),
        "notes": ("five", b"5"),
        "notes-2": ("six", b"6"),
    }


def test_a_file_already_in_the_folder_is_never_overwritten(tmp_path: Path) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "report.md").write_text("someone else's")
    (folder / "data.csv").symlink_to(tmp_path / "elsewhere.csv")
    store = ArtifactStore(folder, max_bytes=1024)
    assert store.save("agent", "report.md", b"mine") == "report-2.md"
    assert store.save("agent", "data.csv", b"a,b") == "data-2.csv"
    assert (folder / "report.md").read_text() == "someone else's"
    assert not (tmp_path / "elsewhere.csv").exists()


def test_the_runs_cap_counts_every_artifact_and_refuses_whole(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "a", max_bytes=10)
    store.save("one", "a.txt", b"x" * 8)
    assert store.save("one", "a.txt", b"y" * 9) == "a.txt", "a replaced file counts only anew"
    with pytest.raises(ArtifactError) as caught:
        store.save("two", "b.txt", b"z" * 2)
    assert caught.value.kind == "too_large"
    assert isinstance(caught.value, ValueError)
    assert "ARTIFACTS_MAX_MB" in caught.value.message
    assert str(caught.value) == caught.value.message
    with pytest.raises(ArtifactError, match="ARTIFACTS_MAX_MB"):
        store.save("one", "a.txt", b"w" * 11)
    assert (tmp_path / "a" / "a.txt").read_bytes() == b"y" * 9, "earlier artifacts stay intact"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["a.txt"]
    assert [(a.name, a.bytes) for a in store.list()] == [("a.txt", 9)]


@pytest.mark.parametrize("name", ["../escape.md", "sub/x.md", ".env", "", "a\x00b", "x\u202egpj"])
def test_an_invalid_name_is_refused_and_nothing_is_written(name: str, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "a", max_bytes=1024)
    with pytest.raises(ArtifactError) as caught:
        store.save("agent", name, b"data")
    assert caught.value.kind == "invalid"
    assert caught.value.message.startswith("artifact name ")
    assert not (tmp_path / "a").exists()
    assert store.list() == []


NAMES = st.text(
    alphabet=st.sampled_from(["a", "b", ".", "/", "\\", " ", "\n", "\x00", "-", "é", "\u202e"])
    | st.characters(),
    max_size=140,
)


@given(name=NAMES)
def test_any_accepted_name_is_a_new_file_directly_inside_the_folder(name: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        folder = Path(base) / "artifacts"
        store = ArtifactStore(folder, max_bytes=1024)
        if agent_runtime.artifact_name_problem(name) is not None:
            with pytest.raises(ArtifactError):
                store.save("agent", name, b"data")
            assert not folder.exists()
            return
        stored = store.save("agent", name, b"data")
        [artifact] = store.list()
        assert stored == name == artifact.name
        assert artifact.path.resolve().parent == folder.resolve()
        assert [p.name for p in folder.iterdir()] == [name]
        assert [p.name for p in Path(base).iterdir()] == ["artifacts"]


def test_agents_saving_at_once_each_get_their_own_name(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "a", max_bytes=1 << 20)
    barrier = threading.Barrier(8)

    def save(number: int) -> None:
        barrier.wait()
        store.save(f"agent_{number}", "report.md", f"from {number}".encode() * 1000)

    threads = [threading.Thread(target=save, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    artifacts = store.list()
    assert sorted(a.name for a in artifacts) == sorted(
        ["report.md", *(f"report-{n}.md" for n in range(2, 9))]
    )
    for artifact in artifacts:
        number = artifact.agent.removeprefix("agent_")
        assert artifact.path.read_bytes() == f"from {number}".encode() * 1000


def test_copy_out_creates_the_folder_and_never_overwrites_a_users_file(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "a", max_bytes=1024)
    store.save("one", "report.md", b"report")
    store.save("two", "chart.svg", b"<svg/>")
    out = tmp_path / "out" / "nested"
    assert artifacts.copy_out(store.list(), out) == [out / "report.md", out / "chart.svg"]
    assert (out / "report.md").read_bytes() == b"report"
    (out / "report.md").write_text("the user edited this")
    again = artifacts.copy_out(store.list(), out)
    assert again == [out / "report-2.md", out / "chart-2.svg"]
    assert (out / "report.md").read_text() == "the user edited this"
    assert (out / "report-2.md").read_bytes() == b"report"
    assert (tmp_path / "a" / "report.md").read_bytes() == b"report", "the run keeps its own"


def test_copy_out_with_no_artifacts_copies_nothing(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "a", max_bytes=1024)
    assert artifacts.copy_out(store.list(), tmp_path / "out") == []
    assert list((tmp_path / "out").iterdir()) == []
    assert not (tmp_path / "a").exists()
