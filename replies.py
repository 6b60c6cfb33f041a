"""replies.py — the shapes AgentGOD hands out: the `--json` reply and the rows renderers draw.

Scripts read these objects, and the renderers draw the same ones, so each shape is written down
once, as a `TypedDict`, and both sides are checked against it. Plain dicts at run time: they go
to `json.dumps` and to the UI unchanged. No project imports, so any module may use them.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict


class CostSummary(TypedDict):
    """A ledger's totals as plain numbers: for displays, `--json` and the run archive."""

    llm_calls: int
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    web_searches: int
    """Server-side web searches, priced per search on top of the tokens."""
    usd: float
    estimate: bool
    """Some model's price was not in the table, so `usd` is a guess."""
    unpriced: NotRequired[list[str]]
    """Which models those were, so the guess can be explained where it is shown."""
    unfinished: NotRequired[int]
    """Calls still waiting for the API when the run ended, counted at their worst case (their
    held input and all their output tokens), so `usd` is never below what was billed."""


class TokenUsage(TypedDict):
    """Calls, the four token kinds and web searches, as the API's replies counted them."""

    llm_calls: int
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    web_searches: int


class CostReply(TokenUsage):
    """The `cost` object of a run's `--json` reply, and each of its `phases`."""

    usd: float


class _PlannedAgent(TypedDict):
    name: str
    role: str
    depends_on: list[str]
    reused: bool
    """Its code comes from the library."""


class PlannedAgent(_PlannedAgent, total=False):
    """One agent of a plan, as the display lists it before anything runs.

    (The optional keys are a `total=False` subclass, not `NotRequired`: under postponed
    annotations Python 3.11 counts a `NotRequired` key as required at run time, and an event log
    written before the key existed must still replay.)
    """

    carried: bool
    """Its output comes from the run this one retries: it is neither written nor run."""


class AgentReply(TypedDict):
    """One agent of a finished run, in `--json`."""

    name: str
    role: str
    reused: bool
    ok: bool
    attempts: int
    seconds: float
    usage: TokenUsage
    """Its own model calls, every attempt together, as the broker billed them."""
    usd: float


CARRIED = "carried"
"""A transcript row's kind for an agent whose output came from the run retried."""


class TranscriptAgent(AgentReply):
    """One agent of a finished run, as the transcript draws it."""

    kind: str
    """ok, or how it failed (`kinds.AgentKind`)."""


class FailureReply(TypedDict):
    """An agent excluded from the answer, and the one line that says why."""

    name: str
    reason: str


class Transcript(TypedDict):
    """What the transcript after a run's answer draws (runrecord.RunRecord.transcript)."""

    agents: list[TranscriptAgent]
    failures: list[FailureReply]
    revisions: int
    council_improved: bool
    run_file: str | None
    sandbox: list[str]
    run_id: str | None
    retry_of: NotRequired[str | None]
    """The run this one retried: its agents listed as carried delivered there."""
    trimmed: NotRequired[list[str]]
    """Agents the plan held beyond MAX_AGENTS, left out: said again beside the answer."""


class FileReply(TypedDict):
    """A file a run read or made, as `--json` lists it and the display shows it."""

    name: str
    """The name agents use for it (an attachment) or gave it (an artifact)."""
    path: str
    """Where it is on disk: the user's own file, or the artifact in the run's folder."""
    bytes: int


class AttachmentReply(FileReply):
    """A file the user attached (`@path`, `--file`), readable by every agent."""

    kind: str
    """text, csv, json, pdf, image or binary: what the agents were told it is."""


class ArtifactReply(FileReply):
    """A file an agent handed back with `save_artifact`."""

    agent: str
    """The agent that saved it (the broker knows; the agent's word is not needed)."""


class FallbackReply(TypedDict):
    """Calls another model answered because the one asked failed (MODEL_FALLBACKS)."""

    asked: str
    """The model the calls were made for."""
    answered: str
    """The model that answered them (at whose price they are counted)."""
    calls: int


class RunReply(TypedDict):
    """The one object `agentgod --json` prints for a run that produced an answer."""

    ok: bool
    """False for a run the budget stopped: its answer is partial (`partial`, `error`)."""
    status: str
    """How the run ended (`kinds.RunStatus`): ok, or budget for a partial answer."""
    partial: bool
    """The budget stopped the run before it finished: the answer is what it had paid for."""
    error: NotRequired[ErrorDetail]
    """With `ok` false: what stopped it, and the way on (`agentgod retry RUN`)."""
    run_id: str | None
    """The run's short id (`agentgod show ID`, `retry ID`); None for small talk, which is no run."""
    conversation: str | None
    """The conversation this answer belongs to (`agentgod --resume RUN` continues it)."""
    task: str
    answer: str
    complexity: str
    """simple, standard or deep; chat for small talk answered without building a team."""
    agents: list[AgentReply]
    failures: list[FailureReply]
    revisions: int
    council_improved: bool
    kept: list[str]
    """New agents that joined the library after this run."""
    retry_of: str | None
    """The run this one retried (`agentgod retry`), if any."""
    carried: list[str]
    """Agents whose outputs came from the retried run: neither written nor run again."""
    cost: CostReply
    phases: dict[str, CostReply]
    """The cost by where it went (`kinds.Spend`): plan, generate, agents, merge, council, judge."""
    duration_seconds: float
    run_file: str | None
    sandbox: list[str]
    """Confinement layers that were active for the agents."""
    budget_usd: float | None
    budget_exhausted: bool
    warnings: list[str]
    """What went wrong that the run survived (a judge that could not rule, SANDBOX=off, ...)."""
    attachments: list[AttachmentReply]
    artifacts: list[ArtifactReply]
    """Files the agents made, in the order they were saved; `--out DIR` copies them."""
    fallbacks: list[FallbackReply]
    """Each model that answered calls made for another (empty when none fell back)."""


