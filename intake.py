"""intake.py — what happens to a person's words before any team is built.

One cheap call on the fast model, made beside the plan's (never before it): for short input,
whether it is small talk, so "hi" or "what can you do?" is answered directly instead of building
a team; and at a terminal, the one clarifying question worth asking when the task is ambiguous
enough that the answer would change the plan. Both decisions keep their bias: a task is never
taken for chat when in doubt, and a question is asked almost never.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from agentgod import config, ledger, llm

MAX_QUESTION_CHARS = 300
"""A clarifying question longer than this is cut: it has to fit on one prompt line."""


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


CHAT_PROMPT = """\
You sit at the prompt of AgentGOD, a terminal program where the user types tasks. For each task \
AgentGOD plans a small team of single-purpose AI agents, writes each agent's code, runs them \
(independent ones in parallel) and merges their work into one answer. That costs time and money, \
so you decide first: is this input small talk rather than a task?

Small talk (is_chat true) is pure conversation that asks for no work: greetings ("hi", "good \
morning"), thanks, goodbyes, and questions about AgentGOD itself ("what can you do?", "how does \
this work?", "who are you?").

Everything else is a task (is_chat false): any request for information, writing, analysis, \
advice, code, a calculation, a translation, a summary or a decision, however short ("capital of \
Peru?", "2+2", "a haiku about rain"), and a greeting that comes with a request ("hi, can you \
summarise..."). When in doubt it is a task: answering a real task with small talk throws the \
user's request away, while building a team for a greeting only costs a little. A request about \
an earlier answer ("make it shorter", "now in French", "and the second one?") is a task too.

The reply to small talk is short, friendly and in the user's language. When asked what you can \
do, be honest: give AgentGOD a task and it builds a team of specialised agents for it, runs them \
and combines their work into one answer; agents worth keeping can be saved and reused on later \
tasks. The agents reason and write with Claude, can search the web, read the files the user \
attaches with @path, and hand files back. Never promise more than that.
"""


class Screen(BaseModel):
    """The two decisions made about the input before any work starts, each reasoned first."""

    # Reason, then the decision, then what follows from it: the model judges before it commits,
    # and writes a reply or a question only once it has decided one is needed.
    chat_reason: str = Field(
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
    ask_reason: str = Field(
        description=(
            "One sentence: could a competent person do this task as written, choosing sensible "
            "defaults for anything unstated? (When is_chat is true: empty.)"
        )
    )
    ask: bool = Field(
        description=(
            "True only when the task cannot be done at all without information only the user "
            "has, so any attempt would waste the whole run. Almost always false; always false "
            "for small talk."
        )
    )
    question: str = Field(
        description=(
            "When ask is true: one short, specific question, in the language of the task, whose "
            "answer unblocks it. When ask is false: empty."
        )
    )


INTAKE_PROMPT = f"""\
You make two decisions about the user's input before AgentGOD spends anything on it.

# 1. Small talk or a task?

{CHAT_PROMPT}
# 2. One question before the run?

Only for a task (never for small talk):

{CLARIFY_PROMPT}"""


@dataclass(frozen=True)
class Screening:
    """What the intake found: a reply to small talk, a question worth asking, or neither."""

    reply: str | None = None
    """The direct answer when the input is small talk (and the caller asked about chat)."""
    question: str | None = None
    """The one question to ask first (when the caller can ask one)."""


def screen(
    text: str,
    *,
    chat: bool,
    ask: bool,
    usage: ledger.Usage | None = None,
    settings: config.Settings | None = None,
) -> Screening:
    """Small talk's reply and the clarifying question, in one call.

    `chat`: the input is short enough to be small talk; `ask`: a person is there to answer a
    question. A decision the caller did not ask about is ignored whatever the model said, so a
    long input is never chat and nobody is asked who cannot answer. Only a decided is_chat with
    a non-empty reply is chat — a task mistaken for chat is lost, while chat mistaken for a task
    only builds a small team — and only a decided ask with a real question is asked — silence
    costs at most one weak run, a needless question the user's attention every time.
    """
    settings = settings or config.settings()
    result = llm.complete_structured(
        f"<input>\n{text}\n</input>\n\nIs this input small talk, and if it is a task, does it "
        "need a question before work starts?",
        Screen,
        system=INTAKE_PROMPT,
        max_tokens=1024,
        effort="low",
        model=settings.fast_model,
        usage=usage,
        settings=settings,
    )
    reply = result.reply.strip()
    if chat and result.is_chat and reply:
        return Screening(reply=reply)
    question = " ".join(result.question.split())
    if not ask or not result.ask or not question:
        return Screening()
    if len(question) > MAX_QUESTION_CHARS:
        question = question[: MAX_QUESTION_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return Screening(question=question)
