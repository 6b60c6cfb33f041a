"""judgment through our road to the model against the fake Messages API: judge and revision."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import cached_system
from fakeapi import FakeMessagesAPI, Reply, Request

from agentgod import judgment, ledger
from agentgod.judgment import Verdict

pytestmark = pytest.mark.usefixtures("distinct_models")

TASK = "List exactly five uses for a paperclip, as a numbered list, in French."
ANSWER = "1. Crochet\n2. Clé\n3. Ressort"


def only_request(api: FakeMessagesAPI) -> Request:
    [request] = api.messages()
    return request


# --- judge ------------------------------------------------------------------------------------


def test_judge_asks_the_fast_model_with_the_task_and_answer(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(
        Reply.json({"missing": "Give five uses; the answer gives three.", "done": False})
    )
    usage = ledger.Usage()
    verdict = judgment.judge(TASK, ANSWER, usage=usage, effort="high")
    assert verdict == Verdict(missing="Give five uses; the answer gives three.", done=False)
    request = only_request(fake_api)
    assert request.body["model"] == "claude-haiku-5-5"
    assert request.body["system"] == cached_system(judgment.JUDGE_PROMPT)
    assert request.body["output_config"]["effort"] == "high"
    assert f"<task>\n{TASK}\n</task>" in request.prompt
    assert f"<answer>\n{ANSWER}\n</answer>" in request.prompt
    assert usage.snapshot()["claude-haiku-5-5"].calls == 1


def test_the_verdict_schema_examines_before_it_rules(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply.json({"missing": "", "done": True}))
    judgment.judge(TASK, ANSWER)
    schema = only_request(fake_api).schema
    assert schema is not None
    assert list(schema["properties"]) == ["missing", "done"]
    assert all(field["description"] for field in schema["properties"].values())


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({"missing": "  ", "done": True}, Verdict(missing="", done=True)),
        ({"missing": "Also cover cost.", "done": True}, Verdict(missing="", done=True)),
        ({"missing": "", "done": False}, Verdict(missing="", done=True)),
        ({"missing": " \n ", "done": False}, Verdict(missing="", done=True)),
        (
            {"missing": "  Answer in French. ", "done": False},
            Verdict(missing="Answer in French.", done=False),
        ),
    ],
)
def test_verdicts_are_normalised(
    fake_api: FakeMessagesAPI, reply: dict[str, Any], expected: Verdict
) -> None:
    fake_api.queue(Reply.json(reply))
    verdict = judgment.judge(TASK, ANSWER)
    assert (verdict.missing, verdict.done) == (expected.missing, expected.done)


def test_a_verdict_built_directly_is_normalised_too() -> None:
    assert Verdict(missing="", done=False).done is True
    assert Verdict(missing="Add a sixth item.", done=True).missing == ""


# --- revision_task ----------------------------------------------------------------------------


def test_revision_keeps_the_original_wording_and_appends_the_gap() -> None:
    task = "  Summarise this:\n\n  line one\n  line two  "
    revised = judgment.revision_task(task, "  Keep it under 50 words.\n")
    assert revised.startswith(task)
    assert revised == f"{task}\n\n---\n{judgment.REVISION_NOTE} Keep it under 50 words."


def test_revision_without_a_gap_leaves_the_task_untouched() -> None:
    assert judgment.revision_task(TASK, " \n") == TASK
