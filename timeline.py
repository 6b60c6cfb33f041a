"""timeline.py — a run's moments as intervals: what its page draws and its trace is made of.

A run leaves two records: its `RunRecord` (the history's, once archived) and its event log (one
line per moment, written as it happens). `build` reads both and says, in seconds from one origin,
when each agent was being written, when each attempt of it ran and how that ended, when each
phase of the flow ran, and when each model call was made and whom it served. It reads; it never
changes either record, and it invents nothing: a moment the log does not hold is not drawn (an
interval still open when the log ends is open, `end` None), and a call is placed by the time its
record gives (counted at `at`, begun `seconds` earlier).

A run in progress has a log and no record yet: the plan and the agents' progress then come from
the log alone (`plan_ready`, the agents' moments); the record, when there is one, is the truth
about the plan, the agents and the calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agentgod.eventlog import NOTE, Event
from agentgod.kinds import AGENT_NAME
from agentgod.ledger import Call
from agentgod.runrecord import RunRecord, utc

BUILD = "build"
"""A segment in which the agent's code was being written (or taken from the library)."""
REPAIR = "repair"
"""A segment in which a failed agent's code was being rewritten from its error."""
RUN = "run"
"""A segment in which one attempt of the agent ran as a process."""


@dataclass
class Segment:
    """One interval of one agent's life."""

    kind: str
    """BUILD, REPAIR or RUN."""
    start: float
    """Seconds from the timeline's origin."""
    end: float | None = None
    """None while it has not ended (a run in progress, or a log that stops short)."""
    attempt: int = 0
    """For RUN: which attempt (1, then each repaired or rerun version)."""
    ok: bool | None = None
    """How it ended: True, False, or None when the log does not say (or it has not ended)."""
    note: str = ""
    """Why it failed (a repair's error, a rejection's reasons), as the log holds it."""


@dataclass
class Lane:
    """One agent across the run: its segments, in order, and where it got to."""

    name: str
    segments: list[Segment] = field(default_factory=list)
    state: str = "planned"
    """planned, building, built, running, or how it finished (kinds.AgentKind: ok, crash, ...)."""
    reused: bool = False
    """Its code came from the library."""
    attempts: int = 0

    def open(self, kind: str) -> Segment | None:
        """The last segment of `kind` that has not ended."""
        for segment in reversed(self.segments):
            if segment.kind == kind and segment.end is None:
                return segment
        return None


@dataclass
class PhaseSpan:
    """One phase of the flow (kinds.Phase), from its start to its end."""

    phase: str
    start: float
    end: float | None = None


@dataclass(frozen=True)
class PlacedCall:
    """One model call of the record, placed in time."""

    index: int
    """Its position in the record's calls (the order they were counted in)."""
    call: Call
    start: float
    end: float


@dataclass(frozen=True)
class PlannedNode:
    """One agent of the plan, as the graph draws it."""

    name: str
    role: str
    depends_on: tuple[str, ...]
    reused: bool = False


@dataclass
class Timeline:
    """Everything `build` found, in seconds from `origin`."""

    origin: datetime | None
    """The wall-clock moment of second 0 (UTC); None when nothing could be placed in time."""
    length: float
    """Seconds from the origin to the last moment known."""
    lanes: list[Lane]
    """One per agent, in wave order (the plan's order within a wave)."""
    phases: list[PhaseSpan]
    calls: list[PlacedCall]
    plan: list[PlannedNode]
    waves: list[list[str]]
    task: str
    """The task, from the record or the log's first note; "" when neither has it."""
    answer: str
    """The answer, from the record, or as far as the log has it."""
    archived: bool
    """The log says the run was archived (so it is over)."""
    has_log: bool
    """There was an event log to read (runs recorded before logs existed have none)."""
    status: str
    """The record's status, or "running" for a run that has no record yet."""


def _seconds(moment: str) -> datetime | None:
    try:
        return utc(datetime.fromisoformat(moment.replace("Z", "+00:00")))
    except ValueError:
        return None


def _log_opened(events: Sequence[Event]) -> datetime | None:
    """When the log was opened: an event's wall-clock time less its seconds since then."""
    for event in events:
        at = _seconds(event.at)
        if at is not None:
            return at - timedelta(seconds=event.t)
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _names(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, str)]