def cost_reply(cost: CostSummary) -> CostReply:
    """A ledger's summary as `--json` shows it: without the estimate flag."""
    return CostReply(
        llm_calls=cost["llm_calls"],
        input_tokens=cost["input_tokens"],
        output_tokens=cost["output_tokens"],
        cache_write_tokens=cost["cache_write_tokens"],
        cache_read_tokens=cost["cache_read_tokens"],
        web_searches=cost["web_searches"],
        usd=cost["usd"],
    )


def chat_reply(task: str, answer: str, cost: CostSummary) -> RunReply:
    """Small talk in the run's own shape, so a script reads every answer the same way."""
    spent = cost_reply(cost)
    return RunReply(
        ok=True,
        status="ok",
        partial=False,
        run_id=None,
        conversation=None,
        task=task,
        answer=answer,
        complexity="chat",
        agents=[],
        failures=[],
        revisions=0,
        council_improved=False,
        kept=[],
        retry_of=None,
        carried=[],
        cost=spent,
        phases={"intake": spent},
        duration_seconds=0.0,
        run_file=None,
        sandbox=[],
        budget_usd=None,
        budget_exhausted=False,
        warnings=[],
        attachments=[],
        artifacts=[],
        fallbacks=[],
    )


class ErrorDetail(TypedDict):
    """What went wrong, as a `problems.Problem` tells it."""

    type: str
    """A stable identifier for scripts (`Problem.kind`, or `usage`, `not_found`)."""
    headline: str
    advice: str
    detail: str
    budget_of: NotRequired[str]
    """With type `budget`: whose budget stopped the run (kinds.BudgetOwner): `run`, its own
    cap (--budget, BUDGET_USD, its batch line's `budget`), or `batch`, its batch's."""


class ErrorReply(TypedDict):
    """The one object `--json` prints when a command fails."""

    ok: Literal[False]
    task: str
    error: ErrorDetail
    run_id: NotRequired[str]
    """The run, when one had begun: it is recorded (`agentgod show`, `retry`)."""
    answer: NotRequired[str]
    """An answer the run had paid for before it was stopped, when it had one."""
    unjudged: NotRequired[bool]
    """True with `answer`: the judge never read it."""


class ModelPrice(TypedDict):
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float


class ModelRow(TypedDict):
    """One model a run may call, as `agentgod models` shows it: what it is sent, what it costs,
    and where each of those came from."""

    model: str
    endpoint: str
    """The base URL it is served at (the Anthropic API's when none is set)."""
    roles: list[str]
    """MODEL, FAST_MODEL, DEEP_MODEL, fallback N: what it does for a run."""
    structured: str
    """The ladder's step a structured call starts at (kinds.Structured)."""
    structured_from: str
    efforts: list[str]
    """The effort levels it is sent; empty: none."""
    web: bool
    documents: bool
    images: bool
    caching: bool
    price: ModelPrice | None
    """None: unknown (its calls count $0, and the cost says so)."""
    price_from: str
    source: str
    """Where the profile came from: the Claude rules, models.toml, an unknown model's defaults."""
    needs_key: bool
    """Whether calls to it carry the Anthropic key."""


class ModelsReply(TypedDict):
    """`agentgod models --json`: the profiles in use."""

    models: list[ModelRow]
    profiles_file: str
    """The home's models.toml (it may not exist)."""
    profiles_file_exists: bool
    learned_file: str
    """Where the ladder's learned steps are kept (learned.py)."""


class LibraryRow(TypedDict):
    """One kept agent and its track record."""

    name: str
    role: str
    generation: int
    wins: int
    losses: int
    uses: int
    reliable: bool
    evolved: bool


class HistoryRow(TypedDict):
    """One archived run, newest first in `history`."""

    id: int
    run_id: str
    """The short id `agentgod show` and `retry` take."""
    status: str
    """ok, failed, interrupted or budget (`kinds.RunStatus`)."""
    started_at: str
    """ISO 8601, UTC."""
    task: str
    ok: bool
    complexity: str | None
    usd: float | None
    duration_seconds: float | None
    agents: int
    run_file: str | None
    retry_of: NotRequired[str | None]
    """The run this one retried (`agentgod retry`), if it is a retry."""


