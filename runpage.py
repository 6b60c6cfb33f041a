"""runpage.py — one run as one self-contained web page: `agentgod show RUN --html` and the viewer.

The page draws what the run recorded and nothing else: the task and the answer; the plan as a
graph (an agent a node, a dependency an edge, the waves as columns, each node coloured by how
the agent fared); a timeline from the event log (each agent's builds and attempts as bars, the
flow's phases above them, every model call marked where it was made); per agent its role, its
code (the model's part highlighted, the trusted runtime folded away), the inputs it was given,
its output, attempts, seconds, tokens and dollars; the calls and the phases with their cost;
the run's files. It reads the record and the log (`timeline.build`); it never changes them.

Safe by construction. Every text that came from a model, an agent, a file or the user passes
through `esc` into element text or a quoted attribute, so no markup, script or link from a run
can be live: an answer holding `<script>` shows those characters, and a `javascript:` URL is a
string. The only links are ours (an agent's section, an artifact's file). The page needs
nothing from the network: its style is inline, its pictures are inline SVG drawn here, and its
Content-Security-Policy (`policy`) allows exactly that style (by its hash) and, for the viewer,
exactly its one script; nothing else may load or run.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import html
import io
import keyword
import re
import tokenize
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agentgod import agent_runtime
from agentgod.eventlog import Event
from agentgod.ledger import Call
from agentgod.runrecord import AgentRecord, RunRecord, utc
from agentgod.text import dollars, human_size
from agentgod.timeline import BUILD, REPAIR, RUN, Lane, PlannedNode, Timeline, build

CSS = """
:root{--bg:#fbfbfa;--fg:#1d1f23;--mute:#5d636e;--line:#d9dce1;--card:#fff;--ok:#2e8b57;
--repaired:#c98a12;--failed:#c0392b;--pending:#8a93a3;--running:#2f6fd6;--reused:#7a4bc2;
--build:#9db8e8;--code:#f4f5f7;--kw:#8a3ab9;--str:#1f7a43;--com:#7b818c;--num:#b35c00;
--fn:#1f5fbf;--bi:#9a4a00}
@media (prefers-color-scheme:dark){:root{--bg:#16181c;--fg:#e4e6ea;--mute:#9aa1ad;
--line:#343841;--card:#1e2126;--code:#23262c;--kw:#d19af0;--str:#8fd19e;--com:#8a919c;
--num:#f0b070;--fn:#8ab4f8;--bi:#f0a060;--build:#4a6aa8}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 system-ui,-apple-system,
"Segoe UI",Roboto,sans-serif}
header.top{padding:14px 28px;border-bottom:1px solid var(--line);display:flex;gap:16px;
align-items:baseline;flex-wrap:wrap}
header.top a{color:inherit}
main{padding:10px 28px 60px;max-width:1280px}
h1{font-size:21px;margin:10px 0 4px}
h2{font-size:17px;margin:30px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:16px;margin:0 0 4px}
h4{font-size:13px;margin:14px 0 4px;color:var(--mute);text-transform:uppercase;
letter-spacing:.04em}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font:13px/1.45 ui-monospace,
"SFMono-Regular",Menlo,Consolas,monospace}
.task,.answer,.output,.error{background:var(--card);border:1px solid var(--line);
border-radius:6px;padding:10px 12px;max-height:34em;overflow:auto}
.error{border-color:var(--failed)}
.facts{display:flex;flex-wrap:wrap;gap:4px 18px;margin:6px 0;color:var(--mute);font-size:14px}
.facts b{color:var(--fg);font-weight:600}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;color:#fff;
background:var(--pending);vertical-align:middle}
.st-ok{background:var(--ok)}.st-repaired{background:var(--repaired)}
.st-failed{background:var(--failed)}.st-running{background:var(--running)}
.st-carried,.st-reused{background:var(--reused)}
svg{display:block;max-width:100%;height:auto}
svg text{font:12px system-ui,sans-serif;fill:var(--fg)}
svg .sub{fill:var(--mute);font-size:11px}
.node rect{fill:var(--card);stroke:var(--pending);stroke-width:2}
.node.ok rect{stroke:var(--ok)}.node.repaired rect{stroke:var(--repaired)}
.node.failed rect{stroke:var(--failed)}.node.running rect{stroke:var(--running)}
.node.carried rect{stroke:var(--reused)}
.node .dot{fill:var(--pending)}.node.ok .dot{fill:var(--ok)}
.node.repaired .dot{fill:var(--repaired)}.node.failed .dot{fill:var(--failed)}
.node.running .dot{fill:var(--running)}.node.carried .dot{fill:var(--reused)}
.node.reused rect{stroke-dasharray:5 3}
.edge{fill:none;stroke:var(--mute);stroke-width:1.4}
#arrow path{fill:var(--mute)}
.wave-label{fill:var(--mute)}
.axis line{stroke:var(--line)}.axis text{fill:var(--mute);font-size:11px}
.seg.build{fill:var(--build)}.seg.repair{fill:var(--repaired)}
.seg.run{fill:var(--running)}.seg.run.ok{fill:var(--ok)}.seg.run.failed{fill:var(--failed)}
.seg.open{opacity:.55}
.phase{fill:var(--line)}.phase-label{fill:var(--mute);font-size:11px}
.call{fill:var(--fg);opacity:.75}
.legend{display:flex;gap:14px;flex-wrap:wrap;font-size:13px;color:var(--mute);margin:4px 0}
.legend i{display:inline-block;width:12px;height:12px;border-radius:3px;margin-right:4px;
vertical-align:-1px;background:var(--pending)}
.legend .l-ok{background:var(--ok)}.legend .l-repaired{background:var(--repaired)}
.legend .l-failed{background:var(--failed)}.legend .l-running{background:var(--running)}
.legend .l-build{background:var(--build)}.legend .l-reused{background:var(--reused)}
.legend .l-call{background:var(--fg)}
section.agent{background:var(--card);border:1px solid var(--line);border-left:5px solid
var(--pending);border-radius:6px;padding:12px 16px;margin:14px 0}
section.agent.ok{border-left-color:var(--ok)}section.agent.repaired{border-left-color:
var(--repaired)}section.agent.failed{border-left-color:var(--failed)}
section.agent.running{border-left-color:var(--running)}
section.agent.carried{border-left-color:var(--reused)}
.role{color:var(--mute);margin:0 0 4px}
pre.code{background:var(--code);border-radius:6px;padding:10px 12px;overflow:auto;
white-space:pre;word-break:normal}
details{margin:6px 0}summary{cursor:pointer;color:var(--mute)}
.kw{color:var(--kw)}.str{color:var(--str)}.com{color:var(--com);font-style:italic}
.num{color:var(--num)}.fn{color:var(--fn)}.bi{color:var(--bi)}
table{border-collapse:collapse;font-size:13px;margin:6px 0;width:100%}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;
vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tfoot td{font-weight:600}
ul.plain{margin:4px 0;padding-left:20px}
.note{color:var(--mute);font-size:14px}
form.search{display:flex;gap:8px;flex-wrap:wrap;margin:14px 0}
form.search input,form.search select,form.search button{font:inherit;padding:4px 8px}
a{color:var(--fn)}
""".strip()
"""The page's one style sheet: inline, and allowed by its hash alone."""

