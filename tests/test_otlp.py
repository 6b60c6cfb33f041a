"""Runs as OpenTelemetry traces: a real OTLP/HTTP receiver on 127.0.0.1 gets what `agentgod`
sends, and the trace is checked against the run's own record (`show --json`)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import agentgod, scripted_env
from fakeapi import FakeMessagesAPI, Reply, Request, web_reply
from scripted import ECHO_BODY, Factory, agent_spec, plan

from agentgod import config, redact

TIDES = ("Tides", "https://tides.example/moon", "Tides follow the moon, twice a day.")
WEB_BODY = """
def run(task, previous_outputs):
    return call_llm(f"agent={AGENT_NAME} keys=[] how do tides work?", web=True)
"""
ARTIFACT_BODY = """
def run(task, previous_outputs):
    save_artifact("notes.md", "the notes")
    keys = ",".join(sorted(previous_outputs))
    return call_llm(f"agent={AGENT_NAME} keys=[{keys}] task={task}")
"""
CRASH_ONCE = "def run(task, previous_outputs):\n    raise RuntimeError('first try fails')\n"


class Receiver:
    """An OTLP/HTTP receiver: keeps every POST (path, headers, JSON body), answers `status`."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.status = status
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(size))
                headers = {key.lower(): value for key, value in self.headers.items()}
                receiver.requests.append((self.path, headers, body))
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


def four_agents(api: FakeMessagesAPI) -> Factory:
    """gatherer (searches the web) and checker (crashes once), then analyst, then writer (saves
    an artifact)."""
    factory = Factory(api)
    factory.plans = [
        plan(
            agent_spec("gatherer", web=True),
            agent_spec("checker"),
            agent_spec("analyst", ["gatherer", "checker"]),
            agent_spec("writer", ["analyst"]),
        )
    ]
    factory.bodies = {"gatherer": [WEB_BODY], "checker": [CRASH_ONCE, ECHO_BODY],
                      "writer": [ARTIFACT_BODY]}  # fmt: skip

    def agent_reply(name: str, request: Request) -> Reply | str:
        return web_reply([TIDES]) if request.tool("web_search") else f"result from {name}"

    factory.agent_reply = agent_reply
    return factory


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in span["attributes"]:
        value = item["value"]
        ((kind, raw),) = value.items()
        values[item["key"]] = int(raw) if kind == "intValue" else raw
    return values


def spans_of(payload: dict[str, Any]) -> list[dict[str, Any]]:
    [resource] = payload["resourceSpans"]
    [scope] = resource["scopeSpans"]
    return list(scope["spans"])


