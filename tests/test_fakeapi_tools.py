"""fakeapi's server tools, documents and images, driven by the real SDK as the product drives it."""

from __future__ import annotations

import base64
import copy
from typing import Any

import anthropic
import pytest
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI, Fetch, Page, Reply, Search, WebTurn, web_reply

MODEL = "claude-sonnet-5-5"
SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
FETCH = {
    "type": "web_fetch_20250910",
    "name": "web_fetch",
    "max_uses": 2,
    "citations": {"enabled": True},
}
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


@pytest.fixture
def client(fake_api: FakeMessagesAPI) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake_api.base_url, api_key=TEST_KEY, max_retries=0)


def create(client: anthropic.Anthropic, content: Any = "look it up", **request: Any) -> Any:
    messages = request.pop("messages", [{"role": "user", "content": content}])
    return client.messages.create(model=MODEL, max_tokens=100, messages=messages, **request)


def bad_request(client: anthropic.Anthropic, **request: Any) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(client, **request)
    return str(caught.value.message)


def test_a_search_turn_is_shaped_like_the_real_apis(
    fake_api: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake_api.queue(
        web_reply(
            [("Python 3.14", "https://python.org/3.14", "Python 3.14 came out in October.")],
            query="python 3.14 release",
        )
    )
    reply = create(client, tools=[SEARCH])
    kinds = [block.type for block in reply.content]
    assert kinds == ["server_tool_use", "web_search_tool_result", "text", "text"]
    use, result, _, cited = reply.content
    assert use.id.startswith("srvtoolu_") and use.input == {"query": "python 3.14 release"}
    assert result.tool_use_id == use.id
    [found] = result.content
    assert (found.url, found.title) == ("https://python.org/3.14", "Python 3.14")
    assert found.encrypted_content
    [citation] = cited.citations
    assert citation.type == "web_search_result_location"
    assert citation.url == "https://python.org/3.14"
    assert citation.cited_text == "Python 3.14 came out in October."
    assert reply.usage.server_tool_use.web_search_requests == 1
    assert reply.usage.server_tool_use.web_fetch_requests == 0


def test_unscripted_it_searches_the_prompt_and_fetches_its_urls(
    fake_api: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake_api.pages.append(Page("https://a.example/tides", "Tides", "Tides follow the moon."))
    searched = create(client, "why are there tides", tools=[SEARCH, FETCH])
    assert searched.content[0].input == {"query": "why are there tides"}
    assert searched.content[1].content[0].url == "https://a.example/tides"
    fetched = create(client, "read https://a.example/tides.", tools=[SEARCH, FETCH])
    assert fetched.content[0].name == "web_fetch"
    page = fetched.content[1].content
    assert page.type == "web_fetch_result" and page.url == "https://a.example/tides"
    assert page.content.source.data == "Tides follow the moon."
    citation = fetched.content[-1].citations[0]
    assert (citation.type, citation.document_title) == ("char_location", "Tides")
    assert fetched.usage.server_tool_use.web_fetch_requests == 1
    plain = create(client, "no tools here")
    assert [b.type for b in plain.content] == ["text"] and plain.usage.server_tool_use is None


def test_tool_errors_are_200s_and_unbilled(
    fake_api: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake_api.queue(
        Reply(
            web=WebTurn(
                [
                    Search("a", error="unavailable"),
                    Fetch("https://never.example/x"),
                    Search("b"),
                    Search("c"),
                ],
                cite=False,
            )
        )
    )
    reply = create(client, tools=[{**SEARCH, "max_uses": 2}, FETCH])
    results = [b.content for b in reply.content if b.type.endswith("_tool_result")]
    assert [getattr(r, "error_code", "ok") for r in results] == [
        "unavailable",
        "url_not_in_prior_context",
        "ok",
        "max_uses_exceeded",
    ]
    assert reply.stop_reason == "end_turn"
    assert reply.usage.server_tool_use.web_search_requests == 1, "only the search that ran"


def test_a_paused_turn_continues_only_unchanged_and_with_the_same_tools(
    fake_api: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake_api.queue(web_reply([("T", "https://t.example/", "the text")], pause=True))
    first = create(client, "q", tools=[SEARCH, FETCH])
    assert first.stop_reason == "pause_turn"
    assert [b.type for b in first.content] == ["server_tool_use", "web_search_tool_result"]
    sent = first.to_dict(mode="json")["content"]
    user = {"role": "user", "content": "q"}
    edited = copy.deepcopy(sent)
    edited[1]["content"][0]["encrypted_content"] = "tampered"
    assert "modified" in bad_request(
        client, messages=[user, {"role": "assistant", "content": edited}], tools=[SEARCH, FETCH]
    )
    assert "unchanged" in bad_request(
        client, messages=[user, {"role": "assistant", "content": sent[:1]}], tools=[SEARCH, FETCH]
    )
    assert "same tools" in bad_request(
        client, messages=[user, {"role": "assistant", "content": sent}], tools=[SEARCH]
    )
    assert "not in tools" in bad_request(
        client, messages=[user, {"role": "assistant", "content": sent}], tools=[FETCH]
    )
    fake_api.queue(Reply("a scripted reply the continuation must not take"))
    done = create(
        client, messages=[user, {"role": "assistant", "content": sent}], tools=[SEARCH, FETCH]
    )
    assert done.stop_reason == "end_turn"
    assert [b.type for b in done.content] == ["text", "text"]
    assert done.content[1].citations[0].url == "https://t.example/"
    assert done.usage.server_tool_use.web_search_requests == 0, "the search ran in the first leg"


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([{**SEARCH, "allowed_domains": ["a.org"], "blocked_domains": ["b.org"]}], "only one"),
        ([{"type": "web_search_29990101", "name": "web_search"}], "does not match"),
        ([{**SEARCH, "name": "search"}], "Input should be 'web_search'"),
        ([{**SEARCH, "citations": {"enabled": True}}], "Extra inputs"),
        ([{**SEARCH, "max_uses": 0}], "greater than or equal to 1"),
        ([SEARCH, SEARCH], "unique"),
        ([{"name": "lookup"}], "input_schema"),
    ],
)
def test_invalid_tools_are_the_apis_400(
    tools: list[dict[str, Any]], message: str, client: anthropic.Anthropic
) -> None:
    assert message in bad_request(client, tools=tools)


def test_documents_and_images_are_recorded_and_checked(
    fake_api: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    png = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()}
    pdf = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}
    content = [
        {"type": "document", "source": pdf, "title": "paper.pdf"},
        {"type": "image", "source": png},
        {"type": "text", "text": "what is this"},
    ]
    reply = create(client, content)
    assert reply.content[0].text == "ok; I saw paper.pdf (application/pdf), an image (image/png)"
    [request] = fake_api.messages()
    assert request.documents == [content[0]] and request.images == [content[1]]
    as_jpeg = [{"type": "image", "source": {**png, "media_type": "image/jpeg"}}]
    assert "image/jpeg" in bad_request(client, content=as_jpeg)
    not_pdf = [{"type": "document", "source": {**pdf, "data": "aGVsbG8="}}]
    assert "PDF" in bad_request(client, content=not_pdf)
    too_many = [{"type": "image", "source": png}] * 101
    assert "too many images" in bad_request(client, content=too_many)


def test_a_body_over_32_mb_is_a_413(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        create(client, "x" * (32 * 1024 * 1024 + 1))
    assert caught.value.status_code == 413
