"""The merged answer on a pseudo-terminal, shown while the merge reply is still being written.

A small program renders a merge exactly as a run does (ui.make_ui on its terminal, the merge's
text sink turned into the answer hooks) against the fake API, which holds the streamed reply
open after its first words until the test has seen them on the screen.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import scripted_env
from fakeapi import FakeMessagesAPI, Reply
from terminal import Terminal

PROGRAM = """
import events, merger, ui
from kinds import Phase

view = ui.make_ui(interactive=True)
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
