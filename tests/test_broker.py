"""broker: real socketpairs, real child processes, the real SDK against the fake Messages API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from conftest import ROOT, TEST_KEY
from fakeapi import FakeMessagesAPI, Reply, Request

import agent_runtime
import broker
import models
from agent_runtime import BROKER_FD_VARIABLE, BrokerRefused, LLMError
from ledger import MIN_OUTPUT_TOKENS, BudgetExhaustedError, Usage

Send = Callable[[dict[str, Any]], Any]
MODEL = "claude-sonnet-5-5"


def sdk(fake_api: FakeMessagesAPI, **options: Any) -> Send:
    """The road as the product has it: the real SDK, holding the key, posting to the fake."""
    client = anthropic.Anthropic(base_url=fake_api.base_url, api_key=TEST_KEY, **options)
    return lambda request: client.messages.create(**request)


def make_broker(send: Send, ledger: Usage, **options: Any) -> broker.Broker:
    return broker.Broker(
        send,
        ledger,
        price=lambda model: models.price_of(model)[0],
        effort_for_model=models.effort_for_model,
        budget_error=BudgetExhaustedError,
        **options,
    )


@pytest.fixture
def ledger() -> Usage:
    return Usage()


@pytest.fixture
def door(fake_api: FakeMessagesAPI, ledger: Usage) -> Iterator[broker.Broker]:
    """A broker whose road is the SDK (no retries: the tests script every reply)."""
    with make_broker(sdk(fake_api, max_retries=0), ledger) as opened:
        yield opened


def ask(
    monkeypatch: pytest.MonkeyPatch, channel: broker.Channel, prompt: str = "hello", **kwargs: Any
) -> str:
    """Call through the runtime in this process, as an agent holding the channel's end would."""
    monkeypatch.setenv(BROKER_FD_VARIABLE, str(channel.child_fd))
    return agent_runtime.call_llm(prompt, **kwargs)


def read_frame(sock: socket.socket) -> dict[str, Any] | None:
    header = sock.recv(4, socket.MSG_WAITALL)
    if len(header) < 4:
        return None
    frame: dict[str, Any] = json.loads(sock.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL))
    return frame


def exchange(channel: broker.Channel, frame: dict[str, Any]) -> dict[str, Any]:
    """Write one frame on the agent's end, as a hostile agent could, and read the answer."""
    with socket.socket(fileno=os.dup(channel.child_fd)) as sock:
        sock.sendall(agent_runtime.encode_frame(frame))
        answer = read_frame(sock)
    assert answer is not None, "the broker hung up"
    return answer


def messages_frame(**request: Any) -> dict[str, Any]:
    body = {"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **request}
    return {"op": "messages", "request": body, "web": False, "files": []}


def start_child(channel: broker.Channel, body: str) -> subprocess.Popen[str]:
    """A real agent process: it inherits the channel's end and nothing of our environment."""
    script = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport agent_runtime\n"
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", script + textwrap.dedent(body)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", **channel.child_env()},
        pass_fds=(channel.child_fd,),
    )
    channel.close_child_end()
    return process


def finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return out


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the state never came")
        time.sleep(0.005)


# ---- a round trip --------------------------------------------------------------------------


def test_an_agent_process_calls_through_its_inherited_socket(
    fake_api: FakeMessagesAPI, door: broker.Broker, ledger: Usage
) -> None:
    fake_api.queue(Reply("the model's words", usage={"input_tokens": 11, "output_tokens": 7}))
    channel = door.open_channel("writer", model=MODEL)
    child = start_child(channel, 'print(agent_runtime.call_llm("hello", system="be brief"))')
    assert finish(child).strip() == "the model's words"
    [request] = fake_api.messages()
    assert request.api_key == TEST_KEY, "the broker's road added the key"
    assert request.body == {
        "model": MODEL,
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "hello"}],
        "system": "be brief",
    }
    assert channel.wait_ended(10), "the agent's exit closed its end"
    usage = door.usage_of("writer")
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (1, 11, 7)
    assert usage.usd == pytest.approx((11 * 2.0 + 7 * 10.0) / 1_000_000)
    assert ledger.totals().calls == 1
    assert ledger.cost_usd() == pytest.approx(usage.usd)


