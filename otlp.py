"""otlp.py — a run as an OpenTelemetry trace, in the GenAI conventions, and its export over OTLP.

`trace` reads a run's record and its event log (through `timeline.build`) and returns the trace
as OTLP/JSON (`{"resourceSpans": [...]}`), the shape an OTLP/HTTP receiver accepts at
`/v1/traces` and a backend imports from a file. It never changes either record. The spans:

    invoke_workflow agentgod                the run (INTERNAL)
      plan agentgod                         planning (INTERNAL), its calls under it
      create_agent NAME                     writing an agent's code, or rewriting it (INTERNAL)
        chat MODEL                          ... each generation call (CLIENT)
      invoke_agent NAME                     each attempt of an agent's process (CLIENT)
        chat MODEL                          ... each of its calls through the broker (CLIENT)
          execute_tool web_search|web_fetch ... each server tool use the reply reports
        execute_tool save_artifact          ... each file it handed back
      merge | council | judge               the flow's other phases, their calls under them
      chat MODEL                            calls before the plan (small talk, the question)

Every chat span carries `gen_ai.usage.*` (input tokens counting cached ones, as the conventions
ask, with the cache reads and writes apart) and `agentgod.cost.usd`; the agent and workflow
spans carry the sums of their calls. Message contents (the task, the answer, the agents' inputs
and outputs, the plan) go in only with `content=True` (TRACE_CONTENT=on). Trace and span ids are
derived from the run id, so the same run always gives the same trace: exporting it again, or
importing `agentgod show RUN --trace FILE` after an export, names the same spans.

`export` sends it with the standard library (urllib), so tracing costs no dependency, and it
is imported only when a run has somewhere to send it (config.Tracing).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agentgod import eventlog, history
from agentgod.config import Settings, Tracing
from agentgod.eventlog import Event
from agentgod.redact import redact
from agentgod.runrecord import RunRecord
from agentgod.timeline import BUILD, REPAIR, RUN, PlacedCall, Segment, Timeline, build

INTERNAL = 1
SERVER = 2
CLIENT = 3
STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2
PROVIDER = "anthropic"
MAIN_AGENT = "agentgod"
"""The main agent's name in the trace: it plans, writes the agents, merges and judges."""
WORKFLOW = "agentgod"
"""gen_ai.workflow.name of every run."""
PHASE_SPANS = ("merge", "council", "judge")
"""The flow's phases drawn as spans of their own (planning is the `plan` operation)."""


@functools.cache
def version() -> str:
    """The installed agentgod's version, for the trace's resource ("unknown" in a bare checkout)."""
    try:
        return importlib.metadata.version("agentgod")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class ExportError(RuntimeError):
    """The trace could not be delivered; the message says where to and why (no secret)."""


@dataclass
class _Span:
    key: str
    """What the span is, uniquely within the run: its id is derived from it."""
    name: str
    kind: int
    start: float
    end: float
    parent: _Span | None
    attributes: dict[str, Any] = field(default_factory=dict)
    status: int = STATUS_UNSET
    message: str = ""


def _id(run_id: str, key: str, size: int) -> str:
    digest = hashlib.sha256(f"agentgod:{run_id}:{key}".encode()).hexdigest()[: size * 2]
    return digest if digest.strip("0") else "1".rjust(size * 2, "0")


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_value(item) for item in value]}}
    return {"stringValue": str(value)}


def _attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"key": key, "value": _value(value)} for key, value in values.items() if value is not None
    ]


def _usage(calls: Iterable[PlacedCall]) -> dict[str, Any]:
    """gen_ai.usage.* of some calls together, and their dollars."""
    chosen = [placed.call for placed in calls]
    cache_read = sum(call.cache_read_tokens for call in chosen)
    cache_write = sum(call.cache_write_tokens for call in chosen)
    return {
        "gen_ai.usage.input_tokens": sum(call.input_tokens for call in chosen)
        + cache_read
        + cache_write,
        "gen_ai.usage.output_tokens": sum(call.output_tokens for call in chosen),
        "gen_ai.usage.cache_read.input_tokens": cache_read,
        "gen_ai.usage.cache_creation.input_tokens": cache_write,
        "agentgod.cost.usd": round(sum(call.usd for call in chosen), 9),
    }


