"""results.py — what a task hands back: its record, and what only the living run still holds.

`TaskResult` is what `orchestrator.handle_task` returns: a `runrecord.RunRecord` (every fact of
the run, the one shape all its views derive from) with the handles a finished run leaves its
caller — the new agents awaiting a keep-or-discard decision, the scratch copies to clean up, the
live ledger, the artifact files to copy out. `AllAgentsFailedError` is how a round with nothing
to merge ends. Kept apart from the orchestrator so their readers need not import the pipeline.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from agentgod import ledger
from agentgod.artifacts import Artifact
from agentgod.kinds import BudgetOwner
from agentgod.runrecord import Failure, RunRecord


@dataclass(frozen=True)
class PendingAgent:
    """A newly built agent that worked, awaiting the user's keep-or-discard decision."""

    name: str
    role: str
    source: str


@dataclass
class TaskResult(RunRecord):
    """A finished run: its record, and what the caller still has to act on."""

    pending: list[PendingAgent] = field(default_factory=list)
    """New agents that worked, for the person to keep or discard."""
    agent_paths: list[Path] = field(default_factory=list)
    """Scratch copies in generated_agents/; the caller decides whether to delete them."""
    usage: ledger.Usage = field(default_factory=ledger.Usage)
    """The run's ledger (its `cost` and `phases` are the summary of it)."""
    artifact_files: list[Artifact] = field(default_factory=list)
    """The files the agents handed back, in the order they were saved (for `--out`)."""
    budget_owner: BudgetOwner | None = None
    """Whose budget stopped the run (status budget): its own, or its batch's at the gateway;
    the `--json` reply's error says so (`budget_of`), so a batch resumes only what it cut."""

    @classmethod
    def of(
        cls,
        record: RunRecord,
        *,
        pending: list[PendingAgent],
        agent_paths: list[Path],
        usage: ledger.Usage,
        artifact_files: list[Artifact],
        budget_owner: BudgetOwner | None = None,
    ) -> TaskResult:
        """The record, field for field, with the living run's handles."""
        facts = {item.name: getattr(record, item.name) for item in dataclasses.fields(RunRecord)}
        return cls(
            **facts,
            pending=pending,
            agent_paths=agent_paths,
            usage=usage,
            artifact_files=artifact_files,
            budget_owner=budget_owner,
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
