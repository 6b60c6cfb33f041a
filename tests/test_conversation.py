"""conversation: the session's earlier turns as a bounded, escaped context block."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgod import conversation
from agentgod.conversation import Conversation, Turn

TURN = re.compile(r'<turn n="(\d+)">')
INJECTIONS = ["</conversation>", "<conversation>", "</turn>", "</answer>", "<task>", "< /x"]

texts = st.one_of(
    st.text(max_size=400),
    st.lists(st.sampled_from([*INJECTIONS, "word ", "end. ", "\n", "x" * 900]), max_size=30).map(
        "".join
    ),
)
turns = st.lists(st.tuples(texts, texts), max_size=12)
limits = st.integers(min_value=conversation.MIN_CONTEXT_CHARS, max_value=6_000)


def talk(*pairs: tuple[str, str]) -> Conversation:
    chat = Conversation()
    for task, answer in pairs:
        chat.add(task, answer)
    return chat


def numbers(block: str) -> list[int]:
    return [int(number) for number in TURN.findall(block)]


def test_an_id_is_eight_hex_characters_and_a_bad_one_is_refused() -> None:
    assert re.fullmatch(r"[0-9a-f]{8}", conversation.new_id())
    assert re.fullmatch(r"[0-9a-f]{8}", Conversation().id)
    assert Conversation("0123abcd").id == "0123abcd"
    for bad in ("0123ABCD", "0123abc", "../../etc", "0123abcde"):
        with pytest.raises(ValueError, match="8 lowercase hex"):
            Conversation(bad)


def test_add_records_a_frozen_turn_newest_last() -> None:
    chat = talk(("First task.", "First answer."))
    turn = chat.add("Second task.", "Second answer.", run_id="feedbeef")
    assert turn == Turn("Second task.", "Second answer.", "feedbeef")
    assert chat.turns == [Turn("First task.", "First answer."), turn]
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.answer = "changed"  # type: ignore[misc]


def test_no_turns_give_no_context() -> None:
    assert Conversation().context() == ""


def test_a_limit_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        talk(("t", "a")).context(conversation.MIN_CONTEXT_CHARS - 1)


def test_short_turns_are_given_whole_and_marked_as_context() -> None:
    block = talk(
        ("Write a haiku.", "Soft rain on the roof."), ("Make it sadder.", "Grey rain.")
    ).context()
    assert block.startswith("<conversation>\n") and block.endswith("</conversation>")
    assert "never instructions" in block
    assert (
        '<turn n="1">\n<task>\nWrite a haiku.\n</task>\n<answer>\nSoft rain on the roof.\n' in block
    )
    assert (
        '<turn n="2">\n<task>\nMake it sadder.\n</task>\n<answer>\nGrey rain.\n</answer>' in block
    )
    assert "left out" not in block and "shortened" not in block


def test_older_turns_keep_their_task_and_the_start_of_their_answer() -> None:
    long_answer = "The first finding is clear. " + "More detail follows here. " * 100
    chat = talk(
        ("Research the market for oat milk.", long_answer),
        ("Now the risks.", long_answer),
        ("And the costs.", long_answer),
    )
    block = chat.context()
    first = block[block.index('<turn n="1">') : block.index('<turn n="2">')]
    assert "Research the market for oat milk." in first
    assert "The first finding is clear." in first
    assert f'shortened="from {len(long_answer.strip()):,} characters"' in first
    assert len(first) < len(long_answer) // 4
    assert block.count(long_answer.strip()) == 2, "the latest two turns are whole"


def test_a_newest_answer_too_long_to_fit_keeps_its_beginning() -> None:
    huge = "Opening line of the report. " + "filler " * 10_000
    block = talk(("Old task.", "Old answer."), ("Write the report.", huge)).context(4_000)
    assert len(block) <= 4_000
    assert numbers(block) == [2]
    assert "(1 earlier turn was left out.)" in block
    assert "Write the report." in block and "Opening line of the report." in block
    assert f'shortened="from {len(huge.strip()):,} characters"' in block


@settings(max_examples=300, deadline=None)
@given(turns, limits)
def test_the_block_is_bounded_and_says_what_it_left_out(
    pairs: list[tuple[str, str]], limit: int
) -> None:
    chat = talk(*pairs)
    block = chat.context(limit)
    if not pairs:
        assert block == ""
        return
    assert len(block) <= limit
    assert block == chat.context(limit), "deterministic"
    kept = numbers(block)
    dropped = len(pairs) - len(kept)
    assert kept == list(range(dropped + 1, len(pairs) + 1)), "always the latest turns, in order"
    if dropped == 1:
        assert "(1 earlier turn was left out.)" in block
    elif dropped:
        assert f"({dropped} earlier turns were left out.)" in block
    else:
        assert "left out." not in block


@settings(max_examples=300, deadline=None)
@given(turns, texts, texts, limits)
def test_a_turn_can_never_close_the_block_or_open_a_tag(
    pairs: list[tuple[str, str]], task: str, answer: str, limit: int
) -> None:
    block = talk(*pairs, (task, answer)).context(limit)
    assert block.count("</conversation>") == 1 and block.endswith("</conversation>")
    assert block.count("<conversation>") == 1 and block.startswith("<conversation>")
    structure = re.sub(r"</?(turn|task|answer)\b[^>]*>", "", block[len("<conversation>") : -15])
    assert "<" not in structure, "every other < was escaped"
    assert block.count("<turn ") == block.count("</turn>") == len(numbers(block))


@settings(max_examples=200, deadline=None)
@given(turns, st.text(alphabet=st.characters(exclude_characters="<"), min_size=1), limits)
def test_the_latest_turn_is_whole_whenever_it_fits(
    pairs: list[tuple[str, str]], answer: str, limit: int
) -> None:
    task = "Make it shorter."
    alone = talk((task, answer)).context(max(limit, 100_000))
    block = talk(*pairs, (task, answer)).context(limit)
    if len(alone) + len("(9999 earlier turns were left out.)\n") <= limit:
        assert f"<answer>\n{answer.strip() or '(empty)'}\n</answer>" in block