def _messages(role: str, *texts: str) -> str:
    """Message contents as the conventions' JSON (role, parts of type text)."""
    parts = [{"type": "text", "content": text} for text in texts if text]
    return json.dumps([{"role": role, "parts": parts}], ensure_ascii=False)


def _holding(segments: Sequence[_Span], moment: float) -> _Span | None:
    """The span among `segments` that was open at `moment`, else the last one begun before it,
    else the first (a call is counted a moment after its reply; clocks differ by a hair)."""
    begun = [span for span in segments if span.start <= moment + 1e-3]
    inside = [span for span in begun if moment <= span.end + 1e-3]
    if inside:
        return inside[-1]
    if begun:
        return begun[-1]
    return segments[0] if segments else None


class _Builder:
    def __init__(self, record: RunRecord, line: Timeline, content: bool) -> None:
        self.record = record
        self.line = line
        self.content = content
        self.spans: list[_Span] = []
        self.call_parents: list[tuple[PlacedCall, _Span]] = []
        """Each call and the span it was placed under."""
        self.common: dict[str, Any] = {
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.conversation.id": record.conversation_id,
        }

    def add(self, span: _Span) -> _Span:
        if "gen_ai.operation.name" in span.attributes:  # a GenAI span: the required ones too
            span.attributes = {**self.common, **span.attributes}
        self.spans.append(span)
        return span

    def build(self) -> list[_Span]:
        record, line = self.record, self.line
        end = max(line.length, max((c.end for c in line.calls), default=0.0))
        root = self.add(
            _Span(
                "workflow",
                f"invoke_workflow {WORKFLOW}",
                INTERNAL,
                0.0,
                end,
                None,
                {
                    "gen_ai.operation.name": "invoke_workflow",
                    "gen_ai.workflow.name": WORKFLOW,
                    "gen_ai.request.model": record.model or None,
                    "agentgod.run.id": record.run_id,
                    "agentgod.run.status": record.status.value,
                    "agentgod.run.complexity": record.complexity,
                    "agentgod.run.agents": len(record.agents),
                    "agentgod.run.revisions": record.revisions,
                    "agentgod.run.retry_of": record.retry_of,
                    **_usage(line.calls),
                },
            )
        )
        if record.status.value != "ok":
            root.status, root.message = STATUS_ERROR, record.error
            root.attributes["error.type"] = record.status.value
        else:
            root.status = STATUS_OK
        if self.content:
            root.attributes["gen_ai.input.messages"] = _messages("user", record.task)
            root.attributes["gen_ai.output.messages"] = _messages("assistant", record.answer)
        plans = self.phases(root, "plan")
        flow = {phase: self.phases(root, phase) for phase in PHASE_SPANS}
        builds, runs = self.agents(root)
        for placed in line.calls:
            call = placed.call
            parent: _Span | None = None
            if call.agent and call.phase == "generate":
                parent = _holding(builds.get(call.agent, []), placed.end)
            elif call.agent:
                parent = _holding(runs.get(call.agent, []), placed.end)
            elif call.phase == "plan":
                parent = _holding(plans, placed.end)
            elif call.phase in flow:
                parent = _holding(flow[call.phase], placed.end)
            self.chat(placed, parent or root)
        for spans in (*builds.values(), *runs.values(), plans, *flow.values()):
            for span in spans:
                span.attributes.update(_usage(self.calls_under(span)))
        self.artifacts(runs)
        return self.spans

    def calls_under(self, span: _Span) -> list[PlacedCall]:
        return [placed for placed, parent in self.call_parents if parent is span]

    def phases(self, root: _Span, phase: str) -> list[_Span]:
        spans = []
        for index, found in enumerate(s for s in self.line.phases if s.phase == phase):
            end = found.end if found.end is not None else self.line.length
            if phase == "plan":
                name, attributes = (
                    f"plan {MAIN_AGENT}",
                    {
                        "gen_ai.operation.name": "plan",
                        "gen_ai.agent.name": MAIN_AGENT,
                    },
                )
                if self.content and self.record.plan:
                    attributes["gen_ai.output.messages"] = _messages(
                        "assistant",
                        json.dumps(self.record.plan, ensure_ascii=False),
                        self.record.reasoning,
                    )
            else:
                name, attributes = phase, {"agentgod.phase": phase}
            spans.append(
                self.add(
                    _Span(f"{phase}#{index}", name, INTERNAL, found.start, end, root, attributes)
                )
            )
        return spans

    def agents(self, root: _Span) -> tuple[dict[str, list[_Span]], dict[str, list[_Span]]]:
        records = {agent.name: agent for agent in self.record.agents}
        roles = {node.name: node.role for node in self.line.plan}
        builds: dict[str, list[_Span]] = {}
        runs: dict[str, list[_Span]] = {}
        for lane in self.line.lanes:
            agent = records.get(lane.name)
            role = agent.role if agent is not None else roles.get(lane.name, "")
            named = {
                "gen_ai.agent.name": lane.name,
                "gen_ai.agent.id": f"{self.record.run_id}/{lane.name}",
                "gen_ai.agent.description": role or None,
            }
            attempts = [s for s in lane.segments if s.kind == RUN]
            for index, segment in enumerate(lane.segments):
                end = segment.end if segment.end is not None else self.line.length
                if segment.kind in (BUILD, REPAIR):
                    span = self.add(
                        _Span(
                            f"create_agent/{lane.name}#{index}",
                            f"create_agent {lane.name}",
                            INTERNAL,
                            segment.start,
                            end,
                            root,
                            {
                                "gen_ai.operation.name": "create_agent",
                                **named,
                                "agentgod.agent.repair": segment.kind == REPAIR,
                                "agentgod.agent.reused": lane.reused,
                            },
                        )
                    )
                    if segment.ok is False:
                        span.status, span.message = STATUS_ERROR, segment.note
                        span.attributes["error.type"] = "rejected"
                    builds.setdefault(lane.name, []).append(span)
                    continue
                span = self.add(
                    _Span(
                        f"invoke_agent/{lane.name}#{index}",
                        f"invoke_agent {lane.name}",
                        CLIENT,
                        segment.start,
                        end,
                        root,
                        {
                            "gen_ai.operation.name": "invoke_agent",
                            **named,
                            "agentgod.agent.attempt": segment.attempt,
                        },
                    )
                )
                self.outcome(span, segment, segment is attempts[-1], agent)
                runs.setdefault(lane.name, []).append(span)
        return builds, runs

    def outcome(self, span: _Span, segment: Segment, last: bool, agent: Any) -> None:
        if segment.ok is False:
            kind = str(agent.kind) if last and agent is not None and not agent.ok else "_OTHER"
            span.status, span.message = STATUS_ERROR, segment.note.strip()[-500:]
            span.attributes["error.type"] = kind
        elif segment.ok:
            span.status = STATUS_OK
        if self.content and last and agent is not None:
            upstream = [self.output_of(name) for name in agent.inputs]
            span.attributes["gen_ai.input.messages"] = _messages(
                "user", self.record.task, *upstream
            )
            if agent.output:
                span.attributes["gen_ai.output.messages"] = _messages("assistant", agent.output)

    def output_of(self, name: str) -> str:
        agent = self.record.agent(name)
        return f"### {name}\n{agent.output}" if agent is not None and agent.output else ""

    def chat(self, placed: PlacedCall, parent: _Span) -> None:
        call = placed.call
        span = self.add(
            _Span(
                f"call#{placed.index}",
                f"chat {call.asked_model}",
                CLIENT,
                placed.start,
                placed.end,
                parent,
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": call.asked_model,
                    # the model that answered: another one when a fallback did (MODEL_FALLBACKS)
                    "gen_ai.response.model": call.model,
                    "gen_ai.agent.name": call.agent or MAIN_AGENT,
                    "agentgod.phase": call.phase,
                    **_usage([placed]),
                },
            )
        )
        self.call_parents.append((placed, parent))
        for tool, count in (("web_search", call.web_searches), ("web_fetch", call.web_fetches)):
            for number in range(count):
                self.add(
                    _Span(
                        f"call#{placed.index}/{tool}#{number}",
                        f"execute_tool {tool}",
                        INTERNAL,
                        placed.start,
                        placed.end,
                        span,
                        {
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": tool,
                            "gen_ai.tool.type": "extension",
                            "gen_ai.agent.name": call.agent or MAIN_AGENT,
                        },
                    )
                )

    def artifacts(self, runs: dict[str, list[_Span]]) -> None:
        for index, item in enumerate(self.record.artifacts):
            agent = str(item.get("agent", ""))
            attempts = runs.get(agent)
            if not attempts:
                continue
            ran = next((s for s in reversed(attempts) if s.status == STATUS_OK), attempts[-1])
            self.add(
                _Span(
                    f"artifact#{index}",
                    "execute_tool save_artifact",
                    INTERNAL,
                    ran.end,
                    ran.end,
                    ran,
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "save_artifact",
                        "gen_ai.tool.type": "function",
                        "gen_ai.agent.name": agent,
                        "agentgod.artifact.name": str(item.get("name", "")),
                        "agentgod.artifact.bytes": int(item.get("bytes", 0)),
                    },
                )
            )