def test_the_key_never_reaches_the_agent(fake_api: FakeMessagesAPI, door: broker.Broker) -> None:
    """Not in its environment, not in an answer, not in an error that echoes the key."""
    fake_api.queue(Reply("fine"), Reply.error(400, f"bad request from key {TEST_KEY}"))
    channel = door.open_channel("nosy", model=MODEL)
    child = start_child(
        channel,
        f"""
        import json, os, socket
        print(json.dumps(dict(os.environ)))
        sock = socket.socket(fileno=int(os.environ[{BROKER_FD_VARIABLE!r}]))
        for _ in range(2):
            sock.sendall({agent_runtime.encode_frame(messages_frame())!r})
            size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
            print(sock.recv(size, socket.MSG_WAITALL).hex())
        """,
    )
    lines = finish(child).splitlines()
    environment = json.loads(lines[0])
    assert set(environment) <= {"PATH", BROKER_FD_VARIABLE, "LC_CTYPE"}
    answers = [json.loads(bytes.fromhex(line)) for line in lines[1:]]
    assert answers[0]["ok"] is True
    assert answers[1]["error"]["type"] == "invalid_request"
    assert "[redacted]" in answers[1]["error"]["message"]
    received = "\n".join(lines[:1] + [json.dumps(a) for a in answers])
    assert TEST_KEY not in received
    assert all(r.api_key == TEST_KEY for r in fake_api.messages())


def test_forged_usage_lines_change_nothing(
    fake_api: FakeMessagesAPI, door: broker.Broker, ledger: Usage
) -> None:
    fake_api.queue(Reply("x", usage={"input_tokens": 20, "output_tokens": 5}))
    channel = door.open_channel("forger", model=MODEL)
    forged = json.dumps({"input_tokens": 999_999, "output_tokens": 999_999})
    child = start_child(
        channel,
        f"""
        for _ in range(3):
            sys.stderr.write("__AGENT_USAGE__ " + {forged!r} + "\\n")
        print(agent_runtime.call_llm("hello"))
        sys.stderr.write("__AGENT_USAGE__ " + {forged!r} + "\\n")
        """,
    )
    finish(child)
    totals = ledger.totals()
    assert (totals.calls, totals.input_tokens, totals.output_tokens) == (1, 20, 5)
    assert channel.usage.tokens == 25


def test_two_agents_calls_do_not_wait_for_each_other(
    fake_api: FakeMessagesAPI, door: broker.Broker
) -> None:
    """The fake holds the first call's answer until the second call has arrived."""
    second_arrived = threading.Event()
    seen: list[str] = []
    lock = threading.Lock()

    def handler(request: Request) -> Reply:
        with lock:
            first = not seen
            seen.append(request.prompt)
        if first:
            return Reply("first" if second_arrived.wait(30) else "held alone: serialised")
        second_arrived.set()
        return Reply("second")

    fake_api.handler = handler
    one = start_child(door.open_channel("one", model=MODEL), 'print(agent_runtime.call_llm("a"))')
    wait_until(lambda: len(fake_api.messages()) == 1)
    two = start_child(door.open_channel("two", model=MODEL), 'print(agent_runtime.call_llm("b"))')
    assert finish(two).strip() == "second"
    assert finish(one).strip() == "first"
    held, passed = fake_api.messages()
    assert held.replied > passed.arrived


def test_the_channel_ends_when_the_agent_dies(door: broker.Broker) -> None:
    channel = door.open_channel("doomed", model=MODEL)
    child = start_child(channel, "sys.stdin.read()")
    assert not channel.ended
    child.kill()
    child.wait(10)
    assert channel.wait_ended(10)


def test_a_call_in_flight_when_the_agent_dies_is_still_billed(
    fake_api: FakeMessagesAPI, door: broker.Broker, ledger: Usage
) -> None:
    release = threading.Event()
    fake_api.handler = lambda request: Reply("late") if release.wait(30) else Reply("x")
    channel = door.open_channel("dies", model=MODEL)
    child = start_child(channel, 'agent_runtime.call_llm("hello")')
    wait_until(lambda: len(fake_api.messages()) == 1)
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    release.set()
    assert channel.wait_ended(10)
    assert channel.usage.calls == 1
    assert ledger.totals().calls == 1


