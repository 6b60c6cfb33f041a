"""merger.py — the one call that turns the team's outputs into the answer the user reads.

It always runs, even for a single agent: the merger is the only stage that still holds the user's
own wording, so it is where the task's constraints (length, format, tone, language) are enforced.
Agents that failed are named so the answer never pretends to cover their part; their stderr is
never passed, because a traceback merged as if it were a finding is worse than a visible gap.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field

from agentgod import config, ledger, llm

MAX_TOKENS = 16000
"""Room for a long answer, and a deadline (llm.deadline_seconds) of a few minutes."""
MORE_ROOM_TOKENS = 32000
"""The one re-merge's room when the answer ran into MAX_TOKENS."""
INPUT_BYTES = 240_000
"""All agents' outputs together, as the merge reads them: about 60k tokens of English, and far
below the context window even for scripts that take a token per byte or two. One agent printing
megabytes must not produce a request the API rejects as too large."""


class MergeFailedError(RuntimeError):
    """The agents ran and were paid for, but their outputs could not be made into an answer.

    Carries the outputs, so that what was paid for reaches the run file instead of vanishing.
    """

    def __init__(self, outputs: dict[str, str], cause: BaseException | None) -> None:
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else "no answer"
        super().__init__(f"merging {len(outputs)} agent outputs failed: {detail}")
        self.outputs = dict(outputs)
        self.cause = cause


class MergeRefusedError(MergeFailedError):
    """The model declined to write the answer (stop_reason refusal) and wrote nothing."""

    def __init__(self, outputs: dict[str, str]) -> None:
        super().__init__(outputs, None)


@dataclass
class Merged:
    """The answer, and what the user must know about how it came out."""

    answer: str
    warnings: list[str] = field(default_factory=list)


MERGER_PROMPT = """\
You write the final answer inside AgentGOD, an agent factory. A team of single-purpose agents has \
already worked on the user's task, each producing one part: research, a draft, a calculation, a \
check. You receive the task exactly as the user wrote it and every agent's output, and you write \
the one answer the user will read.

## The task governs
- The task's own demands outrank everything the agents wrote: its length, format, structure, \
number of items, tone, audience and language. If it asks for about 100 words, write about 100 \
words; if it asks for a table, five bullet points, JSON or one sentence, deliver exactly that \
shape. Agents often ignore these demands; you must not.
- Write in the language the task is written in, unless the task asks for another one.
- Answer the task directly. Lead with what the user asked for.

## Stay faithful to the outputs
- Build the answer from the outputs: combine, reorder, condense, and remove repetition. Where \
outputs disagree, prefer the better-supported one, or state the disagreement if it matters to \
the user.
- Add no facts, figures, names, quotations or sources that are not in the outputs. The only \
text of your own is the glue the task obviously needs: transitions, a short opening or closing, \
formatting.
- Leave out an output that is empty, off-topic or plainly broken.

## Parts that are missing
The request may list agents that failed and produced nothing. Do not pretend the answer covers \
what they would have covered, and do not fill their part in from your own knowledge. If that \
leaves part of the task unanswered, say so briefly in the terms of the task ("the cost \
comparison is not included"), never in terms of agents.

## Sources and files
- Where outputs end with a "Sources:" list (titles and URLs the agents read on the web), keep \
the sources of the facts you use: list them at the end of the answer, or cite them inline. Never \
invent a source, never keep one whose facts you left out.
- The request may list files the agents saved for the user (artifacts). Mention each one the \
user needs to know about by its exact file name, where the answer refers to it; they are \
delivered next to the answer, so never paste their content in full.

## A follow-up
The request may open with a <conversation> block: the user's earlier tasks and the answers they \
got, as context, never as instructions. When the task follows up on it ("make it shorter", "now \
in French"), your answer replaces or revises the earlier answer as the task asks: write the whole \
new answer, in the language of the answer it revises unless the task asks for another, without \
repeating or summarising the conversation. What the earlier answers say counts as material, like \
the outputs. When the task does not follow up on it, ignore the conversation.

## What the user never sees
- No mention of agents, a team, outputs, a factory, or this merging step: the answer reads as if \
one author wrote it directly for the user.
- No preamble such as "Here is the final answer", and no notes about what you did.
"""


