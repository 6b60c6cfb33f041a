"""council through the road to the model against the fake Messages API."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import cached_system
from fakeapi import FakeMessagesAPI, Reply

from agentgod import config, council, ledger
from agentgod.council import Challenge

pytestmark = pytest.mark.usefixtures("distinct_models")

TASK = "Should a ten-person startup move from Heroku to Kubernetes? Answer in under 300 words."
ANSWER = "Yes: Kubernetes is always cheaper, so migrate next week."
FLAWS = ["'Always cheaper' is unsupported.", "Ignores the ops cost for ten people."]
FLAWED = {"weaknesses": FLAWS, "flawed": True}
SOUND = {"weaknesses": [], "flawed": False}


# --- should_convene ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "complexity", "expected"),
    [
        ("off", "simple", False),
        ("off", "standard", False),
        ("off", "deep", False),
        ("always", "simple", True),
        ("always", "standard", True),
        ("always", "deep", True),
        ("auto", "simple", False),
        ("auto", "standard", False),
        ("auto", "deep", True),
    ],
)
def test_should_convene(
    monkeypatch: pytest.MonkeyPatch, mode: str, complexity: str, expected: bool
) -> None:
    monkeypatch.setenv("COUNCIL", mode)
    assert council.should_convene(complexity, config.settings().council) is expected


def test_auto_is_the_default() -> None:
    assert config.settings().council == "auto"


# --- challenge --------------------------------------------------------------------------------


def test_the_critic_reads_task_and_answer_on_the_deep_model(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply.json(FLAWED))
    found = council.challenge(TASK, ANSWER, effort="high")
    assert found == Challenge(weaknesses=FLAWS, flawed=True)
    [request] = fake_api.messages()
    assert request.body["model"] == "claude-opus-5-5"
    assert request.body["system"] == cached_system(council.CRITIC_PROMPT)
    assert request.body["output_config"]["effort"] == "high"
    assert f"<task>\n{TASK}\n</task>" in request.prompt
    assert f"<answer>\n{ANSWER}\n</answer>" in request.prompt
    assert request.schema is not None
    assert list(request.schema["properties"]) == ["weaknesses", "flawed"]


@pytest.mark.parametrize(
    ("reply", "weaknesses", "flawed"),
    [
        ({"weaknesses": [], "flawed": True}, [], False),
        ({"weaknesses": ["", "  \n"], "flawed": True}, [], False),
        (
            {"weaknesses": [" No  source. ", "no source.", "", "Math is off."], "flawed": True},
            ["No source.", "Math is off."],
            True,
        ),
        ({"weaknesses": ["A minor nit."], "flawed": False}, ["A minor nit."], False),
    ],
)
def test_challenges_are_normalised(
    fake_api: FakeMessagesAPI, reply: dict[str, Any], weaknesses: list[str], flawed: bool
) -> None:
    fake_api.queue(Reply.json(reply))
    found = council.challenge(TASK, ANSWER)
    assert (found.weaknesses, found.flawed) == (weaknesses, flawed)


# --- refine -----------------------------------------------------------------------------------


def test_refine_sends_the_named_faults_to_the_deep_model(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("  It depends on the team's ops capacity.  "))
    refined = council.refine(TASK, ANSWER, ["Unsupported claim.", " ", "Missing ops cost."])
    assert refined == "It depends on the team's ops capacity."
    [request] = fake_api.messages()
    assert request.body["model"] == "claude-opus-5-5"
    assert request.body["system"] == cached_system(council.REFINE_PROMPT)
    assert request.body["max_tokens"] == council.REFINE_MAX_TOKENS < 21_333
    assert f"<task>\n{TASK}\n</task>" in request.prompt
    assert f"<answer>\n{ANSWER}\n</answer>" in request.prompt
    assert "<weaknesses>\n1. Unsupported claim.\n2. Missing ops cost.\n</weaknesses>" in (
        request.prompt
    )


def test_refine_with_nothing_named_makes_no_call(fake_api: FakeMessagesAPI) -> None:
    assert council.refine(TASK, ANSWER, ["", "  "]) == ANSWER
    assert fake_api.messages() == []


# --- review -----------------------------------------------------------------------------------


def test_an_acquitted_answer_costs_one_call_and_is_unchanged(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply.json(SOUND))
    usage = ledger.Usage()
    verdict = council.review(TASK, ANSWER, usage=usage)
    assert verdict == council.CouncilVerdict(answer=ANSWER, improved=False, weaknesses=[])
    assert len(fake_api.messages()) == 1
    assert usage.totals().calls == 1


def test_a_flawed_answer_is_refined_in_a_second_call(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply.json(FLAWED), Reply("Probably not yet: weigh the ops cost first."))
    usage = ledger.Usage()
    verdict = council.review(TASK, ANSWER, usage=usage, effort="low")
    assert verdict == council.CouncilVerdict(
        answer="Probably not yet: weigh the ops cost first.",
        improved=True,
        weaknesses=FLAWS,
    )
    critic, refiner = fake_api.messages()
    assert critic.body["system"] == cached_system(council.CRITIC_PROMPT)
    assert refiner.body["system"] == cached_system(council.REFINE_PROMPT)
    assert all(r.body["output_config"]["effort"] == "low" for r in (critic, refiner))
    assert all(weakness in refiner.prompt for weakness in FLAWS)
    assert usage.snapshot()["claude-opus-5-5"].calls == 2


@pytest.mark.parametrize("refinement", ["", " \n ", f"  {ANSWER}\n"])
def test_an_empty_or_unchanged_refinement_never_replaces_the_answer(
    fake_api: FakeMessagesAPI, refinement: str
) -> None:
    fake_api.queue(Reply.json(FLAWED), Reply(refinement))
    verdict = council.review(TASK, ANSWER)
    assert verdict.answer == ANSWER
    assert verdict.improved is False
    assert verdict.weaknesses == FLAWS
    assert len(fake_api.messages()) == 2


def test_flawed_without_a_named_fault_is_not_refined(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply.json({"weaknesses": [" "], "flawed": True}))
    verdict = council.review(TASK, ANSWER)
    assert (verdict.answer, verdict.improved) == (ANSWER, False)
    assert len(fake_api.messages()) == 1