LIVE_SCRIPT = """
(function () {
  "use strict";
  function openIds(root) {
    return Array.from(root.querySelectorAll("details[id][open]")).map(function (d) {
      return d.id;
    });
  }
  function tick() {
    var main = document.querySelector("main[data-poll]");
    if (!main || main.getAttribute("data-live") !== "1") { return; }
    var url = main.getAttribute("data-poll");
    var sep = url.indexOf("?") < 0 ? "?" : "&";
    url += sep + "v=" + encodeURIComponent(main.getAttribute("data-version") || "");
    fetch(url, {credentials: "same-origin", cache: "no-store"}).then(function (reply) {
      if (reply.status !== 200) { return null; }
      return reply.text();
    }).then(function (text) {
      if (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        if (fresh) {
          var open = openIds(main);
          fresh = document.adoptNode(fresh);
          open.forEach(function (id) {
            var d = fresh.querySelector("details[id='" + CSS.escape(id) + "']");
            if (d) { d.open = true; }
          });
          main.replaceWith(fresh);
        }
      }
    }).catch(function () {}).then(function () { setTimeout(tick, 1000); });
  }
  setTimeout(tick, 1000);
})();
""".strip()
"""The viewer's one script: a page that is still changing (a run in progress, the list of runs)
asks for its `<main>` again every second and swaps it in when it changed. It parses what our
own server rendered; it builds no markup from strings."""

ICON = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
    "%3Ccircle cx='4' cy='8' r='3' fill='%232e8b57'/%3E%3Ccircle cx='12' cy='4' r='3' "
    "fill='%232f6fd6'/%3E%3Ccircle cx='12' cy='12' r='3' fill='%23c98a12'/%3E%3C/svg%3E"
)
"""The page's icon, inline: a browser asks for /favicon.ico otherwise."""


def _hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def policy(*, script: bool, connect: bool) -> str:
    """The Content-Security-Policy: nothing loads or runs but the inline style (and, for the
    viewer, its one script and its requests to itself)."""
    parts = [
        "default-src 'none'",
        f"style-src {_hash(CSS)}",
        "img-src data:",
        f"script-src {_hash(LIVE_SCRIPT)}" if script else "script-src 'none'",
        "connect-src 'self'" if connect else "",
        "base-uri 'none'",
        "form-action 'self'" if connect else "form-action 'none'",
    ]
    return "; ".join(part for part in parts if part)


_NOT_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def esc(value: object) -> str:
    """Any value as HTML text (or a quoted attribute's value): markup characters escaped,
    control characters (which HTML cannot hold) dropped."""
    return html.escape(_NOT_TEXT.sub("", str(value)), quote=True)