def run_json(home: Path, api: FakeMessagesAPI, *args: str, **env: str) -> dict[str, Any]:
    done = agentgod(home, api, "--json", "--no-input", "--discard", *args, cwd=None, **env)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_a_run_reaches_the_receiver_as_one_trace_that_matches_its_record(
    fake_api: FakeMessagesAPI, isolated_home: Path, receiver: Receiver, tmp_path: Path
) -> None:
    four_agents(fake_api)
    answered = run_json(
        isolated_home,
        fake_api,
        "research the tides in four parts",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url + "/",
        OTEL_EXPORTER_OTLP_HEADERS="x-team=agents%20ok,authorization=Basic%20c2VjcmV0",
        OTEL_SERVICE_NAME="tide-lab",
    )
    [only] = answered["warnings"]  # the run's own, and no word of the export
    assert only.startswith("SANDBOX=off:")
    [(path, headers, payload)] = receiver.requests
    assert path == "/v1/traces" and headers["content-type"] == "application/json"
    assert headers["x-team"] == "agents ok" and headers["authorization"] == "Basic c2VjcmV0"
    [resource] = payload["resourceSpans"]
    assert attributes(resource["resource"])["service.name"] == "tide-lab"
    spans = spans_of(payload)
    shown = json.loads(agentgod(isolated_home, fake_api, "show", "--json").stdout)
    cost, calls = shown["cost"], shown["calls"]

    by_id = {span["spanId"]: span for span in spans}
    assert len(by_id) == len(spans), "span ids are unique"
    assert {span["traceId"] for span in spans} == {spans[0]["traceId"]}, "one trace"
    [root] = [span for span in spans if "parentSpanId" not in span]
    assert root["name"] == "invoke_workflow agentgod" and root["kind"] == 1
    assert all(span["parentSpanId"] in by_id for span in spans if span is not root)
    for span in spans:
        assert int(span["startTimeUnixNano"]) <= int(span["endTimeUnixNano"])
        found = attributes(span)
        if "gen_ai.operation.name" in found:
            assert found["gen_ai.provider.name"] == "anthropic"
        else:
            assert found["agentgod.phase"] in ("merge", "council", "judge")

    def parent(span: dict[str, Any]) -> dict[str, Any]:
        return by_id[span["parentSpanId"]]

    chats = [span for span in spans if attributes(span).get("gen_ai.operation.name") == "chat"]
    assert len(chats) == len(calls) == cost["llm_calls"], "a chat span per recorded call"
    usage = [attributes(span) for span in chats]
    total_input = cost["input_tokens"] + cost["cache_write_tokens"] + cost["cache_read_tokens"]
    assert sum(u["gen_ai.usage.input_tokens"] for u in usage) == total_input
    assert sum(u["gen_ai.usage.output_tokens"] for u in usage) == cost["output_tokens"]
    assert (
        sum(u["gen_ai.usage.cache_read.input_tokens"] for u in usage) == cost["cache_read_tokens"]
    )
    assert (
        sum(u["gen_ai.usage.cache_creation.input_tokens"] for u in usage)
        == cost["cache_write_tokens"]
    )
    assert sum(u["agentgod.cost.usd"] for u in usage) == pytest.approx(cost["usd"], abs=1e-6)
    top = attributes(root)
    assert top["gen_ai.usage.input_tokens"] == total_input
    assert top["gen_ai.usage.output_tokens"] == cost["output_tokens"]
    assert top["agentgod.run.id"] == shown["run_id"] and top["agentgod.run.status"] == "ok"

    names = sorted(span["name"] for span in spans if span["name"].split()[0] != "chat")
    assert names.count("create_agent checker") == 2, "its code written, then rewritten"
    assert names.count("invoke_agent checker") == 2, "the attempt that failed, the one that ran"
    for agent in ("gatherer", "analyst", "writer"):
        assert names.count(f"create_agent {agent}") == names.count(f"invoke_agent {agent}") == 1
    assert names.count("plan agentgod") == 1 and "merge" in names and "judge" in names
    failed = [
        span
        for span in spans
        if span["name"] == "invoke_agent checker" and span.get("status", {}).get("code") == 2
    ]
    assert len(failed) == 1 and "first try fails" in failed[0]["status"]["message"]
    for span in chats:
        found = attributes(span)
        above = parent(span)
        if found["agentgod.phase"] == "agents":
            assert above["name"] == f"invoke_agent {found['gen_ai.agent.name']}"
            assert above["kind"] == 3
        elif found["agentgod.phase"] == "generate":
            assert above["name"] == f"create_agent {found['gen_ai.agent.name']}"
        elif found["agentgod.phase"] == "plan":
            assert above["name"] == "plan agentgod"
        elif found["agentgod.phase"] in ("merge", "judge"):
            assert above["name"] == found["agentgod.phase"]
        else:
            assert above is root
    for agent in shown["agents"]:
        ran = [
            attributes(span) for span in spans if span["name"] == f"invoke_agent {agent['name']}"
        ]
        assert sum(a["gen_ai.usage.output_tokens"] for a in ran) == agent["usage"]["output_tokens"]
        assert sum(a["agentgod.cost.usd"] for a in ran) == pytest.approx(agent["usd"], abs=1e-6)
    [search] = [span for span in spans if span["name"] == "execute_tool web_search"]
    assert attributes(parent(search))["gen_ai.agent.name"] == "gatherer"
    [saved] = [span for span in spans if span["name"] == "execute_tool save_artifact"]
    assert parent(saved)["name"] == "invoke_agent writer"
    assert attributes(saved)["agentgod.artifact.name"] == "notes.md"
    assert not any(key.endswith(".messages") for span in spans for key in attributes(span)), (
        "no message content unless asked for"
    )
    assert "c2VjcmV0" not in json.dumps(payload), "the exporter's headers never enter the trace"

    written = tmp_path / "trace.json"
    exported = agentgod(isolated_home, fake_api, "show", "--trace", str(written))
    assert exported.returncode == 0, exported.stderr
    again = json.loads(written.read_text(encoding="utf-8"))
    assert spans_of(again) == spans, "show --trace writes the very trace that was sent"


