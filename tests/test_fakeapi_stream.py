"""The fake Messages API streams as the real one does, read raw and through the real SDK."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

import anthropic
import pytest
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI, Reply, WebTurn

MODEL = "claude-sonnet-5-5"


def raw_events(api: FakeMessagesAPI, **body: Any) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """POST a streaming request with urllib; the content type and every (event, data) in order."""
    request = urllib.request.Request(
        api.base_url + "/v1/messages",
        method="POST",
        data=json.dumps(
            {"model": MODEL, "max_tokens": 64, "stream": True, "messages": [], **body}
        ).encode(),
        headers={"content-type": "application/json", "x-api-key": TEST_KEY},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        kind = response.headers["content-type"]
        text = response.read().decode()
    events = []
    for block in text.split("\n\n"):
        if block.strip():
            event, data = block.split("\n")
            events.append((event.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return kind, events


def client(api: FakeMessagesAPI) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=TEST_KEY, base_url=api.base_url, max_retries=0)


def test_a_stream_comes_in_the_apis_order(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("Three little words", thinking=True))
    kind, events = raw_events(fake_api)
    assert kind.startswith("text/event-stream")
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "ping",
        *("content_block_start", "content_block_delta", "content_block_stop"),  # thinking
        "content_block_start",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert (start["content"], start["stop_reason"], start["usage"]["output_tokens"]) == (
        [],
        None,
        1,
    )
    deltas = [data.get("delta", {}) for _, data in events]
    texts = [delta["text"] for delta in deltas if delta.get("type") == "text_delta"]
    assert texts == ["Three ", "little ", "words"]
    ending = events[-2][1]
    [request] = fake_api.messages()
    assert ending["delta"]["stop_reason"] == "end_turn"
    assert ending["usage"] == request.reply["usage"]  # totals, not increments


def test_the_sdk_rebuilds_a_streamed_web_turn_as_it_was_sent(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply(web=WebTurn()))
    tools = [{"type": "web_search_20250305", "name": "web_search"}]
    with client(fake_api).messages.stream(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "python release date"}],
        tools=tools,  # type: ignore[arg-type]
    ) as stream:
        message = stream.get_final_message()
    [request] = fake_api.messages()
    sent = request.reply
    assert [block.type for block in message.content] == [b["type"] for b in sent["content"]]
    assert message.content[0].to_dict() == sent["content"][0]  # server_tool_use, input and all
    assert message.content[1].to_dict() == sent["content"][1]  # the results, encrypted content
    cited = message.content[-1]
    assert cited.type == "text"
    assert cited.text == sent["content"][-1]["text"]
    assert [c.to_dict() for c in cited.citations or []] == sent["content"][-1]["citations"]
    assert message.usage.server_tool_use is not None
    assert message.usage.server_tool_use.web_search_requests == 1


def test_a_held_stream_waits_after_its_first_piece_until_let_go(fake_api: FakeMessagesAPI) -> None:
    gate = threading.Event()
    fake_api.queue(Reply("First words, then the rest.", hold=gate, stream_delay=0.01))
    seen: list[str] = []

    def read() -> None:
        with client(fake_api).messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            seen.extend(event.text for event in stream if event.type == "text")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.005)
    assert seen == ["First "]
    [request] = fake_api.messages()
    assert request.ended == 0  # the reply is still open
    gate.set()
    reader.join(timeout=10)
    assert "".join(seen) == "First words, then the rest."
    assert fake_api.wait_ended(1)[0].sent == request.length


def test_pieces_that_are_not_the_text_are_a_broken_script(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("one two", pieces=["one", "three"]))
    stream = client(fake_api).messages.stream(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    with pytest.raises(anthropic.InternalServerError, match="pieces"), stream:
        pass
