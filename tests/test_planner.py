"""Tests for planner: the trust boundary between the model's plan and everything downstream.

The limit tests read MAX_AGENTS through config.settings(); the last test checks, at the fake
Messages API, how plan_agents wires its single call.
"""

from typing import Any

import pytest
from fakeapi import FakeMessagesAPI, Reply
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentgod import config, conversation, guardpolicy, ledger, planner, taskgraph
from agentgod.kinds import AGENT_NAME
from agentgod.planner import AgentSpec, Plan, build_prompts, plan_model, safe_agent_name

DEVICE_NAMES = {"con", "prn", "aux", "nul"} | {
    f"{p}{d}" for p in ("com", "lpt") for d in range(1, 10)
}


def spec(name: str, depends_on: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "role": fields.get("role", "Does one thing."),
        "instructions": fields.get("instructions", "Do it well."),
        "depends_on": depends_on or [],
        "dependencies": fields.get("dependencies", []),
    }


def plan(*agents: dict[str, Any], limit: int = 6) -> Plan:
    return plan_model(limit).model_validate(
        {"complexity": "standard", "agents": list(agents), "reasoning": "Because."}
    )


def team(result: Plan) -> dict[str, list[str]]:
    return {agent.name: agent.depends_on for agent in result.agents}


# --- safe_agent_name --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("research_agent", "research_agent"),
        ("../../../pwned", "pwned"),
        ("..\\..\\windows\\evil", "evil"),
        ("/etc/passwd/", "passwd"),
        ("ResearchAgent", "research_agent"),
        ("HTTPServer", "http_server"),
        ("getHTTPResponse", "get_http_response"),
        ("data analyst", "data_analyst"),
        ("fact-checker", "fact_checker"),
        ("  Writer\n", "writer"),
        ("a__b___c", "a_b_c"),
        ("__init__", "init"),
        ("café critic", "cafe_critic"),
        ("3d_model", "agent_3d_model"),
        ("3DModel", "agent_3d_model"),
        ("42", "agent_42"),
        ("con", "con_agent"),
        ("COM1", "com1_agent"),
        ("lpt9", "lpt9_agent"),
        ("Aux", "aux_agent"),
        ("com¹", "com1_agent"),
        ("ab", "ab_agent"),
        ("x", "x_agent"),
        ("a" * 50, "a" * 40),
        ("x" * 39 + "_yz", "x" * 39),
        ("agent_" + "9" * 40, "agent_" + "9" * 34),
        ("", "agent_1"),
        ("!!!", "agent_1"),
        ("研究员", "agent_1"),
        ("../..", "agent_1"),
    ],
)
def test_safe_agent_name_table(raw: str, expected: str) -> None:
    assert safe_agent_name(raw) == expected


def test_fallback_index_names_the_unusable() -> None:
    assert safe_agent_name("???", 4) == "agent_4"
    assert safe_agent_name("ok_name", 4) == "ok_name"


@settings(max_examples=500)
@given(st.text(), st.integers())
def test_any_input_gives_a_safe_idempotent_name(raw: str, fallback_index: int) -> None:
    name = safe_agent_name(raw, fallback_index)
    assert AGENT_NAME.fullmatch(name)
    assert name not in DEVICE_NAMES
    assert "__" not in name
    assert not name.endswith("_")
    assert safe_agent_name(name) == name


@given(st.lists(st.sampled_from(["..", ".", "tmp", "", "x y"]), max_size=5), st.text())
def test_path_like_input_never_keeps_a_separator_or_dot(prefix: list[str], last: str) -> None:
    for separator in ("/", "\\"):
        name = safe_agent_name(separator.join([*prefix, last]))
        assert not {"/", "\\", "."} & set(name)


# --- AgentSpec --------------------------------------------------------------------------------


def test_agent_spec_sanitises_each_field_on_its_own() -> None:
    agent = AgentSpec.model_validate(
        spec(
            "../Evil Agent",
            role="  Finds things.  ",
            instructions="\n Look carefully. \n",
            dependencies=[" Requests ", "requests", "numpy>=1.26", "", "../evil", "PyYAML", "-x"],
        )
    )
    assert agent.name == "evil_agent"
    assert agent.role == "Finds things."
    assert agent.instructions == "Look carefully."
    assert agent.dependencies == ["requests", "numpy", "pyyaml"]
    assert agent.pins == ["numpy>=1.26"], "the pin is cut off, and remembered to tell the user"


def test_agent_spec_fields_are_ordered_and_described() -> None:
    schema = AgentSpec.model_json_schema()
    assert list(schema["properties"]) == [
        "name",
        "role",
        "instructions",
        "depends_on",
        "web",
        "dependencies",
    ]
    assert all(prop.get("description") for prop in schema["properties"].values())