def document(
    title: str, main: str, *, script: bool, meta_policy: bool, head_extra: str = ""
) -> str:
    """A whole page around `main`. `meta_policy` puts the policy in the page itself (a file has
    no server to send it); `script` includes the viewer's script."""
    meta = (
        f'<meta http-equiv="Content-Security-Policy" '
        f'content="{esc(policy(script=script, connect=False))}">'
        if meta_policy
        else ""
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"{meta}"
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="{ICON}">'
        f"<title>{esc(title)}</title><style>{CSS}</style>{head_extra}</head>"
        f"<body>{main}" + (f"<script>{LIVE_SCRIPT}</script>" if script else "") + "</body></html>\n"
    )


# ---- the run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Live:
    """How the viewer keeps a page current: where to ask, and what it has now."""

    poll: str
    """The URL (path and query) that answers with a fresher `<main>`."""
    version: str
    """What the page was made from; the server answers 204 while it is unchanged."""
    live: bool
    """Whether the page may still change (a run in progress)."""


ArtifactLink = Callable[[str], str | None]
"""An artifact's name -> the URL the page links it by (None: no link)."""


def page(
    record: RunRecord | None,
    events: Sequence[Event],
    *,
    run_id: str,
    live: Live | None = None,
    artifact_link: ArtifactLink | None = None,
    top: str = "",
) -> str:
    """The whole page of one run. Without `live` it is the standalone file: its policy in a
    meta element, no script at all."""
    title = f"AgentGOD run {run_id}"
    return document(
        title,
        top + main(record, events, run_id=run_id, live=live, artifact_link=artifact_link),
        script=live is not None,
        meta_policy=live is None,
    )


def main(
    record: RunRecord | None,
    events: Sequence[Event],
    *,
    run_id: str,
    live: Live | None = None,
    artifact_link: ArtifactLink | None = None,
) -> str:
    """The `<main>` element of a run's page (what the viewer swaps in while a run goes on)."""
    line = build(events, record)
    attributes = f'id="run" data-run="{esc(run_id)}"'
    if live is not None:
        attributes += (
            f' data-poll="{esc(live.poll)}" data-version="{esc(live.version)}"'
            f' data-live="{1 if live.live else 0}"'
        )
    parts = [
        _heading(record, line, run_id),
        _answer(record, line),
        _graph_section(record, line),
        _timeline_section(line),
        _agents_section(record, line),
        _calls_section(record, line),
        _files_section(record, artifact_link),
    ]
    return f"<main {attributes}>" + "".join(parts) + "</main>"


def _status_badge(status: str) -> str:
    tone = {
        "ok": "ok",
        "failed": "failed",
        "interrupted": "failed",
        "budget": "failed",
        "running": "running",
    }.get(status, "")
    return f'<span class="badge st-{tone}">{esc(status)}</span>'


def _fact(label: str, value: str) -> str:
    return f"<span>{esc(label)} <b>{value}</b></span>"


def _heading(record: RunRecord | None, line: Timeline, run_id: str) -> str:
    task = line.task or "(the task is not in the record yet)"
    facts = [_fact("run", esc(run_id)), _fact("status", _status_badge(line.status))]
    if record is not None:
        started = utc(record.started_at).strftime("%Y-%m-%d %H:%M:%S UTC")
        facts += [
            _fact("started", esc(started)),
            _fact("took", esc(f"{record.duration_seconds:.1f} s")),
            _fact("cost", esc(dollars(record.cost["usd"], record.cost.get("estimate", False)))),
            _fact("model calls", esc(f"{record.cost['llm_calls']:,}")),
            _fact(
                "tokens",
                esc(
                    f"{record.cost['input_tokens']:,} in / {record.cost['output_tokens']:,} out"
                    f" / {record.cost['cache_write_tokens']:,} cache-write"
                    f" / {record.cost['cache_read_tokens']:,} cache-read"
                ),
            ),
        ]
        if record.model:
            facts.append(_fact("model", esc(record.model)))
        if record.effort:
            facts.append(_fact("effort", esc(record.effort)))
        if record.complexity:
            facts.append(_fact("grade", esc(record.complexity)))
        if record.sandbox:
            facts.append(_fact("sandbox", esc(", ".join(record.sandbox))))
        if record.budget_usd is not None:
            spent = " (exhausted)" if record.budget_exhausted else ""
            facts.append(_fact("budget", esc(dollars(record.budget_usd) + spent)))
        if record.revisions:
            facts.append(_fact("revisions", esc(record.revisions)))
        if record.retry_of:
            facts.append(_fact("retry of", esc(record.retry_of)))
        if record.conversation_id:
            facts.append(_fact("conversation", esc(record.conversation_id)))
    elif line.has_log:
        facts.append(_fact("so far", esc(f"{line.length:.1f} s")))
    out = [
        f'<h1>Run {esc(run_id)}</h1><div class="facts">{"".join(facts)}</div>',
        "<h2>Task</h2>",
        f'<pre class="task">{esc(task)}</pre>',
    ]
    if record is not None and record.error:
        out.append(f'<h4>Why it failed</h4><pre class="error">{esc(record.error)}</pre>')
    if record is not None and record.warnings:
        items = "".join(f"<li>{esc(w)}</li>" for w in record.warnings)
        out.append(f'<h4>Warnings</h4><ul class="plain warnings">{items}</ul>')
    return "".join(out)