def _plan_from_log(args: dict[str, Any]) -> list[PlannedNode]:
    agents = args.get("agents")
    nodes: list[PlannedNode] = []
    for agent in agents if isinstance(agents, list) else []:
        if not isinstance(agent, dict) or not isinstance(agent.get("name"), str):
            continue
        nodes.append(
            PlannedNode(
                name=agent["name"],
                role=_text(agent.get("role")),
                depends_on=tuple(_names(agent.get("depends_on"))),
                reused=agent.get("reused") is True,
            )
        )
    return nodes


def _plan_from_record(record: RunRecord) -> list[PlannedNode]:
    nodes: list[PlannedNode] = []
    reused = {agent.name for agent in record.agents if agent.reused}
    for spec in record.plan:
        name = spec.get("name")
        if not isinstance(name, str):
            continue
        nodes.append(
            PlannedNode(
                name=name,
                role=_text(spec.get("role")),
                depends_on=tuple(_names(spec.get("depends_on"))),
                reused=name in reused,
            )
        )
    known = {node.name for node in nodes}
    for agent in record.agents:  # one the record has that no plan listed (an older record)
        if agent.name not in known:
            known.add(agent.name)
            nodes.append(PlannedNode(agent.name, agent.role, tuple(agent.inputs), agent.reused))
    return nodes


class _Reader:
    """Walks the log once, opening and closing intervals."""

    def __init__(self) -> None:
        self.lanes: dict[str, Lane] = {}
        self.phases: list[PhaseSpan] = []
        self.plan: list[PlannedNode] = []
        self.waves: list[list[str]] = []
        self.task = ""
        self.answer: list[str] = []
        self.final_answer: str | None = None
        self.archived = False

    def lane(self, name: Any) -> Lane | None:
        if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
            return None
        return self.lanes.setdefault(name, Lane(name))

    def read(self, event: Event, t: float) -> None:
        args = event.args
        kind = event.event
        if kind == NOTE:
            if args.get("kind") == "task" and not self.task:
                self.task = _text(args.get("text"))
            elif args.get("kind") == "answer":
                self.final_answer = _text(args.get("text"))
            return
        if kind == "phase_started":
            self.phases.append(PhaseSpan(_text(args.get("phase")), t))
        elif kind == "phase_finished":
            phase = _text(args.get("phase"))
            for span in reversed(self.phases):
                if span.phase == phase and span.end is None:
                    span.end = t
                    break
        elif kind == "plan_ready":
            self.plan = _plan_from_log(args)
            waves = args.get("waves")
            self.waves = [_names(w) for w in waves] if isinstance(waves, list) else []
            for node in self.plan:
                lane = self.lane(node.name)
                if lane is not None:
                    lane.reused = lane.reused or node.reused
        elif kind == "answer_started":
            self.answer = []
        elif kind == "answer_delta":
            self.answer.append(_text(args.get("text")))
        elif kind == "archived":
            self.archived = True
        elif kind.startswith("agent_"):
            self.agent(kind, args, t)

    def agent(self, kind: str, args: dict[str, Any], t: float) -> None:
        lane = self.lane(args.get("name"))
        if lane is None:
            return
        if kind == "agent_building":
            lane.reused = lane.reused or args.get("reused") is True
            lane.segments.append(Segment(BUILD, t))
            lane.state = "building"
        elif kind in ("agent_generated", "agent_rejected"):
            segment = lane.open(BUILD) or lane.open(REPAIR)
            if segment is not None:
                segment.end, segment.ok = t, kind == "agent_generated"
                if kind == "agent_rejected":
                    segment.note = "; ".join(_names(args.get("reasons")))
            lane.state = "built" if kind == "agent_generated" else "rejected"
        elif kind == "agent_running":
            for open_kind in (BUILD, REPAIR):
                segment = lane.open(open_kind)
                if segment is not None:  # a library agent is never "generated"
                    segment.end, segment.ok = t, True
            previous = lane.open(RUN)
            if previous is not None:  # run again as it was: a transient failure
                previous.end, previous.ok = t, False
            attempt = args.get("attempt")
            number = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0
            lane.segments.append(Segment(RUN, t, attempt=number))
            lane.attempts = max(lane.attempts, number)
            lane.state = "running"
        elif kind == "agent_repairing":
            segment = lane.open(RUN)
            if segment is not None:
                segment.end, segment.ok = t, False
                segment.note = _text(args.get("error"))
            lane.segments.append(Segment(REPAIR, t))
            lane.state = "repairing"
        elif kind == "agent_finished":
            ok = args.get("ok") is True
            for open_kind in (RUN, BUILD, REPAIR):
                segment = lane.open(open_kind)
                if segment is not None:
                    segment.end, segment.ok = t, ok if open_kind == RUN else segment.ok
                    if open_kind == RUN and not ok:
                        segment.note = _text(args.get("error"))
            lane.state = _text(args.get("kind")) or ("ok" if ok else "failed")
            attempts = args.get("attempts")
            if isinstance(attempts, int) and not isinstance(attempts, bool):
                lane.attempts = max(lane.attempts, attempts)