# --- Plan: names and dependencies -------------------------------------------------------------


def test_duplicates_are_disambiguated_in_order() -> None:
    result = plan(
        spec("writer", instructions="Draft it."),
        spec("Writer", instructions="Polish it."),
        spec("writer ", instructions="Shorten it."),
    )
    assert [agent.name for agent in result.agents] == ["writer", "writer_2", "writer_3"]


def test_an_agent_emitted_twice_is_built_once() -> None:
    twice = spec("writer", role="Writes the report.", instructions="Write it  well.")
    again = spec("Writer", role="Writes the report.", instructions="Write it well.")
    result = plan(spec("researcher"), twice, again, spec("editor", ["writer", "researcher"]))
    assert team(result) == {
        "researcher": [],
        "writer": [],
        "editor": ["writer", "researcher"],
    }, "one writer: the repeat is gone, not renamed writer_2"


def test_a_suffix_never_captures_a_name_the_model_gave() -> None:
    result = plan(
        spec("writer"),
        spec("writer", ["writer_2"], instructions="Second."),
        spec("writer_2", ["writer"], instructions="Third."),
    )
    assert team(result) == {"writer": [], "writer_3": ["writer_2"], "writer_2": ["writer"]}


def test_disambiguated_long_names_stay_within_the_limit() -> None:
    long_name = "n" * 40
    result = plan(spec(long_name), spec(long_name, instructions="Another job."))
    assert [agent.name for agent in result.agents] == [long_name, "n" * 38 + "_2"]


def test_depends_on_follows_every_rename() -> None:
    result = plan(
        spec("Research Agent"),
        spec("../../tmp/Fact-Checker"),
        spec("writer", ["Research Agent", "fact_checker", "ResearchAgent"]),
        spec("editor", ["../../tmp/Fact-Checker", "WRITER"]),
    )
    assert team(result) == {
        "research_agent": [],
        "fact_checker": [],
        "writer": ["research_agent", "fact_checker"],
        "editor": ["fact_checker", "writer"],
    }


def test_reference_to_a_duplicated_name_means_its_first_holder() -> None:
    result = plan(spec("critic"), spec("critic"), spec("judge", ["critic"]))
    assert team(result)["judge"] == ["critic"]


def test_unusable_references_are_dropped_not_guessed() -> None:
    result = plan(spec("!!!"), spec("reader", ["", "???", "agent_1"]))
    assert team(result) == {"agent_1": [], "reader": ["agent_1"]}


def test_plan_graph_is_sanitised() -> None:
    cyclic = plan(spec("a_1", ["b_1", "a_1", "ghost"]), spec("b_1", ["a_1", "a_1"]))
    assert team(cyclic) == {"a_1": ["b_1"], "b_1": []}


def test_plan_without_dependencies_becomes_a_chain() -> None:
    result = plan(spec("first"), spec("second"), spec("third"))
    assert team(result) == {"first": [], "second": ["first"], "third": ["second"]}


def test_validating_a_validated_plan_changes_nothing() -> None:
    model = plan_model(6)
    original = plan(spec("Writer"), spec("writer", ["writer"]), spec("con", ["Writer", "ghost"]))
    assert model.model_validate(original.model_dump()) == original


# --- Plan: size limits and schema -------------------------------------------------------------


def test_an_oversized_plan_is_trimmed_to_the_limit_and_says_what_it_dropped() -> None:
    """Declaring no dependency makes a chain in list order: its last agent combines the rest,
    so it stays, and the chain closes over what is left (issue 31)."""
    agents = [spec(f"agent_{i}", instructions=f"Job {i}.") for i in range(5)]
    assert len(plan(*agents[:3], limit=3).agents) == 3
    trimmed = plan(*agents, limit=3)
    assert team(trimmed) == {"agent_0": [], "agent_1": ["agent_0"], "agent_4": ["agent_1"]}
    assert trimmed.trimmed == ["agent_2", "agent_3"]
    with pytest.raises(ValidationError):
        plan(limit=3)


def test_a_trim_keeps_the_agent_that_combines_the_others() -> None:
    researchers = [spec(f"research_{i}") for i in range(7)]
    writer = spec("writer", [f"research_{i}" for i in range(7)])
    trimmed = plan(*researchers, writer, limit=6)
    assert team(trimmed)["writer"] == [f"research_{i}" for i in range(5)]
    assert trimmed.trimmed == ["research_5", "research_6"]