def _answer(record: RunRecord | None, line: Timeline) -> str:
    if line.answer:
        return f'<h2>Answer</h2><pre class="answer" id="answer">{esc(line.answer)}</pre>'
    if record is not None and record.outputs:
        outputs = "".join(
            f"<h4>{esc(name)}</h4><pre class='output'>{esc(text)}</pre>"
            for name, text in record.outputs.items()
        )
        return (
            f"<h2>Answer</h2><p class='note'>No answer: the agents' outputs, unmerged.</p>{outputs}"
        )
    waiting = "No answer yet." if record is None else "The run gave no answer."
    return f'<h2>Answer</h2><p class="note" id="answer">{waiting}</p>'


# ---- outcome ----------------------------------------------------------------------------------

_FAILED_STATES = frozenset(
    {"crash", "timeout", "silent", "unstartable", "output_limit", "sandbox", "rejected", "budget"}
)


def outcome(lane: Lane | None, agent: AgentRecord | None) -> str:
    """How an agent fared, as the page colours it: ok, repaired (ok after a failed attempt),
    failed, running (building or running now), carried (a retry took its output), or planned."""
    if lane is not None and lane.state == "carried":
        return "carried"
    if agent is not None:
        if agent.ok:
            return "repaired" if agent.attempts > 1 else "ok"
        if agent.kind in _FAILED_STATES or agent.attempts:
            return "failed"
    if lane is None:
        return "planned"
    if lane.state == "ok":
        failed_before = any(s.kind == RUN and s.ok is False for s in lane.segments)
        return "repaired" if failed_before or lane.attempts > 1 else "ok"
    if lane.state in _FAILED_STATES or lane.state == "failed":
        return "failed"
    if lane.state in ("building", "built", "running", "repairing"):
        return "running"
    return "planned"


def _outcome_words(kind: str, lane: Lane | None, agent: AgentRecord | None) -> str:
    if kind == "failed":
        why = agent.kind if agent is not None else (lane.state if lane is not None else "")
        return f"failed ({why})" if why and why != "failed" else "failed"
    if kind == "running" and lane is not None:
        return lane.state
    return kind


# ---- the graph --------------------------------------------------------------------------------

NODE_W = 188
NODE_H = 50
COL_GAP = 64
ROW_GAP = 18
PAD = 16
LABEL_H = 22


