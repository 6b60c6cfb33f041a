"""richtext.py — rich renderables for what RichUI draws from model text and long facts.

The answer exactly as the model wrote it (`Verbatim`), the end of one still being written (`Tail`),
a cell cut to a few lines (`Clamp`), a name shortened in its middle so two long names stay apart
(`middle`), and a line broken only where its separators allow (`fit`): the display must read at
80 columns as at 160, never breaking a word, a number or a path mid-way. And the read-only
commands' tables (library, history, stats), which need nothing of the live display.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token
from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import Markdown
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from agentgod.replies import HistoryRow, LibraryRow, StatsReply
from agentgod.text import WIDE_HISTORY, dollars, duration, one_line, tokens_text


def middle(name: str, limit: int, others: Iterable[str] = ()) -> str:
    """`name` in at most `limit` characters: its start and, longer, its end (where names made
    from one stem differ: `feedback_reader_north`, `feedback_reader_south`), joined by "…".

    When another of `others` (the names shown beside it) would be cut to the same text — they
    differ in the middle: `report_north_writer`, `report_south_writer` — the part shown is where
    they differ: `repo…north_…`, `repo…south_…`.
    """
    if len(name) <= limit:
        return name
    cut = _ends(name, limit)
    rivals = [other for other in others if other != name and _ends(other, limit) == cut]
    if not rivals or limit < 5:
        return cut
    start = min(_shared(name, other) for other in rivals)
    head = max(1, min(start, (limit - 2) * 2 // 5))
    window = name[start : start + limit - head - 2]
    if start + len(window) >= len(name):  # what differs is the end after all
        return f"{name[:head]}…{name[len(name) - (limit - 1 - head) :]}"
    return f"{name[:head]}…{window}…"


def _shared(one: str, other: str) -> int:
    """How many characters `one` and `other` begin with in common."""
    return next(
        (at for at, (a, b) in enumerate(zip(one, other, strict=False)) if a != b),
        min(len(one), len(other)),
    )


def _ends(name: str, limit: int) -> str:
    """`name`'s start and end in at most `limit` characters, joined by "…"."""
    if len(name) <= limit:
        return name
    head = max(1, (limit - 1) * 2 // 5)
    return f"{name[:head]}…{name[len(name) - (limit - 1 - head) :]}"


def fit(pieces: Sequence[str], width: int, indent: str = "  ") -> str:
    """`pieces` joined into lines of at most `width` (a piece longer than that alone on one),
    each line after the first indented: a break falls only between two pieces."""
    lines = [""]
    for piece in pieces:
        if lines[-1].strip() and len(lines[-1]) + len(piece.rstrip()) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append(indent)
        lines[-1] += piece.lstrip() if not lines[-1].strip() else piece
    return "\n".join(lines).rstrip()


def words(text: str, width: int, indent: str = "  ") -> str:
    """`text` in lines of at most `width`, broken only between words (each line after a break
    indented): a word longer than a line — a path, a URL — stays whole, for the terminal to wrap
    and a person to select in one piece."""
    return "\n".join(
        fit(re.split(r"(?<= )", line), width, indent) if line.strip() else line
        for line in text.split("\n")
    )


class Clamp:
    """A table cell of at most `lines` lines: the last one cut with "…" if the text goes on."""

    def __init__(self, text: Text, lines: int = 2) -> None:
        self.text = text
        self.lines = lines

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.text)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rendered = self.text.wrap(console, options.max_width)
        shown = rendered[: self.lines]
        if len(rendered) > self.lines:
            last = shown[-1]
            last.truncate(options.max_width - 1)
            last.rstrip()
            last.append("…")
        yield from shown


class Tail:
    """The end of an answer still being written: its last `limit` lines as rendered, under a
    line counting the ones above; all of it when `limit` is None (the final frame).

    The answer is rendered whole and then cut, so Markdown reads as it will in the end; the
    lines are kept in `cache` per text and width, since the board is redrawn eight times a
    second and the answer changes far less often.
    """

    def __init__(
        self, text: str, limit: int | None, cache: dict[tuple[str, int], list[list[Segment]]]
    ) -> None:
        self.text = text
        self.limit = limit
        self.cache = cache

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        key = (self.text, options.max_width)
        lines = self.cache.get(key)
        if lines is None:
            lines = console.render_lines(Verbatim(self.text), options, pad=False)
            self.cache.clear()
            self.cache[key] = lines
        if self.limit is not None and len(lines) > self.limit:
            above = len(lines) - self.limit + 1
            yield Text(f"… {above} line{'' if above == 1 else 's'} above", style="dim")
            lines = lines[len(lines) - self.limit + 1 :]
        for line in lines:
            yield from line
            yield Segment.line()


class Verbatim(Markdown):
    """Markdown that shows every character the model wrote, and where every link leads.

    rich's own parser reads `<file>` or `Vec<u8>` as inline HTML and then drops it, joins the
    lines of a paragraph with spaces, and strips their indentation. Here HTML is plain text, a
    line break stays a line break, and a paragraph whose later lines are indented (code the
    model forgot to fence) is shown as a code block, indentation intact. No link is made live
    (no OSC 8 hyperlink, whose target the screen never shows): `[text](url)` reads "text (url)",
    and a link whose text is its own target is just that URL.
    """

    def __init__(self, markup: str) -> None:
        super().__init__("", hyperlinks=False)
        self.markup = markup
        parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
        self.parsed = verbatim_tokens(parser.parse(markup), markup.split("\n"))


