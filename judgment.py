"""judgment.py — the main agent judging its own answer against the request.

One cheap call on the fast model, biased toward accepting: `judge` checks a finished answer
against the request and, when it falls short, says what the next attempt must add;
`revision_task` builds that attempt's task without losing the original.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from agentgod import config, ledger, llm

REVISION_NOTE = "A previous attempt fell short. Make sure the answer also:"

# Class docstrings and Field descriptions below are part of the JSON schema the model reads, so
# they speak to the model; the reasoning for developers lives in the validators' docstrings.


class Verdict(BaseModel):
    """Your ruling on whether the answer does what the task asked."""

    # missing is declared before done: structured output is generated in field order, so the
    # model examines the answer before it rules on it.
    missing: str = Field(
        description=(
            "Fill this first. If any explicit demand of the task is unmet, one to three "
            "sentences addressed to the next attempt, each an instruction it can act on "
            "('Give exactly five options; the answer gives three.', 'Answer in French.'). Not a "
            "review and not praise. Empty when every demand is met."
        )
    )
    done: bool = Field(
        description=(
            "True when the answer meets every explicit demand of the task, even if it could be "
            "better. False only when something in missing is clearly unmet."
        )
    )

    @model_validator(mode="after")
    def _consistent(self) -> Verdict:
        """A verdict is either done with nothing missing, or not done with an instruction.

        done with leftover text would send a finished answer's critique nowhere, so it is
        cleared. Not done with nothing missing gives the next attempt nothing to act on: a
        revision would rerun the whole task blind, so it is treated as done.
        """
        self.missing = self.missing.strip()
        if self.done or not self.missing:
            self.done, self.missing = True, ""
        return self


JUDGE_PROMPT = """\
You are the final check inside AgentGOD, an agent factory. You decide whether an answer does what \
the user asked and, if it does not, exactly what the next attempt must add or change. A further \
attempt reruns the whole task at the user's expense, so rule on the request, not on your taste.

## Compliance, not taste
First list to yourself every explicit demand in the task: each question to answer, counts ("five \
ideas", "under 200 words"), format (table, list, JSON, code, one sentence), scope (what to cover \
and what to leave out), language, audience, tone, and any other stated constraint. Then check the \
answer against each one.
- Done: every explicit demand is met. An answer that meets the request is done even if you would \
have written it differently, or it could be longer, more elegant or more thorough.
- Not done: a demand is clearly unmet - part of the question unanswered, the wrong number of \
items, the wrong format or language, a constraint broken, or an answer that refuses, stalls, or \
only describes how it would answer.
- Treat approximate demands approximately: "about 100 words" is met by 90 to 110.
- Do not invent demands the task does not make. Do not fail an answer over style, preference, or \
facts you cannot check, unless they are plainly wrong and matter to the request.
- When in doubt, rule done.

## missing
Write it before you rule. When the answer falls short, name each unmet demand as an instruction \
the next attempt can act on. When the answer is done, leave it empty.
"""


def judge(
    task: str,
    answer: str,
    *,
    usage: ledger.Usage | None = None,
    effort: str | None = None,
    settings: config.Settings | None = None,
) -> Verdict:
    """Rule on whether `answer` does what `task` asked, in one structured call."""
    prompt = (
        f"<task>\n{task}\n</task>\n\n<answer>\n{answer}\n</answer>\n\n"
        "Does this answer meet every explicit demand of the task?"
    )
    return llm.complete_structured(
        prompt,
        Verdict,
        system=JUDGE_PROMPT,
        max_tokens=2048,
        effort=effort,
        model=(settings or config.settings()).fast_model,
        usage=usage,
        settings=settings,
    )


def revision_task(task: str, missing: str) -> str:
    """The original task verbatim, with the judge's gap appended in its own section.

    Replacing the task with the critique is how a second attempt drifts onto the complaint instead
    of onto what the user asked for. Call it with the original task each round, not the previous
    round's revision, so gaps do not pile up. No gap leaves the task untouched.
    """
    gap = missing.strip()
    return f"{task}\n\n---\n{REVISION_NOTE} {gap}" if gap else task


# --------------------------------------------------------------------------------------------
# Before the run: the one question worth asking
# --------------------------------------------------------------------------------------------
