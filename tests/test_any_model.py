"""Any model (issue 26): whole runs on servers that speak the Messages API as Ollama, vLLM and a
bare llama-server do (tests/fakeapi.py's modes, per ../shared/reference/models.md), each using
the step of the structured-output ladder that works there, sent nothing the model's profile
lacks (no effort, no web tools), needing no key and costing nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import agentgod
from fakeapi import FakeMessagesAPI, Request
from scripted import Factory, agent_spec, plan

from agentgod import learned, planner

LOCAL = "qwen3:8b"
TASK = "write a short comparative survey of three sorting algorithms for a newsletter"
WEB_BODY = """
def run(task, previous_outputs):
    try:
        return call_llm(f"agent={AGENT_NAME} keys=[] task={task}", web=True)
    except Exception as error:
        return f"result from {AGENT_NAME} without the web: {error}"
"""


@pytest.fixture(params=["ollama", "vllm", "bare"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(mode=request.param) as api:
        yield api


def local_run(home: Path, api: FakeMessagesAPI, *args: str) -> dict:
    """`agentgod --json --no-input` on the local model at `api`, with no key at all."""
    done = agentgod(
        home,
        None,
        "--json",
        "--no-input",
        *args,
        ANTHROPIC_BASE_URL=api.base_url,
        MODEL=LOCAL,
    )
    assert done.returncode == 0, done.stderr
    reply: dict = json.loads(done.stdout)
    assert reply["ok"], reply
    return reply


def structured(request: Request) -> str:
    """Which step of the ladder a request is: native, tool, or prompt (plain: neither)."""
    if request.schema is not None:
        return "native"
    return "tool" if request.body.get("tool_choice") else "prompt"


def test_a_whole_run_on_a_local_server_works_with_what_it_takes_and_costs_nothing(
    server: FakeMessagesAPI, isolated_home: Path
) -> None:
    factory = Factory(server)
    factory.plans = [plan(agent_spec("researcher", web=True), agent_spec("writer", ["researcher"]))]
    factory.bodies = {"researcher": [WEB_BODY]}
    reply = local_run(isolated_home, server, "--effort", "high", TASK)
    assert reply["answer"] == "MERGED: researcher, writer"
    assert reply["cost"]["usd"] == 0.0, "a local model costs nothing"
    assert not any("price" in warning for warning in reply["warnings"]), reply["warnings"]
    sent = server.messages()
    assert all("x-api-key" not in r.headers for r in sent), "a local model needs no key"
    assert not any("effort" in (r.body.get("output_config") or {}) for r in sent)
    assert not any(r.tools and "input_schema" not in r.tools[0] for r in sent), "no web tools"
    assert not any(r.tool("web_search") or r.tool("web_fetch") for r in sent)
    assert planner.WEB_OFF.strip() in factory.of("plan")[0].system, "the planner was told"
    researcher = next(a for a in reply["agents"] if a["name"] == "researcher")
    assert researcher["ok"]
    # Each structured call was answered by the step that works on this server, learned once.
    steps = {
        "ollama": ["native", "tool"],  # the format is dropped: prose back; forced tools work
        "vllm": ["native"],
        "bare": ["native", "tool", "prompt"],  # neither the format nor tools are honoured
    }[server.mode]
    first = [structured(r) for r in factory.of("plan")]
    assert first == steps, "the plan stepped down the ladder by itself"
    later = [structured(r) for r in factory.of("judge")]
    assert later == steps[-1:], "the judge started where the plan ended"
    found = {(e.endpoint, e.model): e.structured for e in learned.everything(isolated_home)}
    learned.forget_cache()
    if len(steps) > 1:
        assert found == {(server.base_url, LOCAL): steps[-1]}
    else:
        assert found == {}


def test_the_step_learned_on_a_server_is_where_the_next_run_starts(isolated_home: Path) -> None:
    with FakeMessagesAPI(mode="ollama") as api:
        factory = Factory(api)
        factory.plans = [plan(agent_spec("writer"), complexity="simple")]
        local_run(isolated_home, api, TASK)
        before = len(api.messages())
        local_run(isolated_home, api, TASK)
        again = api.messages()[before:]
    assert again and not any(r.schema is not None for r in again), "no prose paid for again"
    assert {structured(r) for r in again if r.body.get("tool_choice")} == {"tool"}
    stored = json.loads((isolated_home / learned.FILE_NAME).read_text())
    assert stored["steps"][0]["structured"] == "tool"
    assert (isolated_home / learned.FILE_NAME).stat().st_mode & 0o777 == 0o600
