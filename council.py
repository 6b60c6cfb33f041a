"""council.py — the adversarial reading of an answer to a deep task.

The judge checks compliance; the council checks quality, and only where it matters: tasks graded
deep, where "meets every stated demand and is still shallow" is the real failure. One critic call
names concrete faults; only if one is real does a second call fix what was named and keep the rest.
Two calls at most, no agents rerun, and an empty refinement never replaces the answer it reviewed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, Field, model_validator

from agentgod import config, ledger, llm
from agentgod.kinds import Complexity, CouncilMode

REFINE_MAX_TOKENS = 16000
"""The refinement rewrites the whole answer: the merger's room, under the non-streaming ceiling."""

# The class docstring and Field descriptions are part of the JSON schema the model reads.


class Challenge(BaseModel):
    """The critic's reading of the answer: the faults found, then the ruling."""

    # weaknesses before flawed: the model states what it found before it rules, as the judge
    # writes missing before done.
    weaknesses: list[str] = Field(
        description=(
            "Fill this first. Each item is one concrete fault in one or two sentences: where it "
            "is, what is wrong, and what a fix needs. Most serious first, at most five. Empty "
            "when nothing material is wrong."
        )
    )
    flawed: bool = Field(
        description=(
            "True only when at least one weakness is serious enough that fixing it would "
            "materially improve the answer. A solid answer is not flawed."
        )
    )

    @model_validator(mode="after")
    def _consistent(self) -> Challenge:
        """Clean the list, and acquit a ruling that names nothing to fix.

        A refinement with no named fault has nothing to aim at and would only rewrite sound work,
        so flawed with no weaknesses becomes not flawed. Duplicates differing only in spacing or
        case are one fault, not two.
        """
        seen: set[str] = set()
        cleaned: list[str] = []
        for weakness in self.weaknesses:
            text = " ".join(weakness.split())
            if text and text.casefold() not in seen:
                seen.add(text.casefold())
                cleaned.append(text)
        self.weaknesses = cleaned
        self.flawed = self.flawed and bool(cleaned)
        return self


@dataclass
class CouncilVerdict:
    """What the council did to an answer."""

    answer: str
    """The answer to use: the refinement when one replaced it, otherwise the original."""
    improved: bool
    """True only when a non-empty refinement replaced the answer."""
    weaknesses: list[str] = field(default_factory=list)
    """The faults acted on; empty when the critic acquitted the answer."""
    warnings: list[str] = field(default_factory=list)
    """Why a refinement that was paid for was not used (cut off, refused), for the user."""


def should_convene(complexity: str, mode: CouncilMode) -> bool:
    """COUNCIL=off never, always always, auto only for tasks the planner graded deep."""
    return mode == CouncilMode.ALWAYS or (
        mode == CouncilMode.AUTO and complexity == Complexity.DEEP
    )


CRITIC_PROMPT = """\
You are the critic on AgentGOD's council. The answer you receive was written for a task where \
the quality of judgement matters; a separate check covers its format and stated demands. Your \
job is substance. Read it as an informed sceptic and name the concrete faults that would mislead \
or fail the user:
- claims stated as fact without support, or that are plainly wrong;
- reasoning that does not carry its conclusion: a leap, a contradiction, a recommendation its \
own analysis does not support;
- a missing counter-case, risk or alternative that would change the conclusion if weighed;
- factual, arithmetic or logical errors.

These are not faults: style, tone, length, an order you would have chosen differently, points \
the task did not ask for, caveats that would not change the conclusion, or "more detail" for its \
own sake.

Lean toward acquittal. Every objection you raise triggers a rewrite the user pays for, and a \
critic who always objects is soon ignored. When nothing material is wrong, return an empty list \
and flawed false - that is the right outcome for a solid answer.
"""

