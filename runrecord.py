"""runrecord.py — a run's facts, in the one shape every view of the run is derived from. No I/O.

`RunRecord` (with an `AgentRecord` per agent and a `Failure` per excluded agent) is what the
crew and the flow fill in as the run goes, what `handle_task` returns (`results.TaskResult` is a
record with the living run's handles), what the archive writes (runlog), the run file renders
and reads back (runfile), the history stores and loads back (history), `--json` prints
(`reply`), the transcript draws (`transcript`) and `agentgod show` shows (`to_json`). A fact of a
run is a field here, once; each view is a method or a reader of it. It sits below the records
and above the vocabulary, so none of its readers has to import another for it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentgod.kinds import AgentKind, RunStatus
from agentgod.ledger import Call
from agentgod.replies import (
    CARRIED,
    AgentReply,
    ArtifactReply,
    AttachmentReply,
    CostSummary,
    FailureReply,
    FallbackReply,
    RunReply,
    TokenUsage,
    Transcript,
    TranscriptAgent,
    cost_reply,
)


def new_run_id() -> str:
    """A fresh run id: 8 lowercase hex characters, short enough to type (`agentgod show 3f9a`).

    Random, not derived from the process: scratch.RunSpace makes it unique in the home, by claiming
    generated_agents/<id>/ (which no concurrent run can then take) and skipping ids an earlier
    run already has (its runs/<id>/ folder or its history row).
    """
    return secrets.token_hex(4)


def utc(moment: datetime) -> datetime:
    """A moment in UTC; a naive one is taken to be UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def no_usage() -> TokenUsage:
    """Usage with every count at zero: an agent that made no model call."""
    return TokenUsage(
        llm_calls=0,
        input_tokens=0,
        output_tokens=0,
        cache_write_tokens=0,
        cache_read_tokens=0,
        web_searches=0,
    )


@dataclass
class AgentRecord:
    """How one agent of the run fared; the crew fills it in as the agent is built and run."""

    name: str
    """The agent's safe name."""
    role: str
    """Its one-line role."""
    reused: bool = False
    """True when it came from the library instead of the generator."""
    ok: bool = False
    """Whether its final attempt succeeded."""
    attempts: int = 0
    """Executions including repairs."""
    seconds: float = 0.0
    """Wall-clock time of its executions."""
    kind: str = AgentKind.PENDING
    """ok, or how its final attempt failed (kinds.AgentKind: crash, timeout, rejected, ...)."""
    error: str = ""
    """The last failure's reason, if any (redacted again before it is written)."""
    usd: float = 0.0
    """What its own model calls cost, as the broker billed them."""
    source: str = ""
    """The exact code that ran (its final attempt), or "" when none did: `agentgod show --code`."""
    inputs: list[str] = field(default_factory=list)
    """The upstream agents whose outputs it was given, by name, in order."""
    output: str = ""
    """What its final attempt returned; "" when it failed."""
    usage: TokenUsage = field(default_factory=no_usage)
    """Its own model calls and what they used, every attempt together, as the broker billed them."""
    refusals: dict[str, int] = field(default_factory=dict)
    """Requests of its the broker would not make, by error type (budget, forbidden, ...)."""
    failed_calls: dict[str, int] = field(default_factory=dict)
    """Its calls that reached the model and failed, by error type (rate_limit, overloaded, ...)."""

    def reply(self) -> AgentReply:
        """As `--json` lists it."""
        return AgentReply(
            name=self.name,
            role=self.role,
            reused=self.reused,
            ok=self.ok,
            attempts=self.attempts,
            seconds=round(self.seconds, 3),
            usage=TokenUsage(**self.usage),
            usd=round(self.usd, 6),
        )

    def transcript_row(self) -> TranscriptAgent:
        """As the transcript after the answer draws it."""
        return TranscriptAgent(**self.reply(), kind=str(self.kind))

    def to_json(self) -> dict[str, Any]:
        """Everything kept of it, for `agentgod show --json`."""
        return {
            "name": self.name,
            "role": self.role,
            "reused": self.reused,
            "ok": self.ok,
            "kind": str(self.kind),
            "attempts": self.attempts,
            "seconds": self.seconds,
            "error": self.error,
            "usd": self.usd,
            "usage": dict(self.usage),
            "refusals": dict(self.refusals),
            "failed_calls": dict(self.failed_calls),
            "inputs": list(self.inputs),
            "output": self.output,
            "source": self.source,
        }


@dataclass(frozen=True)
class Failure:
    """An agent excluded from the answer, and why."""

    name: str
    reason: str
    """One line: the last line of its stderr, or the executor's reason."""
    kind: str = AgentKind.CRASH
    """How it failed (kinds.AgentKind)."""

    def reply(self) -> FailureReply:
        return FailureReply(name=self.name, reason=self.reason)


