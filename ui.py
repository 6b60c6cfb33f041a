"""ui.py — everything a person sees, behind one surface, and the plain renderer of it.

`PlainUI` is the reference: every visual the product has exists here as an aligned, colourless
line, so pipes, CI logs and `--plain` lose nothing but paint. `richui.RichUI` repaints the same
surface; whatever it leaves alone falls back to the line written here. `main.make_ui` picks one,
once.

Three streams, one rule: the answer goes to `out` (stdout), always; narration goes where a person
is watching (stdout at a terminal, stderr in a pipe) and `quiet` silences it; problems go to `err`
(stderr), always, because hiding decoration must never hide why a run died. What a command was
asked to show (library, history, stats, /cost, /help) is that command's answer, so it goes to `out`.

At a terminal the answer is shown as it is written (the answer_* hooks) and not printed again
unless the final one differs; in a pipe or with --json stdout holds exactly one answer.

Nothing of the pipeline is imported: facts arrive as plain arguments shaped as `replies` says,
vocabularies come from `kinds`. The pipeline's hooks (`events.TaskEvents`, a Protocol) are
implemented structurally and mypy checks `PlainUI` against them; so this module stays importable
— and `agentgod --help` fast — without the pipeline or rich.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from agentgod import asking
from agentgod.kinds import Phase
from agentgod.replies import (
    CARRIED,
    ArtifactReply,
    AttachmentReply,
    BatchProgress,
    BatchSummaryLine,
    CostSummary,
    EvalArm,
    EvalComparison,
    EvalReport,
    HistoryRow,
    Interval,
    KeepChoice,
    LibraryRow,
    ModelsReply,
    PlannedAgent,
    StatsReply,
    Transcript,
    TranscriptAgent,
)
from agentgod.text import (
    WIDE_HISTORY,
    clean,
    cost_text,
    dollars,
    duration,
    human_size,
    one_line,
    tokens_text,
)

if TYPE_CHECKING:
    from agentgod.events import TaskEvents

_Row = TypeVar("_Row", TranscriptAgent, KeepChoice)

PHASES: tuple[Phase, ...] = tuple(Phase)
"""The phases of a run, in the order the rail shows them."""

_TAG_WIDTH = 11
_MIN_NAME_WIDTH = 10
FIELD_WIDTH = 10
"""The label column of `agentgod show`: 'retry of' and two spaces."""


def retry_hint(run_id: str, failed: int) -> str:
    """Where a run some of whose agents failed goes on from."""
    agents = "agent" if failed == 1 else "agents"
    return (
        f"agentgod retry {run_id} reruns the {failed} failed {agents}, reusing every output "
        "already paid for"
    )


def trim_note(left_out: list[str]) -> str:
    """Beside the answer: what a plan larger than MAX_AGENTS lost."""
    return (
        f"the plan held more agents than MAX_AGENTS allows; left out: {', '.join(left_out)} "
        "(raise MAX_AGENTS, or ask for less at once)"
    )


def terminal_width(stream: TextIO) -> int | None:
    """The columns of the terminal `stream` is, or None when it is none (a pipe, a file)."""
    if not isatty(stream):
        return None
    return shutil.get_terminal_size().columns


def isatty(stream: TextIO) -> bool:
    """Whether a person watches `stream`; False for anything that cannot say."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _count(value: Any) -> int:
    return len(value) if isinstance(value, list | tuple) else int(value or 0)


