"""A run's page: `agentgod show RUN --html`, opened by a real headless Chromium.

The run is recorded by the real `agentgod` against the scripted fake: four agents in three
waves, one of which crashes on its first attempt and is repaired, and hostile text (a script
tag, a `javascript:` link, an image with an onerror) in the answer and in an agent's output.
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from browser import CHROMIUM, chromium
from conftest import agentgod
from fakeapi import FakeMessagesAPI, Request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scripted import ECHO_BODY, Factory, agent_spec, plan

from agentgod import eventlog, runpage, timeline
from agentgod.eventlog import Event
from agentgod.ledger import Call
from agentgod.runrecord import AgentRecord, RunRecord

needs_browser = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="chromium is not installed (apt-get install chromium; CI installs it)",
)

HOSTILE_ANSWER = (
    "Here: <script>alert(1)</script> and [click me](javascript:alert(2)) "
    '<a href="javascript:alert(5)">a link</a>'
)
HOSTILE_OUTPUT = '<img src=x onerror="alert(3)"> <iframe src="https://example.com"></iframe>'
CRASH_ONCE = "def run(task, previous_outputs):\n    raise RuntimeError('first try fails')\n"
WAVE_ORDER = ["gatherer", "checker", "analyst", "writer"]


def record_four_agents(home: Path, api: FakeMessagesAPI) -> dict[str, Any]:
    """A recorded run: gatherer and checker, then analyst (needs both), then writer; checker
    crashes once and is repaired."""
    factory = Factory(api)
    factory.plans = [
        plan(
            agent_spec("gatherer"),
            agent_spec("checker"),
            agent_spec("analyst", ["gatherer", "checker"]),
            agent_spec("writer", ["analyst"]),
        )
    ]
    factory.bodies["checker"] = [CRASH_ONCE, ECHO_BODY]

    def agent_reply(name: str, request: Request) -> str:
        return HOSTILE_OUTPUT if name == "writer" else f"result from {name}"

    factory.agent_reply = agent_reply
    factory.merge_reply = lambda request: HOSTILE_ANSWER
    done = agentgod(home, api, "--json", "--no-input", "--discard", "four parts <b>please</b>")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert [a["attempts"] for a in reply["agents"] if a["name"] == "checker"] == [2]
    return reply


def write_page(home: Path, api: FakeMessagesAPI, run_id: str, target: Path) -> None:
    shown = agentgod(home, api, "show", run_id, "--html", str(target))
    assert shown.returncode == 0, shown.stderr
    assert target.is_file()


@needs_browser
def test_the_page_of_a_repaired_four_agent_run_draws_its_graph_timeline_and_code(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path
) -> None:
    run = record_four_agents(isolated_home, fake_api)
    page_file = tmp_path / "run.html"
    write_page(isolated_home, fake_api, run["run_id"], page_file)
    assert stat.S_IMODE(page_file.stat().st_mode) == 0o600, "the page holds the task and answer"
    with chromium(tmp_path / "chromium") as browser:
        page = browser.page()
        page.open(page_file.as_uri())
        nodes = page.evaluate(
            "Array.from(document.querySelectorAll('svg.graph g.node'))"
            ".map(g => [g.dataset.agent, g.getAttribute('class')])"
        )
        assert sorted(name for name, _ in nodes) == sorted(WAVE_ORDER)
        classes = dict(nodes)
        assert "repaired" in classes["checker"].split()
        assert all("ok" in classes[name].split() for name in ("gatherer", "analyst", "writer"))
        edges = page.evaluate(
            "Array.from(document.querySelectorAll('svg.graph path.edge'))"
            ".map(p => p.dataset.from + '>' + p.dataset.to)"
        )
        assert sorted(edges) == ["analyst>writer", "checker>analyst", "gatherer>analyst"]
        lanes = page.evaluate(
            "Array.from(document.querySelectorAll('svg.timeline g.agent-lane'))"
            ".map(g => [g.dataset.agent, Array.from(g.querySelectorAll('rect.seg'))"
            ".map(r => [r.getAttribute('class'), +r.dataset.start, +r.dataset.end])])"
        )
        assert [name for name, _ in lanes] == WAVE_ORDER, "4 bars, in wave order"
        runs = {
            name: [(start, end) for cls, start, end in segments if "run" in cls.split()]
            for name, segments in lanes
        }
        assert all(runs[name] for name in WAVE_ORDER)
        first_wave_done = max(end for name in ("gatherer", "checker") for _, end in runs[name])
        assert min(start for start, _ in runs["analyst"]) >= first_wave_done
        assert min(start for start, _ in runs["writer"]) >= max(e for _, e in runs["analyst"])
        checker = [cls.split() for cls, _, _ in dict(lanes)["checker"]]
        assert ["seg", "run", "failed"] in checker and ["seg", "repair"] in checker
        assert ["seg", "run", "ok"] in checker, "the failed attempt, its rewrite, the one that ran"
        marks = page.evaluate("document.querySelectorAll('svg.timeline rect.call').length")
        assert marks == run["cost"]["llm_calls"], "every model call is marked"
        for name in WAVE_ORDER:
            code = page.evaluate(
                f"document.querySelector('#agent-{name} pre.code.body').textContent"
            )
            assert "def run(task, previous_outputs):" in code
        repaired = page.evaluate(
            "document.querySelector('#agent-checker pre.code.body').textContent"
        )
        assert "first try fails" not in repaired, "the code that ran: the repaired version"
        answer = page.evaluate("document.querySelector('#answer').textContent")
        assert answer == HOSTILE_ANSWER, "the answer's markup is text"
        output = page.evaluate("document.querySelector('#agent-writer pre.output').textContent")
        assert output == HOSTILE_OUTPUT
        task = page.evaluate("document.querySelector('pre.task').textContent")
        assert task == "four parts <b>please</b>"
        assert page.evaluate("document.scripts.length") == 0, "the file has no script at all"
        live = page.evaluate(
            "document.querySelectorAll('iframe, img, a[href^=\"javascript\" i], [onerror]').length"
        )
        assert live == 0, "nothing from the run became an element"
        assert page.evaluate("getComputedStyle(document.body).marginTop") == "0px", "style ran"
        policy = page.evaluate(
            "document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]').content"
        )
        assert "default-src 'none'" in policy and "script-src 'none'" in policy
        assert page.dialogs == [], "no alert ever opened"
        assert page.errors_seen() == [], "no console error"
        elsewhere = [r["url"] for r in page.requests if not r["url"].startswith("data:")]
        assert elsewhere == [page_file.as_uri()], "no network request but the page itself"
        page.screenshot(tmp_path / "page.png")
        assert (tmp_path / "page.png").stat().st_size > 10_000


def test_show_html_writes_to_stdout_in_a_pipe_and_names_the_file_it_wrote(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path
) -> None:
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    done = agentgod(isolated_home, fake_api, "--json", "--no-input", "--discard", "otters")
    run_id = json.loads(done.stdout)["run_id"]
    piped = agentgod(isolated_home, fake_api, "show", "--html")
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.startswith("<!DOCTYPE html>") and f'data-run="{run_id}"' in piped.stdout
    by_id = agentgod(isolated_home, fake_api, "show", "--html", run_id[:5], cwd=tmp_path)
    assert by_id.returncode == 0 and by_id.stdout == piped.stdout, "a run id, not a file name"
    target = tmp_path / "deep" / "x.html"
    missing_folder = agentgod(isolated_home, fake_api, "show", "--html", str(target))
    assert missing_folder.returncode == 1 and "Could not write the page" in missing_folder.stderr
    named = agentgod(
        isolated_home, fake_api, "--json", "show", run_id, "--html", str(tmp_path / "p.html")
    )
    assert json.loads(named.stdout) == {"run_id": run_id, "page": str(tmp_path / "p.html")}
    assert (tmp_path / "p.html").read_text(encoding="utf-8") == piped.stdout
    both = agentgod(isolated_home, fake_api, "show", "--html", "--code", "fact_finder")
    assert both.returncode == 2 and "one of --code, --replay, --html and --trace" in both.stderr
    stray = agentgod(isolated_home, fake_api, "history", "--html")
    assert stray.returncode == 2 and "belong to 'agentgod show" in stray.stderr


# ---- safe by construction: every text is text -------------------------------------------------


ALLOWED_TAGS = {
    "html", "head", "meta", "link", "title", "style", "body", "main", "h1", "h2", "h3", "h4",
    "div", "span", "b", "i", "p", "pre", "ul", "li", "a", "section", "details", "summary",
    "table", "thead", "tbody", "tfoot", "tr", "th", "td", "svg", "defs", "marker", "path", "g",
    "rect", "circle", "line", "text", "header",
}  # fmt: skip


class Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


hostile = st.text(
    alphabet=st.sampled_from(list("<>&\"'/=:; ascriptjvSCRIPTonerrorimg\n\t\\`()"))
    | st.characters(),
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=hostile, answer=hostile, role=hostile, output=hostile, error=hostile, source=hostile)
def test_whatever_a_run_holds_the_page_has_only_its_own_elements_and_links(
    task: str, answer: str, role: str, output: str, error: str, source: str
) -> None:
    started = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    record = RunRecord(
        task=task,
        ok=True,
        answer=answer,
        error=error,
        complexity="standard",
        waves=[["reader"]],
        agents=[
            AgentRecord("reader", role, ok=True, attempts=1, kind="ok", error=error,
                        source=source, output=output)
        ],
        failures=[],
        revisions=0,
        council_improved=False,
        cost={"llm_calls": 1, "input_tokens": 1, "output_tokens": 1, "cache_write_tokens": 0,
              "cache_read_tokens": 0, "web_searches": 0, "usd": 0.0, "estimate": False},
        duration_seconds=1.0,
        started_at=started,
        run_id="0123abcd",
        plan=[{"name": "reader", "role": role, "depends_on": [], "instructions": task}],
        calls=[Call("agents", "claude-sonnet-5-5", 1, 1, 0, 0, 0, 0.0, started, agent="reader")],
        warnings=[error],
        artifacts=[{"name": "r.md", "path": "/x/r.md", "bytes": 3, "agent": "reader"}],
    )  # fmt: skip
    events = [
        Event("2026-12-01T09:00:00.000Z", 0.0, "note", {"kind": "task", "text": task}),
        Event("2026-12-01T09:00:00.100Z", 0.1, "agent_running", {"name": "reader", "attempt": 1}),
        Event("2026-12-01T09:00:00.200Z", 0.2, "agent_repairing",
              {"name": "reader", "attempt": 1, "error": error}),
    ]  # fmt: skip
    text = runpage.page(record, events, run_id=record.run_id, artifact_link=lambda name: None)
    parsed = Tags()
    parsed.feed(text)
    parsed.close()
    for tag, attributes in parsed.tags:
        assert tag in ALLOWED_TAGS, tag
        assert not any(name.startswith("on") for name in attributes), attributes
        href = attributes.get("href")
        assert href is None or href.startswith(("#", "data:image/svg+xml,")), href
    assert sum(tag == "script" for tag, _ in parsed.tags) == 0
    assert sum(tag == "style" for tag, _ in parsed.tags) == 1
    shown = "".join(parsed.text)
    for value in (answer, output):
        cleaned = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", "", value)
        assert cleaned in shown, "shown as it was, character for character"


# ---- the timeline, from a log -----------------------------------------------------------------


def _event(t: float, hook: str, **args: Any) -> Event:
    at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC) + timedelta(seconds=t)
    return Event(at.isoformat().replace("+00:00", "Z"), t, hook, args)


def test_a_run_in_progress_is_drawn_from_its_log_alone() -> None:
    planned = [
        {"name": "reader", "role": "reads", "depends_on": [], "reused": False},
        {"name": "writer", "role": "writes", "depends_on": ["reader"], "reused": True},
    ]
    events = [
        _event(0.0, eventlog.NOTE, kind="task", text="sum it"),
        _event(0.1, "phase_started", phase="plan"),
        _event(0.5, "plan_ready", complexity="standard", agents=planned,
               waves=[["reader"], ["writer"]]),
        _event(0.5, "phase_finished", phase="plan", seconds=0.4),
        _event(0.6, "agent_building", name="writer", reused=True),
        _event(0.6, "agent_building", name="reader", reused=False),
        _event(1.0, "agent_generated", name="reader"),
        _event(1.1, "agent_running", name="reader", attempt=1),
        _event(1.5, "agent_finished", name="reader", ok=True, seconds=0.4, kind="ok", error="",
               attempts=1),
        _event(1.6, "agent_running", name="writer", attempt=1),
    ]  # fmt: skip
    line = timeline.build(events, None)
    assert (line.task, line.status, line.archived) == ("sum it", "running", False)
    assert [lane.name for lane in line.lanes] == ["reader", "writer"]
    reader, writer = line.lanes
    assert [(s.kind, s.start, s.end, s.ok) for s in reader.segments] == [
        ("build", 0.6, 1.0, True),
        ("run", 1.1, 1.5, True),
    ]
    assert writer.reused and writer.state == "running"
    assert [(s.kind, s.end) for s in writer.segments] == [("build", 1.6), ("run", None)]
    assert [(p.phase, p.start, p.end) for p in line.phases] == [("plan", 0.1, 0.5)]
    assert [node.depends_on for node in line.plan] == [(), ("reader",)]
    body = runpage.main(None, events, run_id="0123abcd")
    assert 'class="node ok"' in body and "node running reused" in body
    assert "No answer yet." in body and "Not recorded yet." in body
