"""eventlog: the run's moments on disk, read back, and replayed into a display.

Every test writes a real file in tmp_path. Pacing is checked through an injected `wait` that
records the pauses it is asked for, so no test sleeps.
"""

from __future__ import annotations

import enum
import inspect
import io
import json
import os
import stat
import threading
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentgod import eventlog, ui
from agentgod.events import HOOKS, TaskEvents
from agentgod.kinds import AgentKind, Phase
from agentgod.replies import PlannedAgent

SECRET = "sk-ant-api03-" + "Q7" * 24


class Recorder(TaskEvents):
    """Remembers every hook call as (hook, {parameter: value}), exactly as it arrived."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []


def _record(name: str) -> Any:
    signature = inspect.signature(getattr(TaskEvents, name))

    def hook(self: Recorder, *args: Any, **kwargs: Any) -> None:
        arguments = signature.bind(self, *args, **kwargs).arguments
        self.calls.append((name, {k: v for k, v in arguments.items() if k != "self"}))

    return hook


for _name in HOOKS:
    setattr(Recorder, _name, _record(_name))


class Raising(TaskEvents):
    """A watcher whose `warn` fails, as a broken display would."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def warn(self, text: str) -> None:
        raise self.error


def _sample(hint: Any, label: str) -> Any:
    """A value of the declared type, chosen to show a conversion (a second enum member, an
    int that a float parameter must accept as float, a row with every field)."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is __import__("types").UnionType:
        return _sample(next(a for a in typing.get_args(hint) if a is not type(None)), label)
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_sample(item, f"{label}-1"), _sample(item, f"{label}-2")]
    if typing.is_typeddict(hint):
        return {
            key: _sample(field, f"{label}.{key}")
            for key, field in typing.get_type_hints(hint).items()
        }
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return list(hint)[1]
    if hint is bool:
        return True
    if hint is int:
        return 7
    if hint is float:
        return 2.5
    if hint is str:
        return f"{label} text"
    raise AssertionError(f"no sample for {hint!r}: teach _sample (and check eventlog._decode)")


def _samples(name: str) -> dict[str, Any]:
    hints = typing.get_type_hints(getattr(TaskEvents, name))
    parameters = list(inspect.signature(getattr(TaskEvents, name)).parameters)[1:]
    return {parameter: _sample(hints[parameter], parameter) for parameter in parameters}


def _shape(value: Any) -> Any:
    """The value with the type of every part spelled out, so Phase("plan") != "plan"."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_shape(item) for item in value])
    return (type(value).__name__, value)


def _write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _line(t: float, event: str, **args: Any) -> dict[str, Any]:
    return {"at": "2025-01-01T00:00:00.000Z", "t": t, "event": event, "args": args}


# ---- writing ------------------------------------------------------------------------------------


def test_every_hook_round_trips_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    expected = [(name, _samples(name)) for name in HOOKS]
    log = eventlog.EventLog(path)
    watcher: TaskEvents = log
    for name, arguments in expected:
        getattr(watcher, name)(**arguments)
    log.close()
    assert log.failed is None

    recorder = Recorder()
    assert eventlog.replay(path, recorder, wait=lambda _: None) == len(HOOKS)
    assert [name for name, _ in recorder.calls] == list(HOOKS)
    assert [_shape(call) for call in recorder.calls] == [_shape(call) for call in expected]


