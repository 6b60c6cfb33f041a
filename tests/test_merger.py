"""merger through the road to the model against the fake Messages API."""

from __future__ import annotations

import pytest
from fakeapi import FakeMessagesAPI, Reply

from agentgod import conversation, ledger, merger

pytestmark = pytest.mark.usefixtures("distinct_models")

TASK = "Write a 50-word pitch for a bakery, in German, as one paragraph."


def test_a_single_agent_still_gets_exactly_one_merge_call(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("Frisches Brot jeden Morgen."))
    usage = ledger.Usage()
    merged = merger.merge_outputs(TASK, {"pitch_writer": "Fresh bread daily."}, usage=usage)
    assert merged.answer == "Frisches Brot jeden Morgen."
    assert merged.warnings == []
    [request] = fake_api.messages()
    assert request.body["model"] == "claude-sonnet-5-5"
    assert request.body["max_tokens"] == merger.MAX_TOKENS
    assert "temperature" not in request.body
    assert request.body["system"] == [
        {"type": "text", "text": merger.MERGER_PROMPT, "cache_control": {"type": "ephemeral"}}
    ]
    assert usage.totals().calls == 1
    assert usage.snapshot()["claude-sonnet-5-5"].output_tokens > 0


def test_the_prompt_holds_the_task_verbatim_and_every_output_labelled(
    fake_api: FakeMessagesAPI,
) -> None:
    outputs = {"market_researcher": "Three bakeries nearby.", "copywriter": "Warm & crusty."}
    roles = {"market_researcher": "Finds competitors.", "copywriter": 'Writes "punchy" copy.'}
    merger.merge_outputs(TASK, outputs, roles=roles)
    prompt = fake_api.messages()[0].prompt
    assert f"<task>\n{TASK}\n</task>" in prompt
    assert (
        '<output agent="market_researcher" role="Finds competitors.">\n'
        "Three bakeries nearby.\n</output>"
    ) in prompt
    assert (
        '<output agent="copywriter" role="Writes &quot;punchy&quot; copy.">\nWarm & crusty.\n'
        "</output>"
    ) in prompt
    assert prompt.index("market_researcher") < prompt.index("copywriter") < prompt.index(TASK)


def test_an_agent_without_a_role_is_labelled_by_name_alone(fake_api: FakeMessagesAPI) -> None:
    merger.merge_outputs(TASK, {"writer": "Text."}, roles={"other": "Unused."})
    assert '<output agent="writer">\nText.\n</output>' in fake_api.messages()[0].prompt


def test_failed_agents_are_named_but_never_given_an_output(fake_api: FakeMessagesAPI) -> None:
    merger.merge_outputs(
        TASK,
        {"copywriter": "Warm bread."},
        roles={"price_checker": "Compares prices."},
        failed=["price_checker", "translator", "price_checker"],
    )
    prompt = fake_api.messages()[0].prompt
    assert "failed and produced nothing" in prompt
    assert '<failed agent="price_checker" role="Compares prices." />' in prompt
    assert '<failed agent="translator" />' in prompt
    assert prompt.count("price_checker") == 1
    assert '<output agent="price_checker"' not in prompt
    assert '<output agent="translator"' not in prompt


def test_no_failures_means_no_failure_note(fake_api: FakeMessagesAPI) -> None:
    merger.merge_outputs(TASK, {"copywriter": "Warm bread."}, failed=[])
    assert "failed" not in fake_api.messages()[0].prompt


def test_nothing_to_merge_is_an_error_and_costs_nothing(fake_api: FakeMessagesAPI) -> None:
    with pytest.raises(ValueError, match="at least one"):
        merger.merge_outputs(TASK, {})
    assert fake_api.messages() == []


def test_an_empty_merge_reply_falls_back_to_the_labelled_outputs(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(Reply("  \n", thinking=True))
    merged = merger.merge_outputs(TASK, {"researcher": " Facts. ", "writer": "Draft."})
    assert merged.answer == "## researcher\n\nFacts.\n\n## writer\n\nDraft."
    assert merged.warnings  # the user is told the answer is the raw outputs
    assert len(fake_api.messages()) == 1


def test_effort_is_passed_through(fake_api: FakeMessagesAPI) -> None:
    merger.merge_outputs(TASK, {"writer": "Draft."}, effort="low")
    assert fake_api.messages()[0].body["output_config"] == {"effort": "low"}


def test_the_prompt_forbids_invention_and_mentioning_the_factory() -> None:
    prompt = merger.MERGER_PROMPT
    assert "Add no facts" in prompt
    assert "No mention of agents" in prompt
    assert "language the task is written in" in prompt


def test_a_follow_up_sees_the_conversation_before_the_outputs_and_the_task_last(
    fake_api: FakeMessagesAPI,
) -> None:
    chat = conversation.Conversation()
    chat.add("Write a pitch for a bakery.", "Frisches Brot, jeden Morgen, seit 1920.")
    block = chat.context()
    merger.merge_outputs("Make it shorter.", {"reviser": "Frisches Brot."}, conversation=block)
    prompt = fake_api.messages()[0].prompt
    assert block in prompt
    assert (
        prompt.index("<conversation>")
        < prompt.index("</conversation>")
        < prompt.index('<output agent="reviser">')
        < prompt.index("<task>\nMake it shorter.\n</task>")
    )
    assert prompt.endswith("</task>\n\nWrite the final answer to this task.")


def test_without_a_conversation_there_is_no_block() -> None:
    prompt = merger.build_prompt(TASK, {"writer": "Draft."}, conversation=" \n")
    assert "<conversation>" not in prompt
    assert prompt.startswith('<output agent="writer">')


def test_the_prompt_says_a_follow_up_revises_the_earlier_answer() -> None:
    prompt = merger.MERGER_PROMPT
    assert "<conversation>" in prompt
    assert "replaces or revises the earlier answer" in prompt
    assert "without repeating" in prompt
    assert "language of the answer it revises" in prompt


# ---- streaming ---------------------------------------------------------------------------------


def test_the_answer_is_streamed_as_it_is_written(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(
        Reply("Frisches Brot jeden Morgen.", pieces=["Frisches ", "Brot", " jeden Morgen."])
    )
    seen: list[str] = []
    usage = ledger.Usage()
    merged = merger.merge_outputs(
        TASK, {"writer": "Fresh bread."}, usage=usage, on_text=seen.append
    )
    assert seen == ["Frisches ", "Brot", " jeden Morgen."]
    assert merged.answer == "".join(seen)
    [request] = fake_api.messages()
    assert request.body["stream"] is True
    assert request.body["max_tokens"] == merger.MAX_TOKENS
    assert usage.totals().calls == 1


def test_a_rewrite_with_more_room_streams_again_from_the_start(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("Cut off in", stop_reason="max_tokens"), Reply("Whole answer."))
    seen: list[str] = []
    merged = merger.merge_outputs(TASK, {"writer": "Draft."}, on_text=seen.append)
    assert seen == ["Cut ", "off ", "in", "", "Whole ", "answer."]
    assert merged.answer == "Whole answer."
    assert [r.body["max_tokens"] for r in fake_api.messages()] == [
        merger.MAX_TOKENS,
        merger.MORE_ROOM_TOKENS,
    ]


def test_an_empty_streamed_merge_still_falls_back_to_the_outputs(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(Reply(""))
    seen: list[str] = []
    merged = merger.merge_outputs(TASK, {"writer": "Draft."}, on_text=seen.append)
    assert seen == []
    assert merged.answer == "## writer\n\nDraft."  # what the display must show instead