@dataclass
class RunRecord:
    """Everything worth keeping about one task; the flow fills in one per task."""

    task: str
    """The user's task as typed."""
    ok: bool
    """True when the run produced an answer."""
    answer: str
    """The final answer; "" on failure."""
    error: str
    """One-line headline of why the run failed; "" on success."""
    complexity: str | None
    """The planner's grade (simple, standard, deep); None when planning never finished."""
    waves: list[list[str]]
    """Agent names per execution wave, in order."""
    agents: list[AgentRecord]
    """One record per agent that took part."""
    failures: list[Failure]
    """Each agent that was excluded after its repairs, and why."""
    revisions: int
    """Extra rounds the judge asked for."""
    council_improved: bool
    """True when the council's refinement replaced the answer."""
    cost: CostSummary
    """What the run spent: llm_calls, the four token counts, usd, estimate."""
    duration_seconds: float
    """Wall-clock time of the whole task."""
    started_at: datetime
    """When the task started (UTC; a naive value is taken as UTC)."""
    sandbox: list[str] = field(default_factory=list)
    """Confinement layers that were active for the agents."""
    budget_exhausted: bool = False
    """True when BUDGET_USD stopped the run early."""
    warnings: list[str] = field(default_factory=list)
    """What went wrong that the run survived (a package pip refused, a judge that failed)."""
    phases: dict[str, CostSummary] = field(default_factory=dict)
    """The cost by where it went (kinds.Spend)."""
    outputs: dict[str, str] = field(default_factory=dict)
    """Agent outputs that were paid for but reached no answer (the merge failed), by agent."""
    attachments: list[AttachmentReply] = field(default_factory=list)
    """The user's files the agents could read (named, never copied into the archive)."""
    artifacts: list[ArtifactReply] = field(default_factory=list)
    """The files the agents made, kept beside the run file under runs/<run id>/artifacts/."""
    run_id: str = field(default_factory=new_run_id)
    """The run's short id (new_run_id: its scratch.RunSpace's), by which `agentgod show` finds
    it; a fresh one when not given."""
    status: RunStatus = RunStatus.OK
    """How the run ended. Left at its default, it follows `ok` and `budget_exhausted` (FAILED or
    BUDGET when not ok), as callers that predate it expect; `ok` stays for the old queries."""
    conversation_id: str | None = None
    """The conversation the task belongs to (follow-ups share one); None outside any."""
    retry_of: str | None = None
    """The run id of the run this one retried, reusing what it had done."""
    carried: list[str] = field(default_factory=list)
    """Agents whose outputs came from the retried run: neither written nor run again."""
    model: str = ""
    """The main model: the one that planned, wrote the agents and merged."""
    effort: str | None = None
    """The effort the run was planned at (kinds.Effort); None when it was never chosen."""
    reasoning: str = ""
    """The planner's reasoning for its plan."""
    plan: list[dict[str, Any]] = field(default_factory=list)
    """The agents as planned (planner.AgentSpec as dicts: name, role, instructions, depends_on,
    web, dependencies), before any ran."""
    calls: list[Call] = field(default_factory=list)
    """Every model call counted against the run, in order (ledger.Usage.call_log()), the ones
    made before the plan included."""
    budget_usd: float | None = None
    """The cap the run spent under (BUDGET_USD, --budget); None without one."""
    trimmed: list[str] = field(default_factory=list)
    """Agents the plan held beyond MAX_AGENTS, left out (a warning says so too, and is kept)."""
    run_file: Path | None = None
    """The run file the archive wrote (runs/<stamp>_<slug>.md); None until it is written, or
    when it could not be."""

    def __post_init__(self) -> None:
        """A caller that predates `status` says how the run ended with ok and budget_exhausted."""
        if not self.ok and self.status is RunStatus.OK:
            self.status = RunStatus.BUDGET if self.budget_exhausted else RunStatus.FAILED

    @classmethod
    def without_team(
        cls,
        *,
        task: str,
        ok: bool,
        answer: str,
        error: str,
        cost: CostSummary,
        duration_seconds: float,
        started_at: datetime,
        **rest: Any,
    ) -> RunRecord:
        """A run that had no team: an eval's single call, or a run lost before its record came
        back (nothing planned, built or judged)."""
        return cls(
            task=task,
            ok=ok,
            answer=answer,
            error=error,
            complexity=None,
            waves=[],
            agents=[],
            failures=[],
            revisions=0,
            council_improved=False,
            cost=cost,
            duration_seconds=duration_seconds,
            started_at=started_at,
            **rest,
        )

    def agent(self, name: str) -> AgentRecord | None:
        """The last record of agent `name` (a later round's, when it ran again), or None."""
        return next((agent for agent in reversed(self.agents) if agent.name == name), None)

    def reply(self, kept: list[str]) -> RunReply:
        """The `--json` reply of a run that answered (`kept`: its new agents that joined the
        library)."""
        return RunReply(
            ok=self.ok,
            status=self.status.value,
            partial=self.status is RunStatus.BUDGET,
            run_id=self.run_id,
            conversation=self.conversation_id,
            task=self.task,
            answer=self.answer,
            complexity=self.complexity or "",
            agents=[agent.reply() for agent in self.agents],
            failures=[failure.reply() for failure in self.failures],
            revisions=self.revisions,
            council_improved=self.council_improved,
            kept=kept,
            retry_of=self.retry_of,
            carried=list(self.carried),
            cost=cost_reply(self.cost),
            phases={name: cost_reply(spent) for name, spent in self.phases.items()},
            duration_seconds=round(self.duration_seconds, 3),
            run_file=str(self.run_file) if self.run_file else None,
            sandbox=list(self.sandbox),
            budget_usd=self.budget_usd,
            budget_exhausted=self.budget_exhausted,
            warnings=list(self.warnings),
            attachments=list(self.attachments),
            artifacts=list(self.artifacts),
            fallbacks=self.fallbacks(),
        )

    def fallbacks(self) -> list[FallbackReply]:
        """Which model answered calls made for another, how many, in the order it first did."""
        counted: dict[tuple[str, str], int] = {}
        for call in self.calls:
            if call.fell_back:
                pair = (call.asked, call.model)
                counted[pair] = counted.get(pair, 0) + 1
        return [
            FallbackReply(asked=asked, answered=answered, calls=calls)
            for (asked, answered), calls in counted.items()
        ]

    def transcript(self) -> Transcript:
        """What the transcript after the answer draws."""
        ran = {agent.name for agent in self.agents}
        roles = {str(spec.get("name")): str(spec.get("role", "")) for spec in self.plan}
        carried = [  # delivered in the run retried: listed, as carried, not as new or reused
            TranscriptAgent(
                name=name,
                role=roles.get(name, ""),
                reused=False,
                ok=True,
                attempts=0,
                seconds=0.0,
                usage=no_usage(),
                usd=0.0,
                kind=CARRIED,
            )
            for name in self.carried
            if name not in ran
        ]
        return Transcript(
            agents=[*carried, *(agent.transcript_row() for agent in self.agents)],
            failures=[failure.reply() for failure in self.failures],
            revisions=self.revisions,
            council_improved=self.council_improved,
            run_file=str(self.run_file) if self.run_file else None,
            sandbox=list(self.sandbox),
            run_id=self.run_id,
            retry_of=self.retry_of,
            trimmed=list(self.trimmed),
        )

    def to_json(self) -> dict[str, Any]:
        """The run whole as plain JSON values, for `agentgod show --json` and the display."""
        return {
            "run_id": self.run_id,
            "task": self.task,
            "status": self.status.value,
            "ok": self.ok,
            "answer": self.answer,
            "error": self.error,
            "complexity": self.complexity,
            "model": self.model,
            "effort": self.effort,
            "conversation_id": self.conversation_id,
            "retry_of": self.retry_of,
            "carried": list(self.carried),
            "started_at": utc(self.started_at).isoformat(),
            "duration_seconds": self.duration_seconds,
            "reasoning": self.reasoning,
            "plan": [dict(spec) for spec in self.plan],
            "waves": [list(wave) for wave in self.waves],
            "agents": [agent.to_json() for agent in self.agents],
            "failures": [dict(failure.reply()) for failure in self.failures],
            "revisions": self.revisions,
            "council_improved": self.council_improved,
            "budget_usd": self.budget_usd,
            "budget_exhausted": self.budget_exhausted,
            "cost": dict(self.cost),
            "phases": {name: dict(spent) for name, spent in self.phases.items()},
            "calls": [call.to_json() for call in self.calls],
            "fallbacks": [dict(each) for each in self.fallbacks()],
            "warnings": list(self.warnings),
            "sandbox": list(self.sandbox),
            # Only a run whose agents' work reached no answer has outputs apart from its agents'.
            **({"outputs": dict(self.outputs)} if self.outputs else {}),
            "attachments": [dict(item) for item in self.attachments],
            "artifacts": [dict(item) for item in self.artifacts],
            "run_file": str(self.run_file) if self.run_file else None,
        }
