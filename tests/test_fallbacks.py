"""Fallbacks (issue 26): MODEL_FALLBACKS and --fallback name models tried in order when a call
fails with 429, 529, 5xx, a timeout or a dropped connection after its own retries — never after
a 400, 401, 403, 404 or a refusal. A model that failed is set aside for every call of the
process, the run's and its agents' alike; each call records the model asked of and the one that
answered, and is priced as the one that answered.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY, agentgod
from fakeapi import FakeMessagesAPI, Reply, Request
from pydantic import BaseModel
from scripted import Factory, agent_spec, plan

from agentgod import agent_runtime, broker, config, llm, models, problems, wire
from agentgod.agent_runtime import BROKER_FD_VARIABLE
from agentgod.ledger import BudgetExhaustedError, Usage

MAIN = "claude-sonnet-5-5"
FALLBACK = "claude-haiku-5-5"
TASK = "write a short comparative survey of three sorting algorithms for a newsletter"


class Verdict(BaseModel):
    missing: str
    done: bool


@pytest.fixture(autouse=True)
def nothing_set_aside() -> Iterator[None]:
    llm.forget_cooldowns()
    yield
    llm.forget_cooldowns()


def of(api: FakeMessagesAPI, model: str) -> list[Request]:
    return [r for r in api.messages() if r.body.get("model") == model]


def failing(api: FakeMessagesAPI, model: str, status: int, **headers: str) -> None:
    """Every request for `model` gets `status` (with these headers), whoever sends it."""
    api.route(lambda r: r.body.get("model") == model, Reply.error(status, headers=headers))


def fallbacks(monkeypatch: pytest.MonkeyPatch, *entries: str) -> config.Settings:
    monkeypatch.setenv("MODEL", MAIN)
    monkeypatch.setenv("MODEL_FALLBACKS", ",".join(entries))
    return config.settings()


# ---- a whole run -------------------------------------------------------------------------------


def test_a_run_whose_model_is_overloaded_on_every_try_is_answered_by_the_fallback(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("researcher"), agent_spec("writer", ["researcher"]))]
    failing(fake_api, MAIN, 529)
    done = agentgod(
        isolated_home, fake_api, "--json", "--no-input", "--fallback", FALLBACK, TASK, MODEL=MAIN
    )
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["answer"] == "MERGED: researcher, writer"
    assert len(of(fake_api, MAIN)) == 3, "one call's three tries, then it was set aside"
    asked_of_main = ["plan", "generate", "generate", "agent", "agent", "merge"]
    assert reply["fallbacks"] == [
        {"asked": MAIN, "answered": FALLBACK, "calls": len(asked_of_main)}
    ]
    said = f"{MAIN} did not answer (overloaded (529)): {FALLBACK}, a fallback, answered instead"
    assert any(said in warning for warning in reply["warnings"]), reply["warnings"]
    assert said in done.stderr, "the display says so too"
    shown = json.loads(agentgod(isolated_home, None, "show", reply["run_id"], "--json").stdout)
    haiku = models.PRICES[FALLBACK]
    for call in shown["calls"]:
        assert call["model"] == FALLBACK, call
        priced = (
            call["input_tokens"] * haiku.input
            + call["output_tokens"] * haiku.output
            + call["cache_write_tokens"] * haiku.cache_write
            + call["cache_read_tokens"] * haiku.cache_read
        ) / 1_000_000
        assert call["usd"] == pytest.approx(priced), "priced as the model that answered"
    assert sorted(c["asked"] for c in shown["calls"]) == sorted([MAIN] * 6 + [FALLBACK] * 2)
    assert shown["fallbacks"] == reply["fallbacks"]
    traced = agentgod(isolated_home, None, "show", reply["run_id"], "--trace", "-")
    assert traced.returncode == 0, traced.stderr
    [resource] = json.loads(traced.stdout)["resourceSpans"]
    chats = [
        {item["key"]: item["value"].get("stringValue") for item in span["attributes"]}
        for span in resource["scopeSpans"][0]["spans"]
        if span["name"].startswith("chat ")
    ]
    pairs = sorted((c["gen_ai.request.model"], c["gen_ai.response.model"]) for c in chats)
    assert pairs == sorted([(MAIN, FALLBACK)] * 6 + [(FALLBACK, FALLBACK)] * 2)


def test_four_parallel_agents_under_a_429_cooldown_make_one_failing_request_between_them(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """The parent's first call meets the 429 (its retry-after is past any deadline, so it is
    not waited for); from then on the run's calls and its four agents' calls, running at once,
    go to the fallback: no agent rediscovers the 429."""
    factory = Factory(fake_api)
    names = ["alpha_part", "beta_part", "gamma_part", "delta_part"]
    factory.plans = [{**plan(*(agent_spec(name) for name in names)), "independent": True}]
    failing(fake_api, MAIN, 429, **{"retry-after": "600", "retry-after-ms": "600000"})
    done = agentgod(
        isolated_home, fake_api, "--json", "--no-input", "--fallback", FALLBACK, TASK, MODEL=MAIN
    )
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["answer"] == "MERGED: " + ", ".join(sorted(names))
    assert len(of(fake_api, MAIN)) == 1, [r.body.get("system") for r in of(fake_api, MAIN)]
    assert len(factory.of("agent")) == 4
    assert {r.body["model"] for r in factory.of("agent")} == {FALLBACK}


# ---- never on a request another model would fail the same way -------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_a_client_error_is_never_tried_on_another_model(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    settings = fallbacks(monkeypatch, FALLBACK)
    failing(fake_api, MAIN, status)
    with pytest.raises(wire.APIStatusError) as raised:
        llm.complete("hi", model=MAIN, effort=None, settings=settings)
    assert raised.value.status_code == status
    assert of(fake_api, FALLBACK) == [], "the fallback never saw it"
    assert len(of(fake_api, MAIN)) == 1, "and it was not retried"
    assert llm.set_aside(MAIN, settings.base_url) is None


def test_a_refusal_is_never_tried_on_another_model(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = fallbacks(monkeypatch, FALLBACK)
    fake_api.route(lambda r: r.body["model"] == MAIN, Reply("", stop_reason="refusal"))
    with pytest.raises(llm.StructuredReplyError) as raised:
        llm.complete_structured("judge", Verdict, model=MAIN, effort=None, settings=settings)
    assert raised.value.stop_reason == "refusal"
    assert of(fake_api, FALLBACK) == []


# ---- what falls back, and how ------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503, 529])
def test_a_transient_failure_after_its_retries_is_answered_by_the_next_model(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    settings = fallbacks(monkeypatch, "claude-nonexistent-1", FALLBACK)
    failing(fake_api, MAIN, status)
    failing(fake_api, "claude-nonexistent-1", 529)
    spent = Usage()
    text = llm.complete("hi", model=MAIN, effort="high", usage=spent, settings=settings)
    assert text == "ok"
    assert len(of(fake_api, MAIN)) == settings.api_retries + 1, "its own retries first"
    assert len(of(fake_api, "claude-nonexistent-1")) == settings.api_retries + 1
    [call] = spent.call_log()
    assert (call.asked, call.model) == (MAIN, FALLBACK)
    assert spent.cost_usd() == pytest.approx(call.usd) and call.usd > 0
    assert llm.set_aside(MAIN, settings.base_url) is not None
    llm.complete("again", model=MAIN, effort=None, settings=settings)
    assert len(of(fake_api, MAIN)) == settings.api_retries + 1, "set aside: not asked again"


def test_a_retry_after_that_fits_the_deadline_is_waited_for_on_the_same_model(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = fallbacks(monkeypatch, FALLBACK)
    fake_api.queue(Reply.error(429, headers={"retry-after-ms": "20"}))
    spent = Usage()
    assert llm.complete("hi", model=MAIN, effort=None, usage=spent, settings=settings) == "ok"
    assert [r.body["model"] for r in fake_api.messages()] == [MAIN, MAIN]
    assert not spent.call_log()[0].fell_back


def test_an_unreachable_server_falls_back_to_a_model_served_elsewhere_without_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dropped connection falls back too; a fallback on an endpoint of its own (a local
    Ollama backing the API up) never sees the Anthropic key, and costs nothing."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    with FakeMessagesAPI(
        lambda r: Reply.json({"missing": "", "done": True}), mode="ollama"
    ) as local:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", dead)
        monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
        settings = fallbacks(monkeypatch, f"qwen3:8b@{local.base_url}")
        spent = Usage()
        verdict = llm.complete_structured(
            "judge", Verdict, model=MAIN, effort="high", usage=spent, settings=settings
        )
        assert verdict == Verdict(missing="", done=True)
        sent = local.messages()
    assert sent and all("x-api-key" not in r.headers for r in sent), "the key stays home"
    assert not any("effort" in (r.body.get("output_config") or {}) for r in sent)
    assert {(c.asked, c.model) for c in spent.call_log()} == {(MAIN, "qwen3:8b")}
    assert spent.cost_usd() == 0.0 and spent.unpriced() == []


def test_under_a_budget_a_model_with_no_known_price_is_refused_before_any_request(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://models.example/v1")
    settings = config.settings()
    with pytest.raises(llm.UnpricedModelError) as raised:
        llm.complete(
            "hi", model="some-model", effort=None, usage=Usage(budget_usd=1.0), settings=settings
        )
    problem = problems.explain(raised.value)
    assert "some-model has no known price" in problem.headline
    assert "models.toml" in problem.advice and "--budget" in problem.advice
    assert fake_api.messages() == []


# ---- the broker: agents fall back the same way, and share the cooldown --------------------------


def broker_for(settings: config.Settings, spent: Usage, *, dearer: bool = True) -> broker.Broker:
    return broker.Broker(
        lambda request: llm.forward(request, settings, dearer=dearer),
        spent,
        price=settings.price_of,
        effort_for_model=settings.effort_for,
        profile=settings.profile,
        budget_error=BudgetExhaustedError,
    )


def ask(monkeypatch: pytest.MonkeyPatch, channel: broker.Channel, prompt: str) -> str:
    monkeypatch.setenv(BROKER_FD_VARIABLE, str(channel.child_fd))
    return agent_runtime.call_llm(prompt)


def test_agents_share_the_cooldown_the_parent_found_and_are_billed_as_the_fallback(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = fallbacks(monkeypatch, FALLBACK)
    failing(fake_api, MAIN, 529)
    spent = Usage()
    llm.complete("the parent's call", model=MAIN, effort=None, settings=settings)
    tries = len(of(fake_api, MAIN))
    answers: list[str] = []
    with broker_for(settings, spent) as door:
        channels = [door.open_channel(f"agent_{n}", model=MAIN) for n in range(4)]

        def one(channel: broker.Channel) -> None:
            frame = {
                "op": "messages",
                "request": {"max_tokens": 50, "messages": [{"role": "user", "content": "go"}]},
                "web": False,
                "files": [],
            }
            with socket.socket(fileno=__import__("os").dup(channel.child_fd)) as sock:
                sock.sendall(agent_runtime.encode_frame(frame))
                header = sock.recv(4, socket.MSG_WAITALL)
                body = sock.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL)
            answers.append(json.loads(body)["model"])

        threads = [threading.Thread(target=one, args=(c,)) for c in channels]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        usage = [door.usage_of(f"agent_{n}") for n in range(4)]
    assert answers == [FALLBACK] * 4, "each agent is told which model answered"
    assert len(of(fake_api, MAIN)) == tries, "no agent rediscovered the overload"
    haiku = models.PRICES[FALLBACK]
    for each, call in zip(usage, spent.call_log(), strict=True):
        assert each.calls == 1 and each.usd == pytest.approx(call.usd)
        assert (call.asked, call.model) == (MAIN, FALLBACK)
        expected = (call.input_tokens * haiku.input + call.output_tokens * haiku.output) / 1e6
        assert call.usd == pytest.approx(expected)


def test_a_fallback_that_cannot_take_what_the_call_carries_is_passed_over(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's web call is never sent to a model without the API's server tools; under a
    budget, never to a dearer model than its hold was taken for."""
    settings = fallbacks(monkeypatch, f"qwen3:8b@{fake_api.base_url}", "claude-opus-5-5")
    failing(fake_api, MAIN, 529)
    request: dict[str, Any] = {
        "model": MAIN,
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "look it up"}],
        "tools": agent_runtime.web_tools(1),
    }
    with pytest.raises(wire.OverloadedError):
        llm.forward(request, settings, dearer=False)
    assert of(fake_api, "qwen3:8b") == [] and of(fake_api, "claude-opus-5-5") == []
    reply = llm.forward(request, settings)
    assert reply["model"] == "claude-opus-5-5", "the dearer one, when no budget holds it"
    assert of(fake_api, "qwen3:8b") == []
