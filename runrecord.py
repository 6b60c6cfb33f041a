"""runrecord.py — what one run leaves behind, as the orchestrator hands it over. No I/O.

`RunRecord` (with an `AgentRecord` per agent) is the one shape the archive writes (runlog), the
run file renders and reads back (runfile) and the history stores (history): it sits below all
three, so none of them has to import another for it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentgod.kinds import RunStatus
from agentgod.ledger import Call
from agentgod.replies import ArtifactReply, AttachmentReply, CostSummary, TokenUsage


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
    """How one agent of the run fared."""

    name: str
    """The agent's safe name."""
    role: str
    """Its one-line role."""
    reused: bool
    """True when it came from the library instead of the generator."""
    ok: bool
    """Whether its final attempt succeeded."""
    attempts: int
    """Executions including repairs."""
    seconds: float
    """Wall-clock time of its executions."""
    kind: str
    """executor.AgentResult.kind of the final attempt: ok, crash, timeout, ..."""
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


@dataclass
class RunRecord:
    """Everything worth keeping about one task; the orchestrator builds one per task."""

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
    failures: list[tuple[str, str]]
    """(name, reason) for each agent that was excluded after its repairs."""
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

    def __post_init__(self) -> None:
        """A caller that predates `status` says how the run ended with ok and budget_exhausted."""
        if not self.ok and self.status is RunStatus.OK:
            self.status = RunStatus.BUDGET if self.budget_exhausted else RunStatus.FAILED
