"""richui.py — the surface of ui.PlainUI, repainted with rich for a person at a terminal.

Loaded only by main.make_ui, and only when rich imports and a terminal is watching, so it may
import rich at the top without slowing `agentgod --help` or breaking a rich-less install.

During a task one `rich.live.Live` shows a phase rail (plan → ... → archive) and a board with one
row per agent, redrawn eight times a second from state the pipeline's hooks update. Hooks run on
worker threads and only touch that state under `_state`; they never print while holding it,
because the refresh thread takes Live's lock and then `_state` — the reverse order would
deadlock. The display stays up until task_finished, leaving its final frame in the scrollback;
anything that needs the person (a question, a problem, the answer) takes it down first.
Whatever this class does not override prints PlainUI's line through the console.

The answer, while it is written, is a panel under the board showing as much of its end as the
screen has room for; the final frame shows it whole, so the `answer` that follows is printed only
if it differs (the council refined it, say, which the board says in the panel's place).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.segment import Segment
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from agentgod import asking
from agentgod.kinds import Phase
from agentgod.replies import (
    CARRIED,
    BatchProgress,
    BatchSummaryLine,
    CostSummary,
    EvalReport,
    HistoryRow,
    KeepChoice,
    LibraryRow,
    PlannedAgent,
    StatsReply,
    Transcript,
)
from agentgod.richtext import (
    Clamp,
    Tail,
    Verbatim,
    fit,
    history_table,
    library_table,
    middle,
    stats_grid,
    words,
)
from agentgod.text import clean, cost_text, dollars, duration, one_line
from agentgod.ui import (
    BAR_WIDTH,
    FIELD_WIDTH,
    PHASES,
    PlainUI,
    batch_summary_text,
    eval_footer,
    eval_row,
    retry_hint,
    trim_note,
)

WORDMARK = r"""
   _                     _       ___   ___   ___
  /_\   __ _  ___  _ _  | |_    / __| / _ \ |   \
 / _ \ / _` |/ -_)| ' \ |  _|  | (_ || (_) || |) |
/_/ \_\\__, |\___||_||_| \__|   \___| \___/ |___/
       |___/
""".strip("\n").splitlines()
TAGLINE = "one request in, a team of agents out"

_WIDE = 110
"""Below this many columns the transcript puts each agent's role under its name."""
_SPINNING = {"building": "yellow", "running": "cyan", "repairing": "magenta"}
_SETTLED = {
    "waiting": ("·", "dim"),
    "done": ("✓", "green"),
    "failed": ("✗", "red"),
    "stopped": ("■", "yellow"),
    "skipped": ("-", "dim"),
}
_PHASE_LOOK = {
    "pending": ("○", "dim"),
    "done": ("✓", "green"),
    "stopped": ("■", "yellow"),
    "skipped": ("-", "dim"),
}


@dataclass
class _Phase:
    state: str = "pending"  # pending, active, done, stopped, skipped
    since: float = 0.0
    seconds: float = 0.0


@dataclass
class _Agent:
    name: str
    role: str = ""
    reused: bool = False
    state: str = "waiting"  # one of _SPINNING or _SETTLED
    since: float = field(default_factory=time.monotonic)
    seconds: float | None = None
    note: str = ""


@dataclass
class _Answer:
    """The answer as it is being written: what the live panel shows."""

    pieces: list[str] = field(default_factory=list)
    """Its text as it arrived, joined only when shown: appending to one string would copy the
    whole answer at every piece."""
    streaming: bool = False
    again: bool = False
    """Written again from the start (an attempt failed part-way, or there was no room)."""
    replaced: str | None = None
    """Why it will not stand, once answer_replaced said so."""

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def can_drive(stream: TextIO) -> bool:
    """Whether rich can redraw a live display on `stream`: a terminal, and not a dumb one."""
    return Console(file=stream).is_interactive


class RichUI(PlainUI):
    """PlainUI's surface with a wordmark, a live board, Markdown answers and tables."""

    def __init__(
        self,
        *,
        out: TextIO | None = None,
        err: TextIO | None = None,
        narrate_to: TextIO | None = None,
        quiet: bool = False,
        interactive: bool = False,
        input_stream: TextIO | None = None,
        console: Console | None = None,
    ) -> None:
        """`console`, when given, renders everything (answers, narration and problems) — for tests
        and embedding; otherwise each stream gets a console of its own, shared when streams are."""
        super().__init__(
            out=out,
            err=err,
            narrate_to=narrate_to,
            quiet=quiet,
            interactive=interactive,
            input_stream=input_stream,
        )
        if console is not None:
            self.console = self.answer_console = self.error_console = console
        else:
            consoles: dict[int, Console] = {}
            for stream in (self.out, self.narrate_to, self.err):
                if id(stream) not in consoles:
                    consoles[id(stream)] = Console(file=stream, highlight=False)
            self.console = consoles[id(self.narrate_to)]
            self.answer_console = consoles[id(self.out)]
            self.error_console = consoles[id(self.err)]
        self._state = threading.Lock()
        self._live: Live | None = None
        self._waiting: Live | None = None
        """The spinner `waiting` shows before the board is up."""
        self._spinner = Spinner("dots")
        self._phases = {phase: _Phase() for phase in PHASES}
        self._agents: dict[str, _Agent] = {}
        self._plan_summary = ""
        self._revision = 0
        self._answer = _Answer()
        self._notes: list[Text] = []
        """What the council, the judge and a revision said, in order: drawn below the answer."""
        self._settled = False
        """The display is coming down for good: its last frame shows the answer whole."""
        self._rendered: dict[tuple[str, int], list[list[Segment]]] = {}
        self._batch: BatchProgress | None = None
        """Where a batch stands, for its live line."""

    # ---- output plumbing -----------------------------------------------------------------------

    def _print(self, console: Console, text: Text) -> None:
        """A text already broken into lines (`words`): printed as it is, never folded inside a
        word, so a path too long for the screen is wrapped by the terminal, whole."""
        console.print(text, overflow="ignore", crop=False, highlight=False)

    def _narrate(self, text: str) -> None:
        self._print(self.console, Text(words(clean(text), self.console.width, " " * 11)))

    def _result(self, text: str) -> None:
        width = self.answer_console.width
        self._print(self.answer_console, Text(words(clean(text), width, "")))

    def _prompt(self, text: str) -> None:
        self.console.print(Text(clean(text)), end="", highlight=False)

    def _field(self, label: str, text: str) -> None:
        """The text wraps inside its own column, so a long role never runs under its label."""
        grid = Table.grid()
        grid.add_column(width=FIELD_WIDTH, no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row(Text(label), Text(clean(text)))
        self.answer_console.print(grid)

    def _show(self, renderable: RenderableType) -> None:
        """Narration: above the live display while it is up, nothing at all when quiet."""
        if not self.quiet:
            self.console.print(renderable)

    def _stop_live(self) -> None:
        """Take down the board (leaving its last frame) and the spinner of `waiting`, if up."""
        with self._state:
            self._settled = True
        for live in (self._live, self._waiting):
            if live is not None:
                live.stop()
        self._live = self._waiting = None

    def _shows_pieces(self) -> bool:
        """Only while the live display is up, on the console the answer belongs on."""
        return not self.quiet and self._live is not None and self.console is self.answer_console

    def _take_stream(self) -> tuple[str, str | None]:
        with self._state:
            taken, self._answer = self._answer, _Answer()
        return taken.text, taken.replaced

    # ---- session and conversation --------------------------------------------------------------

    def banner(self, version: str, model: str, home: str) -> None:
        if self.quiet:
            return
        art = Text("\n".join(WORDMARK[:-1]) + "\n", style="bold cyan")
        art.append(WORDMARK[-1], style="bold cyan")
        art.append(f"    {TAGLINE}", style="italic")
        self.console.print(art)
        self.console.print(Text(f"v{version} · model {model} · home {clean(home)}", style="dim"))

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """A spinner from the moment work starts, until it ends or anything else is shown (a
        question, a problem, the run's board): only ever one live display is up."""
        if not self.quiet and self._live is None and self._waiting is None:
            self._waiting = Live(
                Spinner("dots", Text(f"{what}…", style="cyan"), style="bold cyan"),
                console=self.console,
                refresh_per_second=12,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._waiting.start()
        try:
            yield
        finally:
            if self._waiting is not None:
                self._waiting.stop()
                self._waiting = None

    def task_started(self, task: str) -> None:
        self._stop_live()
        with self._state:
            self._phases = {phase: _Phase() for phase in PHASES}
            self._agents = {}
            self._plan_summary = ""
            self._revision = 0
            self._answer = _Answer()
            self._notes = []
            self._settled = False
        self._plan_order = {}
        if self.quiet:
            return
        self._live = Live(
            console=self.console,
            get_renderable=self._board,
            refresh_per_second=8,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def task_finished(self) -> None:
        """Settle whatever an error or Ctrl-C left moving, then leave the final frame on screen."""
        with self._state:
            for phase in self._phases.values():
                if phase.state in ("pending", "active"):
                    phase.state = "skipped" if phase.state == "pending" else "stopped"
            for agent in self._agents.values():
                if agent.state in _SPINNING:
                    agent.state = "stopped"
                elif agent.state == "waiting":
                    agent.state = "skipped"
        self._stop_live()

    def answer(self, text: str) -> None:
        """The answer panel; not again when the display's last frame showed exactly this."""
        self._stop_live()
        streamed, replaced = self._take_stream()
        if streamed.strip():
            if replaced is None and streamed.strip() == text.strip():
                return
            self.answer_console.print(Text("the final answer:", style="bold yellow"))
        self.answer_console.print(
            Panel(
                Verbatim(clean(text)),
                title="answer",
                title_align="left",
                border_style="cyan",
                padding=(1, 2),
            )
        )

    def cost(self, summary: CostSummary, duration_seconds: float) -> None:
        """One line where it fits, else broken only between its parts (never inside a number)."""
        pieces = re.split(r"(?<= \| )|(?<= / )", "cost  " + cost_text(summary, duration_seconds))
        line = Text(fit(pieces, self.console.width, " " * 6), style="dim")
        line.stylize("bold not dim", 0, 4)
        self._show(line)

    def transcript(self, run: Transcript) -> None:
        agents, run_file = run["agents"], run["run_file"]
        narrow = self.console.width < _WIDE
        table = Table(title="run transcript", title_justify="left", box=box.SIMPLE_HEAD)
        for heading in ("agent", "role", "origin", "result", "tries", "time", "cost"):
            if heading != "role" or not narrow:
                table.add_column(
                    heading,
                    justify="right" if heading in ("tries", "time", "cost") else "left",
                    no_wrap=heading != "role" and not (narrow and heading == "agent"),
                )
        # At 80 columns a role beside the facts would be a few words wide: it goes under the name.
        room = self.console.width - 56 if narrow else self._name_room(56)
        names = [agent["name"] for agent in agents]
        for agent in self._in_plan_order(agents):
            ok = bool(agent.get("ok"))
            name = Text(middle(agent["name"], room, names), style="bold", no_wrap=True)
            role = Clamp(Text(one_line(agent.get("role", ""), 300), style="dim" if narrow else ""))
            if agent.get("kind") == CARRIED:  # delivered in the run retried: not run again
                facts_of: list[str | Text] = ["carried", Text("done", "green"), "-", "-", "-"]
            else:
                facts_of = [
                    "reused" if agent.get("reused") else "new",
                    Text("done", "green") if ok else Text(f"failed ({agent.get('kind')})", "red"),
                    str(agent.get("attempts", 0)),
                    duration(float(agent.get("seconds", 0.0))),
                    dollars(agent["usd"]),
                ]
            table.add_row(*([Group(name, role)] if narrow else [name, role]), *facts_of)
        notes = Text()
        for failure in run["failures"]:
            notes.append(f"✗ {failure['name']}: {one_line(failure['reason'])}\n", style="red")
        revisions, run_id = run["revisions"], run["run_id"]
        if run["failures"] and run_id:
            notes.append(f"↻ {retry_hint(run_id, len(run['failures']))}\n", style="yellow")
        if run.get("trimmed"):
            notes.append(f"! {trim_note(run.get('trimmed') or [])}\n", style="yellow")
        facts = [f"{revisions} revision{'' if revisions == 1 else 's'}"]
        if run.get("retry_of"):
            facts.insert(0, f"retry of {run['retry_of']}")
        if run["council_improved"]:
            facts.append("council improved the answer")
        facts.append(f"sandbox: {', '.join(run['sandbox']) or 'none reported'}")
        if run_id:
            facts.append(f"run {run_id} (agentgod show {run_id})")
        pieces = [f"{fact} · " for fact in facts[:-1]] + facts[-1:]
        notes.append(fit(pieces, self.console.width, "") + "\n" + self._saved(run_file), "dim")
        self._show(table)
        if not self.quiet:
            self._print(self.console, notes)  # the run file's path whole, however long

    def _name_room(self, reserved: int) -> int:
        """How many characters an agent's name may take beside `reserved` columns of other facts:
        the rest of the screen's width, leaving a share to what follows the name."""
        return max(16, (self.console.width - reserved) * 3 // 5)

    def _saved(self, run_file: str | None) -> str:
        """The run file on its own line, home as ~, never broken (the terminal wraps it whole)."""
        if not run_file:
            return "not archived"
        home = str(Path.home()).rstrip("/") + "/"
        shown = "~/" + run_file[len(home) :] if run_file.startswith(home) else run_file
        return words(f"saved to {shown}", self.console.width)

    def problem(self, headline: str, advice: str, technical: str) -> None:
        self._stop_live()
        width = self.error_console.width
        text = Text(words(f"✗ {one_line(headline, 400)}", width) + "\n", style="bold red")
        if advice.strip():
            text.append(words(clean(advice).strip(), width) + "\n")
        if technical.strip():
            text.append(words(clean(technical).strip(), width), style="dim")
        self._print(self.error_console, text)

    def info(self, text: str) -> None:
        if not self.quiet:
            self._print(self.console, Text(words(clean(text), self.console.width)))

    def warn(self, text: str) -> None:
        """In the live display where the person looks; quiet, on stderr like PlainUI."""
        if self.quiet:
            super().warn(text)
        else:
            shown = words(f"! {clean(text)}", self.console.width)
            self._print(self.console, Text(shown, style="yellow"))

    def ask(self, question: str) -> str | None:
        self._stop_live()
        return super().ask(question)

    def ask_secret(self, question: str) -> str | None:
        self._stop_live()
        return super().ask_secret(question)

    def confirm(self, question: str, default: bool = False) -> bool:
        self._stop_live()
        return super().confirm(question, default)

    def choose_keep(self, agents: list[KeepChoice]) -> list[str]:
        """The new agents by number, whole name (it is what may be typed) and role in at most
        two lines: beside the name on a wide screen, under it on a narrow one."""
        self._stop_live()
        if not self.interactive or not agents:
            return []
        agents = self._in_plan_order(agents)
        narrow = self.console.width < _WIDE
        listing = Table.grid(padding=(0, 2))
        listing.add_column(justify="right")
        listing.add_column(style="bold", no_wrap=not narrow)
        if not narrow:
            listing.add_column()
        for number, agent in enumerate(agents, 1):
            name = Text(agent["name"], style="bold")
            role = Clamp(Text(one_line(agent.get("role", ""), 300), style="dim"))
            listing.add_row(f"{number}.", *([Group(name, role)] if narrow else [name, role]))
        self.console.print(Text("New agents from this run:"))
        self.console.print(listing)
        return asking.keep(self._read, self._prompt, [a["name"] for a in agents])

    def library(self, entries: list[LibraryRow]) -> None:
        if not entries:
            super().library(entries)
            return
        self.answer_console.print(library_table(entries))

    def history(self, rows: list[HistoryRow]) -> None:
        if not rows:
            super().history(rows)
            return
        self.answer_console.print(history_table(rows, self.answer_console.width))

    def stats(self, stats: StatsReply) -> None:
        self.answer_console.print(stats_grid(stats))

    def session_cost(self, summary: CostSummary) -> None:
        """Broken only between its parts, each line after the first under the first's figures."""
        head = "this session  "
        pieces = re.split(r"(?<= \| )|(?<= / )", head + cost_text(summary))
        line = Text(fit(pieces, self.answer_console.width, " " * len(head)), style="dim")
        line.stylize("bold not dim", 0, len(head))
        self._print(self.answer_console, line)

    def help(self, commands: list[tuple[str, str]]) -> None:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold cyan")
        grid.add_column()
        for command, meaning in commands:
            grid.add_row(command, meaning)
        self.answer_console.print(grid)

    def clear(self) -> None:
        self.answer_console.clear()

    # ---- the live board ------------------------------------------------------------------------

    def _board(self) -> RenderableType:
        """Called by Live's refresh thread: a fresh picture of the current state."""
        now = time.monotonic()
        rendered = self._spinner.render(now)
        frame = rendered.plain if isinstance(rendered, Text) else str(rendered)
        with self._state:
            header = Text(self._plan_summary, style="bold")
            if self._revision:
                header.append(f" · revision {self._revision}", style="yellow")
            rail = self._rail(now, frame)
            board = Table.grid(padding=(0, 2))
            board.add_column(no_wrap=True)
            board.add_column(no_wrap=True, style="bold")
            board.add_column(no_wrap=True, min_width=9)
            board.add_column(no_wrap=True, justify="right", min_width=6)
            board.add_column(style="dim")  # wraps first when the screen is narrow: one line cut
            room = self._name_room(24)
            names = list(self._agents)
            for agent in self._agents.values():
                board.add_row(*self._agent_cells(agent, now, frame, room, names))
            parts: list[RenderableType] = [header] if self._plan_summary else []
            parts.append(rail)
            if self._agents:
                parts.append(board)
            answer = replace(self._answer, pieces=list(self._answer.pieces))
            merging = self._phases[Phase.MERGE].state
            settled = self._settled
            notes = list(self._notes)
        if answer.replaced is not None:
            parts.append(
                Text(
                    f"↻ {one_line(answer.replaced)}: the final answer is shown when the run ends",
                    style="yellow",
                )
            )
        elif answer.text.strip():
            parts.append(self._answer_panel(answer, [*parts, *notes], merging, settled))
        return Group(*parts, *notes)

    def _answer_panel(
        self, answer: _Answer, above: list[RenderableType], merging: str, settled: bool
    ) -> Panel:
        """The answer so far, in what the screen leaves below the board (whole once settled);
        its title says whether it is still being written (`merging`: the merge phase's state)."""
        limit = None
        if not settled:
            used = len(self.console.render_lines(Group(*above), self.console.options, pad=False))
            limit = max(3, self.console.size.height - used - 5)  # borders, padding, the cursor
        title = "answer"
        if merging == "active":
            title += " · written again" if answer.again else " · being written"
        elif merging == "stopped":
            title += " · stopped part-way"
        return Panel(
            Tail(clean(answer.text), limit, self._rendered),
            title=title,
            title_align="left",
            border_style="cyan",
            padding=(1, 2),
        )

    def _rail(self, now: float, frame: str) -> Text:
        """The phases on one line: with every time where the screen is wide enough, else with
        the running phase's time only, else closer together (callers hold _state)."""
        for timed, arrow in ((True, " → "), (False, " → "), (False, " ")):
            rail = Text(no_wrap=True, overflow="crop")
            for number, phase in enumerate(PHASES):
                if number:
                    rail.append(arrow, style="dim")
                rail.append_text(self._phase_cell(phase, self._phases[phase], now, frame, timed))
            if rail.cell_len <= self.console.width:
                break
        return rail

    @staticmethod
    def _phase_cell(name: str, phase: _Phase, now: float, frame: str, timed: bool) -> Text:
        if phase.state == "active":
            return Text(f"{frame} {name} {duration(now - phase.since)}", style="bold cyan")
        mark, style = _PHASE_LOOK[phase.state]
        timing = f" {duration(phase.seconds)}" if phase.state == "done" and timed else ""
        return Text(f"{mark} {name}{timing}", style=style)

    @staticmethod
    def _agent_cells(
        agent: _Agent, now: float, frame: str, room: int, names: list[str]
    ) -> tuple[RenderableType, ...]:
        elapsed: float | None
        if agent.state in _SPINNING:
            colour = _SPINNING[agent.state]
            mark, elapsed = Text(frame, style=colour), now - agent.since
        else:
            symbol, colour = _SETTLED[agent.state]
            mark, elapsed = Text(symbol, style=colour), agent.seconds
        return (
            mark,
            Text(
                middle(agent.name, room - 9, names) + " (reused)"
                if agent.reused
                else middle(agent.name, room, names)
            ),
            Text(agent.state, style=colour),
            Text(duration(elapsed) if elapsed is not None else ""),
            Clamp(Text(agent.note), 1),
        )

    def _agent(self, name: str) -> _Agent:
        """The row for `name` (callers hold _state); one appears if a hook precedes the plan."""
        return self._agents.setdefault(name, _Agent(name))

    def _set_agent(self, name: str, state: str, note: str, seconds: float | None = None) -> None:
        with self._state:
            agent = self._agent(name)
            agent.state, agent.note, agent.seconds = state, note, seconds
            agent.since = time.monotonic()

    # ---- the pipeline's hooks ------------------------------------------------------------------

    def _note(self, text: Text) -> None:
        """A verdict in its place: under the board and the answer while the display is up."""
        with self._state:
            if self._live is not None:
                self._notes.append(text)
                return
        self._show(text)

    def phase_started(self, phase: Phase) -> None:
        """A plan starts a round: whatever came after it is the last round's, and pending."""
        with self._state:
            if phase is Phase.PLAN:
                self._phases = {each: _Phase() for each in PHASES}
            self._phases[phase] = _Phase("active", time.monotonic())

    def phase_finished(self, phase: Phase, seconds: float) -> None:
        with self._state:
            self._phases[phase] = _Phase("done", seconds=seconds)

    def plan_ready(
        self, complexity: str, agents: list[PlannedAgent], waves: list[list[str]]
    ) -> None:
        count = len(agents)
        self._planned(agents)
        with self._state:
            self._plan_summary = (
                f"{complexity} · {count} agent{'' if count == 1 else 's'} "
                f"in {len(waves)} wave{'' if len(waves) == 1 else 's'}"
            )
            self._agents = {
                a["name"]: _Agent(a["name"], a.get("role", ""), bool(a.get("reused")))
                for a in agents
            }
            for a in agents:
                if a.get("carried"):  # delivered in the run retried: done, and never run again
                    agent = self._agents[a["name"]]
                    agent.state, agent.note = "done", "carried from the run retried"

    def revision_started(self, revision: int, missing: str) -> None:
        """A revision merges (and judges) again, so the rail from the merge on starts over; a
        new round's plan, if it comes to one, resets the rest (phase_started)."""
        with self._state:
            self._revision = revision
            for phase in PHASES[PHASES.index(Phase.MERGE) : PHASES.index(Phase.ARCHIVE)]:
                self._phases[phase] = _Phase()
        self._note(Text(f"↻ revision {revision}: {one_line(missing)}", style="yellow"))

    def agent_building(self, name: str, reused: bool) -> None:
        self._set_agent(name, "building", "from the library" if reused else "writing code")
        if reused:
            with self._state:
                self._agent(name).reused = True

    def agent_generated(self, name: str) -> None:
        self._set_agent(name, "waiting", "built, waiting for its inputs")

    def agent_rejected(self, name: str, reasons: list[str]) -> None:
        self._set_agent(name, "failed", "codeguard: " + one_line("; ".join(reasons), 80))

    def agent_running(self, name: str, attempt: int) -> None:
        self._set_agent(name, "running", f"attempt {attempt}" if attempt > 1 else "")

    def agent_repairing(self, name: str, attempt: int, error: str) -> None:
        self._set_agent(name, "repairing", f"attempt {attempt} failed: {one_line(error, 70)}")

    def agent_finished(
        self, name: str, ok: bool, seconds: float, kind: str, error: str, attempts: int
    ) -> None:
        tries = f"{attempts} attempts" if attempts > 1 else ""
        if ok:
            self._set_agent(name, "done", tries, seconds)
        else:
            reason = f"{kind}: {one_line(error, 70)}" if error else kind
            self._set_agent(name, "failed", f"{reason}  {tries}".strip(), seconds)

    def merge_started(self, count: int) -> None:
        """The rail already shows the merge."""

    def answer_started(self) -> None:
        if not self._shows_pieces():
            return
        with self._state:
            self._answer = _Answer(streaming=True, again=self._answer.streaming)

    def answer_delta(self, text: str) -> None:
        with self._state:
            if self._answer.streaming:
                self._answer.pieces.append(text)

    def answer_replaced(self, reason: str) -> None:
        with self._state:
            if self._answer.text.strip():
                self._answer.replaced = reason

    def council_started(self) -> None:
        """The rail already shows the council."""

    def council_finished(self, weaknesses: list[str], improved: bool) -> None:
        found = len(weaknesses)
        text = Text(
            f"council: {found} weakness{'' if found == 1 else 'es'} found · "
            f"{'answer refined' if improved else 'answer kept'}",
            style="magenta",
        )
        for weakness in weaknesses:
            text.append(f"\n  - {one_line(weakness)}", style="dim")
        self._note(text)

    def judged(self, done: bool, missing: str) -> None:
        if done:
            self._note(Text("✓ judge: the answer covers the request", style="green"))
        else:
            self._note(Text(f"judge: incomplete — {one_line(missing)}", style="yellow"))

    def budget_exhausted(self, spent_usd: float, budget_usd: float) -> None:
        self._show(
            Text(
                f"! budget: {dollars(spent_usd)} of {dollars(budget_usd)} spent "
                "— no more model work",
                style="bold yellow",
            )
        )

    def archived(self, path: str | None) -> None:
        """The transcript names the run file; only a failed write is news now."""
        if path is None:
            self._show(Text("! the run could not be archived", style="yellow"))

    # ---- a batch ---------------------------------------------------------------------------

    def output_line(self, text: str) -> None:
        """Above the progress display while it is up; never wrapped (each line is one JSON)."""
        self.answer_console.print(Text(clean(text)), soft_wrap=True, highlight=False)

    def batch_progress(self, progress: BatchProgress) -> None:
        """A live line with a bar: done, running and failed, dollars so far, the time left (fits
        in 80 columns; the batch's id is in the lines above and below it)."""
        if self.quiet:
            return
        with self._state:
            self._batch = progress
        if self._live is None:
            self._live = Live(
                console=self.console,
                get_renderable=self._batch_board,
                refresh_per_second=4,
                transient=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def _batch_board(self) -> RenderableType:
        with self._state:
            progress = self._batch
        if progress is None:
            return Text("")
        total = max(1, progress["total"])
        width = 12
        done = round(width * progress["done"] / total)
        capped = min(width - done, round(width * progress["capped"] / total))
        failed = min(width - done - capped, round(width * progress["failed"] / total))
        running = min(width - done - capped - failed, round(width * progress["running"] / total))
        bar = Text()
        bar.append("█" * done, style="green")
        bar.append("█" * capped, style="yellow")
        bar.append("█" * failed, style="red")
        bar.append("▒" * running, style="cyan")
        bar.append("·" * (width - done - capped - failed - running), style="dim")
        eta = progress["eta_seconds"]
        left = "" if eta is None else f" · ~{duration(eta)} left"
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(bar)
        finished = progress["done"] + progress["capped"] + progress["failed"]
        line.append(f" {finished}/{progress['total']} · {progress['done']} done · ")
        if progress["capped"]:
            line.append(f"{progress['capped']} capped", style="yellow")
            line.append(" · ")
        line.append(
            f"{progress['running']} running · {progress['failed']} failed · "
            f"{dollars(progress['usd'])}{left}"
        )
        return line

    def batch_finished(self, summary: BatchSummaryLine) -> None:
        self._stop_live()
        if not self.quiet:
            clean = not summary["failed"] and not summary["capped"]
            style = "green" if summary["status"] == "done" and clean else "yellow"
            self.console.print(Text(batch_summary_text(summary), style=style))

    # ---- an eval ---------------------------------------------------------------------------

    def eval_report(self, report: EvalReport) -> None:
        """The arms as a table (a significant difference green, or red when it is a loss),
        then a bar per arm: its score out of 1, with its interval beside it."""
        from rich.bar import Bar

        self._stop_live()
        width = max(len(arm["arm"]) for arm in report["arms"])
        for arm in report["arms"]:
            cells = eval_row(arm)
            score, difference = arm["score"], arm["vs_single"]
            line = Text(f"{arm['arm']:<{width}}  ", style="bold")
            line.append(f"score {score['mean']:.2f} ")
            line.append(f"[{score['low']:.2f}, {score['high']:.2f}]", "dim")
            if difference is not None:
                style = ""
                if difference["significant"]:
                    style = "green" if difference["mean"] > 0 else "red"
                mark = " *" if difference["significant"] else ""
                line.append(f"   vs single {difference['mean']:+.2f}{mark} ", style)
                line.append(f"[{difference['low']:+.2f}, {difference['high']:+.2f}]", "dim")
            facts = Text(" " * (width + 2), style="dim")
            ratio = f" ({cells[4]} single)" if arm["usd_ratio"] is not None else ""
            facts.append(
                f"{cells[3]} a case{ratio} · {cells[5]} calls · {cells[6]} s · "
                f"{cells[7]} per $" + (f" · short: {cells[8]}" if arm["failures"] else ""),
                "dim",
            )
            self.answer_console.print(line)
            self.answer_console.print(facts)
        self.answer_console.print()
        bars = Table.grid(padding=(0, 1))
        bars.add_column(no_wrap=True)
        bars.add_column(width=BAR_WIDTH)
        bars.add_column(no_wrap=True)
        for arm in report["arms"]:
            score = arm["score"]
            colour = "cyan" if arm["arm"] == "single" else "green"
            bars.add_row(
                Text(arm["arm"]),
                Bar(1.0, 0.0, score["mean"], width=BAR_WIDTH, color=colour, bgcolor="grey23"),
                Text(f"{score['mean']:.2f}  [{score['low']:.2f}, {score['high']:.2f}]"),
            )
        self.answer_console.print(bars)
        for text in eval_footer(report):
            self.answer_console.print(Text(text, style="dim"))