def test_nothing_is_sent_or_imported_without_the_setting(
    fake_api: FakeMessagesAPI, isolated_home: Path, receiver: Receiver
) -> None:
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("fact_finder"), complexity="simple")]

    def traced_run(**env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "agentgod", "--json", "--no-input",
             "--discard", "find the facts about otters"],
            capture_output=True,
            text=True,
            timeout=120,
            env=scripted_env(isolated_home, fake_api, **env),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr

    untraced = traced_run()
    assert receiver.requests == [], "no setting: nothing sent"
    assert "agentgod.otlp" not in untraced and "agentgod.timeline" not in untraced
    assert "agentgod.eventlog" in untraced, "importtime does list our modules"
    traced = traced_run(TRACE_ENDPOINT=receiver.url)
    assert len(receiver.requests) == 1
    assert "agentgod.otlp" in traced


def test_a_receiver_that_refuses_costs_a_warning_never_the_run(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    refusing = Receiver(status=503)
    try:
        answered = run_json(
            isolated_home, fake_api, "otters", OTEL_EXPORTER_OTLP_ENDPOINT=refusing.url
        )
    finally:
        refusing.close()
    assert answered["ok"] is True and answered["answer"] == "MERGED: fact_finder"
    [warning] = [w for w in answered["warnings"] if "trace" in w]
    assert (
        warning == f"the run's trace was not exported: {refusing.url}/v1/traces answered HTTP 503"
    )
    gone = run_json(
        isolated_home, fake_api, "otters", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=refusing.url
    )
    [warning] = [w for w in gone["warnings"] if "trace" in w]
    assert warning.startswith(f"the run's trace was not exported: {refusing.url} could not be")


def test_message_contents_go_in_only_when_asked_for(
    fake_api: FakeMessagesAPI, isolated_home: Path, receiver: Receiver
) -> None:
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("fact_finder"), agent_spec("writer", ["fact_finder"]))]
    run_json(isolated_home, fake_api, "otters, then prose", TRACE_ENDPOINT=receiver.url,
             TRACE_CONTENT="on")  # fmt: skip
    spans = spans_of(receiver.requests[0][2])
    [root] = [span for span in spans if "parentSpanId" not in span]
    found = attributes(root)
    assert json.loads(found["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "otters, then prose"}]}
    ]
    assert "MERGED: fact_finder, writer" in found["gen_ai.output.messages"]
    [writer] = [attributes(s) for s in spans if s["name"] == "invoke_agent writer"]
    given = json.loads(writer["gen_ai.input.messages"])[0]["parts"]
    assert [part["content"] for part in given] == [
        "otters, then prose",
        "### fact_finder\nresult from fact_finder",
    ]
    assert json.loads(writer["gen_ai.output.messages"])[0]["parts"][0]["content"] == (
        "result from writer"
    )
    written = agentgod(isolated_home, fake_api, "show", "--trace", "-", TRACE_CONTENT="on")
    assert written.returncode == 0 and "gen_ai.input.messages" in written.stdout, "no endpoint"
    plain = agentgod(isolated_home, fake_api, "show", "--trace", "-")
    assert "gen_ai.input.messages" not in plain.stdout and "resourceSpans" in plain.stdout


# ---- the settings -----------------------------------------------------------------------------


def test_tracing_is_off_without_an_endpoint_and_each_setting_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert config.settings().tracing is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")
    with pytest.raises(config.ConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT must be an http"):
        config.settings()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    tracing = config.settings().tracing
    assert tracing is not None and tracing.url == "http://collector:4318/v1/traces"
    assert tracing.timeout_seconds == 10.0
    assert (config.settings().service_name, config.settings().trace_content) == ("agentgod", False)
    monkeypatch.setenv("TRACE_ENDPOINT", "https://mine.example/otel")
    assert config.settings().tracing.url == "https://mine.example/otel/v1/traces"  # type: ignore[union-attr]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://tempo.example/v1/t")
    assert config.settings().tracing.url == "https://tempo.example/v1/t"  # type: ignore[union-attr]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20abcdefgh12345678")
    assert "abcdefgh12345678" not in redact.redact(
        f"refused {config.settings().tracing}"  # the headers are never shown
        + " Bearer abcdefgh12345678"
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "no pair here")
    with pytest.raises(config.ConfigError, match="OTEL_EXPORTER_OTLP_HEADERS") as raised:
        config.settings()
    assert "no pair" not in str(raised.value), "a header's value may be a secret"
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_HEADERS")
    monkeypatch.setenv("TRACE_CONTENT", "maybe")
    with pytest.raises(config.ConfigError, match="TRACE_CONTENT"):
        config.settings()
    monkeypatch.setenv("TRACE_CONTENT", "on")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")
    tracing = config.settings().tracing
    assert tracing is not None and tracing.timeout_seconds == 2.5
    assert config.settings().trace_content
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert config.settings().tracing is None, "the standard switch turns it off"
