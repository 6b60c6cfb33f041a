"""judgment.py — the main agent judging itself, and deciding when not to start at all.

Three cheap calls on the fast model, each biased toward letting the run proceed:
- `judge` checks a finished answer against the request and, when it falls short, says what the
  next attempt must add; `revision_task` builds that attempt's task without losing the original.
- `clarifying_question` asks the user one question before anything is spent, almost never.
- `triage` lets the REPL answer small talk without building a team for "hi".
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

import config
import ledger
import llm

MAX_QUESTION_CHARS = 300
"""A clarifying question longer than this is cut: it has to fit on one prompt line."""

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


class Clarification(BaseModel):
    """Whether the task needs one question to the user before any work starts."""

    # reason, then the decision, then the question: the model judges the task before it commits
    # to asking, and writes a question only once it has decided one is needed.
    reason: str = Field(
        description=(
            "One sentence, written first: could a competent person do this task as written, "
            "choosing sensible defaults for anything unstated?"
        )
    )
    ask: bool = Field(
        description=(
            "True only when the task cannot be done at all without information only the user "
            "has, so any attempt would waste the whole run. Almost always false."
        )
    )
    question: str = Field(
        description=(
            "When ask is true: one short, specific question, in the language of the task, whose "
            "answer unblocks it. When ask is false: empty."
        )
    )


CLARIFY_PROMPT = """\
You stand at the door of AgentGOD, an agent factory that builds and runs a team of agents for the \
user's task. Before anything is spent, you decide whether one question to the user is truly \
necessary. Almost always it is not.

Ask only when the task cannot be done at all without something only the user can supply, so any \
attempt would waste the whole run:
- it refers to material that is not there ("translate this", "summarise the text below", "fix my \
code" with nothing given);
- it asks to choose between or compare things it never names ("which of the two options is \
better?");
- it is so fragmentary that no reasonable reading exists.

Do not ask when:
- the task is broad, open or underspecified but has a reasonable reading - the team will choose \
one;
- length, tone, audience, format or level of detail are unstated - sensible defaults exist;
- more context would merely be nice, or a preference could refine the answer;
- the task is short, simple, unusual or casually worded.

A question can stall a run that nobody is there to answer, and a factory that asks about every \
task is worse than one that never asks. When in doubt, do not ask.
"""


def clarifying_question(task: str, *, usage: ledger.Usage | None = None) -> str | None:
    """The one question worth asking before the run, or None (nearly always).

    Only a decided ask with a real question counts; anything else proceeds, because silence
    costs at most one weak run while a needless question costs the user's attention every time.
    """
    result = llm.complete_structured(
        f"<task>\n{task}\n</task>\n\nDoes this task need a question before work starts?",
        Clarification,
        system=CLARIFY_PROMPT,
        max_tokens=1024,
        effort="low",
        model=config.settings().fast_model,
        usage=usage,
    )
    question = " ".join(result.question.split())
    if not result.ask or not question:
        return None
    if len(question) > MAX_QUESTION_CHARS:
        question = question[: MAX_QUESTION_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return question


# --------------------------------------------------------------------------------------------
# At the prompt: small talk is answered, not planned
# --------------------------------------------------------------------------------------------


class Triage(BaseModel):
    """Whether the input is small talk rather than a task, and the reply if it is."""

    reason: str = Field(
        description="One sentence, written first: does this input ask for any work to be done?"
    )
    is_chat: bool = Field(
        description=(
            "True only for pure conversation that asks for no work: a greeting, thanks, a "
            "goodbye, or a question about AgentGOD itself. False for anything else."
        )
    )
    reply: str = Field(
        description=(
            "When is_chat is true: a short, friendly reply of one to three sentences in the "
            "user's language. When is_chat is false: empty."
        )
    )


CHAT_PROMPT = """\
You sit at the prompt of AgentGOD, a terminal program where the user types tasks. For each task \
AgentGOD plans a small team of single-purpose AI agents, writes each agent's code, runs them \
(independent ones in parallel) and merges their work into one answer. That costs time and money, \
so you decide one thing: is this input small talk rather than a task?

Small talk (is_chat true) is pure conversation that asks for no work: greetings ("hi", "good \
morning"), thanks, goodbyes, and questions about AgentGOD itself ("what can you do?", "how does \
this work?", "who are you?").

Everything else is a task (is_chat false): any request for information, writing, analysis, \
advice, code, a calculation, a translation, a summary or a decision, however short ("capital of \
Peru?", "2+2", "a haiku about rain"), and a greeting that comes with a request ("hi, can you \
summarise..."). When in doubt it is a task: answering a real task with small talk throws the \
user's request away, while building a team for a greeting only costs a little.

The reply to small talk is short, friendly and in the user's language. When asked what you can \
do, be honest: give AgentGOD a task and it builds a team of specialised agents for it, runs them \
and combines their work into one answer; agents worth keeping can be saved and reused on later \
tasks. The agents reason and write with Claude but cannot browse the web or read the user's \
files. Never promise more than that.
"""


def triage(text: str, *, usage: ledger.Usage | None = None) -> str | None:
    """A direct reply when the REPL input is small talk; None for anything that is a task.

    A task mistaken for chat is lost, while chat mistaken for a task only builds a small team,
    so only a decided is_chat with a non-empty reply is answered here.
    """
    result = llm.complete_structured(
        f"<input>\n{text}\n</input>\n\nIs this input small talk or a task?",
        Triage,
        system=CHAT_PROMPT,
        max_tokens=1024,
        effort="low",
        model=config.settings().fast_model,
        usage=usage,
    )
    reply = result.reply.strip()
    return reply if result.is_chat and reply else None