def _short(name: str, limit: int = 24) -> str:
    """A long name cut in the middle, so names that share a stem keep their ends."""
    if len(name) <= limit:
        return name
    keep = limit - 1
    return name[: (keep + 1) // 2] + "…" + name[len(name) - keep // 2 :]


def _columns(plan: list[PlannedNode], waves: list[list[str]]) -> list[list[str]]:
    known = {node.name for node in plan}
    columns = [[name for name in wave if name in known] for wave in waves]
    columns = [column for column in columns if column]
    placed = {name for column in columns for name in column}
    rest = [node.name for node in plan if node.name not in placed]
    if rest:
        columns.append(rest)
    return columns


def graph_svg(record: RunRecord | None, line: Timeline) -> str:
    """The plan as a graph: agents as nodes in wave columns, dependencies as edges."""
    plan = line.plan
    if not plan:
        return ""
    agents = {agent.name: agent for agent in record.agents} if record is not None else {}
    lanes = {lane.name: lane for lane in line.lanes}
    columns = _columns(plan, line.waves)
    tallest = max(len(column) for column in columns)
    width = PAD * 2 + len(columns) * NODE_W + (len(columns) - 1) * COL_GAP
    height = PAD * 2 + LABEL_H + tallest * NODE_H + (tallest - 1) * ROW_GAP
    where: dict[str, tuple[float, float]] = {}
    labels = []
    for index, column in enumerate(columns):
        x = PAD + index * (NODE_W + COL_GAP)
        offset = (tallest - len(column)) * (NODE_H + ROW_GAP) / 2
        wave_word = f"wave {index + 1}" if index < len(line.waves) else "not run"
        labels.append(
            f'<text class="wave-label" x="{x + NODE_W / 2:.0f}" y="{PAD + 12}" '
            f'text-anchor="middle">{wave_word}</text>'
        )
        for row, name in enumerate(column):
            where[name] = (x, PAD + LABEL_H + offset + row * (NODE_H + ROW_GAP))
    edges = []
    for node in plan:
        if node.name not in where:
            continue
        x2, y2 = where[node.name]
        for source in node.depends_on:
            if source not in where:
                continue
            x1, y1 = where[source]
            sx, sy, tx, ty = x1 + NODE_W, y1 + NODE_H / 2, x2, y2 + NODE_H / 2
            bend = max(24.0, (tx - sx) / 2)
            edges.append(
                f'<path class="edge" data-from="{esc(source)}" data-to="{esc(node.name)}" '
                f'd="M{sx:.1f},{sy:.1f} C{sx + bend:.1f},{sy:.1f} {tx - bend:.1f},{ty:.1f} '
                f'{tx:.1f},{ty:.1f}" marker-end="url(#arrow)"/>'
            )
    nodes = []
    for node in plan:
        if node.name not in where:
            continue
        left, top = where[node.name]
        agent, lane = agents.get(node.name), lanes.get(node.name)
        kind = outcome(lane, agent)
        classes = f"node {kind}" + (" reused" if node.reused or (agent and agent.reused) else "")
        attempts = agent.attempts if agent is not None else (lane.attempts if lane else 0)
        words = _outcome_words(kind, lane, agent)
        if attempts > 1:
            words += f" · {attempts} attempts"
        tip = f"{node.name}: {node.role}" if node.role else node.name
        nodes.append(
            f'<g class="{classes}" data-agent="{esc(node.name)}">'
            f'<a href="#agent-{esc(node.name)}"><title>{esc(tip)}</title>'
            f'<rect x="{left:.1f}" y="{top:.1f}" width="{NODE_W}" height="{NODE_H}" rx="7"/>'
            f'<circle class="dot" cx="{left + 14:.1f}" cy="{top + 17:.1f}" r="5"/>'
            f'<text x="{left + 26:.1f}" y="{top + 21:.1f}">{esc(_short(node.name))}</text>'
            f'<text class="sub" x="{left + 26:.1f}" y="{top + 38:.1f}">{esc(words)}</text></a></g>'
        )
    arrow = (
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker>'
        "</defs>"
    )
    return (
        f'<svg class="graph" role="img" aria-label="the plan as a graph" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">{arrow}'
        + "".join(labels)
        + "".join(edges)
        + "".join(nodes)
        + "</svg>"
    )


def _legend(items: Sequence[tuple[str, str]]) -> str:
    return (
        '<div class="legend">'
        + "".join(f'<span><i class="l-{cls}"></i>{esc(word)}</span>' for cls, word in items)
        + "</div>"
    )


def _graph_section(record: RunRecord | None, line: Timeline) -> str:
    drawn = graph_svg(record, line)
    if not drawn:
        return "<h2>Plan</h2><p class='note'>No plan yet.</p>"
    legend = _legend(
        [
            ("ok", "ok"),
            ("repaired", "ok after a repair"),
            ("failed", "failed"),
            ("running", "at work"),
            ("reused", "carried from the run retried"),
            ("", "not started"),
        ]
    )
    reasoning = ""
    if record is not None and record.reasoning:
        reasoning = (
            f"<details id='reasoning'><summary>The planner's reasoning</summary>"
            f"<pre class='output'>{esc(record.reasoning)}</pre></details>"
        )
    return f"<h2>Plan</h2>{legend}{drawn}{reasoning}"


# ---- the timeline -----------------------------------------------------------------------------

TL_WIDTH = 1000
TL_LABEL = 170
TL_LANE = 26
TL_TOP = 26


def _tick_step(length: float) -> float:
    for step in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600):
        if length / step <= 10:
            return step
    return 7200.0


def _call_words(line: Timeline, index: int) -> str:
    placed = line.calls[index]
    call = placed.call
    who = f" for {call.agent}" if call.agent else ""
    took = f", {call.seconds:.2f} s" if call.seconds else ""
    return (
        f"call {index + 1}: {call.phase}{who}, {call.model}: {call.input_tokens:,} in / "
        f"{call.output_tokens:,} out / {call.cache_write_tokens:,} cache-write / "
        f"{call.cache_read_tokens:,} cache-read{took}, {dollars(call.usd)}"
    )