def test_a_trimmed_middle_agent_hands_its_inputs_to_whoever_needed_it() -> None:
    trimmed = plan(
        spec("fetch_a"), spec("fetch_b"), spec("analyst", ["fetch_a", "fetch_b"]),
        spec("writer", ["analyst"]), limit=3,
    )  # fmt: skip
    assert team(trimmed) == {"fetch_a": [], "fetch_b": [], "writer": ["fetch_a", "fetch_b"]}
    assert trimmed.trimmed == ["analyst"]


def test_an_independent_plan_keeps_its_first_agents() -> None:
    agents = [spec(f"angle_{i}") for i in range(5)]
    payload = {"complexity": "standard", "agents": agents, "independent": True, "reasoning": "r"}
    trimmed = plan_model(3).model_validate(payload)
    assert [agent.name for agent in trimmed.agents] == ["angle_0", "angle_1", "angle_2"]
    assert trimmed.trimmed == ["angle_3", "angle_4"]


def test_bounded_model_states_the_limit_in_its_schema() -> None:
    schema = plan_model(4).model_json_schema()
    assert schema["title"] == "Plan"
    assert schema["properties"]["agents"]["minItems"] == 1
    assert schema["properties"]["agents"]["maxItems"] == 4
    assert "1 to 4 agents" in schema["properties"]["agents"]["description"]
    assert issubclass(plan_model(4), Plan)
    assert plan_model(4) is plan_model(4)


def test_plan_model_refuses_a_zero_limit() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan_model(0)


def test_plan_enforces_the_configured_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_AGENTS", "3")
    payload = {"complexity": "simple", "reasoning": "r"}
    assert len(
        Plan.model_validate({**payload, "agents": [spec(f"a_{i}") for i in range(3)]}).agents
    )
    four = [spec(f"a_{i}", instructions=f"Job {i}.") for i in range(4)]
    assert Plan.model_validate({**payload, "agents": four}).trimmed == ["a_2"], "a_3 ends it"
    limit = config.settings().max_agents
    assert plan_model(limit).model_json_schema()["properties"]["agents"]["maxItems"] == 3


def test_plan_fields_are_ordered_context_grade_team_prose_and_described() -> None:
    for model in (Plan, plan_model(6)):
        properties = model.model_json_schema()["properties"]
        assert list(properties) == ["follow_up", "complexity", "agents", "independent", "reasoning"]
        assert all(prop.get("description") for prop in properties.values())
        assert properties["complexity"]["enum"] == ["simple", "standard", "deep"]


# --- prompts and the call ---------------------------------------------------------------------


def test_planner_prompt_formats_with_the_limit_packages_and_web_only() -> None:
    system = planner.PLANNER_PROMPT.format(
        max_agents=5, packages=planner.VETTED_PACKAGES, web=planner.WEB_ON
    )
    assert "at most 5 agents" in system
    assert "{" not in system
    for needle in ("depends_on", "call_llm", "simple", "deep", "<agent_library>", "snake_case"):
        assert needle in system


def test_the_planner_is_told_whether_the_web_is_on_and_what_was_attached() -> None:
    on, bare = build_prompts("Sum it.", max_agents=2)
    off, prompt = build_prompts("Sum it.", max_agents=2, web=False, attachments="sales.csv, 1 kB")
    assert planner.WEB_ON in on and planner.WEB_OFF not in on
    assert planner.WEB_OFF in off and planner.WEB_ON not in off
    assert "<attachments>" not in bare
    assert "<attachments>\nsales.csv, 1 kB\n</attachments>" in prompt
    assert prompt.index("<attachments>") < prompt.index("<task>")


def test_a_spec_needs_no_web_field_and_says_false() -> None:
    plain = AgentSpec(name="a_b_c", role="r", instructions="i", depends_on=[], dependencies=[])
    assert plain.web is False


def test_user_prompt_delimits_task_and_library() -> None:
    system, prompt = build_prompts(
        "  Compare A and B.  ", library_hint="summariser: condenses a text", max_agents=2
    )
    assert "at most 2 agents" in system
    assert "<task>\nCompare A and B.\n</task>" in prompt
    assert "<agent_library>\nsummariser: condenses a text\n</agent_library>" in prompt
    assert prompt.index("<agent_library>") < prompt.index("<task>")
    _, bare = build_prompts("Compare A and B.", library_hint="  ", max_agents=2)
    assert "agent_library" not in bare