# ---- what an agent may ask for -------------------------------------------------------------


def test_a_model_outside_the_grant_is_refused(
    fake_api: FakeMessagesAPI,
    door: broker.Broker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_MODEL", "claude-opus-5-5")
    channel = door.open_channel("cheap", model=MODEL, allowed_models={"claude-haiku-5-5"})
    with pytest.raises(BrokerRefused) as caught:
        ask(monkeypatch, channel)
    assert caught.value.kind == "forbidden"
    assert "claude-opus-5-5" in caught.value.message
    assert fake_api.messages() == []
    monkeypatch.setenv("AGENT_MODEL", "claude-haiku-5-5")
    ask(monkeypatch, channel)
    assert fake_api.messages()[0].body["model"] == "claude-haiku-5-5"
    assert channel.usage.refusals == {"forbidden": 1}


@pytest.mark.parametrize(
    "frame",
    [
        messages_frame(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
        messages_frame(temperature=0.5),
        messages_frame(stream=True),
        messages_frame(metadata={"user_id": "x"}),
        {**messages_frame(), "stream": True},
        {**messages_frame(), "op": "count_tokens"},
        {**messages_frame(), "request": "hello"},
        messages_frame(max_tokens="100"),
        messages_frame(max_tokens=True),
        messages_frame(max_tokens=0),
        messages_frame(messages=[]),
        messages_frame(messages=[{"role": "system", "content": "x"}]),
        messages_frame(messages=[{"role": "user", "content": "x", "name": "y"}]),
        messages_frame(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}]),
        messages_frame(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]),
        messages_frame(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": "x",
                            "cache_control": {"type": "ephemeral", "ttl": "1h"},
                        }
                    ],
                }
            ]
        ),
        messages_frame(system={"text": "x"}),
        messages_frame(output_config={"format": {"type": "json_schema", "schema": {}}}),
        messages_frame(output_config={"effort": "ultra"}),
        {**messages_frame(), "files": "notes.txt"},
        {**messages_frame(), "web": "yes"},
    ],
)
def test_anything_outside_the_allowlist_is_refused_not_stripped(
    frame: dict[str, Any], fake_api: FakeMessagesAPI, door: broker.Broker
) -> None:
    channel = door.open_channel("pushy", model=MODEL)
    answer = exchange(channel, frame)
    assert answer["ok"] is False
    assert answer["error"]["type"] == "invalid", answer
    assert fake_api.messages() == []
    assert exchange(channel, messages_frame())["ok"] is True, "the channel is still open"


def test_cached_text_blocks_are_allowed(fake_api: FakeMessagesAPI, door: broker.Broker) -> None:
    blocks = [{"type": "text", "text": "stable", "cache_control": {"type": "ephemeral"}}]
    channel = door.open_channel("cacher", model=MODEL)
    answer = exchange(channel, messages_frame(system=blocks))
    assert answer["ok"] is True
    assert fake_api.messages()[0].body["system"] == blocks