class TokenTotals(TypedDict):
    input: int
    output: int
    cache_write: int
    cache_read: int


class StatsReply(TypedDict):
    """Totals over every archived run."""

    runs: int
    succeeded: int
    success_rate: float
    """A fraction, 0 to 1."""
    llm_calls: int
    tokens: TokenTotals
    usd: float
    mean_duration: float | None
    """Seconds; None before the first run."""
    most_used: list[tuple[str, int]]
    most_reliable: list[tuple[str, int, int]]
    """(name, runs it succeeded in, runs)."""


class KeepChoice(TypedDict):
    """A new agent offered to the library after a run."""

    name: str
    role: str


class BatchProgress(TypedDict):
    """Where a batch stands, for its live display: counts, money so far, time left."""

    batch_id: str
    total: int
    """Tasks that will run in this sitting (a resumed batch: the unfinished ones)."""
    done: int
    """Finished with an answer."""
    capped: int
    """Stopped by their own line's budget: finished, with a partial answer (`capped`)."""
    failed: int
    """Finished without one (failed, stopped, or never started for want of money)."""
    running: int
    usd: float
    """What this sitting has spent so far, as the gateway billed it."""
    elapsed_seconds: float
    eta_seconds: float | None
    """An estimate of the time left (None until a task has finished)."""


class BatchTaskLine(TypedDict):
    """One line of `agentgod batch`'s output: a task, as it finished."""

    type: Literal["task"]
    batch_id: str
    id: str | None
    """The task's own id from its line, when it gave one."""
    line: int
    status: str
    """kinds.TaskStatus."""
    ok: bool
    run_id: str | None
    usd: float
    seconds: float
    result: dict[str, object] | None
    """The run's own `--json` object, exactly as `agentgod --json` prints it."""
    error: NotRequired[ErrorDetail]
    """Why the line was not run, the run gave no object, or its own budget stopped it (status
    `capped`: the advice says how to go on)."""


class BatchSummaryLine(TypedDict):
    """The last line of `agentgod batch`'s output."""

    type: Literal["summary"]
    batch_id: str
    status: str
    """kinds.BatchStatus."""
    tasks: int
    done: int
    capped: int
    """Tasks their own line's budget stopped (finished: `agentgod retry RUN --budget USD` goes
    on, each line's error says how)."""
    failed: int
    invalid: int
    unfinished: int
    """Tasks `agentgod batch resume` would run."""
    usd: float
    """The whole batch's spending, every sitting together."""
    seconds: float


class Interval(TypedDict):
    """A mean over `n` cases and its 95 % bootstrap interval (evalstats.Estimate)."""

    mean: float
    low: float
    high: float
    n: int
    significant: bool
    """The interval excludes 0 (read it for a difference)."""


class EvalArm(TypedDict):
    """One arm of an eval, over the cases every arm has a score for."""

    arm: str
    cases: int
    score: Interval
    vs_single: Interval | None
    """The paired difference to the single call on the same cases (None for single itself)."""
    usd_per_case: float
    usd_ratio: float | None
    """Its dollars per case over the single call's: what equal dollars would buy of that."""
    calls_per_case: float
    seconds_per_case: float
    score_per_usd: float | None
    failures: dict[str, int]
    """Results without a full score, by kind: an error type (budget, interrupted, ...) for no
    answer, `wrong` for an answer that scored 0, `unscored` for one that could not be scored."""
    usd: float
    """Everything the arm spent, every case included, its judges too."""


class EvalCase(TypedDict):
    """One case of an eval: its score, cost and run in each arm."""

    id: str
    task: str
    scores: dict[str, float | None]
    usd: dict[str, float]
    runs: dict[str, str | None]
    status: dict[str, str]
    details: dict[str, str]


class EvalReport(TypedDict):
    """`agentgod eval`'s answer: the arms side by side, and every case."""

    eval_id: str
    suite: str
    status: str
    """kinds.BatchStatus."""
    model: str
    effort: str
    arms: list[EvalArm]
    cases: int
    complete: int
    """Cases every arm has a score for: the ones the figures are over."""
    usd: float
    """The whole eval: runs, single calls and judges, every sitting."""
    judge_usd: float
    calls: int
    seconds: float
    batch_id: str | None
    per_case: list[EvalCase]


class EvalChange(TypedDict):
    """One arm's score on one case in two evals."""

    id: str
    arm: str
    before: float
    after: float


class EvalArmChange(TypedDict):
    arm: str
    cases: int
    before: float
    after: float
    difference: Interval
    """After minus before, paired over the cases both evals scored."""


class EvalComparison(TypedDict):
    """`agentgod eval compare A B`: what changed from A to B, arm by arm, case by case."""

    before: str
    after: str
    arms: list[EvalArmChange]
    changes: list[EvalChange]
    left_out: list[str]
    """Cases not compared (only in one eval, or their task changed), with why."""
