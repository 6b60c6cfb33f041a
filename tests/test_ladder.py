"""The ladder of structured output (issue 26): native `output_config.format`, else one forced
tool call, else the schema in the prompt and the first JSON object of the reply, validated, with
one retry shown the validation error. Property-tested where a rule holds for every reply a model
might write: prose around the JSON, a fenced block, trailing text, braces and quotes inside
strings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeapi import FakeMessagesAPI, Reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

from agentgod import config, jsontext, learned, llm
from agentgod.kinds import Structured

LOCAL = "qwen3:8b"


class Inner(BaseModel):
    label: str
    weight: float


class Finding(BaseModel):
    """A shape with what trips naive extraction: free text, numbers, a list, a nested object."""

    summary: str
    count: int
    tags: list[str]
    inner: Inner


tricky_text = st.lists(
    st.sampled_from([*'abc {}[]"\\:,\n\t`é', "```", "json", "```json"]), max_size=12
).map("".join)
"""Strings holding braces, brackets, quotes, backslashes and fences: what must not be taken for
structure."""
findings = st.builds(
    Finding,
    summary=tricky_text,
    count=st.integers(-(10**6), 10**6),
    tags=st.lists(tricky_text, max_size=3),
    inner=st.builds(
        Inner, label=tricky_text, weight=st.floats(allow_nan=False, allow_infinity=False)
    ),
)
prose = st.text(
    alphabet=st.characters(blacklist_characters="{", blacklist_categories=["Cs"]), max_size=80
)
"""Text before the JSON: anything but an opening brace (so nothing in it can be an object)."""
anything = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=80)


def written(obj: dict, before: str, after: str, fenced: bool, indent: int | None) -> str:
    body = json.dumps(obj, indent=indent, ensure_ascii=indent is None)
    if fenced:
        body = f"```json\n{body}\n```"
    return f"{before}{body}{after}"


# ---- the extraction ----------------------------------------------------------------------------


@settings(max_examples=300)
@given(
    findings,
    prose,
    anything,
    st.booleans(),
    st.sampled_from([None, 2]),
)
def test_the_first_json_object_is_found_whatever_surrounds_it(
    finding: Finding, before: str, after: str, fenced: bool, indent: int | None
) -> None:
    obj = finding.model_dump()
    assert jsontext.first_object(written(obj, before, after, fenced, indent)) == obj


@settings(max_examples=300)
@given(findings, anything, anything)
def test_an_object_after_any_text_is_among_the_objects_found(
    finding: Finding, before: str, after: str
) -> None:
    """Prose may hold braces of its own, even a stray `{}`: the answer is still one of the
    objects found, which the ladder validates in order."""
    obj = finding.model_dump()
    assert obj in list(jsontext.objects(f"{before} {json.dumps(obj)} {after}"))


@settings(max_examples=200)
@given(anything)
def test_text_without_an_object_yields_none_and_never_raises(text: str) -> None:
    found = list(jsontext.objects(text.replace("{", "(")))
    assert found == []


def test_many_unmatched_braces_cost_bounded_work() -> None:
    text = "{" * 100_000 + '{"a": 1}'
    assert list(jsontext.objects(text)) == [], "past MAX_STARTS, nothing more is tried"
    assert jsontext.first_object("{" * 10 + '{"a": 1}') == {"a": 1}


# ---- the ladder against servers --------------------------------------------------------------


@pytest.fixture
def bare() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(mode="bare") as api:
        yield api


def local(api: FakeMessagesAPI) -> config.Settings:
    return config.settings({"ANTHROPIC_BASE_URL": api.base_url, "MODEL": LOCAL})


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(findings, prose, anything, st.booleans(), st.sampled_from([None, 2]))
def test_the_prompt_step_takes_the_answer_out_of_whatever_a_model_writes(
    bare: FakeMessagesAPI,
    finding: Finding,
    before: str,
    after: str,
    fenced: bool,
    indent: int | None,
) -> None:
    text = written(finding.model_dump(), before, after, fenced, indent)
    bare.handler = lambda request: Reply(text) if "JSON schema" in request.prompt else Reply("?")
    got = llm.complete_structured("find", Finding, model=LOCAL, effort=None, settings=local(bare))
    assert got == finding


def test_a_reply_that_misses_the_schema_is_tried_once_more_with_the_validation_error(
    bare: FakeMessagesAPI,
) -> None:
    good = Finding(summary="s {x}", count=1, tags=[], inner=Inner(label="l", weight=0.5))
    wrong = {**good.model_dump(), "count": "many"}
    replies = iter([f"Here: {json.dumps(wrong)} ok?", f"Sorry! {good.model_dump_json()}"])
    learned.remember(config.settings().home, bare.base_url, LOCAL, Structured.PROMPT)
    bare.handler = lambda request: Reply(next(replies))
    got = llm.complete_structured("find", Finding, model=LOCAL, effort=None, settings=local(bare))
    assert got == good
    first, retry = bare.messages()
    assert "JSON schema" in first.prompt and '"count"' in first.prompt
    assert [m["role"] for m in retry.body["messages"]] == ["user", "assistant", "user"]
    assert "count" in retry.prompt and "integer" in retry.prompt, "the validation error shown"


def test_a_second_miss_raises_the_validation_error(bare: FakeMessagesAPI) -> None:
    learned.remember(config.settings().home, bare.base_url, LOCAL, Structured.PROMPT)
    bare.handler = lambda request: Reply('{"summary": "no"}')
    with pytest.raises(ValidationError):
        llm.complete_structured("find", Finding, model=LOCAL, effort=None, settings=local(bare))
    assert len(bare.messages()) == 2


def test_the_tool_step_shows_the_model_its_validation_error_once(
    fake_api: FakeMessagesAPI,
) -> None:
    settings_ = config.settings(
        {"MODEL": LOCAL, "ANTHROPIC_BASE_URL": fake_api.base_url, "ANTHROPIC_API_KEY": "k"}
    )
    learned.remember(settings_.home, fake_api.base_url, LOCAL, Structured.TOOL)
    good = {"summary": "s", "count": 2, "tags": ["a"], "inner": {"label": "x", "weight": 1.0}}
    replies = iter([Reply.json({**good, "inner": {}}), Reply.json(good)])
    fake_api.handler = lambda request: next(replies)
    got = llm.complete_structured("find", Finding, model=LOCAL, effort=None, settings=settings_)
    assert got == Finding.model_validate(good)
    first, retry = fake_api.messages()
    assert first.body["tool_choice"] == {"type": "tool", "name": "Finding"}
    assert first.tools[0]["input_schema"] == Finding.model_json_schema()
    told = retry.body["messages"][-1]["content"][0]
    assert told["type"] == "tool_result" and told["is_error"] is True
    assert told["tool_use_id"] == retry.body["messages"][1]["content"][0]["id"]
    assert "label" in told["content"]


# ---- what the ladder never does on the real API -------------------------------------------------


class Verdict(BaseModel):
    missing: str
    done: bool
    score: int = Field(ge=0)


def test_native_json_that_misses_the_schema_raises_without_stepping_down(
    fake_api: FakeMessagesAPI,
) -> None:
    """The API held the reply to the schema; what pydantic adds (a bound) failing is the model's
    answer, not a server ignoring the format: as before the ladder, it raises."""
    fake_api.handler = lambda request: Reply.json({"missing": "", "done": True, "score": -1})
    with pytest.raises(ValidationError):
        llm.complete_structured("judge", Verdict, model="claude-haiku-5-5", effort="low")
    assert len(fake_api.messages()) == 1
    assert learned.everything(config.settings().home) == []


def test_a_native_reply_cut_short_raises_without_stepping_down(fake_api: FakeMessagesAPI) -> None:
    fake_api.handler = lambda request: Reply('{"missing": "the', stop_reason="max_tokens")
    with pytest.raises(ValidationError):
        llm.complete_structured("judge", Verdict, model="claude-haiku-5-5", effort="low")
    assert len(fake_api.messages()) == 1


def test_prose_around_json_from_a_native_request_is_kept_not_paid_for_again(
    fake_api: FakeMessagesAPI,
) -> None:
    """A paid answer is never lost: JSON found in what came back is used, no step down."""
    fake_api.handler = lambda request: Reply(
        'Sure: {"missing": "", "done": true, "score": 3} - done.'
    )
    got = llm.complete_structured("judge", Verdict, model="claude-haiku-5-5", effort="low")
    assert got == Verdict(missing="", done=True, score=3)
    assert len(fake_api.messages()) == 1


def test_models_toml_names_the_step_and_the_ladder_starts_there(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    (isolated_home / config.MODELS_FILE).write_text(
        '[models."qwen*"]\nstructured = "prompt"\n', encoding="utf-8"
    )
    fake_api.handler = lambda request: Reply.json({"missing": "", "done": True, "score": 1})
    settings_ = config.settings({"MODEL": LOCAL, "ANTHROPIC_BASE_URL": fake_api.base_url})
    llm.complete_structured("judge", Verdict, model=LOCAL, effort=None, settings=settings_)
    [request] = fake_api.messages()
    assert request.schema is None and "tool_choice" not in request.body
    assert "JSON schema" in request.prompt
