"""kinds.py — the project's closed vocabularies, each defined once.

Every word that more than one module compares against (a failure's kind, a phase, an effort
level, a setting's modes) lives here as a `StrEnum`, so a typo is a type error instead of a
branch that silently never runs. The members are plain strings at run time: they go into JSON,
SQLite and the renderers unchanged. No imports from the project, so anything may import it.
"""

from __future__ import annotations

import re
from enum import StrEnum

BUDGET_USD_RANGE = (0.000001, 1_000_000.0)
"""What a budget may be, in dollars: BUDGET_USD and --budget alike."""
TASK_MAX_CHARS = 50_000
"""The largest task sent without a question: a task goes whole into every model call of its run
(the plan, each agent, the merge, the judge), so a long text belongs in a file, attached (`@file`:
the planner sees a sample of it, and the agents' own code reads it whole). A batch's line or a
suite's case above it is refused when it is read, as a pipe's task is."""
AGENT_NAME = re.compile(r"[a-z][a-z0-9_]{2,39}")
"""An agent's name, file name and previous_outputs key at once: use with `fullmatch`."""


class Effort(StrEnum):
    """How hard the model thinks, in the API's own order (output_config.effort)."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    XHIGH = "xhigh"
    MAX = "max"


EFFORT_LEVELS: tuple[Effort, ...] = tuple(Effort)
"""Every effort level, weakest first: comparisons go by position in this tuple."""


class Complexity(StrEnum):
    """The planner's grade of a task; it chooses the effort and whether the council sits."""

    SIMPLE = "simple"
    STANDARD = "standard"
    DEEP = "deep"


class SandboxMode(StrEnum):
    """SANDBOX: confine agents with what the machine has, insist on all of it, or not at all."""

    AUTO = "auto"
    STRICT = "strict"
    OFF = "off"


class CouncilMode(StrEnum):
    """COUNCIL: review deep tasks only, every task, or none."""

    AUTO = "auto"
    ALWAYS = "always"
    OFF = "off"


class RunStatus(StrEnum):
    """How a run ended, as its record keeps it and `history` shows it."""

    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    """Ctrl-C, SIGTERM or SIGHUP stopped it; what it had done and spent is kept."""
    BUDGET = "budget"
    """BUDGET_USD stopped it before it could answer."""
    RUNNING = "running"
    """Still going: recorded as it started, its calls and agents as they happen."""
    CRASHED = "crashed"
    """Its process ended without finishing it (killed outright, out of memory, a power cut); a
    later command found it so, and kept what it had recorded."""


class BudgetOwner(StrEnum):
    """Whose budget stopped a run: told apart so a batch resumes only what its own budget cut."""

    RUN = "run"
    """The run's own cap: --budget or BUDGET_USD in the run, or its share of a batch's budget
    (its line's `budget`) at the batch's gateway."""
    BATCH = "batch"
    """The budget of the batch (or eval) the run belongs to, which only its gateway holds."""


class Switch(StrEnum):
    """A setting that is simply on or off (WEB)."""

    ON = "on"
    OFF = "off"


class Phase(StrEnum):
    """The boxes of the flow diagram, as the display's rail shows them."""

    PLAN = "plan"
    BUILD = "build"
    RUN = "run"
    MERGE = "merge"
    COUNCIL = "council"
    JUDGE = "judge"
    ARCHIVE = "archive"


class AgentKind(StrEnum):
    """How one agent ended: ok, or the one reason it failed (problems tells each as a story)."""

    PENDING = "pending"
    """Not finished yet."""
    OK = "ok"
    CRASH = "crash"
    """It raised, or exited non-zero."""
    TIMEOUT = "timeout"
    """It ran past AGENT_TIMEOUT_SECONDS and was killed."""
    SILENT = "silent"
    """It exited 0 and printed nothing."""
    UNSTARTABLE = "unstartable"
    """Its interpreter could not be started."""
    OUTPUT_LIMIT = "output_limit"
    """It printed more than the executor accepts, and was killed."""
    SANDBOX = "sandbox"
    """A wall of the sandbox stopped it."""
    REJECTED = "rejected"
    """Codeguard refused every version of its code; it never ran."""
    BUDGET = "budget"
    """The budget ran out before it could be written or run."""


class Spend(StrEnum):
    """Where a run's money goes: the `phases` of its cost, as `--json` and the run file show it."""

    INTAKE = "intake"
    """Before the plan: the small-talk check and the clarifying question."""
    PLAN = "plan"
    GENERATE = "generate"
    """Writing agents, repairs included."""
    AGENTS = "agents"
    """The agents' own calls, through the broker."""
    MERGE = "merge"
    COUNCIL = "council"
    JUDGE = "judge"


class TaskStatus(StrEnum):
    """Where one task of a batch stands (batchrecord, batch, the progress display)."""

    PENDING = "pending"
    """Not started yet (or started and stopped before its run began): resume runs it."""
    OK = "ok"
    FAILED = "failed"
    """Its run ended without an answer: finished, paid for, not run again by resume."""
    INTERRUPTED = "interrupted"
    """Stopped by Ctrl-C or a signal mid-run: resume runs it again (retrying what it had)."""
    BUDGET = "budget"
    """The batch's budget stopped its run (the gateway refused a call for the batch), or it never
    started for want of money: resume runs it (retrying what it had), under the batch's budget."""
    CAPPED = "capped"
    """Its run was stopped by its own cap (its line's `budget`), not by the batch's: finished,
    its partial answer kept. Resume leaves it, since running it again would spend past the cap
    its line set; `agentgod retry RUN --budget USD` goes on, on purpose."""
    CRASHED = "crashed"
    """Its run's process was killed outright (kill -9, out of memory) and left no answer: its
    record is finished as a crashed run, and resume runs it again (retrying what it had)."""
    INVALID = "invalid"
    """Its line could not be a task (not JSON, no task, a refused attachment): never run."""

    @property
    def finished(self) -> bool:
        """Whether resume leaves it alone: an answer, a failure paid for, a run its own cap
        stopped, or a bad line."""
        return self in (TaskStatus.OK, TaskStatus.FAILED, TaskStatus.CAPPED, TaskStatus.INVALID)


class BatchStatus(StrEnum):
    """How a batch stands: running, or how it ended."""

    RUNNING = "running"
    DONE = "done"
    """Every task ran (some may have failed, or been stopped by their own cap)."""
    INTERRUPTED = "interrupted"
    BUDGET = "budget"
    """Its budget stopped it before every task ran."""


class EngineName(StrEnum):
    """Where a batch's runs run: child processes here, or Ray tasks on a cluster."""

    LOCAL = "local"
    RAY = "ray"


class Structured(StrEnum):
    """How a structured call asks for its JSON: the ladder's steps, surest first.

    NATIVE: `output_config.format` (the API constrains the reply to the schema); TOOL: one forced
    tool call whose `input_schema` is the schema; PROMPT: the schema in the prompt, the first JSON
    object of the reply taken, one retry with the validation error.
    """

    NATIVE = "native"
    TOOL = "tool"
    PROMPT = "prompt"


STRUCTURED_STEPS: tuple[Structured, ...] = tuple(Structured)
"""The ladder, in the order a call steps down it."""