REFINE_PROMPT = """\
You revise answers on AgentGOD's council. A critic has named specific faults in an answer to the \
user's task. Rewrite the answer so that each named fault is fixed, and change nothing else.
- Fix exactly what was named: support or soften an unsupported claim, repair the reasoning, weigh \
the missing counter-case, correct the error. If you cannot fix a fault reliably, qualify or \
remove the claim rather than invent support for it.
- Preserve everything else: the sound content, the structure, the format, the tone and the \
language. The task's own constraints still bind (length, format, number of items); every fix \
must fit within them, tightening elsewhere if needed.
- Return the complete revised answer, ready for the user, and nothing else: no preamble, no list \
of changes, and no mention of a critic, a review or agents.
"""


def _task_and_answer(task: str, answer: str) -> str:
    return f"<task>\n{task}\n</task>\n\n<answer>\n{answer}\n</answer>"


def challenge(
    task: str,
    answer: str,
    *,
    usage: ledger.Usage | None = None,
    effort: str | None = None,
    settings: config.Settings | None = None,
) -> Challenge:
    """The critic's structured reading of `answer`, in one call on the deep model."""
    return llm.complete_structured(
        _task_and_answer(task, answer) + "\n\nName the material faults in this answer, if any.",
        Challenge,
        system=CRITIC_PROMPT,
        max_tokens=4096,
        effort=effort,
        model=(settings or config.settings()).deep_model,
        usage=usage,
        settings=settings,
    )


def refine(
    task: str,
    answer: str,
    weaknesses: list[str],
    *,
    usage: ledger.Usage | None = None,
    effort: str | None = None,
    settings: config.Settings | None = None,
) -> str:
    """`answer` with the named weaknesses fixed; the original when there is nothing to use.

    No named weakness means nothing to aim at, so no call is made. An empty, cut-off or refused
    reply returns the original: a blank or half refinement must never replace an answer the user
    has already paid for.
    """
    refined, _ = _refined(task, answer, weaknesses, usage=usage, effort=effort, settings=settings)
    return refined


def _refined(
    task: str,
    answer: str,
    weaknesses: list[str],
    *,
    usage: ledger.Usage | None,
    effort: str | None,
    settings: config.Settings | None,
) -> tuple[str, str]:
    """The refinement (or the original answer), and why the original was kept ("" if it was not)."""
    named = [" ".join(weakness.split()) for weakness in weaknesses]
    named = [weakness for weakness in named if weakness]
    if not named:
        return answer, ""
    listed = "\n".join(f"{number}. {weakness}" for number, weakness in enumerate(named, 1))
    settings = settings or config.settings()
    reply = llm.completion(
        f"{_task_and_answer(task, answer)}\n\n<weaknesses>\n{listed}\n</weaknesses>\n\n"
        "Rewrite the answer with these faults fixed.",
        system=REFINE_PROMPT,
        max_tokens=REFINE_MAX_TOKENS,
        effort=effort,
        model=settings.deep_model,
        usage=usage,
        settings=settings,
    )
    if reply.cut:
        return answer, "the council's revision was cut off at its length limit, so it was not used"
    if reply.refused:
        return answer, "the model refused to revise the answer, so it stands as merged"
    return reply.text or answer, ""


def review(
    task: str,
    answer: str,
    *,
    usage: ledger.Usage | None = None,
    effort: str | None = None,
    settings: config.Settings | None = None,
) -> CouncilVerdict:
    """Challenge the answer and, only if it is flawed, refine it: two calls at most."""
    found = challenge(task, answer, usage=usage, effort=effort, settings=settings)
    if not found.flawed:
        return CouncilVerdict(answer=answer, improved=False)
    refined, kept_because = _refined(
        task, answer, found.weaknesses, usage=usage, effort=effort, settings=settings
    )
    improved = refined.strip() != answer.strip()
    return CouncilVerdict(
        answer=refined if improved else answer,
        improved=improved,
        weaknesses=found.weaknesses,
        warnings=[kept_because] if kept_because else [],
    )