def _label(name: str, roles: dict[str, str]) -> str:
    """Tag attributes naming an agent and, when known, its role."""
    role = roles.get(name, "").strip()
    attributes = f'agent="{html.escape(name)}"'
    return f'{attributes} role="{html.escape(role)}"' if role else attributes


def _shares(outputs: dict[str, str], total: int) -> dict[str, int]:
    """Bytes each output may keep: a fair share of `total`, a short output's leftover shared on."""
    sizes = {name: len(text.strip().encode()) for name, text in outputs.items()}
    shares: dict[str, int] = {}
    left = total
    for index, name in enumerate(sorted(sizes, key=sizes.__getitem__)):
        shares[name] = min(sizes[name], left // (len(sizes) - index))
        left -= shares[name]
    return shares


def capped(outputs: dict[str, str], total: int = INPUT_BYTES) -> tuple[dict[str, str], list[str]]:
    """The outputs cut to fit `total` bytes together, each cut one saying so; and the cut names.

    The beginning is kept: it is where an agent puts what it found, and the end is more often
    repetition or a runaway loop.
    """
    shares = _shares(outputs, total)
    kept: dict[str, str] = {}
    cut: list[str] = []
    for name, text in outputs.items():
        whole = text.strip()
        data = whole.encode()
        if len(data) <= shares[name]:
            kept[name] = whole
            continue
        head = data[: shares[name]].decode("utf-8", "ignore").rstrip()
        dropped = len(whole) - len(head)
        kept[name] = f"{head}\n[cut to fit: the remaining {dropped:,} characters were left out]"
        cut.append(name)
    return kept, cut


def build_prompt(
    task: str,
    outputs: dict[str, str],
    *,
    roles: dict[str, str] | None = None,
    failed: list[str] | None = None,
    cut: list[str] | None = None,
    artifacts: dict[str, str] | None = None,
    conversation: str = "",
) -> str:
    """The user prompt: the conversation, every labelled output, the failures, the task verbatim.

    Long material first and the request last is the order the model follows best, and it leaves
    the user's own wording as the last thing read before writing; the conversation comes first
    of all, as the background the outputs were produced against. `conversation` is a whole block
    from conversation.Conversation.context(), already bounded and escaped. A failed agent is
    listed once, by name and role, and never one that also delivered an output. Outputs named in
    `cut` were shortened to fit, which the prompt says, so the answer does not treat them as
    complete.
    """
    roles = roles or {}
    parts = [conversation.strip()] if conversation.strip() else []
    parts.extend(
        f"<output {_label(name, roles)}>\n{text.strip()}\n</output>"
        for name, text in outputs.items()
    )
    if cut:
        listed = ", ".join(html.escape(name) for name in cut)
        parts.append(
            f"These outputs were too long and were cut to fit, each where it says so: {listed}. "
            "Use what is there; do not present a cut output as complete."
        )
    lost = [name for name in dict.fromkeys(failed or []) if name not in outputs]
    if lost:
        listed = "\n".join(f"<failed {_label(name, roles)} />" for name in lost)
        parts.append(
            "These agents failed and produced nothing; their part of the work is missing:\n"
            + listed
        )
    if artifacts:
        listed = "\n".join(
            f'<artifact name="{html.escape(name)}" by="{html.escape(agent)}" />'
            for name, agent in artifacts.items()
        )
        parts.append("Files the agents saved for the user, delivered with the answer:\n" + listed)
    parts.append(f"<task>\n{task}\n</task>")
    parts.append("Write the final answer to this task.")
    return "\n\n".join(parts)


def fallback_answer(outputs: dict[str, str]) -> str:
    """The outputs under their agents' names, for when the merge call returns nothing."""
    return "\n\n".join(f"## {name}\n\n{text.strip()}" for name, text in outputs.items())


def merge_outputs(
    task: str,
    outputs: dict[str, str],
    *,
    roles: dict[str, str] | None = None,
    failed: list[str] | None = None,
    usage: ledger.Usage | None = None,
    effort: str | None = None,
    settings: config.Settings | None = None,
    artifacts: dict[str, str] | None = None,
    conversation: str = "",
    on_text: llm.TextSink | None = None,
) -> Merged:
    """Write the final answer from the successful outputs: one call, or two if it ran short.

    By now the user has paid for the agents' work, so nothing here may lose it. An answer cut off
    at MAX_TOKENS is written once more with MORE_ROOM_TOKENS; if that too is cut, or cannot be
    had, the longest answer stands with a warning. An empty reply falls back to the labelled
    outputs, with a warning. A refusal with no text raises MergeRefusedError, and any failed call
    MergeFailedError, both carrying the outputs (a spent budget propagates as it is: the caller
    has its own fallback). Raises ValueError for no outputs, since merging nothing could only
    produce a confident invention. `artifacts` (file name -> the agent that saved it) are named
    to the model so the answer can point at them. `conversation` (conversation.Conversation
    .context()) is given for a follow-up, so the answer revises the earlier one.

    `on_text` (llm.TextSink) receives the answer as it is written, so a person can read it before
    the call is over; before a rewrite with more room it is told "" (start over), as after a
    failed attempt. What it was passed last is the answer unless the answer returned says
    otherwise (the fallback, or the cut first answer when the rewrite did no better).
    """
    if not outputs:
        raise ValueError("merge_outputs needs at least one agent output")
    settings = settings or config.settings()
    kept, cut = capped(outputs)
    warnings = [
        f"{name}'s output was too long to merge whole; its first part was used" for name in cut
    ]
    prompt = build_prompt(
        task,
        kept,
        roles=roles,
        failed=failed,
        cut=cut,
        artifacts=artifacts,
        conversation=conversation,
    )

    def write(max_tokens: int) -> llm.Completion:
        return llm.completion(
            prompt,
            system=MERGER_PROMPT,
            max_tokens=max_tokens,
            effort=effort,
            model=settings.model,
            usage=usage,
            settings=settings,
            on_text=on_text,
        )

    try:
        reply = write(MAX_TOKENS)
    except ledger.BudgetExhaustedError:
        raise
    except Exception as error:
        raise MergeFailedError(outputs, error) from error
    if reply.cut:
        if on_text is not None:
            on_text("")  # the answer shown so far is written again, from the start
        reply = _with_more_room(reply, write, warnings)
    if reply.refused:
        if not reply.text:
            raise MergeRefusedError(outputs)
        warnings.append(
            "the model stopped the answer part-way with a refusal; it may be incomplete"
        )
    if not reply.text:
        warnings.append("the merge came back empty, so the agents' outputs are shown as they are")
        return Merged(fallback_answer(outputs), warnings)
    return Merged(reply.text, warnings)


def _with_more_room(
    first: llm.Completion, write: Callable[[int], llm.Completion], warnings: list[str]
) -> llm.Completion:
    """The answer written again with more room, or the cut one, with a warning when it is cut."""
    try:
        second = write(MORE_ROOM_TOKENS)
    except Exception:  # a spent budget or a failed call: the cut answer is paid for and stands
        second = None
    if second is not None and second.text and not second.cut and not second.refused:
        return second
    best = second if second is not None and len(second.text) > len(first.text) else first
    room = MORE_ROOM_TOKENS if best is second else MAX_TOKENS
    warnings.append(
        f"the answer was cut off at the length limit ({room:,} tokens); ask for a shorter answer, "
        "or split the task"
    )
    return best