def _nanos(origin: datetime, seconds: float) -> str:
    base = int(origin.timestamp() * 1_000_000) * 1000
    return str(base + round(seconds * 1e9))


def trace(
    record: RunRecord,
    events: Sequence[Event],
    *,
    service_name: str = "agentgod",
    content: bool = False,
) -> dict[str, Any]:
    """The run as one OTLP/JSON trace (ExportTraceServiceRequest)."""
    line = build(events, record)
    origin = line.origin or record.started_at
    spans = _Builder(record, line, content).build()
    trace_id = _id(record.run_id, "trace", 16)
    encoded = []
    for span in spans:
        shape: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": _id(record.run_id, span.key, 8),
            "name": span.name,
            "kind": span.kind,
            "startTimeUnixNano": _nanos(origin, span.start),
            "endTimeUnixNano": _nanos(origin, max(span.start, span.end)),
            "attributes": _attributes(span.attributes),
        }
        if span.parent is not None:
            shape["parentSpanId"] = _id(record.run_id, span.parent.key, 8)
        if span.status != STATUS_UNSET:
            shape["status"] = {"code": span.status}
            if span.message:
                shape["status"]["message"] = span.message
        encoded.append(shape)
    resource = {
        "service.name": service_name,
        "service.version": version(),
        "telemetry.sdk.name": "agentgod",
        "telemetry.sdk.language": "python",
        "telemetry.sdk.version": version(),
    }
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource)},
                "scopeSpans": [
                    {"scope": {"name": "agentgod", "version": version()}, "spans": encoded}
                ],
            }
        ]
    }