def timeline_svg(line: Timeline) -> str:
    """Each agent's builds and attempts as bars against time, the phases above, calls marked."""
    if not line.has_log or line.origin is None:
        return ""
    length = max(line.length, 0.001)
    plot = TL_WIDTH - TL_LABEL - 12
    scale = plot / length

    def x(seconds: float) -> float:
        return TL_LABEL + max(0.0, min(seconds, length)) * scale

    rows = len(line.lanes) + 1
    height = TL_TOP + rows * TL_LANE + 8
    out = [
        f'<svg class="timeline" role="img" aria-label="the run over time" '
        f'viewBox="0 0 {TL_WIDTH} {height}" width="{TL_WIDTH}" height="{height}">'
    ]
    step = _tick_step(length)
    ticks = ['<g class="axis">']
    count = int(length / step) + 1
    for number in range(count + 1):
        at = number * step
        if at > length + 1e-9:
            break
        label = f"{at:g} s"
        ticks.append(
            f'<line x1="{x(at):.1f}" y1="{TL_TOP - 6}" x2="{x(at):.1f}" y2="{height - 4}"/>'
            f'<text x="{x(at):.1f}" y="{TL_TOP - 10}" text-anchor="middle">{label}</text>'
        )
    ticks.append("</g>")
    out += ticks
    y = TL_TOP
    flow = [f'<g class="phase-lane"><text x="4" y="{y + 16}">the flow</text>']
    for span in line.phases:
        end = span.end if span.end is not None else length
        if span.phase in ("build", "run"):
            continue  # the agents' own bars say it better
        flow.append(
            f'<rect class="phase" data-phase="{esc(span.phase)}" x="{x(span.start):.1f}" '
            f'y="{y + 3}" width="{max(1.5, x(end) - x(span.start)):.1f}" height="{TL_LANE - 8}">'
            f"<title>{esc(span.phase)}: {end - span.start:.2f} s</title></rect>"
        )
        if x(end) - x(span.start) >= 6.5 * len(span.phase) + 4:  # named where it fits
            flow.append(
                f'<text class="phase-label" x="{x(span.start) + 2:.1f}" y="{y + 16}">'
                f"{esc(span.phase)}</text>"
            )
    for placed in line.calls:
        if not placed.call.agent:
            flow.append(_call_mark(line, placed.index, x, y))
    flow.append("</g>")
    out += flow
    for lane in line.lanes:
        y += TL_LANE
        parts = [
            f'<g class="agent-lane" data-agent="{esc(lane.name)}">'
            f'<text x="4" y="{y + 16}"><title>{esc(lane.name)}</title>'
            f"{esc(_short(lane.name, 22))}</text>"
        ]
        for segment in lane.segments:
            end = segment.end if segment.end is not None else length
            cls = f"seg {segment.kind}"
            if segment.kind == RUN and segment.ok is not None:
                cls += " ok" if segment.ok else " failed"
            if segment.end is None:
                cls += " open"
            words = {BUILD: "writing its code", REPAIR: "rewriting its code", RUN: "running"}[
                segment.kind
            ]
            if segment.kind == RUN:
                words = f"attempt {segment.attempt}"
                if segment.ok is not None:
                    words += ": ok" if segment.ok else ": failed"
            note = f" — {segment.note.strip().splitlines()[-1]}" if segment.note.strip() else ""
            parts.append(
                f'<rect class="{cls}" data-start="{segment.start:.3f}" data-end="{end:.3f}" '
                f'x="{x(segment.start):.1f}" y="{y + 5}" '
                f'width="{max(1.5, x(end) - x(segment.start)):.1f}" height="{TL_LANE - 10}">'
                f"<title>{esc(lane.name)}, {esc(words)}: {segment.start:.2f} s to "
                f"{end:.2f} s{esc(note)}</title></rect>"
            )
        for placed in line.calls:
            if placed.call.agent == lane.name:
                parts.append(_call_mark(line, placed.index, x, y))
        parts.append("</g>")
        out += parts
    out.append("</svg>")
    return "".join(out)


def _call_mark(line: Timeline, index: int, x: Callable[[float], float], y: float) -> str:
    placed = line.calls[index]
    left, right = x(placed.start), x(placed.end)
    return (
        f'<rect class="call" data-call="{index}" x="{left:.1f}" y="{y + TL_LANE - 7}" '
        f'width="{max(2.0, right - left):.1f}" height="3">'
        f"<title>{esc(_call_words(line, index))}</title></rect>"
    )


def _timeline_section(line: Timeline) -> str:
    drawn = timeline_svg(line)
    if not drawn:
        return (
            "<h2>Timeline</h2><p class='note'>This run has no event log (it was recorded before "
            "runs kept one), so there is no timeline.</p>"
        )
    legend = _legend(
        [
            ("build", "writing code"),
            ("repaired", "rewriting after a failure"),
            ("ok", "an attempt that succeeded"),
            ("failed", "an attempt that failed"),
            ("running", "running now"),
            ("call", "a model call"),
        ]
    )
    origin = line.origin.strftime("%H:%M:%S UTC") if line.origin else ""
    return (
        f"<h2>Timeline</h2>{legend}{drawn}"
        f"<p class='note'>Seconds from {esc(origin)}; hover a bar or a call for its facts.</p>"
    )


# ---- the agents -------------------------------------------------------------------------------


_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))


