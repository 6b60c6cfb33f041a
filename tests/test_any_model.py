"""Any model (issue 26): whole runs on servers that speak the Messages API as Ollama, vLLM and a
bare llama-server do (tests/fakeapi.py's modes, per ../shared/reference/models.md), each using
the step of the structured-output ladder that works there, sent nothing the model's profile
lacks (no effort, no web tools), needing no key and costing nothing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import agentgod, scripted_env
from fakeapi import FakeMessagesAPI, Request
from scripted import Factory, agent_spec, plan
from terminal import Terminal

from agentgod import agent_runtime, broker, config, learned, llm, planner
from agentgod.kinds import Structured
from agentgod.ledger import BudgetExhaustedError, Usage

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


# ---- the broker sends an agent's call only what its model takes --------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def local_broker(api: FakeMessagesAPI, spent: Usage) -> broker.Broker:
    settings = config.settings({"ANTHROPIC_BASE_URL": api.base_url, "MODEL": LOCAL})
    return broker.Broker(
        lambda request: llm.forward(request, settings),
        spent,
        price=settings.price_of,
        effort_for_model=settings.effort_for,
        profile=settings.profile,
        budget_error=BudgetExhaustedError,
        web=True,
    )


def frame(channel: broker.Channel, **asked: Any) -> dict[str, Any]:
    """One messages frame on the agent's end, as its runtime writes it; the broker's answer."""
    request = {"max_tokens": 50, "messages": [{"role": "user", "content": "read it"}]}
    body = {"op": "messages", "request": {**request, **asked.pop("request", {})}, **asked}
    with socket.socket(fileno=os.dup(channel.child_fd)) as sock:
        sock.sendall(agent_runtime.encode_frame({"web": False, "files": [], **body}))
        size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
        answer: dict[str, Any] = json.loads(sock.recv(size, socket.MSG_WAITALL))
    return answer


def test_a_pdf_an_image_or_the_web_for_a_model_that_lacks_them_is_refused_saying_why(
    tmp_path: Path,
) -> None:
    pdf, png = tmp_path / "paper.pdf", tmp_path / "chart.png"
    pdf.write_bytes(b"%PDF-1.4 fake")
    png.write_bytes(PNG)
    with FakeMessagesAPI(mode="vllm") as api, local_broker(api, Usage()) as door:
        channel = door.open_channel(
            "reader",
            model=LOCAL,
            files={"paper.pdf": pdf, "chart.png": png},
            web_allowed=True,
            max_searches=5,
        )
        for name, said in (
            ("paper.pdf", "reads no PDF documents"),
            ("chart.png", "reads no images"),
        ):
            answer = frame(channel, files=[name])
            assert answer["ok"] is False and answer["error"]["type"] == "invalid"
            message = answer["error"]["message"]
            assert said in message and LOCAL in message and "models.toml" in message
        web = frame(channel, web=True)
        assert web["ok"] is False and "runs no web tools" in web["error"]["message"]
        assert api.messages() == [], "nothing reached the server, which would have said 400"


def test_an_agents_call_carries_no_effort_or_cache_hint_its_model_does_not_take(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("the notes", encoding="utf-8")
    spent = Usage()
    with FakeMessagesAPI(mode="ollama") as api, local_broker(api, spent) as door:
        channel = door.open_channel("writer", model=LOCAL, effort="high", files={"n": notes})
        system = [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
        answer = frame(
            channel,
            request={"system": system, "output_config": {"effort": "high"}},
            files=["n"],
        )
        assert answer["ok"] is True, answer
        [sent] = api.messages()
    assert "output_config" not in sent.body, "no effort: on Ollama it would turn thinking on"
    assert "cache_control" not in json.dumps(sent.body)
    assert "the notes" in json.dumps(sent.body), "text files still go"
    assert spent.cost_usd() == 0.0 and answer["model"] == LOCAL


# ---- agentgod models --------------------------------------------------------------------------


def test_agentgod_models_lists_the_profiles_in_use_and_where_each_came_from(
    isolated_home: Path,
) -> None:
    base = "http://127.0.0.1:11434"
    (isolated_home / config.MODELS_FILE).write_text(
        '[models."qwen*"]\nimages = true\neffort = ["low", "high"]\n', encoding="utf-8"
    )
    learned.remember(isolated_home, base, LOCAL, Structured.TOOL)
    chain = "claude-haiku-5-5@https://api.anthropic.com,claude-mystery-2"

    def models(*args: str) -> subprocess.CompletedProcess[str]:
        return agentgod(
            isolated_home, None, *args, ANTHROPIC_BASE_URL=base, MODEL=LOCAL, MODEL_FALLBACKS=chain
        )

    done = models("--json", "models")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    rows = {row["model"]: row for row in reply["models"]}
    assert list(rows) == [LOCAL, "claude-haiku-5-5", "claude-mystery-2"]
    local = rows[LOCAL]
    assert local["roles"] == ["MODEL", "FAST_MODEL", "DEEP_MODEL"]
    assert (local["endpoint"], local["structured"]) == (base, "tool")
    assert local["structured_from"].startswith("learned ")
    assert local["efforts"] == ["low", "high"] and local["images"] and not local["web"]
    assert local["source"] == 'models.toml [models."qwen*"]'
    assert local["price"] == {"input": 0.0, "output": 0.0, "cache_read": 0.0}
    assert local["price_from"] == "served locally: free" and not local["needs_key"]
    haiku = rows["claude-haiku-5-5"]
    assert haiku["roles"] == ["fallback 1"] and haiku["endpoint"] == "https://api.anthropic.com"
    assert haiku["price_from"] == "the price table" and haiku["needs_key"]
    mystery = rows["claude-mystery-2"]
    assert mystery["price"] is None and mystery["price_from"] == "unknown"
    assert reply["profiles_file_exists"] is True
    drawn = models("models")
    assert drawn.returncode == 0, drawn.stderr
    assert f"{LOCAL}  (MODEL, FAST_MODEL, DEEP_MODEL)  at {base}" in drawn.stdout
    assert "price unknown (counted as $0)" in drawn.stdout
    (isolated_home / config.MODELS_FILE).write_text("[models\n", encoding="utf-8")
    broken = models("models")
    assert broken.returncode == 0 and "valid TOML" in broken.stderr, "named, and set aside"


def test_slash_models_at_the_prompt_shows_the_sessions_own_models(
    fake_api: FakeMessagesAPI, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    env = scripted_env(isolated_home, fake_api, TERM="xterm", COLUMNS="120")
    terminal = open_terminal(env, "--model", "claude-opus-5-5", "--fallback", "claude-haiku-5-5")
    terminal.expect("agentgod> ")
    terminal.type("/models\n")
    terminal.expect(r"claude-opus-5-5  \(MODEL, DEEP_MODEL\)")
    terminal.expect(r"claude-haiku-5-5  \(FAST_MODEL, fallback 1\)")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    assert fake_api.messages() == [], "looking costs nothing"