class PlainUI(asking.Questions):
    """The whole surface as aligned, colourless lines; never an escape code."""

    def __init__(
        self,
        *,
        out: TextIO | None = None,
        err: TextIO | None = None,
        narrate_to: TextIO | None = None,
        quiet: bool = False,
        interactive: bool = False,
        input_stream: TextIO | None = None,
    ) -> None:
        """`interactive`: a person can answer questions. Answers are read from `input_stream`
        when given (tests, embedding), else with input(), which brings readline's line editing."""
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.narrate_to = narrate_to or (self.out if isatty(self.out) else self.err)
        self.quiet = quiet
        self.interactive = interactive
        self.input_stream = input_stream
        self._lock = threading.RLock()
        self._name_width = _MIN_NAME_WIDTH
        self._plan_order: dict[str, int] = {}
        """Each planned agent's place, every round's plan in turn: how agents are listed."""
        self._streamed: list[str] = []
        """The pieces of the answer shown as it was written (joined only when taken)."""
        """The answer as streamed since the last answer_started (the pieces as they came)."""
        self._streaming = False
        """answer_started came during this task: the answer's pieces are being shown."""
        self._replaced: str | None = None
        """Why the streamed answer will not stand, once answer_replaced said so."""
        self._mid_line = False
        """The last piece written left the cursor mid-line: the next line needs a newline first."""
        self._batch_reported = -1
        """How many of a batch's tasks had finished when its progress was last drawn."""

    # ---- writing -------------------------------------------------------------------------------

    def _write(self, stream: TextIO, text: str, *, piece: bool = False) -> None:
        """Every byte PlainUI emits passes here: cleaned, locked, flushed, never an encode crash.

        A `piece` of the streamed answer may end mid-line; whatever is written next starts on a
        line of its own."""
        text = clean(text)
        with self._lock:
            if piece:
                self._mid_line = not text.endswith("\n") if text else self._mid_line
            elif self._mid_line:
                self._mid_line = False
                self._write(self.out, "\n")
            try:
                stream.write(text)
            except UnicodeEncodeError:
                encoding = getattr(stream, "encoding", None) or "ascii"
                stream.write(text.encode(encoding, "replace").decode(encoding))
            stream.flush()

    def _narrate(self, text: str) -> None:
        """Put one narration line on screen; RichUI routes it through its console instead."""
        self._write(self.narrate_to, text + "\n")

    def _say(self, text: str) -> None:
        if not self.quiet:
            self._narrate(text)

    def _line(self, tag: str, text: str) -> None:
        self._say(f"[{tag}]".ljust(_TAG_WIDTH) + text)

    def _prompt(self, text: str) -> None:
        """Part of a question, not narration: shown where the person looks, even when quiet."""
        self._write(self.narrate_to, text)

    def _result(self, text: str) -> None:
        """What a command was asked to show: its answer, so stdout and never quieted."""
        self._write(self.out, text + "\n")

    def _field(self, label: str, text: str) -> None:
        """One labelled line of a command's result (`agentgod show`), the text in one column."""
        self._result(f"{label:<{FIELD_WIDTH}}{text}")

    def _planned(self, agents: list[PlannedAgent]) -> None:
        """Remember the plan's order (a later round's new agents after the earlier ones)."""
        for agent in agents:
            self._plan_order.setdefault(agent["name"], len(self._plan_order))

    def _in_plan_order(self, rows: list[_Row]) -> list[_Row]:
        """`rows` as the plan listed them, whatever order the agents finished in."""
        last = len(self._plan_order)
        return sorted(rows, key=lambda row: self._plan_order.get(row["name"], last))

    def _agent_line(self, name: str, state: str, detail: str = "") -> None:
        self._name_width = max(self._name_width, len(name))
        self._line("agent", f"{name:<{self._name_width}}  {state:<9}  {detail}".rstrip())

    # ---- session and conversation --------------------------------------------------------------

    def banner(self, version: str, model: str, home: str) -> None:
        self._line("agentgod", f"AgentGOD {version} - model {model} - home {home}")

    def task_started(self, task: str) -> None:
        self._name_width = _MIN_NAME_WIDTH
        self._plan_order = {}
        self._take_stream()
        self._line("task", one_line(task.strip().splitlines()[0] if task.strip() else "", 100))

    def task_finished(self) -> None:
        """Nothing to take down: plain lines are already in the scrollback."""

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Work under way with nothing yet to show (the first model calls after Enter, before
        the run's own display): RichUI spins; plain lines have no screen to animate."""
        yield

    def answer(self, text: str) -> None:
        """The final answer; not again when it is exactly what was just streamed."""
        streamed, replaced = self._take_stream()
        if streamed.strip():
            if replaced is None and streamed.strip() == text.strip():
                self._write(self.out, "")  # only ends the streamed answer's last line
                return
            self._line("answer", "the final answer:")
        text = text.rstrip("\n")
        self._write(self.out, text + "\n")

    def _take_stream(self) -> tuple[str, str | None]:
        """What was streamed and why it will not stand (None: it stands); forgotten here."""
        with self._lock:
            taken = ("".join(self._streamed), self._replaced)
            self._streamed, self._streaming, self._replaced = [], False, None
            return taken

    def _shows_pieces(self) -> bool:
        """The answer is shown as it is written only to a person at a terminal, never in a pipe,
        with --json or when quiet: those get the one final answer."""
        return not self.quiet and isatty(self.out)

    def cost(self, summary: CostSummary, duration_seconds: float) -> None:
        self._line("cost", cost_text(summary, duration_seconds))

    def transcript(self, run: Transcript) -> None:
        """After the answer: each agent's result, the failures, and the run's facts."""
        agents, run_file = run["agents"], run["run_file"]
        width = max([self._name_width, *(len(a["name"]) for a in agents)])
        for agent in self._in_plan_order(agents):
            if agent.get("kind") == CARRIED:
                origin = f"run {run['retry_of']}" if run.get("retry_of") else "the run retried"
                self._line("run", f"{agent['name']:<{width}}  carried from {origin}")
                continue
            attempts = int(agent.get("attempts", 0))
            status = "done" if agent.get("ok") else "failed"
            kind = "" if agent.get("ok") else str(agent.get("kind") or "")
            tries = f"{attempts} attempt{'' if attempts == 1 else 's'}"
            self._line(
                "run",
                f"{agent['name']:<{width}}  {status:<6}  {tries:<11}"
                f"{duration(float(agent.get('seconds', 0.0))):>7}  "
                f"{dollars(agent['usd']):>9}  "
                f"{'reused' if agent.get('reused') else 'new':<6}  {kind}".rstrip(),
            )
        for failure in run["failures"]:
            self._line("failed", f"{failure['name']:<{width}}  {one_line(failure['reason'])}")
        revisions, sandbox, run_id = run["revisions"], run["sandbox"], run["run_id"]
        if run["failures"] and run_id:
            self._line("retry", retry_hint(run_id, len(run["failures"])))
        if run.get("trimmed"):
            self._line("plan", trim_note(run.get("trimmed") or []))
        notes = [f"{revisions} revision{'' if revisions == 1 else 's'}"]
        if run.get("retry_of"):
            notes.insert(0, f"retry of {run['retry_of']}")
        if run["council_improved"]:
            notes.append("council improved the answer")
        notes.append(f"sandbox: {', '.join(sandbox) if sandbox else 'none reported'}")
        notes.append(f"saved to {run_file}" if run_file else "not archived")
        if run_id:
            notes.append(f"run {run_id} (agentgod show {run_id})")
        self._line("run", " - ".join(notes))

    def attachments(self, files: list[AttachmentReply]) -> None:
        """What the agents will be able to read, shown before anything is spent."""
        width = max(len(f["name"]) for f in files) if files else 0
        for item in files:
            size = human_size(item["bytes"])
            self._line("file", f"{item['name']:<{width}}  {size:>8}  {item['kind']}")

    def artifacts(self, files: list[ArtifactReply]) -> None:
        """The files the agents made, each with its path, so they can be opened at once."""
        for item in files:
            size = human_size(item["bytes"])
            self._line("made", f"{item['path']}  ({size}, by {item['agent']})")

    def problem(self, headline: str, advice: str, technical: str) -> None:
        lines = ["[error]".ljust(_TAG_WIDTH) + one_line(headline, 400)]
        lines += [" " * _TAG_WIDTH + line for line in clean(advice).strip().splitlines()]
        lines += [" " * _TAG_WIDTH + "detail: " + line for line in technical.strip().splitlines()]
        self._write(self.err, "\n".join(lines) + "\n")

    def info(self, text: str) -> None:
        self._line("info", text)

    def warn(self, text: str) -> None:
        """Something the run survived: always on stderr, never silenced (quiet hides narration,
        not what a person or a script should know about the answer)."""
        self._write(self.err, "[warn]".ljust(_TAG_WIDTH) + one_line(text, 400) + "\n")

    # ---- questions (ask, ask_secret and confirm: asking.Questions) -------------------------------

    def choose_keep(self, agents: list[KeepChoice]) -> list[str]:
        """Which new agents join the library; nobody present keeps none."""
        if not self.interactive or not agents:
            return []
        agents = self._in_plan_order(agents)
        width = max(len(a["name"]) for a in agents)
        listing = [
            f"  {number:>2}. {a['name']:<{width}}  {one_line(a.get('role', ''), 70)}"
            for number, a in enumerate(agents, 1)
        ]
        self._prompt("New agents from this run:\n" + "\n".join(listing) + "\n")
        return asking.keep(self._read, self._prompt, [a["name"] for a in agents])

    # ---- what commands show --------------------------------------------------------------------

    def library(self, entries: list[LibraryRow]) -> None:
        if not entries:
            self._result("The library is empty: keep an agent after a run to start it.")
            return
        width = max(len(e["name"]) for e in entries)
        for e in entries:
            status = "reliable" if e.get("reliable") else "retired"
            evolved = "  evolved" if e.get("evolved") else ""
            self._result(
                f"{e['name']:<{width}}  gen {e['generation']:<3} "
                f"{e['wins']:>3} won {e['losses']:>3} lost {e['uses']:>4} uses  "
                f"{status:<8}{evolved}  {one_line(e.get('role', ''), 80)}"
            )

    def models(self, reply: ModelsReply) -> None:
        """`agentgod models`: each model a run may call, what it is sent, what it costs, and
        where each of those came from."""
        for row in reply["models"]:
            price = row["price"]
            cost = (
                "price unknown (counted as $0)"
                if price is None
                else f"${price['input']:g} in / ${price['output']:g} out / "
                f"${price['cache_read']:g} cache read per M tokens"
            )
            efforts = "/".join(row["efforts"]) or "none"
            flags = {
                "web": row["web"],
                "documents": row["documents"],
                "images": row["images"],
                "cache hints": row["caching"],
            }
            takes = [name for name, yes in flags.items() if yes]
            self._result(f"{row['model']}  ({', '.join(row['roles'])})  at {row['endpoint']}")
            self._result(f"  structured  {row['structured']}  ({row['structured_from']})")
            self._result(f"  effort      {efforts}")
            self._result(f"  takes       {', '.join(takes) or 'text only'}")
            self._result(f"  price       {cost}  ({row['price_from']})")
            self._result(f"  profile     {row['source']}")
        told = "" if reply["profiles_file_exists"] else " (none yet)"
        self._result(f"profiles: {reply['profiles_file']}{told}; learned: {reply['learned_file']}")

    def history(self, rows: list[HistoryRow]) -> None:
        """One line per run, whatever the terminal's width (the task is cut to fit); a retry is
        marked ↻ with the run it retried."""
        if not rows:
            self._result("No runs yet.")
            return
        width = terminal_width(self.out)
        narrow = width is not None and width < WIDE_HISTORY
        for row in rows:
            usd, count = row.get("usd"), _count(row.get("agents"))
            when = str(row.get("started_at", ""))[:16].replace("T", " ")
            gap = " " if narrow else "  "
            facts = [
                f"{row['run_id']:<8}",
                when[5:] if narrow else when,
                f"{row['status']:<11}",
                *([] if narrow else [f"{row.get('complexity') or '-':<8}"]),
                f"{dollars(float(usd)) if usd is not None else '-':>8}",
                f"{duration(float(row.get('duration_seconds') or 0.0)):>7}",
                f"{count:>2} {'agent' if count == 1 else 'agents':<6}",
            ]
            head = gap.join(facts) + gap
            task = one_line(row.get("task", ""), 10_000)
            if row.get("retry_of"):
                task = f"↻ {row['retry_of']} {task}"
            room = max(12, width - len(head) - 1) if width is not None else 60
            self._result(head + (task if len(task) <= room else task[: room - 1] + "…"))

    def stored_run(self, run: dict[str, Any]) -> None:
        """`agentgod show`: what a recorded run planned, what each agent did, cost and said."""
        cost = run.get("cost") or {}
        self._result(
            f"run {run['run_id']}  {run['status']}  {str(run['started_at'])[:19].replace('T', ' ')}"
            f"  {dollars(float(cost.get('usd', 0.0)))}  {duration(float(run['duration_seconds']))}"
        )
        self._field("task", one_line(str(run["task"]).splitlines()[0], 200))
        effort = f" at {run['effort']} effort" if run.get("effort") else ""
        self._field("model", f"{run.get('model') or '-'}{effort}")
        if run.get("retry_of"):
            self._field("retry of", str(run["retry_of"]))
        if run.get("reasoning"):
            self._field("plan", one_line(str(run["reasoning"]), 400))
        agents = run.get("agents") or []
        width = max([_MIN_NAME_WIDTH, *(len(a["name"]) for a in agents)])
        for agent in agents:
            status = "ok" if agent["ok"] else f"failed ({agent['kind']})"
            inputs = ", ".join(agent.get("inputs") or []) or "the task only"
            self._result(
                f"\n{agent['name']:<{width}}  {status}  {agent['attempts']} attempt(s)  "
                f"{duration(float(agent['seconds']))}  {dollars(float(agent['usd']))}"
            )
            self._field("  role", one_line(agent["role"], 200))
            self._field("  inputs", inputs)
            shown = agent["output"] if agent["ok"] else agent.get("error", "")
            if not str(shown).strip():  # a record rebuilt from its run file keeps no outputs
                shown = "(not in this record)" if agent["ok"] else "(no error was recorded)"
            for line in str(shown).strip().splitlines():
                self._result(f"  | {line}")
        self._result("")
        if run.get("ok"):
            self._result("answer")
            self._result(str(run["answer"]).rstrip())
        else:
            self._result(f"no answer: {run.get('error') or run['status']}")
        if agents:
            self._result(f"\ncode: agentgod show {run['run_id']} --code NAME")

    def stats(self, stats: StatsReply) -> None:
        """`success_rate` is a fraction (0..1); `mean_duration` seconds or None with no runs."""
        tokens = stats.get("tokens", {})
        mean = stats.get("mean_duration")
        lines = [
            f"runs           {stats.get('runs', 0)}",
            f"succeeded      {stats.get('succeeded', 0)} "
            f"({float(stats.get('success_rate') or 0.0):.0%})",
            tokens_text(
                int(tokens.get("input", 0)),
                int(tokens.get("output", 0)),
                int(tokens.get("cache_write", 0)),
                int(tokens.get("cache_read", 0)),
            ).replace("tokens ", "tokens         ", 1),
            f"spent          {dollars(float(stats.get('usd') or 0.0))}",
            f"mean duration  {duration(float(mean)) if mean is not None else '-'}",
        ]
        used = ", ".join(f"{name} ({uses})" for name, uses in stats.get("most_used", []))
        reliable = ", ".join(
            f"{name} ({ok}/{runs})" for name, ok, runs in stats.get("most_reliable", [])
        )
        lines.append(f"most used      {used or '-'}")
        lines.append(f"most reliable  {reliable or '-'}")
        for line in lines:
            self._result(line)

    def session_cost(self, summary: CostSummary) -> None:
        self._result(f"this session: {cost_text(summary)}")

    def help(self, commands: list[tuple[str, str]]) -> None:
        width = max((len(command) for command, _ in commands), default=0)
        for command, meaning in commands:
            self._result(f"  {command:<{width}}  {meaning}")

    def clear(self) -> None:
        """Plain output never sends escape codes, so there is no screen to clear."""

    # ---- the pipeline's hooks (events.TaskEvents, by name) -------------------------------------

    def phase_started(self, phase: Phase) -> None:
        self._line("phase", f"{phase:<8} started")

    def phase_finished(self, phase: Phase, seconds: float) -> None:
        self._line("phase", f"{phase:<8} done     {seconds:.1f}s")

    def plan_ready(
        self, complexity: str, agents: list[PlannedAgent], waves: list[list[str]]
    ) -> None:
        self._name_width = max([_MIN_NAME_WIDTH, *(len(a["name"]) for a in agents)])
        self._planned(agents)
        count = len(agents)
        self._line(
            "plan",
            f"{complexity} - {count} agent{'' if count == 1 else 's'} "
            f"in {len(waves)} wave{'' if len(waves) == 1 else 's'}",
        )
        wave_of = {name: number for number, wave in enumerate(waves, 1) for name in wave}
        for agent in agents:
            origin = (
                "carried from the run retried"
                if agent.get("carried")
                else "from the library"
                if agent.get("reused")
                else "new"
            )
            self._agent_line(
                agent["name"],
                "waiting",
                f"wave {wave_of.get(agent['name'], '?')}, {origin}: "
                f"{one_line(agent.get('role', ''), 80)}",
            )

    def revision_started(self, revision: int, missing: str) -> None:
        self._line("revision", f"{revision} - the judge found a gap: {one_line(missing)}")

    def packages(
        self, name: str, installed: list[str], refused: list[str], failed: list[str]
    ) -> None:
        parts = [
            f"{label} {', '.join(items)}"
            for label, items in (("installed", installed), ("refused", refused), ("failed", failed))
            if items
        ]
        self._line("packages", f"{name}: {'; '.join(parts) or 'nothing to install'}")

    def agent_building(self, name: str, reused: bool) -> None:
        self._agent_line(name, "building", "from the library" if reused else "writing code")

    def agent_generated(self, name: str) -> None:
        self._agent_line(name, "built", "passed codeguard")

    def agent_rejected(self, name: str, reasons: list[str]) -> None:
        self._agent_line(name, "rejected", "codeguard: " + one_line("; ".join(reasons), 200))

    def agent_running(self, name: str, attempt: int) -> None:
        self._agent_line(name, "running", f"attempt {attempt}" if attempt > 1 else "")

    def agent_repairing(self, name: str, attempt: int, error: str) -> None:
        self._agent_line(name, "repairing", f"attempt {attempt} failed: {one_line(error)}")

    def agent_finished(
        self, name: str, ok: bool, seconds: float, kind: str, error: str, attempts: int
    ) -> None:
        tries = f", {attempts} attempts" if attempts > 1 else ""
        if ok:
            self._agent_line(name, "done", f"{seconds:>6.1f}s{tries}")
        else:
            reason = f"{kind}: {one_line(error)}" if error else kind
            self._agent_line(name, "failed", f"{seconds:>6.1f}s{tries}  {reason}")

    def merge_started(self, count: int) -> None:
        self._line("merge", f"merging {count} output{'' if count == 1 else 's'}")

    def answer_started(self) -> None:
        if not self._shows_pieces():
            return
        with self._lock:
            again = self._streaming
            self._streamed, self._streaming, self._replaced = [], True, None
        self._line("answer", "written again from the start:" if again else "being written:")

    def answer_delta(self, text: str) -> None:
        with self._lock:
            if not self._streaming:
                return
            self._streamed.append(text)
            self._write(self.out, text, piece=True)

    def answer_replaced(self, reason: str) -> None:
        with self._lock:
            if not "".join(self._streamed).strip():
                return
            self._replaced = reason
        self._line("answer", f"{one_line(reason)}: the final answer follows at the end")

    def council_started(self) -> None:
        self._line("council", "reviewing the answer")

    def council_finished(self, weaknesses: list[str], improved: bool) -> None:
        found = len(weaknesses)
        self._line(
            "council",
            f"{found} weakness{'' if found == 1 else 'es'} found; "
            f"{'answer refined' if improved else 'answer kept'}",
        )
        for weakness in weaknesses:
            self._line("council", f"  - {one_line(weakness)}")

    def judged(self, done: bool, missing: str) -> None:
        self._line("judge", "complete" if done else f"incomplete: {one_line(missing)}")

    def budget_exhausted(self, spent_usd: float, budget_usd: float) -> None:
        self._line(
            "budget",
            f"{dollars(spent_usd)} of {dollars(budget_usd)} spent - no more model work",
        )

    def archived(self, path: str | None) -> None:
        self._line("archive", path if path else "the run could not be written")

    # ---- a batch ---------------------------------------------------------------------------

    def output_line(self, text: str) -> None:
        """One line of a command's machine-readable output (a batch's JSON lines): stdout,
        never quieted, never wrapped."""
        self._write(self.out, text + "\n")

    def batch_progress(self, progress: BatchProgress) -> None:
        """Where a batch stands; plain, one line each time a task ends."""
        finished = progress["done"] + progress["capped"] + progress["failed"]
        if finished and finished != self._batch_reported:
            self._batch_reported = finished
            self._line("batch", batch_progress_text(progress))

    def batch_finished(self, summary: BatchSummaryLine) -> None:
        """The batch's summary, for a person (the JSON one is its last output line)."""
        self._line("batch", batch_summary_text(summary))

    def stored_batch(self, batch: dict[str, Any]) -> None:
        """`agentgod batch show`: the batch, then one row per task."""
        counts = batch["counts"]
        self._field("batch", f"{batch['batch_id']}  {batch['status']}  from {batch['source']}")
        self._field("started", str(batch["started_at"]))
        self._field("tasks", ", ".join(f"{n} {s}" for s, n in counts.items() if n))
        self._field("cost", f"{dollars(batch['usd'])} in {duration(batch['seconds'])}")
        options = batch["options"]
        budget = options.get("budget_usd")
        parallel = options.get("parallel")
        shown = f"{parallel} at a time" + (f", budget {dollars(budget)}" if budget else "")
        self._field("options", f"{shown}, engine {options.get('engine', 'local')}")
        for task in batch["tasks"]:
            label = task["id"] or f"line {task['line']}"
            run = task["run_id"] or "-"
            row = f"{label:<16} {task['status']:<12} {run:<9} {dollars(task['usd']):>9}"
            row += f" {duration(task['seconds']):>7}  {one_line(task['task'], 60)}"
            self._result(row)
            if task["error"]:
                self._result(" " * 17 + one_line(task["error"], 100))
            if task["status"] == "capped" and task["run_id"]:
                more = task["budget_usd"] if task["budget_usd"] is not None else "USD"
                self._result(
                    " " * 17 + f"its own budget stopped it: agentgod retry {task['run_id']} "
                    f"--budget {more} goes on"
                )

    # ---- an eval ---------------------------------------------------------------------------

    def eval_report(self, report: EvalReport) -> None:
        """`agentgod eval`'s answer: the arms side by side, a bar per arm, and how to read them."""
        for line in eval_table(report):
            self._result(line)
        self._result("")
        for line in eval_bars(report):
            self._result(line)
        self._result("")
        for line in eval_footer(report):
            self._result(line)

    def eval_cases(self, report: EvalReport) -> None:
        """`agentgod eval show`: each case's score (and cost) in each arm."""
        arms = [arm["arm"] for arm in report["arms"]]
        width = max([len(case["id"]) for case in report["per_case"]] + [4])
        self._result(f"{'case':<{width}}  " + "  ".join(f"{arm:>17}" for arm in arms))
        for case in report["per_case"]:
            cells = []
            for arm in arms:
                score = case["scores"].get(arm)
                shown = "-" if score is None else f"{score:.2f}"
                cells.append(f"{shown:>6} {dollars(case['usd'].get(arm, 0.0)):>10}")
            self._result(f"{case['id']:<{width}}  " + "  ".join(cells))
            for arm in arms:
                detail = case["details"].get(arm, "")
                if detail and case["scores"].get(arm) != 1.0:
                    self._result(" " * (width + 2) + f"{arm}: {one_line(detail, 100)}")

    def eval_comparison(self, comparison: EvalComparison) -> None:
        """`agentgod eval compare A B`: per arm, what changed and whether it is significant."""
        for line in comparison_lines(comparison):
            self._result(line)

    def eval_list(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            self._result("No eval yet: start one with agentgod eval adversarial.")
            return
        for row in rows:
            self._result(
                f"{row['eval_id']}  {row['status']:<11} {row['cases']:>4} cases  "
                f"{','.join(row['arms']):<30} {dollars(row['usd']):>9}  "
                f"{str(row['started_at'])[:19]}  {one_line(str(row['suite']), 40)}"
            )


def interval_text(value: Interval, *, signed: bool = False) -> str:
    """`0.62 [0.48, 0.75]`, or `+0.17 [+0.03, +0.31] *` for a significant difference."""
    form = "+.2f" if signed else ".2f"
    text = f"{value['mean']:{form}} [{value['low']:{form}}, {value['high']:{form}}]"
    return text + (" *" if signed and value["significant"] else "")


def failures_text(failures: dict[str, int]) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in sorted(failures.items())) or "-"


EVAL_COLUMNS = (
    "arm",
    "score [95% CI]",
    "vs single [95% CI]",
    "$/case",
    "x single",
    "calls/case",
    "s/case",
    "score/$",
    "short of 1",
)


def eval_row(arm: EvalArm) -> list[str]:
    """One arm's cells, in EVAL_COLUMNS' order."""
    ratio = arm["usd_ratio"]
    per_usd = arm["score_per_usd"]
    return [
        arm["arm"],
        interval_text(arm["score"]),
        interval_text(arm["vs_single"], signed=True) if arm["vs_single"] else "-",
        dollars(arm["usd_per_case"]),
        f"{ratio:.1f}x" if ratio is not None else "-",
        f"{arm['calls_per_case']:.1f}",
        f"{arm['seconds_per_case']:.1f}",
        f"{per_usd:.1f}" if per_usd is not None else "-",
        failures_text(arm["failures"]),
    ]


def eval_table(report: EvalReport) -> list[str]:
    """The arms as aligned columns."""
    rows = [list(EVAL_COLUMNS), *(eval_row(arm) for arm in report["arms"])]
    widths = [max(len(row[i]) for row in rows) for i in range(len(EVAL_COLUMNS))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


BAR_WIDTH = 30


def eval_bars(report: EvalReport) -> list[str]:
    """A bar per arm: its score, with its interval marked, out of 1."""
    width = max([len(arm["arm"]) for arm in report["arms"]] + [3])
    lines = []
    for arm in report["arms"]:
        score = arm["score"]
        cells = ["." for _ in range(BAR_WIDTH)]
        for i in range(round(score["mean"] * BAR_WIDTH)):
            cells[i] = "#"
        low, high = round(score["low"] * BAR_WIDTH), round(score["high"] * BAR_WIDTH)
        if 0 < low <= BAR_WIDTH:
            cells[low - 1] = "["
        if 0 < high <= BAR_WIDTH:
            cells[high - 1] = "]"
        lines.append(f"{arm['arm']:<{width}}  |{''.join(cells)}|  {score['mean']:.2f}")
    return lines


def eval_footer(report: EvalReport) -> list[str]:
    """What the figures are over, what the eval spent, how to read the table."""
    status = report["status"]
    state = "" if status == "done" else f" ({status}: agentgod eval resume {report['eval_id']})"
    return [
        f"eval {report['eval_id']}{state}: {report['suite']}, {report['cases']} cases, "
        f"{report['complete']} scored in every arm; model {report['model'] or '?'}, "
        f"effort {report['effort'] or '?'}",
        f"spent {dollars(report['usd'])} ({dollars(report['judge_usd'])} judging), "
        f"{report['calls']} model calls, {duration(report['seconds'])}",
        "score: the mean over the cases every arm has a score for (1 = passed), [its 95 % "
        "interval];",
        "vs single: the paired difference on the same cases; * = its interval excludes 0 "
        "(a real difference)",
    ]


def comparison_lines(comparison: EvalComparison) -> list[str]:
    lines = [f"{comparison['before']} -> {comparison['after']}"]
    width = max([len(arm["arm"]) for arm in comparison["arms"]] + [3])
    for arm in comparison["arms"]:
        difference = arm["difference"]
        verdict = "a real change" if difference["significant"] else "no significant change"
        lines.append(
            f"{arm['arm']:<{width}}  {arm['before']:.2f} -> {arm['after']:.2f}  "
            f"difference {interval_text(difference, signed=True)}  over {arm['cases']} cases: "
            f"{verdict}"
        )
    for change in comparison["changes"]:
        lines.append(
            f"  {change['id']} ({change['arm']}): {change['before']:.2f} -> {change['after']:.2f}"
        )
    lines += [f"  left out: {why}" for why in comparison["left_out"]]
    return lines


def batch_progress_text(progress: BatchProgress) -> str:
    """`7/12 finished: 6 done, 1 capped, 4 running, 0 failed, $0.0342 so far, about 12s left`
    (capped only once a task's own budget has stopped it)."""
    finished = progress["done"] + progress["capped"] + progress["failed"]
    eta = progress["eta_seconds"]
    left = "time left unknown" if eta is None else f"about {duration(eta)} left"
    capped = f"{progress['capped']} capped, " if progress["capped"] else ""
    return (
        f"{finished}/{progress['total']} finished: {progress['done']} done, {capped}"
        f"{progress['running']} running, {progress['failed']} failed, "
        f"{dollars(progress['usd'])} so far, {left}"
    )


def batch_summary_text(summary: BatchSummaryLine) -> str:
    """`batch 3f9a2b1c done: 11 done, 1 failed, $0.1234, 12.3s`."""
    parts = [f"{summary['done']} done", f"{summary['failed']} failed"]
    if summary["capped"]:
        parts.insert(
            1,
            f"{summary['capped']} capped by their own budget (its line says how to go on: "
            "agentgod retry RUN --budget USD)",
        )
    if summary["invalid"]:
        parts.append(f"{summary['invalid']} bad lines")
    if summary["unfinished"]:
        parts.append(
            f"{summary['unfinished']} unfinished (agentgod batch resume {summary['batch_id']})"
        )
    return (
        f"batch {summary['batch_id']} {summary['status']}: {', '.join(parts)}, "
        f"{dollars(summary['usd'])}, {duration(summary['seconds'])}"
    )


if TYPE_CHECKING:

    def _renders_every_hook(ui: PlainUI) -> TaskEvents:
        """mypy proves here that PlainUI (and so RichUI) implements every TaskEvents hook."""
        return ui
