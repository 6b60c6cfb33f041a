"""library: real files in the test's AGENTGOD_HOME, real threads and real concurrent processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import IMPORT_ROOT
from hypothesis import given
from hypothesis import strategies as st

from agentgod import config, library


def agent_source(name: str, role: str, body: str = "return task") -> str:
    """An agent file with the header fields the library reads back when it rebuilds."""
    return (
        "import json\n\n"
        f"AGENT_NAME = {name!r}\n"
        f"AGENT_ROLE = {role!r}\n\n\n"
        f"def run(task, previous_outputs):\n    {body}\n"
    )


def folder() -> Path:
    return config.settings().inventory_dir / "agents"


def by_name() -> dict[str, library.LibraryEntry]:
    return {entry.name: entry for entry in library.entries()}


def score(name: str, wins: int, losses: int) -> None:
    for _ in range(wins):
        library.record_outcome(name, True)
    for _ in range(losses):
        library.record_outcome(name, False)


# ---- storing and replacing -------------------------------------------------------------------


def test_remember_then_lookup_round_trips() -> None:
    source = agent_source("claim_extractor", "Extracts claims")
    entry = library.remember("claim_extractor", "Extracts  the\nclaims", source)
    assert library.lookup("claim_extractor") == source
    assert entry.name == "claim_extractor"
    assert entry.role == "Extracts the claims"
    assert (entry.generation, entry.wins, entry.losses, entry.uses) == (1, 0, 0, 0)
    assert entry.evolved is False
    assert entry.created == entry.updated
    assert entry.path == folder() / "claim_extractor.py"
    assert entry.path.read_text(encoding="utf-8") == source
    assert library.entries() == [entry]


def test_unknown_name_is_none() -> None:
    assert library.lookup("never_kept") is None
    library.remember("kept_agent", "Keeps", agent_source("kept_agent", "Keeps"))
    assert library.lookup("never_kept") is None


@pytest.mark.parametrize(
    "name",
    ["../escape", "../../etc/passwd", "Upper_case", "ab", "a" * 41, "name.py", "kept_agent\n", ""],
)
def test_unsafe_names_are_refused(name: str, tmp_path: Path) -> None:
    library.remember("kept_agent", "Keeps", agent_source("kept_agent", "Keeps"))
    (folder().parent / "escape.py").write_text("outside", encoding="utf-8")
    before = sorted(tmp_path.rglob("*"))
    assert library.lookup(name) is None
    with pytest.raises(ValueError, match="unsafe agent name"):
        library.remember(name, "role", "source")
    library.record_outcome(name, True)
    assert library.forget(name) is False
    assert library.reliable(name) is False
    assert sorted(tmp_path.rglob("*")) == before


def test_a_link_pointing_out_of_the_folder_is_not_an_agent(tmp_path: Path) -> None:
    secret = tmp_path / "secret.py"
    secret.write_text("AGENT_ROLE = 'not ours'\n", encoding="utf-8")
    folder().mkdir(parents=True)
    (folder() / "linked_agent.py").symlink_to(secret)
    assert library.lookup("linked_agent") is None
    assert library.entries() == []


def test_new_source_advances_the_generation_and_resets_the_record() -> None:
    library.remember("summary_writer", "Writes", agent_source("summary_writer", "Writes"))
    score("summary_writer", wins=2, losses=1)
    replacement = agent_source("summary_writer", "Writes", body="return task.upper()")
    entry = library.remember("summary_writer", "Writes summaries", replacement)
    assert (entry.generation, entry.wins, entry.losses) == (2, 0, 0)
    assert entry.uses == 3, "uses counts every reuse of the name, across generations"
    assert entry.role == "Writes summaries"
    assert entry.evolved is False
    assert library.lookup("summary_writer") == replacement
    assert by_name()["summary_writer"] == entry


def test_same_source_is_a_no_op_apart_from_the_role() -> None:
    source = agent_source("summary_writer", "Writes")
    first = library.remember("summary_writer", "Writes", source)
    score("summary_writer", wins=1, losses=1)
    again = library.remember("summary_writer", "Writes", source, evolved=True)
    assert (again.generation, again.wins, again.losses, again.uses) == (1, 1, 1, 2)
    assert again.evolved is False
    renamed = library.remember("summary_writer", "Writes short summaries", source)
    assert renamed.role == "Writes short summaries"
    assert (renamed.generation, renamed.wins, renamed.losses) == (1, 1, 1)
    assert renamed.created == first.created


def test_evolved_marks_a_repair_until_the_next_replacement() -> None:
    new = library.remember(
        "fact_checker", "Checks", agent_source("fact_checker", "Checks"), evolved=True
    )
    assert new.evolved is False, "nothing was replaced, so nothing evolved"
    repaired = agent_source("fact_checker", "Checks", body="return task.strip()")
    evolved = library.remember("fact_checker", "Checks", repaired, evolved=True)
    assert (evolved.generation, evolved.evolved) == (2, True)
    assert by_name()["fact_checker"].evolved is True
    chosen = agent_source("fact_checker", "Checks", body="return task.lower()")
    kept = library.remember("fact_checker", "Checks", chosen)
    assert (kept.generation, kept.evolved) == (3, False)


# ---- outcomes and retirement -----------------------------------------------------------------


def test_record_outcome_counts_wins_losses_and_uses() -> None:
    library.remember("table_builder", "Builds", agent_source("table_builder", "Builds"))
    score("table_builder", wins=3, losses=2)
    entry = by_name()["table_builder"]
    assert (entry.wins, entry.losses, entry.uses) == (3, 2, 5)
    stored = json.loads((folder() / "table_builder.json").read_text(encoding="utf-8"))
    assert (stored["wins"], stored["losses"], stored["uses"]) == (3, 2, 5)


def test_record_outcome_for_an_unknown_agent_changes_nothing() -> None:
    library.record_outcome("nobody_here", True)
    assert not folder().exists()
    library.remember("table_builder", "Builds", agent_source("table_builder", "Builds"))
    library.record_outcome("nobody_here", False)
    assert set(by_name()) == {"table_builder"}
    assert not (folder() / "nobody_here.json").exists()


@pytest.mark.parametrize(
    ("wins", "losses", "expected"),
    [
        (0, 0, True),
        (0, 2, True),
        (0, 3, False),
        (3, 3, True),
        (3, 4, False),
        (5, 4, True),
        (1, 5, False),
    ],
)
def test_retirement_rule(wins: int, losses: int, expected: bool) -> None:
    library.remember("flaky_agent", "Flakes", agent_source("flaky_agent", "Flakes"))
    score("flaky_agent", wins=wins, losses=losses)
    assert library.reliable("flaky_agent") is expected


def test_unknown_agent_is_not_reliable() -> None:
    assert library.reliable("never_kept") is False


def test_a_new_generation_is_reliable_again() -> None:
    library.remember("flaky_agent", "Flakes", agent_source("flaky_agent", "Flakes"))
    score("flaky_agent", wins=0, losses=3)
    assert library.reliable("flaky_agent") is False
    fixed = agent_source("flaky_agent", "Flakes", body="return 'fixed'")
    library.remember("flaky_agent", "Flakes", fixed, evolved=True)
    assert library.reliable("flaky_agent") is True


# ---- the planner's view ----------------------------------------------------------------------


def test_describe_for_planner_is_empty_without_reliable_agents() -> None:
    assert library.describe_for_planner() == ""
    library.remember("flaky_agent", "Flakes", agent_source("flaky_agent", "Flakes"))
    score("flaky_agent", wins=0, losses=3)
    assert library.describe_for_planner() == ""


def test_describe_for_planner_lists_reliable_agents_only() -> None:
    library.remember("writer_agent", "Writes prose", agent_source("writer_agent", "Writes"))
    library.remember("claim_finder", "Finds claims", agent_source("claim_finder", "Finds"))
    library.remember("flaky_agent", "Flakes", agent_source("flaky_agent", "Flakes"))
    score("writer_agent", wins=2, losses=1)
    score("flaky_agent", wins=0, losses=4)
    header, *lines = library.describe_for_planner().splitlines()
    assert "reuse" in header
    assert "exactly this name" in header
    assert lines == [
        "- claim_finder: Finds claims (used 0 times, 0 wins / 0 losses)",
        "- writer_agent: Writes prose (used 3 times, 2 wins / 1 losses)",
    ]


VERBS = (
    "parses",
    "summarises",
    "translates",
    "ranks",
    "extracts",
    "compares",
    "classifies",
    "formats",
    "validates",
    "scores",
)
THINGS = (
    "emails logs tweets reviews contracts recipes tickets papers headlines resumes forecasts "
    "invoices playlists lyrics budgets sermons patents menus timetables diagrams poems quotes "
    "warrants leases manifests transcripts surveys charts glossaries itineraries bibliographies "
    "changelogs datasets essays fables memos obituaries prescriptions riddles sonnets spreadsheets "
    "syllabi telegrams trials vouchers webpages wikis yearbooks zines almanacs"
)
OBJECTS = tuple(THINGS.split())


def crowd(size: int = 500) -> dict[str, library.LibraryEntry]:
    """`size` kept agents as a year of use leaves them: one per verb and object, in memory."""
    entries: dict[str, library.LibraryEntry] = {}
    for verb in VERBS:
        for thing in OBJECTS:
            name = f"{thing}_{verb[:-1]}"
            role = f"{verb.capitalize()} {thing} and reports what it found"
            entries[name] = library.LibraryEntry(
                name, role, 1, 1, 0, 1, "2026-01-01", "2026-01-01", False, Path(f"{name}.py")
            )
            if len(entries) == size:
                return entries
    return entries


def test_a_crowded_library_is_shown_to_the_planner_within_the_bound() -> None:
    shelf = library.Shelf(crowd())
    whole = sum(len(f"- {e.name}: {e.role}") for e in shelf.agents.values())
    assert whole > 5 * library.HINT_MAX_CHARS, "the library alone would not fit"
    for task in ("Summarise these emails", "", "hello", "x " * 5000, "emails " * 2000):
        assert len(shelf.describe_for_planner(task)) <= library.HINT_MAX_CHARS


@given(st.sampled_from(sorted(crowd())), st.sampled_from(["Please", "Could you", "I need to"]))
def test_out_of_500_the_agent_whose_role_matches_the_task_is_offered(
    name: str, opening: str
) -> None:
    shelf = library.Shelf(crowd())
    entry = shelf.agents[name]
    thing, verb = entry.role.split()[1], entry.role.split()[0].lower()
    hint = shelf.describe_for_planner(f"{opening} {verb.removesuffix('s')} my {thing}.")
    assert f"\n- {name}: " in hint
    assert "of the 500 kept" in hint.splitlines()[0]
    assert "exactly this name" in hint.splitlines()[0]
    assert len(hint) <= library.HINT_MAX_CHARS


def test_the_view_ranks_by_words_of_name_and_role_then_by_record() -> None:
    agents = crowd()
    agents["invoice_total_checker"] = library.LibraryEntry(
        "invoice_total_checker",
        "Checks that the line items of an invoice add up to its stated total",
        1, 4, 1, 5, "2026-01-01", "2026-01-01", False, Path("invoice_total_checker.py"),
    )  # fmt: skip
    ranked = library.rank(list(agents.values()), "Do the line items on this invoice add up?")
    assert ranked[0][0].name == "invoice_total_checker", "it shares the most, and rarest, words"
    relevant = [entry.name for entry, relevance in ranked if relevance > 0]
    assert {"invoices_parse", "invoices_rank"} <= set(relevant)
    assert all(relevance == 0 for _, relevance in ranked[len(relevant) :])
    loser = replace(agents["invoices_parse"], wins=0, losses=2)
    winner = replace(agents["invoices_rank"], wins=9, losses=0)
    order = [e.name for e, _ in library.rank([loser, winner], "the invoices")]
    assert order == ["invoices_rank", "invoices_parse"], "equal words: the better record first"


def test_a_task_sharing_no_word_with_a_crowded_library_is_offered_none() -> None:
    assert library.Shelf(crowd()).describe_for_planner("What is 2+2?") == ""


def test_retired_agents_are_never_offered_however_relevant() -> None:
    agents = crowd()
    agents["invoices_parse"] = replace(agents["invoices_parse"], wins=0, losses=3)
    hint = library.Shelf(agents).describe_for_planner("parse my invoices")
    assert "invoices_parse" not in hint and "invoices_rank" in hint


def test_a_long_role_is_cut_in_the_view_only() -> None:
    role = "Writes " + "very " * 100 + "long prose"
    library.remember("prose_writer", role, agent_source("prose_writer", "Writes"))
    [line] = library.describe_for_planner("write prose").splitlines()[1:]
    assert len(line) < library.HINT_ROLE_CHARS + 80 and "…" in line
    assert library.entries()[0].role == " ".join(role.split())


def test_one_read_gives_the_listing_its_verdicts() -> None:
    library.remember("good_agent", "Works", agent_source("good_agent", "Works"))
    library.remember("flaky_agent", "Flakes", agent_source("flaky_agent", "Flakes"))
    score("flaky_agent", wins=0, losses=3)
    shelf = library.read()
    assert set(shelf.agents) == {"good_agent", "flaky_agent"}
    assert shelf.reliable("good_agent") and not shelf.reliable("flaky_agent")
    assert not shelf.reliable("never_kept")
    assert [e.reliable for e in library.entries()] == [False, True]


def test_entries_include_retired_agents_sorted_by_name() -> None:
    for name in ("zeta_agent", "alpha_agent", "mid_agent"):
        library.remember(name, "Does", agent_source(name, "Does"))
    score("alpha_agent", wins=0, losses=3)
    assert [entry.name for entry in library.entries()] == ["alpha_agent", "mid_agent", "zeta_agent"]
    assert library.entries()[0].losses == 3


def test_reading_an_absent_library_creates_nothing() -> None:
    assert library.entries() == []
    assert library.describe_for_planner() == ""
    assert not config.settings().inventory_dir.exists()


# ---- the index is a convenience --------------------------------------------------------------


def populate() -> dict[str, library.LibraryEntry]:
    library.remember("alpha_agent", "First", agent_source("alpha_agent", "First"))
    library.remember("beta_agent", "Second", agent_source("beta_agent", "Second"))
    score("alpha_agent", wins=2, losses=1)
    score("beta_agent", wins=0, losses=3)
    return by_name()


def index_path() -> Path:
    return folder() / library.INDEX_NAME


def assert_index_is_whole(expected: dict[str, library.LibraryEntry]) -> None:
    assert by_name() == expected
    stored = json.loads(index_path().read_text(encoding="utf-8"))
    assert stored["version"] == library.INDEX_VERSION
    assert sorted(stored["agents"]) == sorted(expected)


@pytest.mark.parametrize(
    "damage",
    [
        b"\x00\xff{{ not json",
        b"[1, 2, 3]",
        b'{"version": 1, "agents": []}',
        b'{"version": 1, "agents": {"alpha_agent": {"role": 7}}}',
        b'{"version": 99, "agents": {}}',
        None,
    ],
    ids=["garbage", "list", "agents-not-a-dict", "bad-record", "other-version", "deleted"],
)
def test_a_damaged_index_is_rebuilt_without_losing_agents_or_records(damage: bytes | None) -> None:
    expected = populate()
    if damage is None:
        index_path().unlink()
    else:
        index_path().write_bytes(damage)
    assert_index_is_whole(expected)
    assert library.reliable("beta_agent") is False
    library.record_outcome("alpha_agent", True)
    assert by_name()["alpha_agent"].wins == 3


def test_index_entries_for_missing_files_are_dropped() -> None:
    expected = populate()
    stored = json.loads(index_path().read_text(encoding="utf-8"))
    stored["agents"]["ghost_agent"] = dict(stored["agents"]["alpha_agent"])
    index_path().write_text(json.dumps(stored), encoding="utf-8")
    assert_index_is_whole(expected)
    assert library.lookup("ghost_agent") is None


def test_a_stray_agent_file_joins_the_library() -> None:
    expected = populate()
    stray = folder() / "stray_agent.py"
    stray.write_text(agent_source("stray_agent", "Arrived  by\thand"), encoding="utf-8")
    (folder() / "no_header_agent.py").write_text("def run(task, previous_outputs): ...\n")
    (folder() / "Not-An-Agent.py").write_text("AGENT_ROLE = 'ignored'\n", encoding="utf-8")
    found = by_name()
    assert set(found) == {*expected, "stray_agent", "no_header_agent"}
    assert found["stray_agent"].role == "Arrived by hand"
    assert (found["stray_agent"].generation, found["stray_agent"].uses) == (1, 0)
    assert found["no_header_agent"].role == ""
    assert {name: found[name] for name in expected} == expected
    assert library.lookup("stray_agent") == stray.read_text(encoding="utf-8")


def test_a_corrupt_sidecar_falls_back_to_the_index() -> None:
    expected = populate()
    (folder() / "alpha_agent.json").write_text("{ torn", encoding="utf-8")
    assert by_name() == expected
    assert json.loads((folder() / "alpha_agent.json").read_text(encoding="utf-8"))["wins"] == 2


def test_a_corrupt_sidecar_and_index_reset_only_that_agent() -> None:
    expected = populate()
    (folder() / "alpha_agent.json").write_text('{"wins": true}', encoding="utf-8")
    index_path().write_text("nonsense", encoding="utf-8")
    found = by_name()
    assert found["beta_agent"] == expected["beta_agent"]
    alpha = found["alpha_agent"]
    assert alpha.role == "First", "the role comes back from the agent's AGENT_ROLE header"
    assert (alpha.generation, alpha.wins, alpha.losses, alpha.uses) == (1, 0, 0, 0)


def test_a_sidecar_newer_than_the_index_wins() -> None:
    populate()
    sidecar = folder() / "alpha_agent.json"
    record = json.loads(sidecar.read_text(encoding="utf-8"))
    record["wins"] = 9
    sidecar.write_text(json.dumps(record), encoding="utf-8")
    stamp = sidecar.stat().st_mtime_ns
    os.utime(index_path(), ns=(stamp - 10**9, stamp - 10**9))
    assert by_name()["alpha_agent"].wins == 9


# ---- forgetting ------------------------------------------------------------------------------


def test_forget_removes_the_agent_and_its_record() -> None:
    populate()
    assert library.forget("alpha_agent") is True
    assert library.lookup("alpha_agent") is None
    assert not (folder() / "alpha_agent.py").exists()
    assert not (folder() / "alpha_agent.json").exists()
    assert set(by_name()) == {"beta_agent"}
    assert "alpha_agent" not in json.loads(index_path().read_text(encoding="utf-8"))["agents"]
    assert library.forget("alpha_agent") is False
    assert library.forget("never_kept") is False


def test_forgotten_name_starts_over_when_kept_again() -> None:
    populate()
    library.forget("beta_agent")
    entry = library.remember("beta_agent", "Second", agent_source("beta_agent", "Second"))
    assert (entry.generation, entry.wins, entry.losses, entry.uses) == (1, 0, 0, 0)


# ---- sharing one library ---------------------------------------------------------------------


def test_threads_never_lose_a_tally() -> None:
    library.remember("shared_agent", "Shared", agent_source("shared_agent", "Shared"))
    start = threading.Barrier(8)

    def worker(index: int) -> None:
        start.wait()
        for _ in range(25):
            library.record_outcome("shared_agent", index % 2 == 0)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entry = by_name()["shared_agent"]
    assert (entry.uses, entry.wins, entry.losses) == (200, 100, 100)


_WORKER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from agentgod import library
go = Path(sys.argv[2])
Path(sys.argv[3]).touch()  # at the starting line
while not go.exists():
    time.sleep(0.002)
for number in range(50):
    library.record_outcome("shared_agent", number % 2 == 0)
"""


def test_two_processes_never_lose_a_tally(tmp_path: Path) -> None:
    library.remember("shared_agent", "Shared", agent_source("shared_agent", "Shared"))
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{number}" for number in range(2)]
    workers = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(IMPORT_ROOT), str(go), str(mark)])
        for mark in ready
    ]
    deadline = time.monotonic() + 60
    try:
        while not all(mark.exists() for mark in ready):  # both imported: they start together
            assert all(worker.poll() is None for worker in workers), "a worker died early"
            assert time.monotonic() < deadline, "the workers never reached the starting line"
            time.sleep(0.002)
    finally:
        go.touch()  # even after a failure, so no worker waits forever
    for worker in workers:
        assert worker.wait(timeout=120) == 0
    entry = by_name()["shared_agent"]
    assert (entry.uses, entry.wins, entry.losses) == (100, 50, 50)
    assert not list(folder().glob("*.tmp")), "no temporary file is left behind"