def test_max_tokens_is_clamped_to_the_share(
    fake_api: FakeMessagesAPI, door: broker.Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = door.open_channel("thrifty", model=MODEL, share_tokens=3000)
    ask(monkeypatch, channel, max_tokens=4096)
    sent = fake_api.messages()[0].body["max_tokens"]
    assert 2900 < sent < 3000, "what the share holds, less the prompt's estimate"


def test_max_tokens_never_exceeds_the_cap(
    fake_api: FakeMessagesAPI, door: broker.Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = door.open_channel("greedy", model=MODEL)
    ask(monkeypatch, channel, max_tokens=100_000)
    assert fake_api.messages()[0].body["max_tokens"] == broker.MAX_TOKENS_CAP


def test_max_tokens_is_clamped_to_what_the_budget_can_pay(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Usage(budget_usd=0.02)  # about 2,000 output tokens of Sonnet 5.5
    with make_broker(sdk(fake_api, max_retries=0), ledger) as door:
        answer = exchange(door.open_channel("a", model=MODEL), messages_frame(max_tokens=8000))
    assert answer["ok"] is True
    sent = fake_api.messages()[0].body["max_tokens"]
    assert MIN_OUTPUT_TOKENS <= sent < 2000
    assert answer["max_tokens"] == sent


def test_a_spent_share_is_refused_and_the_agent_sees_it(
    fake_api: FakeMessagesAPI, door: broker.Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_api.queue(Reply("x", usage={"input_tokens": 50, "output_tokens": 1400}))
    channel = door.open_channel("spender", model=MODEL, share_tokens=1600)
    child = start_child(
        channel,
        """
        print(agent_runtime.call_llm("one"))
        try:
            agent_runtime.call_llm("two")
        except agent_runtime.BrokerRefused as error:
            print(error.kind, "|", error.message)
        """,
    )
    first, second = finish(child).splitlines()
    assert first == "x"
    assert second.startswith("budget | this agent's share of the budget is spent")
    assert len(fake_api.messages()) == 1
    assert channel.usage.refusals == {"budget": 1}


def test_a_spent_run_budget_is_refused(fake_api: FakeMessagesAPI) -> None:
    ledger = Usage(budget_usd=0.000_01)
    with make_broker(sdk(fake_api), ledger) as door:
        answer = exchange(door.open_channel("late", model=MODEL), messages_frame())
    assert answer["error"]["type"] == "budget"
    assert "budget is spent" in answer["error"]["message"]
    assert fake_api.messages() == []


@pytest.mark.parametrize(
    ("effort", "model", "asked", "sent"),
    [
        ("high", "claude-sonnet-5-5", None, "high"),
        ("max", "claude-sonnet-5-5", None, "high"),  # lowered to what the model has
        ("high", "claude-haiku-4-5", None, None),  # the model takes no effort
        ("high", "claude-sonnet-5-5", "low", "low"),  # an agent may ask for less
        ("medium", "claude-sonnet-5-5", "max", "medium"),  # never for more
        (None, "claude-sonnet-5-5", "high", None),  # no effort granted, none sent
    ],
)
def test_effort_is_the_grants_lowered_for_the_model(
    effort: str | None,
    model: str,
    asked: str | None,
    sent: str | None,
    fake_api: FakeMessagesAPI,
    door: broker.Broker,
) -> None:
    channel = door.open_channel("thinker", model=model, effort=effort)
    extra = {"output_config": {"effort": asked}} if asked else {}
    assert exchange(channel, messages_frame(**extra))["ok"] is True
    body = fake_api.messages()[0].body
    assert body.get("output_config") == ({"effort": sent} if sent else None)


def test_update_grant_applies_from_the_next_request(
    fake_api: FakeMessagesAPI, door: broker.Broker
) -> None:
    channel = door.open_channel("late_effort", model=MODEL)
    exchange(channel, messages_frame())
    channel.update_grant(effort="low", model="claude-haiku-5-5")
    exchange(channel, messages_frame())
    first, second = (r.body for r in fake_api.messages())
    assert (first["model"], first.get("output_config")) == (MODEL, None)
    assert (second["model"], second["output_config"]) == ("claude-haiku-5-5", {"effort": "low"})


def test_a_grant_always_allows_its_own_model_and_only_real_efforts(door: broker.Broker) -> None:
    with pytest.raises(ValueError, match="effort"):
        door.open_channel("x", model=MODEL, effort="ultra")
    channel = door.open_channel("x", model=MODEL)
    grant = channel.update_grant(allowed_models={"claude-haiku-5-5"})
    assert grant.allowed_models == {MODEL, "claude-haiku-5-5"}
    with pytest.raises(ValueError, match="effort"):
        channel.update_grant(effort="ultra")
    assert channel.grant == grant


WEB_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def test_web_search_only_for_a_web_agent_and_only_the_brokers_tools(
    fake_api: FakeMessagesAPI, ledger: Usage, monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_broker(sdk(fake_api, max_retries=0), ledger, web_tools=[WEB_TOOL]) as door:
        offline = door.open_channel("offline", model=MODEL)
        with pytest.raises(BrokerRefused, match="not allowed") as caught:
            ask(monkeypatch, offline, web=True)
        assert caught.value.kind == "forbidden"
        assert fake_api.messages() == []
        ask(monkeypatch, door.open_channel("online", model=MODEL, web_allowed=True), web=True)
    assert fake_api.messages()[0].body["tools"] == [WEB_TOOL]


def test_web_search_is_refused_when_the_run_has_none(
    door: broker.Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = door.open_channel("online", model=MODEL, web_allowed=True)
    with pytest.raises(BrokerRefused, match="not available"):
        ask(monkeypatch, channel, web=True)


def test_only_granted_files_are_attached(
    fake_api: FakeMessagesAPI, door: broker.Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("the notes ✓", encoding="utf-8")
    paper = tmp_path / "paper.pdf"
    paper.write_bytes(b"%PDF-1.4 fake")
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\xff\xfe\x00")
    files = {"notes.txt": notes, "paper.pdf": paper, "blob.bin": blob}
    channel = door.open_channel("reader", model=MODEL, files=files)
    with pytest.raises(BrokerRefused) as caught:
        ask(monkeypatch, channel, files=["secrets.txt"])
    assert caught.value.kind == "forbidden"
    with pytest.raises(BrokerRefused) as caught:
        ask(monkeypatch, channel, files=["blob.bin"])
    assert caught.value.kind == "invalid"
    assert fake_api.messages() == []
    ask(monkeypatch, channel, "summarise", files=["notes.txt", "paper.pdf"])
    [content] = [m["content"] for m in fake_api.messages()[0].body["messages"]]
    text_doc, pdf_doc, prompt = content
    assert text_doc == {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "the notes ✓"},
        "title": "notes.txt",
    }
    assert pdf_doc["source"] == {
        "type": "base64",
        "media_type": "application/pdf",
        "data": "JVBERi0xLjQgZmFrZQ==",
    }
    assert prompt == {"type": "text", "text": "summarise"}


# ---- failures ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [(429, "rate_limit"), (529, "overloaded"), (500, "api_error"), (400, "invalid_request")],
)
def test_api_errors_reach_the_agent_by_type(
    status: int,
    kind: str,
    fake_api: FakeMessagesAPI,
    door: broker.Broker,
    ledger: Usage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_api.queue(Reply.error(status))
    channel = door.open_channel("unlucky", model=MODEL)
    with pytest.raises(LLMError) as caught:
        ask(monkeypatch, channel)
    assert not isinstance(caught.value, BrokerRefused)
    assert caught.value.kind == kind
    assert f"HTTP {status}" in caught.value.message
    assert channel.usage.failures == {kind: 1}
    assert ledger.totals().calls == 0


def test_a_timeout_and_an_unreachable_api_are_typed(
    fake_api: FakeMessagesAPI, ledger: Usage, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_api.handler = lambda request: Reply("slow", latency=3)
    slow = sdk(fake_api, max_retries=0, timeout=0.2)
    unreachable = anthropic.Anthropic(
        base_url="http://127.0.0.1:9", api_key=TEST_KEY, max_retries=0
    )
    for send, kind in (
        (slow, "timeout"),
        (lambda r: unreachable.messages.create(**r), "connection"),
    ):
        with make_broker(send, ledger) as door:
            with pytest.raises(LLMError) as caught:
                ask(monkeypatch, door.open_channel("a", model=MODEL))
            assert caught.value.kind == kind


def test_no_error_an_agent_sees_holds_a_secret(
    ledger: Usage, monkeypatch: pytest.MonkeyPatch
) -> None:
    def leaky(request: dict[str, Any]) -> Any:
        raise RuntimeError(f"failed with key {TEST_KEY} and password hunter2-plain-words")

    door = make_broker(leaky, ledger, secrets=["hunter2-plain-words"])
    with door, pytest.raises(LLMError) as caught:
        ask(monkeypatch, door.open_channel("a", model=MODEL))
    assert caught.value.kind == "api_error"
    assert TEST_KEY not in caught.value.message
    assert "hunter2-plain-words" not in caught.value.message
    assert "[redacted]" in caught.value.message


# ---- frames --------------------------------------------------------------------------------


def test_an_oversized_request_is_refused_and_the_channel_stays(
    fake_api: FakeMessagesAPI, ledger: Usage
) -> None:
    with make_broker(sdk(fake_api), ledger, max_request_bytes=1000) as door:
        channel = door.open_channel("wordy", model=MODEL)
        answer = exchange(channel, messages_frame(system="x" * 5000))
        assert answer["error"]["type"] == "too_large"
        assert exchange(channel, messages_frame())["ok"] is True
    assert len(fake_api.messages()) == 1
    assert channel.usage.refusals == {"too_large": 1}


def test_a_request_made_too_large_by_its_attachments_is_refused(
    fake_api: FakeMessagesAPI, ledger: Usage, tmp_path: Path
) -> None:
    big = tmp_path / "big.txt"
    big.write_text("y" * 5000)
    with make_broker(sdk(fake_api), ledger, max_request_bytes=1000) as door:
        channel = door.open_channel("attacher", model=MODEL, files={"big.txt": big})
        answer = exchange(channel, {**messages_frame(), "files": ["big.txt"]})
    assert answer["error"]["type"] == "too_large"
    assert fake_api.messages() == []


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x00\x00\x00",
        b"\x00\x00\x00\x05hello",
        b"\x00\x00\x00\x02[]",
        b"\x00\x00\x00\x02\xff\xfe",
        len(b"[" * 100_000).to_bytes(4, "big") + b"[" * 100_000,
        (broker.MAX_DRAIN_BYTES + 1).to_bytes(4, "big"),
    ],
    ids=["empty", "not-json", "not-an-object", "not-utf8", "nested-too-deep", "beyond-drain"],
)
def test_a_malformed_frame_is_answered_then_the_channel_closes(
    data: bytes, fake_api: FakeMessagesAPI, door: broker.Broker
) -> None:
    channel = door.open_channel("garbled", model=MODEL)
    with socket.socket(fileno=os.dup(channel.child_fd)) as sock:
        sock.sendall(data)
        answer = read_frame(sock)
        assert answer is not None and answer["error"]["type"] == "malformed", answer
        assert read_frame(sock) is None, "then the broker hung up"
    assert channel.wait_ended(10)
    assert fake_api.messages() == []


def test_a_frame_cut_short_ends_the_channel_without_an_answer(door: broker.Broker) -> None:
    channel = door.open_channel("cut", model=MODEL)
    with socket.socket(fileno=os.dup(channel.child_fd)) as sock:
        sock.sendall(b"\x00\x00\x01\x00{")
    channel.close_child_end()
    assert channel.wait_ended(10)
    assert channel.usage.refusals == {}


# ---- accounting and closing ----------------------------------------------------------------


def test_each_agent_is_billed_its_own_calls_and_its_meter_too(
    fake_api: FakeMessagesAPI, door: broker.Broker, ledger: Usage
) -> None:
    fake_api.handler = lambda request: Reply(
        "x", usage={"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 1000}
    )
    meter = Usage()
    first = door.open_channel("repeat", model=MODEL, meter=meter)
    exchange(first, messages_frame())
    exchange(first, messages_frame(model="claude-haiku-5-5"))
    again = door.open_channel("repeat", model=MODEL)
    exchange(again, messages_frame())
    other = door.open_channel("other", model=MODEL)
    exchange(other, messages_frame())
    assert door.usage_of("repeat").calls == 2, "the haiku call was refused"
    assert door.usage_of("repeat").refusals == {"forbidden": 1}
    assert door.usage_of("repeat").cache_read_tokens == 2000
    assert door.usage_of("other").calls == 1
    assert meter.totals().calls == 1
    assert meter.cost_usd() == pytest.approx(first.usage.usd)
    assert ledger.totals().calls == 3
    everyone = door.usage_of("repeat").usd + door.usage_of("other").usd
    assert ledger.cost_usd() == pytest.approx(everyone)


def test_close_ends_every_channel(door: broker.Broker) -> None:
    channel = door.open_channel("open", model=MODEL)
    with socket.socket(fileno=os.dup(channel.child_fd)) as sock:
        door.close()
        assert channel.ended
        assert read_frame(sock) is None
    with pytest.raises(RuntimeError, match="closed"):
        door.open_channel("late", model=MODEL)
