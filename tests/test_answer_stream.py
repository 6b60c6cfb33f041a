"""The merged answer on a pseudo-terminal, shown while the merge reply is still being written.

A small program renders a merge exactly as a run does (main.make_ui on its terminal, the merge's
text sink turned into the answer hooks) against the fake API, which holds the streamed reply
open after its first words until the test has seen them on the screen.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import scripted_env
from fakeapi import FakeMessagesAPI, Reply
from terminal import Terminal

from agentgod import eventlog, events, ui

PROGRAM = """
from agentgod import events, main, merger
from agentgod.kinds import Phase

view = main.make_ui(interactive=True)
view.task_started("Write a pitch for a bakery.")
view.phase_started(Phase.MERGE)
view.merge_started(1)
merged = merger.merge_outputs(
    "Write a pitch for a bakery.", {"writer": "Fresh bread."}, on_text=events.answer_stream(view)
)
view.phase_finished(Phase.MERGE, 1.0)
view.task_finished()
view.answer(merged.answer)
print("[over]", type(view).__name__, flush=True)
"""
ANSWER = "Frisches Brot jeden Morgen, seit 1920 in der Altstadt."


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.stop()


@pytest.mark.parametrize("renderer", ["PlainUI", "RichUI"])
def test_the_first_words_are_on_screen_before_the_merge_reply_is_over(
    fake_api: FakeMessagesAPI,
    isolated_home: Path,
    terminals: list[Terminal],
    renderer: str,
) -> None:
    gate = threading.Event()
    fake_api.queue(Reply(ANSWER, hold=gate, hold_after=2))
    env = scripted_env(isolated_home, fake_api, TERM="xterm", COLUMNS="100")
    if renderer == "PlainUI":
        env["AGENTGOD_PLAIN"] = "1"
    terminal = Terminal([sys.executable, "-c", PROGRAM], env)
    terminals.append(terminal)
    terminal.expect("Frisches Brot")
    [request] = fake_api.messages()
    assert request.ended == 0  # the reply is still open: what is on screen came from the stream
    assert "jeden" not in terminal.text
    gate.set()
    terminal.expect(rf"\[over\] {renderer}")
    assert terminal.close() == 0
    if renderer == "PlainUI":  # plain lines are drawn once each: the answer is not repeated
        assert terminal.text.count(ANSWER) == 1


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_logged_streamed_answer_replays_as_it_was_written_and_once(tmp_path: Path) -> None:
    """`agentgod show --replay` re-emits the answer hooks, then the answer note: a person at a
    terminal sees each attempt at the answer again (the log keeps an attempt's pieces as one),
    and no second copy after it."""
    path = tmp_path / "events.jsonl"
    with eventlog.EventLog(path) as log:
        sink = events.answer_stream(log)
        for piece in ("Frisches ", "Brot.", "", "Frisches ", "Brot, ", "jeden Morgen."):
            sink(piece)
        log.note("answer", "Frisches Brot, jeden Morgen.")
    out = TTY()
    view = ui.PlainUI(out=out, err=io.StringIO())
    view.task_started("Write a pitch.")
    on_note = lambda note: view.answer(str(note.args["text"]))  # noqa: E731  (as verbs does)
    assert eventlog.replay(path, view, wait=lambda _: None, on_note=on_note) == 4
    assert out.getvalue().endswith(
        "[answer]   being written:\nFrisches Brot.\n"
        "[answer]   written again from the start:\nFrisches Brot, jeden Morgen.\n"
    )


def test_a_key_split_across_streamed_pieces_never_reaches_the_log(tmp_path: Path) -> None:
    """Each piece alone looks harmless; only the whole answer shows the key, so that is what the
    log redacts and keeps."""
    key = "sk-ant-api03-" + "Q" * 40
    path = tmp_path / "events.jsonl"
    with eventlog.EventLog(path) as log:
        sink = events.answer_stream(log)
        for piece in ("The key is sk-an", key[5:20], key[20:], " and that is all."):
            sink(piece)
    logged = path.read_text(encoding="utf-8")
    assert "Q" * 8 not in logged
    streamed = [e.args["text"] for e in eventlog.read(path) if e.event == "answer_delta"]
    assert streamed == ["The key is [redacted] and that is all."]