def events_of(runs_dir: Path, run_id: str) -> list[Event]:
    """A run's event log, or nothing when it has none (recorded before logs were kept)."""
    try:
        return eventlog.read(eventlog.run_log(runs_dir, run_id))
    except OSError:
        return []


def send(payload: dict[str, Any], tracing: Tracing) -> None:
    """POST one trace to the OTLP/HTTP receiver; raises ExportError saying why not."""
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(tracing.url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("User-Agent", f"agentgod/{version()}")
    for key, value in tracing.headers:
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=tracing.timeout_seconds) as reply:
            reply.read(65536)
    except urllib.error.HTTPError as error:
        raise ExportError(f"{tracing.url} answered HTTP {error.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        raise ExportError(redact(f"{tracing.url} could not be reached: {reason}")) from None


def export_run(run_id: str, settings: Settings) -> str | None:
    """Send the recorded run `run_id` (its history record and event log) where the settings say
    (`settings.tracing`); a warning for the person when it could not be, else None. Never
    raises."""
    tracing = settings.tracing
    if tracing is None:
        return None
    try:
        record = history.load(run_id)
    except Exception as error:  # a history that cannot be read costs the trace, not the run
        return f"the run's trace was not exported: its record could not be read ({error})"
    if record is None:
        return "the run's trace was not exported: it is not in the history"
    payload = trace(
        record,
        events_of(settings.runs_dir, run_id),
        service_name=settings.service_name,
        content=settings.trace_content,
    )
    try:
        send(payload, tracing)
    except ExportError as error:
        return f"the run's trace was not exported: {error}"
    return None
