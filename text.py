"""text.py — how the product writes a fact as text, for every layer: terminal-safe strings,
sizes, durations, dollars and token counts. No I/O.

The renderers (ui, richui) draw with these, and so do the records (the run file, the archive),
the user's files (their sizes) and the problems (a budget in dollars): a fact reads the same on
the screen, in a run file and in an error, and no module below the conversation has to import
the UI to say it.
"""

from __future__ import annotations

import math
import re

from agentgod.replies import CostSummary

WIDE_HISTORY = 100
"""Below this many columns `history` leaves out each run's grade and year to keep one line."""
_MAX_PLACES = 8
"""Decimals of the smallest amount `dollars` shows apart from zero."""
# C0 and C1 control characters except tab and newline: model output reaches a terminal through
# here, and an escape sequence in an answer must not be able to repaint or retitle it.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""The bidi embedding, override and isolate controls: invisible, they reorder what a terminal
or an editor shows around them, so text (or code) reads differently from what it is."""
_BIDI = re.compile("[" + "".join(sorted(BIDI_CONTROLS)) + "]")


def bidi_marker(char: str) -> str:
    """The visible stand-in for one bidi control: <U+202E>."""
    return f"<U+{ord(char):04X}>"


def clean(text: str) -> str:
    """Text safe to put on a terminal: control characters (ESC included) removed, and bidi
    controls shown as visible markers (<U+202E>) instead of reordering what follows them."""
    text = _CONTROL.sub("", text.replace("\r\n", "\n"))
    return _BIDI.sub(lambda found: bidi_marker(found.group()), text)


def visible_code(source: str) -> tuple[str, list[int]]:
    """Code as a terminal can show it without being fooled, and the lines that needed it.

    Unlike `clean`, nothing is removed: a control character (but tab and newline) is written as
    its escape (`\\x1b`, `\\r`), as a string literal in the code would spell it, and a bidi
    control as its marker (<U+202E>), so what a person reads is what runs. The line numbers
    (1-based) are those that held either, for a warning (Trojan Source).
    """
    flagged: list[int] = []
    lines = []
    for number, line in enumerate(source.split("\n"), start=1):
        shown = _CONTROL.sub(
            lambda found: f"\\x{ord(found.group()):02x}", line.replace("\r", "\\r")
        )
        shown = _BIDI.sub(lambda found: bidi_marker(found.group()), shown)
        if shown != line:
            flagged.append(number)
        lines.append(shown)
    return "\n".join(lines), flagged


def one_line(text: str, limit: int = 160) -> str:
    """The most telling line of a message (the last non-empty one, like a traceback's), capped."""
    lines = [line.strip() for line in clean(text).splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def duration(value: float) -> str:
    return f"{value:.1f}s"


def dollars(usd: float, estimate: bool = False) -> str:
    """Money, the one way it is written everywhere (the display, errors, warnings, run files).

    Cents hide most runs' cost, so amounts under a dollar keep four decimals, and amounts below
    a hundredth of a cent as many as show two digits (a $0.0001 budget is not "$0.0000");
    a dollar and more, cents. "~" marks an estimate."""
    if usd >= 1:
        amount = f"${usd:.2f}"
    elif usd >= 0.0001 or usd <= 0:
        amount = f"${usd:.4f}"
    elif usd < 10**-_MAX_PLACES:
        amount = f"<${10**-_MAX_PLACES:.{_MAX_PLACES}f}"
    else:
        places = min(_MAX_PLACES, 1 - math.floor(math.log10(usd)))
        amount = f"${usd:.{places}f}"
    return f"~{amount}" if estimate else amount


def human_size(n: int) -> str:
    """Bytes as a person reads them: "812 B", "1.2 kB", "3.4 MB", "100 MB", "2.0 GB" (1024-based,
    so a limit of ATTACH_MAX_MB=100 reads as "100 MB")."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    units = ("kB", "MB", "GB", "TB", "PB")
    for unit in units:
        value /= 1024
        if round(value) < 1024 or unit == units[-1]:
            break
    return f"{value:.1f} {unit}" if value < 9.95 else f"{value:.0f} {unit}"


def tokens_text(input_tokens: int, output_tokens: int, cache_write: int, cache_read: int) -> str:
    """Input, output and both cache directions apart: they are priced differently."""
    return (
        f"tokens {input_tokens:,} in / {output_tokens:,} out / "
        f"{cache_write:,} cache-write / {cache_read:,} cache-read"
    )


def cost_text(summary: CostSummary, duration_seconds: float | None = None) -> str:
    """One line from a ledger's cost summary (and the run's duration when known)."""
    calls = int(summary.get("llm_calls", 0))
    parts = [
        f"{calls} call{'' if calls == 1 else 's'}",
        tokens_text(
            int(summary.get("input_tokens", 0)),
            int(summary.get("output_tokens", 0)),
            int(summary.get("cache_write_tokens", 0)),
            int(summary.get("cache_read_tokens", 0)),
        ),
        dollars(float(summary.get("usd", 0.0)), bool(summary.get("estimate", False))),
    ]
    searches = int(summary.get("web_searches", 0))
    if searches:
        parts.insert(2, f"{searches} web search{'' if searches == 1 else 'es'}")
    if duration_seconds is not None:
        parts.append(duration(duration_seconds))
    note = estimate_note(summary)
    if note:
        parts.append(f"~ {note}")
    return " | ".join(parts)


def estimate_note(summary: CostSummary) -> str | None:
    """Why the dollars are not exact ("estimated: MODEL has no known price, counted as $0");
    None when they are. A model with no known price is never priced as another."""
    if not summary["estimate"]:
        return None
    notes = []
    names = summary.get("unpriced") or []
    if names:
        notes.append(
            f"{', '.join(names)} {'have' if len(names) > 1 else 'has'} no known price, counted "
            "as $0 (models.toml can set one)"
        )
    unfinished = summary.get("unfinished", 0)
    if unfinished:
        calls = "call" if unfinished == 1 else "calls"
        notes.append(f"{unfinished} unanswered {calls} counted at the most they may cost")
    return "estimated: " + "; ".join(notes or ["a model used has no known price"])