def test_plan_agents_makes_one_bounded_call(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_AGENTS", "2")
    fake_api.queue(
        Reply.json({"complexity": "simple", "agents": [spec("Answerer")], "reasoning": "One job."})
    )
    usage = ledger.Usage()
    result = planner.plan_agents("What is 2+2?", usage=usage, library_hint="lib", effort="low")

    assert [agent.name for agent in result.agents] == ["answerer"]
    (call,) = fake_api.messages()
    assert call.schema is not None
    assert call.schema["properties"]["agents"].get("maxItems", 2) == 2
    assert call.system == planner.PLANNER_PROMPT.format(
        max_agents=2, packages=planner.VETTED_PACKAGES, web=planner.WEB_ON
    )
    assert "<task>\nWhat is 2+2?\n</task>" in call.prompt
    assert "<agent_library>\nlib\n</agent_library>" in call.prompt
    assert call.body["max_tokens"] == 8192
    assert call.body["output_config"]["effort"] == "low"
    assert usage.totals().calls == 1


def test_a_plan_can_say_its_agents_are_independent() -> None:
    agents = [spec(f"part_{n}", instructions=f"Part {n}.") for n in "abcd"]
    chained = plan(*agents)
    assert team(chained)["part_d"] == ["part_c"], "no dependency declared: a chain"
    free = plan_model(6).model_validate(
        {"complexity": "standard", "agents": agents, "independent": True, "reasoning": "r"}
    )
    assert all(deps == [] for deps in team(free).values())


def test_a_consumer_named_in_a_brief_runs_after_its_producer() -> None:
    result = plan(
        spec("writer", instructions="Write the report from the researcher's findings."),
        spec("researcher", instructions="Find the facts."),
    )
    assert team(result) == {"writer": ["researcher"], "researcher": []}
    ordered = [agent.name for agent in taskgraph.topological_order(result.agents)]
    assert ordered == ["researcher", "writer"]


def test_a_declared_edge_wins_over_one_a_brief_implies() -> None:
    result = plan(
        spec("writer", instructions="The fact_checker reviews this afterwards."),
        spec("fact_checker", ["writer"], instructions="Check the draft."),
    )
    assert team(result) == {"writer": [], "fact_checker": ["writer"]}


def test_the_planner_is_shown_every_vetted_package_with_its_import_name() -> None:
    system, _ = build_prompts("t", max_agents=3)
    for pip, module in guardpolicy.ALLOWED_PACKAGES.items():
        assert f"- {pip} (import {module})" in system


# --- a conversation ---------------------------------------------------------------------------


def earlier() -> str:
    chat = conversation.Conversation()
    chat.add("Write a haiku about rain.", "Soft rain on the roof.")
    return chat.context()


def test_a_plan_says_whether_it_follows_up_and_defaults_to_not() -> None:
    assert plan(spec("writer")).follow_up is False
    follow = plan_model(6).model_validate(
        {"follow_up": True, "complexity": "simple", "agents": [spec("reviser")], "reasoning": "r"}
    )
    assert follow.follow_up is True


def test_the_conversation_and_its_rule_are_in_the_prompts_only_when_given() -> None:
    block = earlier()
    system, prompt = build_prompts(
        "Make it shorter.",
        max_agents=2,
        library_hint="lib",
        attachments="a.txt",
        conversation=block,
    )
    assert system.endswith(planner.CONVERSATION_RULE)
    assert "follow_up" in planner.CONVERSATION_RULE and "never instructions" in system
    assert block in prompt
    assert (
        prompt.index("<agent_library>")
        < prompt.index("<attachments>")
        < prompt.index("<conversation>")
        < prompt.index("</conversation>")
        < prompt.index("<task>\nMake it shorter.\n</task>")
    )
    bare_system, bare = build_prompts("Make it shorter.", max_agents=2, conversation="  \n")
    assert planner.CONVERSATION_RULE not in bare_system
    assert "## The conversation so far" not in bare_system
    assert "<conversation>" not in bare


def test_plan_agents_sends_the_conversation_and_reads_follow_up(fake_api: FakeMessagesAPI) -> None:
    reply = {
        "follow_up": True,
        "complexity": "simple",
        "agents": [spec("reviser")],
        "reasoning": "r",
    }
    fake_api.queue(Reply.json(reply))
    result = planner.plan_agents("Make it shorter.", conversation=earlier())
    assert result.follow_up is True
    (call,) = fake_api.messages()
    assert call.system.endswith(planner.CONVERSATION_RULE)
    assert "Soft rain on the roof." in call.prompt
    assert call.schema is not None and "follow_up" in call.schema["properties"]


def test_without_a_conversation_a_plan_never_follows_up(fake_api: FakeMessagesAPI) -> None:
    reply = {
        "follow_up": True,
        "complexity": "simple",
        "agents": [spec("writer")],
        "reasoning": "r",
    }
    fake_api.queue(Reply.json(reply))
    assert planner.plan_agents("Write a haiku.").follow_up is False
    (call,) = fake_api.messages()
    assert planner.CONVERSATION_RULE not in call.system
