"""results.py — what a task leaves behind: the answer, who worked on it, what it cost.

`TaskResult` is what `orchestrator.handle_task` returns and everything after it reads (the
session, the `--json` reply, the archive); `AllAgentsFailedError` is how a round with nothing to
merge ends. Kept apart from the orchestrator so their readers need not import the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agentgod import ledger
from agentgod.artifacts import Artifact
from agentgod.broker import AgentUsage
from agentgod.kinds import AgentKind
from agentgod.replies import (
    AgentReply,
    CostSummary,
    FailureReply,
    RunReply,
    TokenUsage,
    TranscriptAgent,
    cost_reply,
)


@dataclass
class AgentRun:
    """One agent's part in a task, as the user sees it."""

    name: str
    role: str
    reused: bool
    """Its code came from the library instead of the generator."""
    ok: bool = False
    attempts: int = 0
    """Executions: 1, plus one per repair."""
    seconds: float = 0.0
    """Wall-clock time across all attempts."""
    kind: AgentKind = AgentKind.PENDING
    """ok, or how it failed (crash, timeout, silent, rejected, ...)."""
    error: str = ""
    usage: AgentUsage = field(default_factory=AgentUsage)
    """What its model calls cost, all attempts together, as the broker billed them."""
    source: str = ""
    """The exact code its last attempt ran ("" when it never ran)."""
    inputs: list[str] = field(default_factory=list)
    """The upstream agents whose outputs it was given, in order."""
    output: str = ""
    """What it returned ("" when it failed)."""

    def reply(self) -> AgentReply:
        """As `--json` lists it."""
        return AgentReply(
            name=self.name,
            role=self.role,
            reused=self.reused,
            ok=self.ok,
            attempts=self.attempts,
            seconds=round(self.seconds, 3),
            usage=TokenUsage(
                llm_calls=self.usage.calls,
                input_tokens=self.usage.input_tokens,
                output_tokens=self.usage.output_tokens,
                cache_write_tokens=self.usage.cache_write_tokens,
                cache_read_tokens=self.usage.cache_read_tokens,
                web_searches=self.usage.searches,
            ),
            usd=round(self.usage.usd, 6),
        )

    def transcript_row(self) -> TranscriptAgent:
        """As the transcript after the answer draws it."""
        return TranscriptAgent(**self.reply(), kind=self.kind)


@dataclass(frozen=True)
class Failure:
    """An agent excluded from the answer, and why."""

    name: str
    reason: str
    """One line: the last line of its stderr, or the executor's reason."""
    kind: AgentKind


@dataclass(frozen=True)
class PendingAgent:
    """A newly built agent that worked, awaiting the user's keep-or-discard decision."""

    name: str
    role: str
    source: str


@dataclass
class TaskResult:
    """Everything a caller needs after a task: the answer, what ran, what it cost."""

    task: str
    answer: str
    complexity: str
    agents: list[AgentRun]
    failures: list[Failure]
    revisions: int
    """Extra rounds run because the judge found the answer short."""
    council_improved: bool
    pending: list[PendingAgent]
    agent_paths: list[Path]
    """Scratch copies in generated_agents/; the caller decides whether to delete them."""
    usage: ledger.Usage
    duration_seconds: float
    run_file: Path | None
    waves: list[list[str]] = field(default_factory=list)
    sandbox: list[str] = field(default_factory=list)
    """Confinement layers active for the agents."""
    budget_usd: float | None = None
    budget_exhausted: bool = False
    """The budget stopped model work early; the answer is built from what was done by then."""
    warnings: list[str] = field(default_factory=list)
    """What went wrong that the run survived; shown as it happened, and in `--json`."""
    artifacts: list[Artifact] = field(default_factory=list)
    """Files the agents handed back, in the order they were saved."""
    run_id: str | None = None
    """The run's short id, as history and `agentgod show` know it."""
    conversation: str | None = None
    """The id of the conversation the task belonged to, if any."""
    retry_of: str | None = None
    """The run this one retried, if any."""
    carried: list[str] = field(default_factory=list)
    """Agents whose outputs came from the retried run."""

    def cost_summary(self) -> CostSummary:
        return self.usage.cost_summary()

    def reply(self, kept: list[str]) -> RunReply:
        """The `--json` reply (`kept`: the new agents that joined the library)."""
        return RunReply(
            ok=True,
            run_id=self.run_id,
            conversation=self.conversation,
            task=self.task,
            answer=self.answer,
            complexity=self.complexity,
            agents=[agent.reply() for agent in self.agents],
            failures=[FailureReply(name=f.name, reason=f.reason) for f in self.failures],
            revisions=self.revisions,
            council_improved=self.council_improved,
            kept=kept,
            retry_of=self.retry_of,
            carried=list(self.carried),
            cost=cost_reply(self.cost_summary()),
            phases={name: cost_reply(spent) for name, spent in self.usage.phases().items()},
            duration_seconds=round(self.duration_seconds, 3),
            run_file=str(self.run_file) if self.run_file else None,
            sandbox=self.sandbox,
            budget_usd=self.budget_usd,
            budget_exhausted=self.budget_exhausted,
            warnings=list(self.warnings),
            attachments=[],
            artifacts=[item.reply() for item in self.artifacts],
        )


class AllAgentsFailedError(RuntimeError):
    """No agent produced output, so there is nothing honest to merge."""

    def __init__(self, failures: list[Failure], timeout_seconds: float) -> None:
        super().__init__(
            f"all {len(failures)} agents failed: "
            + "; ".join(f"{f.name}: {f.reason}" for f in failures)
        )
        self.failures = failures
        self.timeout_seconds = timeout_seconds