def highlight(source: str) -> str:
    """Python source as HTML, its keywords, strings, comments, numbers and defined names marked;
    every character escaped. Source that does not tokenize is shown plain."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return esc(source)
    starts = [0]
    for text_line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(text_line))

    def offset(row: int, col: int) -> int:
        return starts[row - 1] + col if row - 1 < len(starts) else len(source)

    out: list[str] = []
    done = 0
    defining = False
    for token in tokens:
        start, end = offset(*token.start), offset(*token.end)
        if start < done or start > len(source):
            continue
        out.append(esc(source[done:start]))
        piece = source[start:end]
        cls = ""
        if token.type == tokenize.NAME:
            if defining:
                cls, defining = "fn", False
            elif keyword.iskeyword(piece) or keyword.issoftkeyword(piece):
                cls = "kw"
                defining = piece in ("def", "class")
            elif piece in _BUILTINS:
                cls = "bi"
        elif token.type == tokenize.STRING:
            cls = "str"
        elif token.type == tokenize.COMMENT:
            cls = "com"
        elif token.type == tokenize.NUMBER:
            cls = "num"
        out.append(f'<span class="{cls}">{esc(piece)}</span>' if cls else esc(piece))
        done = end
    out.append(esc(source[done:]))
    return "".join(out)


def code_html(name: str, source: str) -> str:
    """An agent's exact source: the model's part open and highlighted, the trusted runtime
    header and footer folded (they are the same in every agent)."""
    if not source:
        return (
            "<p class='note'>No code was recorded (it never ran, or its run was recorded before"
            " code was kept).</p>"
        )
    start = source.find(agent_runtime.BODY_START)
    end = source.rfind(agent_runtime.BODY_END)
    if start < 0 or end < start:
        return f'<pre class="code body">{highlight(source)}</pre>'
    head, body, foot = source[:start], source[start:end], source[end:]
    fold = (
        "<details id='{id}'><summary>{words} ({n} lines)</summary>"
        "<pre class='code'>{code}</pre></details>"
    )
    return (
        fold.format(
            id=esc(f"head-{name}"),
            words="the trusted runtime header",
            n=head.count("\n"),
            code=highlight(head),
        )
        + f'<pre class="code body">{highlight(body)}</pre>'
        + fold.format(
            id=esc(f"foot-{name}"),
            words="the trusted runtime footer",
            n=foot.count("\n"),
            code=highlight(foot),
        )
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage_row(label: str, usage: Mapping[str, object], usd: float) -> str:
    return (
        f"<tr><td>{esc(label)}</td>"
        + "".join(
            f'<td class="n">{_count(usage.get(key)):,}</td>'
            for key in (
                "llm_calls",
                "input_tokens",
                "output_tokens",
                "cache_write_tokens",
                "cache_read_tokens",
                "web_searches",
            )
        )
        + f'<td class="n">{esc(dollars(usd))}</td></tr>'
    )


_USAGE_HEAD = (
    "<thead><tr><th></th><th class='n'>calls</th><th class='n'>in</th><th class='n'>out</th>"
    "<th class='n'>cache-write</th><th class='n'>cache-read</th><th class='n'>searches</th>"
    "<th class='n'>cost</th></tr></thead>"
)


def _agent_section(
    name: str,
    role: str,
    agent: AgentRecord | None,
    lane: Lane | None,
    line: Timeline,
) -> str:
    kind = outcome(lane, agent)
    words = _outcome_words(kind, lane, agent)
    badge_tone = {"ok": "ok", "repaired": "repaired", "failed": "failed", "running": "running"}
    badge = f'<span class="badge st-{badge_tone.get(kind, kind)}">{esc(words)}</span>'
    out = [
        f'<section class="agent {kind}" id="agent-{esc(name)}" data-agent="{esc(name)}">',
        f"<h3>{esc(name)} {badge}</h3>",
        f'<p class="role">{esc(role)}</p>' if role else "",
    ]
    if agent is None:
        where = "Not recorded yet." if line.status == "running" else "It did not run."
        out.append(f"<p class='note'>{where}</p></section>")
        return "".join(out)
    facts = [
        _fact("attempts", esc(agent.attempts)),
        _fact("seconds", esc(f"{agent.seconds:.2f}")),
        _fact("cost", esc(dollars(agent.usd))),
        _fact(
            "tokens",
            esc(f"{agent.usage['input_tokens']:,} in / {agent.usage['output_tokens']:,} out"),
        ),
        _fact("model calls", esc(agent.usage["llm_calls"])),
    ]
    if agent.usage["web_searches"]:
        facts.append(_fact("web searches", esc(agent.usage["web_searches"])))
    if agent.reused:
        facts.append(_fact("code", "from the library"))
    out.append(f'<div class="facts">{"".join(facts)}</div>')
    if agent.error:
        out.append(f'<h4>Last error</h4><pre class="error">{esc(agent.error)}</pre>')
    if agent.refusals:
        text = ", ".join(f"{k}: {v}" for k, v in sorted(agent.refusals.items()))
        out.append(f"<h4>Requests the broker refused</h4><p>{esc(text)}</p>")
    if agent.failed_calls:
        text = ", ".join(f"{k}: {v}" for k, v in sorted(agent.failed_calls.items()))
        out.append(f"<h4>Calls that failed</h4><p>{esc(text)}</p>")
    inputs = "".join(
        f'<li>the output of <a href="#agent-{esc(upstream)}">{esc(upstream)}</a></li>'
        for upstream in agent.inputs
    )
    out.append(
        "<h4>Inputs</h4><ul class='plain inputs'><li>the task (above)</li>" + inputs + "</ul>"
    )
    output = agent.output or "(no output)"
    out.append(f'<h4>Output</h4><pre class="output">{esc(output)}</pre>')
    out.append(f"<h4>Code</h4>{code_html(name, agent.source)}")
    own = [placed for placed in line.calls if placed.call.agent == name]
    if own:
        rows = "".join(_call_row(placed.index, placed.call, placed.start) for placed in own)
        out.append(f"<h4>Its calls</h4><table class='calls'>{_CALLS_HEAD}{rows}</table>")
    out.append("</section>")
    return "".join(out)


def _agents_section(record: RunRecord | None, line: Timeline) -> str:
    lanes = {lane.name: lane for lane in line.lanes}
    roles = {node.name: node.role for node in line.plan}
    agents: dict[str, AgentRecord] = {}
    if record is not None:
        for agent in record.agents:
            agents[agent.name] = agent  # the last round's record of it
            roles.setdefault(agent.name, agent.role)
    names = [lane.name for lane in line.lanes]
    sections = [
        _agent_section(name, roles.get(name, ""), agents.get(name), lanes.get(name), line)
        for name in names
    ]
    if not sections:
        return "<h2>Agents</h2><p class='note'>No agents yet.</p>"
    failures = ""
    if record is not None and record.failures:
        items = "".join(
            f"<li><a href='#agent-{esc(f.name)}'>{esc(f.name)}</a>: {esc(f.reason)}</li>"
            for f in record.failures
        )
        failures = f"<h4>Left out of the answer</h4><ul class='plain'>{items}</ul>"
    return f"<h2>Agents</h2>{failures}" + "".join(sections)


# ---- calls, phases, files ---------------------------------------------------------------------

_CALLS_HEAD = (
    "<thead><tr><th class='n'>#</th><th class='n'>at</th><th>phase</th><th>for</th>"
    "<th>model</th><th class='n'>in</th><th class='n'>out</th><th class='n'>cache-write</th>"
    "<th class='n'>cache-read</th><th class='n'>searches</th><th class='n'>took</th>"
    "<th class='n'>cost</th></tr></thead>"
)


def _call_row(index: int, call: Call, start: float | None) -> str:
    at = f"{start:.2f} s" if start is not None else utc(call.at).strftime("%H:%M:%S")
    who = (
        f'<a href="#agent-{esc(call.agent)}">{esc(call.agent)}</a>' if call.agent else "main agent"
    )
    took = f"{call.seconds:.2f} s" if call.seconds else "—"
    searches = call.web_searches + call.web_fetches
    return (
        f'<tr data-call="{index}"><td class="n">{index + 1}</td><td class="n">{esc(at)}</td>'
        f"<td>{esc(call.phase)}</td><td>{who}</td><td>{esc(call.model)}</td>"
        f'<td class="n">{call.input_tokens:,}</td><td class="n">{call.output_tokens:,}</td>'
        f'<td class="n">{call.cache_write_tokens:,}</td>'
        f'<td class="n">{call.cache_read_tokens:,}</td><td class="n">{searches:,}</td>'
        f'<td class="n">{esc(took)}</td><td class="n">{esc(dollars(call.usd))}</td></tr>'
    )


def _calls_section(record: RunRecord | None, line: Timeline) -> str:
    if record is None:
        return (
            "<h2>Calls and cost</h2>"
            "<p class='note'>The calls are listed once the run is recorded.</p>"
        )
    phases = "".join(_usage_row(name, spent, spent["usd"]) for name, spent in record.phases.items())
    total = _usage_row("the run", record.cost, record.cost["usd"]).replace(
        "<tr>", "<tr class='total'>", 1
    )
    starts = {placed.index: placed.start for placed in line.calls}
    rows = "".join(_call_row(i, call, starts.get(i)) for i, call in enumerate(record.calls))
    calls = (
        f"<details id='all-calls' open><summary>Every model call ({len(record.calls)})</summary>"
        f"<table class='calls'>{_CALLS_HEAD}<tbody>{rows}</tbody></table></details>"
        if record.calls
        else "<p class='note'>No calls were recorded one by one for this run.</p>"
    )
    return (
        "<h2>Calls and cost</h2>"
        f"<table class='phases'>{_USAGE_HEAD}<tbody>{phases}</tbody><tfoot>{total}</tfoot></table>"
        f"{calls}"
    )


def _files_section(record: RunRecord | None, artifact_link: ArtifactLink | None) -> str:
    if record is None or not (record.artifacts or record.attachments or record.run_file):
        return ""
    out = ["<h2>Files</h2>"]
    if record.artifacts:
        items = []
        for item in record.artifacts:
            name = str(item.get("name", ""))
            href = artifact_link(name) if artifact_link is not None else None
            label = esc(name)
            shown = f'<a href="{esc(href)}" download="{esc(name)}">{label}</a>' if href else label
            items.append(
                f"<li class='artifact'>{shown} — {esc(human_size(int(item.get('bytes', 0))))}, "
                f"made by <a href='#agent-{esc(item.get('agent', ''))}'>"
                f"{esc(item.get('agent', ''))}</a></li>"
            )
        out.append(f"<h4>Made by the agents</h4><ul class='plain'>{''.join(items)}</ul>")
    if record.attachments:
        items = [
            f"<li>{esc(item.get('name', ''))} — {esc(human_size(int(item.get('bytes', 0))))}, "
            f"{esc(item.get('path', ''))}</li>"
            for item in record.attachments
        ]
        out.append(f"<h4>Attached by you (read-only)</h4><ul class='plain'>{''.join(items)}</ul>")
    if record.run_file:
        out.append(f"<p class='note'>Run file: {esc(record.run_file)}</p>")
    return "".join(out)