def _placed(calls: Iterable[Call], origin: datetime) -> list[PlacedCall]:
    placed = []
    for index, call in enumerate(calls):
        end = (utc(call.at) - origin).total_seconds()
        placed.append(PlacedCall(index, call, end - max(0.0, call.seconds), end))
    return placed


def _wave_order(names: Iterable[str], waves: list[list[str]], plan: list[PlannedNode]) -> list[str]:
    """Names in wave order, the plan's order within a wave; names in no wave after them."""
    position = {node.name: index for index, node in enumerate(plan)}
    wave_of = {name: index for index, wave in enumerate(waves) for name in wave}
    unknown = len(waves)
    return sorted(
        names, key=lambda name: (wave_of.get(name, unknown), position.get(name, len(position)))
    )


def build(events: Sequence[Event], record: RunRecord | None) -> Timeline:
    """The run's timeline from its log (`events`, possibly none) and its record (None while it
    has none: a run in progress)."""
    reader = _Reader()
    opened = _log_opened(events)
    calls = record.calls if record is not None else []
    starts = [opened] if opened is not None else []
    starts += [utc(call.at) - timedelta(seconds=max(0.0, call.seconds)) for call in calls]
    if record is not None and not events:
        starts.append(utc(record.started_at))
    origin = min(starts) if starts else None
    shift = (opened - origin).total_seconds() if opened is not None and origin is not None else 0.0
    for event in events:
        reader.read(event, event.t + shift)
    placed = _placed(calls, origin) if origin is not None else []
    plan = _plan_from_record(record) if record is not None and record.plan else reader.plan
    waves = record.waves if record is not None and record.waves else reader.waves
    names = list(reader.lanes)
    for node in plan:
        if node.name not in reader.lanes:
            names.append(node.name)
            reader.lanes[node.name] = Lane(node.name, reused=node.reused)
    if record is not None:
        for agent in record.agents:
            lane = reader.lanes.setdefault(agent.name, Lane(agent.name))
            if agent.name not in names:
                names.append(agent.name)
            lane.state = str(agent.kind)
            lane.reused, lane.attempts = agent.reused, max(lane.attempts, agent.attempts)
            if agent.name in record.carried:
                lane.state = "carried"
    lanes = [reader.lanes[name] for name in _wave_order(names, waves, plan)]
    ends = [event.t + shift for event in events]
    ends += [call.end for call in placed]
    if record is not None and origin is not None:
        ends.append((utc(record.started_at) - origin).total_seconds() + record.duration_seconds)
    if record is not None:
        answer = record.answer
    elif reader.final_answer is not None:
        answer = reader.final_answer
    else:
        answer = "".join(reader.answer)
    return Timeline(
        origin=origin,
        length=max(ends, default=0.0),
        lanes=lanes,
        phases=reader.phases,
        calls=placed,
        plan=plan,
        waves=[list(wave) for wave in waves],
        task=record.task if record is not None else reader.task,
        answer=answer,
        archived=reader.archived,
        has_log=bool(events),
        status=record.status.value if record is not None else "running",
    )