def verbatim_tokens(tokens: list[Token], source: list[str] | None = None) -> list[Token]:
    """Soft breaks made hard; indented paragraphs made code blocks (see Verbatim).

    Such a block is the paragraph's own lines as written (`source`, for one at the top level),
    dedented as a whole: the parser strips the first line's indentation but not the others',
    which would shift the code's lines against each other.
    """
    kept: list[Token] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        inline = tokens[index + 1] if index + 1 < len(tokens) else None
        if token.type == "paragraph_open" and inline is not None and inline.type == "inline":
            lines = inline.content.split("\n")
            if any(line[:1].isspace() for line in lines[1:]):
                code = inline.content
                if source is not None and token.level == 0 and token.map:
                    code = textwrap.dedent("\n".join(source[token.map[0] : token.map[1]]))
                block = Token("fence", "code", 0, block=True, content=code.rstrip("\n") + "\n")
                block.level = token.level
                kept.append(block)
                index += 3  # paragraph_open, inline, paragraph_close
                continue
        for child in token.children or []:
            if child.type == "softbreak":
                child.type = "hardbreak"
        if token.children:
            token.children = _plain_self_links(token.children)
        kept.append(token)
        index += 1
    return kept


def _plain_self_links(children: list[Token]) -> list[Token]:
    """Inline tokens with each link whose whole text is its own target (`<https://x>`) shown as
    that text alone: "https://x (https://x)" would say it twice."""
    kept: list[Token] = []
    index = 0
    while index < len(children):
        link = children[index : index + 3]
        if (
            len(link) == 3
            and [token.type for token in link] == ["link_open", "text", "link_close"]
            and link[1].content == str(link[0].attrs.get("href", ""))
        ):
            kept.append(link[1])
            index += 3
            continue
        kept.append(children[index])
        index += 1
    return kept


# ---- the read-only commands' tables ------------------------------------------------------------


def library_table(entries: list[LibraryRow]) -> Table:
    """`agentgod library`: each kept agent's record."""
    table = Table(title="agent library", title_justify="left", box=box.SIMPLE_HEAD)
    for heading in ("agent", "role", "gen", "won", "lost", "uses", "status"):
        table.add_column(
            heading, justify="right" if heading in ("gen", "won", "lost", "uses") else "left"
        )
    for e in entries:
        status = Text("reliable", "green") if e.get("reliable") else Text("retired", "red")
        if e.get("evolved"):
            status.append(" · evolved", style="cyan")
        table.add_row(
            Text(e["name"], style="bold"),
            Text(one_line(e.get("role", ""), 60)),  # a Text: a role's "[link=…]" is no markup
            str(e["generation"]),
            str(e["wins"]),
            str(e["losses"]),
            str(e["uses"]),
            status,
        )
    return table


def history_table(rows: list[HistoryRow], width: int = WIDE_HISTORY) -> Table:
    """`agentgod history`: the recent runs, newest first, one line each at any `width` (the
    task cut to what is left, with "…"); a retry is marked ↻ with the run it retried."""
    narrow = width < WIDE_HISTORY
    table = Table(
        title="recent runs",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        expand=True,
        pad_edge=False,
        collapse_padding=True,
    )
    headings = ["run", "when", "result", "complexity", "cost", "time", "agents", "task"]
    if narrow:
        headings.remove("complexity")
    lines: list[list[str | Text]] = []
    for row in rows:
        usd = row.get("usd")
        agents = row.get("agents")
        when = str(row.get("started_at", ""))[:16].replace("T", " ")
        task = Text(one_line(row.get("task", ""), 300), overflow="ellipsis", no_wrap=True)
        if row.get("retry_of"):
            task = Text.assemble((f"↻ {row['retry_of']} ", "yellow"), task)
            task.no_wrap, task.overflow = True, "ellipsis"
        cells: list[str | Text] = [
            row["run_id"],
            when[5:] if narrow else when,
            Text(row["status"], "green" if row.get("ok") else "red"),
            str(row.get("complexity") or "-"),
            dollars(float(usd)) if usd is not None else "-",
            duration(float(row.get("duration_seconds") or 0.0)),
            str(len(agents) if isinstance(agents, list | tuple) else agents or 0),
            task,
        ]
        if narrow:
            del cells[3]
        lines.append(cells)
    for index, heading in enumerate(headings):
        # Every fact keeps its whole width; the task alone is cut (with "…") to what is left.
        facts = [len(str(line[index])) for line in lines]
        table.add_column(
            heading,
            justify="right" if heading in ("cost", "time", "agents") else "left",
            no_wrap=True,
            overflow="ellipsis",
            min_width=None if heading == "task" else max(len(heading), *facts),
            ratio=1 if heading == "task" else None,
        )
    for line in lines:
        table.add_row(*line)
    return table


def stats_grid(stats: StatsReply) -> Table:
    """`agentgod stats`: `success_rate` is a fraction (0..1)."""
    tokens = stats.get("tokens", {})
    mean = stats.get("mean_duration")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("runs", str(stats.get("runs", 0)))
    grid.add_row(
        "succeeded",
        f"{stats.get('succeeded', 0)} ({float(stats.get('success_rate') or 0.0):.0%})",
    )
    grid.add_row(
        "tokens",
        tokens_text(
            int(tokens.get("input", 0)),
            int(tokens.get("output", 0)),
            int(tokens.get("cache_write", 0)),
            int(tokens.get("cache_read", 0)),
        ).removeprefix("tokens "),
    )
    grid.add_row("spent", dollars(float(stats.get("usd") or 0.0)))
    grid.add_row("mean duration", duration(float(mean)) if mean is not None else "-")
    used = ", ".join(f"{name} ({uses})" for name, uses in stats.get("most_used", []))
    reliable = ", ".join(
        f"{name} ({ok}/{runs})" for name, ok, runs in stats.get("most_reliable", [])
    )
    grid.add_row("most used", used or "-")
    grid.add_row("most reliable", reliable or "-")
    return grid
