"""`agentgod ui`: the real command, spoken to over HTTP and driven by a real headless Chromium."""

from __future__ import annotations

import http.client
import json
import queue
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from browser import chromium
from conftest import agentgod, agentgod_command, scripted_env
from fakeapi import FakeMessagesAPI, Request
from scripted import ECHO_BODY, Factory, agent_spec, plan
from test_runpage import needs_browser

SAVER = """
def run(task, previous_outputs):
    save_artifact("notes.md", "the notes")
    save_artifact("trap.html", "<script>document.title='owned'</script>")
    return call_llm(f"agent={AGENT_NAME} keys=[] task={task}")
"""


class Viewer:
    """A running `agentgod ui`: its process, its URL, its port and token."""

    def __init__(self, home: Path, api: FakeMessagesAPI) -> None:
        self.process = subprocess.Popen(
            [*agentgod_command(), "ui"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=scripted_env(home, api),
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: lines.put(self.process.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        ).start()
        try:
            self.url = lines.get(timeout=60).strip()
        except queue.Empty:
            raise AssertionError("agentgod ui printed no URL") from None
        parts = urlsplit(self.url)
        assert parts.hostname == "127.0.0.1" and parts.query.startswith("token="), self.url
        self.port = int(parts.port or 0)
        self.token = parts.query.removeprefix("token=")
        self.base = f"http://127.0.0.1:{self.port}"

    def get(
        self, path: str, *, host: str | None = None, method: str = "GET", cookie: bool = True
    ) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Host": host or f"127.0.0.1:{self.port}"}
        if cookie:
            headers["Cookie"] = f"agentgod_ui_{self.port}={self.token}"
        connection.request(method, path, headers=headers)
        reply = connection.getresponse()
        body = reply.read()
        connection.close()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, body

    def stop(self) -> tuple[int, str, str]:
        self.process.send_signal(signal.SIGINT)
        stdout, stderr = self.process.communicate(timeout=30)
        return self.process.returncode, stdout, stderr

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@pytest.fixture
def viewer_of(fake_api: FakeMessagesAPI, isolated_home: Path) -> Iterator[Any]:
    started: list[Viewer] = []

    def start() -> Viewer:
        started.append(Viewer(isolated_home, fake_api))
        return started[-1]

    yield start
    for each in started:
        each.kill()


def record(home: Path, api: FakeMessagesAPI, factory: Factory, task: str) -> dict[str, Any]:
    done = agentgod(home, api, "--json", "--no-input", "--discard", task)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_the_viewer_refuses_strangers_and_serves_nothing_outside_the_runs(
    fake_api: FakeMessagesAPI, isolated_home: Path, viewer_of: Any
) -> None:
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("saver"), complexity="simple")]
    factory.bodies = {"saver": [SAVER]}
    run_id = record(isolated_home, fake_api, factory, "save some notes")["run_id"]
    viewer = viewer_of()
    status, _, body = viewer.get("/", cookie=False)
    assert status == 403 and b"needs its token" in body
    status, _, _ = viewer.get(f"/?token={viewer.token[:-1]}x", cookie=False)
    assert status == 403, "a wrong token"
    status, _, body = viewer.get(f"/?token={viewer.token}", host="attacker.example", cookie=False)
    assert status == 403 and b"only at its own address" in body, "another Host: refused"
    status, headers, body = viewer.get(f"/?token={viewer.token}", cookie=False)
    assert status == 200 and run_id.encode() in body
    assert f"agentgod_ui_{viewer.port}={viewer.token}" in headers["set-cookie"]
    assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
    policy = headers["content-security-policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    status, headers, body = viewer.get(f"/runs/{run_id}/artifacts/notes.md")
    assert (status, body) == (200, b"the notes")
    assert headers["content-disposition"].startswith("attachment")
    assert "sandbox" in headers["content-security-policy"]
    status, headers, body = viewer.get(f"/runs/{run_id}/artifacts/trap.html")
    assert status == 200 and headers["content-type"] == "application/octet-stream"
    assert "sandbox" in headers["content-security-policy"], "an agent's HTML never runs here"
    for path in (
        f"/runs/{run_id}/artifacts/..%2Fevents.jsonl",
        f"/runs/{run_id}/artifacts/%2E%2E%2F%2E%2E%2Fhistory.db",
        f"/runs/{run_id}/events.jsonl",
        "/runs/../history.db",
        "/runs/%2E%2E/history.db",
        "/history.db",
        "/etc/passwd",
        f"/runs/{run_id[:4]}",
    ):
        status, _, body = viewer.get(path)
        assert status == 404, path
        assert b"the notes" not in body and b"SQLite" not in body
    status, _, _ = viewer.get("/", method="POST")
    assert status == 405
    status, headers, body = viewer.get(f"/runs/{run_id}/trace.json")
    assert status == 200 and json.loads(body)["resourceSpans"]
    status, headers, body = viewer.get(f"/runs/{run_id}/page.html")
    assert status == 200 and body.startswith(b"<!DOCTYPE html>")
    code, _, stderr = viewer.stop()
    assert code == 0, stderr
    assert "Stopping the viewer." in stderr
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", viewer.port), timeout=5).close()


@needs_browser
def test_a_browser_lists_the_runs_opens_one_and_watches_a_run_in_progress(
    fake_api: FakeMessagesAPI, isolated_home: Path, viewer_of: Any, tmp_path: Path
) -> None:
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("fact_finder"), agent_spec("writer", ["fact_finder"]))]
    done = record(isolated_home, fake_api, factory, "find the facts about otters")
    viewer = viewer_of()
    with chromium(tmp_path / "chromium") as browser:
        stranger = browser.page(isolated=True)
        stranger.open(viewer.base + "/")
        assert [r["status"] for r in stranger.responses if r["url"] == viewer.base + "/"] == [403]
        assert "needs its token" in stranger.evaluate("document.body.textContent")

        page = browser.page()
        page.open(viewer.url)
        rows = page.evaluate(
            "Array.from(document.querySelectorAll('tr.run')).map(r => r.dataset.run)"
        )
        assert rows == [done["run_id"]]
        page.open(viewer.base + "/?q=owls")
        assert "No runs match." in page.evaluate("document.querySelector('main').textContent")
        page.open(viewer.base + "/?q=OTTERS&status=ok")
        assert page.evaluate("document.querySelectorAll('tr.run').length") == 1
        page.open(f"{viewer.base}/runs/{done['run_id']}")
        assert page.evaluate("document.querySelectorAll('svg.graph g.node.ok').length") == 2
        assert page.evaluate("document.querySelector('main').dataset.live") == "0"
        assert "MERGED: fact_finder, writer" in page.evaluate(
            "document.querySelector('#answer').textContent"
        )

        # A run in progress: three agents in a chain, each answered when the test says so.
        released = {name: threading.Event() for name in ("first", "second", "third")}
        asked = {name: threading.Event() for name in released}

        def agent_reply(name: str, request: Request) -> str:
            asked[name].set()
            assert released[name].wait(60), f"{name} was never released"
            return f"result from {name}"

        live = Factory(fake_api)
        live.plans = [
            plan(
                agent_spec("first"),
                agent_spec("second", ["first"]),
                agent_spec("third", ["second"]),
            )
        ]
        live.bodies = {name: [ECHO_BODY] for name in released}
        live.agent_reply = agent_reply
        running = subprocess.Popen(
            [*agentgod_command(), "--json", "--no-input", "--discard", "a chain of three"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=scripted_env(isolated_home, fake_api),
        )
        try:
            page.open(viewer.url)
            assert asked["first"].wait(60), "the first agent never called the model"
            live_id = page.wait_for(
                "(() => { const r = document.querySelector('tr.run .st-running');"
                " return r && r.closest('tr').dataset.run; })()",
                "the list to show the run in progress",
            )
            page.open(f"{viewer.base}/runs/{live_id}")
            loads = page.loads
            assert page.evaluate("document.querySelector('main').dataset.live") == "1"
            assert page.evaluate("document.querySelectorAll('svg.graph g.node').length") == 3
            assert "a chain of three" in page.evaluate(
                "document.querySelector('pre.task').textContent"
            )
            done_count = "document.querySelectorAll('svg.graph g.node.ok').length"
            assert page.evaluate(done_count) == 0
            for number, name in enumerate(("first", "second", "third"), start=1):
                released[name].set()
                page.wait_for(f"{done_count} >= {number}", f"{name} to be drawn done")
                if name != "third":
                    assert asked[list(released)[number]].wait(60)
            page.wait_for(
                "document.querySelector('main').dataset.live === '0'", "the run to be recorded"
            )
            assert page.loads == loads, "it changed in place, without a reload"
            answer = page.evaluate("document.querySelector('#answer').textContent")
            assert answer == "MERGED: first, second, third"
            assert (
                page.evaluate("document.querySelectorAll('section.agent pre.code.body').length")
                == 3
            )
            stdout, stderr = running.communicate(timeout=60)
            assert running.returncode == 0, stderr
            assert json.loads(stdout)["run_id"] == live_id
        finally:
            for event in released.values():
                event.set()
            if running.poll() is None:
                running.kill()
                running.communicate()
        assert page.errors_seen() == []
        assert [e["text"] for e in stranger.errors_seen()] == [
            "Failed to load resource: the server responded with a status of 403 (Forbidden)"
        ], "the refusal, and nothing else"
        assert page.dialogs == []
        foreign = [
            r["url"] for r in page.requests if not r["url"].startswith((viewer.base + "/", "data:"))
        ]
        assert foreign == [], "the viewer's pages ask nothing of anyone else"
        page.open(f"{viewer.base}/runs/{done['run_id']}")
        page.screenshot(tmp_path / "viewer.png")
    code, _, _ = viewer.stop()
    assert code == 0