def test_a_line_is_timestamped_plain_json(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with eventlog.EventLog(path) as log:
        log.phase_finished(Phase.MERGE, 3)
        log.agent_finished("writer", False, 1.5, AgentKind.TIMEOUT, "killed", 2)
        log.note("interrupted", "SIGINT")
    lines = [json.loads(line) for line in path.read_text().splitlines()]

    assert [line["event"] for line in lines] == ["phase_finished", "agent_finished", "note"]
    assert lines[0]["args"] == {"phase": "merge", "seconds": 3}
    assert lines[1]["args"]["kind"] == "timeout"
    assert lines[2]["args"] == {"kind": "interrupted", "text": "SIGINT"}
    for line in lines:
        at = datetime.fromisoformat(line["at"])
        assert at.tzinfo is not None and at.utcoffset() == UTC.utcoffset(None)
        assert len(line["at"]) == len("2025-01-01T00:00:00.000Z") and line["at"].endswith("Z")
    times = [line["t"] for line in lines]
    assert times == sorted(times) and times[0] >= 0


def test_the_log_is_private_and_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "0a1b2c3d" / "events.jsonl"
    with eventlog.EventLog(path) as log:
        log.merge_started(2)
    with eventlog.EventLog(path) as log:
        log.council_started()

    assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o077 == 0
    assert [event.event for event in eventlog.read(path)] == ["merge_started", "council_started"]


def test_a_secret_in_an_argument_never_reaches_the_disk(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    agent: PlannedAgent = {
        "name": "caller",
        "role": f"calls the API with {SECRET}",
        "depends_on": [],
        "reused": False,
    }
    with eventlog.EventLog(path) as log:
        log.warn(f"the request failed: Authorization: Bearer {SECRET}")
        log.plan_ready("simple", [agent], [["caller"]])
        log.agent_rejected("caller", [f"api_key = '{SECRET}'"])
        log.note("answer", f"the key is {SECRET}")

    text = path.read_text()
    assert SECRET not in text
    assert SECRET[:20] not in text
    assert text.count("[redacted]") >= 4


def test_threads_writing_at_once_leave_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = eventlog.EventLog(path)
    threads, per_thread = 8, 150
    start = threading.Barrier(threads)

    def write(worker: int) -> None:
        start.wait()
        for attempt in range(per_thread):
            log.agent_repairing(f"agent{worker}", attempt, "x" * 3000)

    workers = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    log.close()

    events, skipped = eventlog.read_counted(path)
    assert skipped == 0
    assert len(events) == threads * per_thread
    for n in range(threads):
        attempts = [e.args["attempt"] for e in events if e.args["name"] == f"agent{n}"]
        assert attempts == list(range(per_thread))
    assert all(len(e.args["error"]) == 3000 for e in events)


def test_a_hook_never_waits_for_the_disk_and_the_lines_keep_their_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log's thread writes; a hook fired while a write hangs returns at once."""
    path = tmp_path / "events.jsonl"
    gate, writing = threading.Event(), threading.Event()
    real_write = os.write

    def slow_write(fd: int, data: Any) -> int:
        if threading.current_thread().name == "agentgod-eventlog":  # only the log's own writes
            writing.set()
            gate.wait(timeout=30)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", slow_write)
    log = eventlog.EventLog(path)
    log.warn("first")
    assert writing.wait(timeout=30), "the log's thread is writing the first line"
    for n in range(50):  # all while that write hangs
        log.warn(f"line {n}")
    assert not gate.is_set() and eventlog.read(path) == []
    gate.set()
    log.close()
    assert [e.args["text"] for e in eventlog.read(path)] == [
        "first",
        *(f"line {n}" for n in range(50)),
    ]


def test_a_line_that_cannot_be_written_stops_the_log_but_never_a_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> str:
        raise TypeError("not serialisable")

    monkeypatch.setattr(json, "dumps", broken)
    log = eventlog.EventLog(tmp_path / "events.jsonl")
    log.warn("first")
    log.flush()  # returns: the log's thread is still there to answer it
    assert log.failed is not None and "TypeError" in log.failed
    log.close()


def test_what_a_hook_was_given_is_logged_as_it_was_then(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    installed = ["numpy"]
    with eventlog.EventLog(path) as log:
        log.packages("reader", installed, [], [])
        installed.append("pandas")  # changed by the caller after the hook returned
    assert eventlog.read(path)[0].args["installed"] == ["numpy"]


def test_flush_makes_every_line_so_far_readable(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = eventlog.EventLog(path)
    log.council_started()
    log.answer_delta("half of ")
    log.answer_delta("it")
    log.judged(True, "")
    log.flush()
    assert [e.event for e in eventlog.read(path)] == ["council_started", "answer_delta", "judged"]
    assert eventlog.read(path)[1].args["text"] == "half of it"
    log.close()


def test_an_unwritable_path_sets_failed_and_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the folder should be")
    log = eventlog.EventLog(blocker / "0a1b2c3d" / "events.jsonl")

    assert log.failed is not None and "event log" in log.failed
    log.phase_started(Phase.PLAN)
    log.note("interrupted", "SIGINT")
    log.close()
    assert blocker.read_text() == "a file where the folder should be"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_stops_the_log_once_and_the_run_goes_on() -> None:
    log = eventlog.EventLog(Path("/dev/full"))
    assert log.failed is None

    log.warn("first")
    log.flush()
    first = log.failed
    assert first is not None and "No space left" in first
    log.warn("second")
    log.note("answer", "text")
    log.flush()
    assert log.failed == first
    log.close()


def test_a_call_that_fits_no_hook_is_left_out_without_raising(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with eventlog.EventLog(path) as log:
        log.phase_started()  # type: ignore[call-arg]
        log.judged(True, "")
    assert [event.event for event in eventlog.read(path)] == ["judged"]
    assert log.failed is None


def test_nothing_is_written_after_close(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = eventlog.EventLog(path)
    log.council_started()
    log.close()
    log.council_started()
    log.note("answer", "late")
    log.close()
    assert len(eventlog.read(path)) == 1
    assert log.failed is None


# ---- reading ------------------------------------------------------------------------------------


def test_a_torn_last_line_and_foreign_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with eventlog.EventLog(path) as log:
        log.phase_started(Phase.PLAN)
        log.phase_finished(Phase.PLAN, 1.0)
    with path.open("ab") as handle:
        handle.write(b"not json at all\n[1, 2]\n")
        handle.write(b'{"at": "x", "t": true, "event": "warn", "args": {}}\n')
        handle.write(b'\xff\xfe{"broken": \n\n')
        handle.write(b'{"at": "2025-01-01T00:00:00.000Z", "t": 2.0, "event": "merge_sta')

    events, skipped = eventlog.read_counted(path)
    assert [event.event for event in events] == ["phase_started", "phase_finished"]
    assert events[0].args == {"phase": "plan"}
    assert skipped == 5
    assert eventlog.read(path) == events
    assert eventlog.replay(path, Recorder(), wait=lambda _: None) == 2


def test_a_missing_log_is_the_callers_to_report(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        eventlog.read(tmp_path / "events.jsonl")


# ---- replaying ----------------------------------------------------------------------------------


def test_replay_keeps_the_pace_divided_by_speed_and_cuts_long_pauses(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    _write_lines(
        path,
        [
            _line(0.2, "phase_started", phase="plan"),
            _line(0.7, "note", kind="question", text="which year?"),
            _line(1.7, "phase_finished", phase="plan", seconds=1.5),
            _line(9.0, "a_hook_removed_since", name="x"),
            _line(12.2, "merge_started", count=2),
            _line(12.2, "council_started"),
        ],
    )
    waits: list[float] = []
    recorder = Recorder()
    assert eventlog.replay(path, recorder, speed=2.0, max_gap=2.0, wait=waits.append) == 4
    assert waits == pytest.approx([0.75, 2.0])
    assert [name for name, _ in recorder.calls] == [
        "phase_started",
        "phase_finished",
        "merge_started",
        "council_started",
    ]

    waits.clear()
    notes: list[eventlog.Event] = []
    assert eventlog.replay(path, Recorder(), wait=waits.append, on_note=notes.append) == 4
    assert waits == pytest.approx([0.5, 1.0, 2.0])
    assert [(note.args["kind"], note.args["text"]) for note in notes] == [
        ("question", "which year?")
    ]


def test_replay_refuses_a_speed_that_is_no_speed(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    _write_lines(path, [_line(0.0, "council_started")])
    for speed in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            eventlog.replay(path, Recorder(), speed=speed, wait=lambda _: None)


def test_an_older_log_replays_what_still_fits(tmp_path: Path) -> None:
    row = {"name": "w", "role": "writes", "depends_on": [], "reused": False}
    path = tmp_path / "events.jsonl"
    _write_lines(
        path,
        [
            _line(0.0, "phase_started", phase="teleport"),
            _line(0.1, "agent_running", name="w"),
            _line(0.2, "agent_running", name="w", attempt=2, host="old"),
            _line(0.3, "judged", done="yes", missing=""),
            _line(0.4, "plan_ready", complexity="simple", agents=[{"name": "w"}], waves=[]),
            _line(0.5, "plan_ready", complexity="simple", agents=[row | {"x": 1}], waves=[["w"]]),
            _line(0.6, "archived", path=None),
            _line(0.7, "phase_finished", phase="run", seconds="soon"),
            _line(0.8, "budget_exhausted", spent_usd=1, budget_usd=1.0),
        ],
    )
    recorder = Recorder()
    assert eventlog.replay(path, recorder, wait=lambda _: None) == 4
    assert recorder.calls == [
        ("agent_running", {"name": "w", "attempt": 2}),
        ("plan_ready", {"complexity": "simple", "agents": [row], "waves": [["w"]]}),
        ("archived", {"path": None}),
        ("budget_exhausted", {"spent_usd": 1.0, "budget_usd": 1.0}),
    ]
    assert isinstance(recorder.calls[-1][1]["spent_usd"], float)


def _scripted_run(watcher: TaskEvents) -> int:
    """A short run as the orchestrator reports one; returns how many hooks it called."""
    agents: list[PlannedAgent] = [
        {"name": "researcher", "role": "finds the facts", "depends_on": [], "reused": True},
        {"name": "writer", "role": "writes it up", "depends_on": ["researcher"], "reused": False},
    ]
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("phase_started", (Phase.PLAN,)),
        ("plan_ready", ("standard", agents, [["researcher"], ["writer"]])),
        ("phase_finished", (Phase.PLAN, 1.25)),
        ("phase_started", (Phase.BUILD,)),
        ("phase_started", (Phase.RUN,)),
        ("agent_building", ("researcher", True)),
        ("agent_building", ("writer", False)),
        ("packages", ("writer", ["requests"], ["evil-pkg"], [])),
        ("agent_generated", ("writer",)),
        ("agent_running", ("researcher", 1)),
        ("agent_finished", ("researcher", True, 2.5, AgentKind.OK, "", 1)),
        ("agent_running", ("writer", 1)),
        ("agent_repairing", ("writer", 2, "Traceback\nValueError: no dates")),
        ("agent_running", ("writer", 2)),
        ("agent_finished", ("writer", False, 61.0, AgentKind.TIMEOUT, "killed after 60s", 2)),
        ("phase_finished", (Phase.BUILD, 3.0)),
        ("phase_finished", (Phase.RUN, 62.0)),
        ("warn", ("the council could not be had",)),
        ("merge_started", (1,)),
        ("council_started", ()),
        ("council_finished", (["too long", "no sources"], True)),
        ("judged", (False, "the dates")),
        ("revision_started", (2, "the dates")),
        ("agent_rejected", ("writer", ["imports socket"])),
        ("budget_exhausted", (0.5, 0.5)),
        ("archived", (None,)),
        ("archived", ("runs/0a1b2c3d.md",)),
    ]
    for name, arguments in calls:
        getattr(watcher, name)(*arguments)
    return len(calls)


def test_replay_into_plain_ui_shows_what_the_live_run_showed(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    live_out, live_err = io.StringIO(), io.StringIO()
    log = eventlog.EventLog(path)
    count = _scripted_run(eventlog.Tee(log, ui.PlainUI(out=live_out, err=live_err)))
    log.close()

    again_out, again_err = io.StringIO(), io.StringIO()
    again = ui.PlainUI(out=again_out, err=again_err)
    assert eventlog.replay(path, again, speed=1000.0, wait=lambda _: None) == count
    assert live_err.getvalue().count("\n") >= count
    assert "[warn]" in live_err.getvalue() and "timeout: killed after 60s" in live_err.getvalue()
    assert again_err.getvalue() == live_err.getvalue()
    assert again_out.getvalue() == live_out.getvalue()


# ---- the tee ------------------------------------------------------------------------------------


def test_tee_forwards_every_hook_to_every_target_in_order(tmp_path: Path) -> None:
    first, second = Recorder(), Recorder()
    order: list[str] = []

    class Marker(TaskEvents):
        def __init__(self, label: str) -> None:
            self.label = label

        def judged(self, done: bool, missing: str) -> None:
            order.append(self.label)

    tee: TaskEvents = eventlog.Tee(first, Marker("a"), second, Marker("b"))
    for name in HOOKS:
        getattr(tee, name)(**_samples(name))

    assert [name for name, _ in first.calls] == list(HOOKS)
    assert first.calls == second.calls
    assert order == ["a", "b"]


def test_a_failing_target_does_not_cost_the_others_their_call(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = eventlog.EventLog(path)
    after = Recorder()
    tee = eventlog.Tee(Raising(RuntimeError("the screen went away")), log, after)

    with pytest.raises(RuntimeError, match="the screen went away"):
        tee.warn("disk nearly full")
    log.close()
    assert after.calls == [("warn", {"text": "disk nearly full"})]
    assert [event.args for event in eventlog.read(path)] == [{"text": "disk nearly full"}]


def test_tee_raises_the_first_error_and_notes_the_later_ones() -> None:
    tee = eventlog.Tee(
        Raising(KeyboardInterrupt()), Raising(OSError(f"broken pipe near {SECRET}")), Recorder()
    )
    with pytest.raises(KeyboardInterrupt) as caught:
        tee.warn("x")
    notes = getattr(caught.value, "__notes__", [])
    assert len(notes) == 1
    assert "warn also raised in Raising: OSError" in notes[0]
    assert SECRET not in notes[0]
