"""merger.py — the one call that turns the team's outputs into the answer the user reads.

It always runs, even for a single agent: the merger is the only stage that still holds the user's
own wording, so it is where the task's constraints (length, format, tone, language) are enforced.
Agents that failed are named so the answer never pretends to cover their part; their stderr is
never passed, because a traceback merged as if it were a finding is worse than a visible gap.
"""

from __future__ import annotations

import html

import config
import ledger
import llm

MAX_TOKENS = 16000
"""Room for a long answer while staying under the SDK's ceiling for a non-streaming request."""

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


def build_prompt(
    task: str,
    outputs: dict[str, str],
    *,
    roles: dict[str, str] | None = None,
    failed: list[str] | None = None,
) -> str:
    """The user prompt: every labelled output, then the failures, then the task verbatim.

    Long material first and the request last is the order the model follows best, and it leaves
    the user's own wording as the last thing read before writing. A failed agent is listed once,
    by name and role, and never one that also delivered an output.
    """
    roles = roles or {}
    parts = [
        f"<output {_label(name, roles)}>\n{text.strip()}\n</output>"
        for name, text in outputs.items()
    ]
    lost = [name for name in dict.fromkeys(failed or []) if name not in outputs]
    if lost:
        listed = "\n".join(f"<failed {_label(name, roles)} />" for name in lost)
        parts.append(
            "These agents failed and produced nothing; their part of the work is missing:\n"
            + listed
        )
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
) -> str:
    """Write the final answer from the successful outputs in exactly one call.

    An empty reply (a refusal, or a budget spent before any text) falls back to the labelled
    outputs: by now the user has paid for the agents' work, and raw findings are worth more
    than a blank answer. Raises ValueError for no outputs, since merging nothing could only
    produce a confident invention.
    """
    if not outputs:
        raise ValueError("merge_outputs needs at least one agent output")
    answer = llm.complete(
        build_prompt(task, outputs, roles=roles, failed=failed),
        system=MERGER_PROMPT,
        max_tokens=MAX_TOKENS,
        effort=effort,
        model=(settings or config.settings()).model,
        usage=usage,
    )
    return answer or fallback_answer(outputs)
