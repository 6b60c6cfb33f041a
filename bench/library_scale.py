"""Benchmark — the library after a year of use: 10, 100 and 500 kept agents (issue 30).

The library is filled through the product's own `library.remember` (what keeping an agent
does), each agent a real assembled program with its own name and role. At each size:

- the planner's prompt: a real one-shot task planned against the fake API (the scripted model);
  the tokens of the plan request as the API counts them, and of its library view alone. The
  view is bounded (about 1,000 tokens), so the plan request stays flat past that, whatever the
  library's size; the task matches a few kept agents, which must be among those offered;
- `agentgod library`: the whole command, its median wall time past the same command's on an
  empty library (its start-up: interpreter, imports, the sweep of dead runs);
- a lookup: `library.reliable` and `library.lookup` of one agent, in the process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agents import spec

from agentgod import config, generator, library, orchestrator
from bench import harness

SIZES = (10, 100, 500)
TARGET_VIEW_TOKENS = 1000.0
TARGET_COMMAND_MS = 50.0
TARGET_LOOKUP_MS = 5.0
TASK = "Summarise the support tickets from last week and rank them by how urgent they are."
MATCHING = ("tickets_summarise", "tickets_rank")
"""Kept agents whose names and roles match the task: the planner must be offered them."""

VERBS = ("summarise", "rank", "translate", "extract", "compare", "classify", "format", "validate",
         "score", "parse")  # fmt: skip
_THINGS = (
    "tickets emails logs tweets reviews contracts recipes papers headlines resumes forecasts "
    "invoices playlists lyrics budgets sermons patents menus timetables diagrams poems quotes "
    "warrants leases manifests transcripts surveys charts glossaries itineraries bibliographies "
    "changelogs datasets essays fables memos obituaries prescriptions riddles sonnets spreadsheets "
    "syllabi telegrams trials vouchers webpages wikis yearbooks zines almanacs"
)
THINGS = tuple(_THINGS.split())
BODY = """
def run(task, previous_outputs):
    notes = format_previous(previous_outputs)
    return call_llm(f"agent={{AGENT_NAME}} {verb} the {thing} in: {{task}}\\n\\n{{notes}}")
"""


def kept_agents() -> list[tuple[str, str, str]]:
    """(name, role, source) of 500 agents, in the order they are kept: one per verb and thing,
    the two matching the task first."""
    agents = []
    for thing in THINGS:
        for verb in VERBS:
            name = f"{thing}_{verb}"
            role = f"{verb.capitalize()}s {thing} and reports what it found"
            body = BODY.format(verb=verb, thing=thing)
            source = generator.assemble_agent(body, spec(name, role))
            agents.append((name, role, generator.for_library(source)))
    return agents


def fill(agents: list[tuple[str, str, str]]) -> None:
    for name, role, source in agents:
        library.remember(name, role, source)


def _planned(factory: Any) -> dict[str, Any]:
    """One one-shot task planned, built, run and answered: its plan request's token count and
    the library view it carried."""
    from scripted import agent_spec, plan

    factory.plans = [plan(agent_spec("tickets_summarise"), complexity="simple")]
    before = len(factory.of("plan"))
    orchestrator.handle_task(TASK, settings=config.settings())
    request = factory.of("plan")[before]
    usage = factory.api.usage_of[id(request)]
    tokens = (
        usage["input_tokens"]
        + usage["cache_creation_input_tokens"]
        + usage["cache_read_input_tokens"]
    )
    prompt = request.prompt
    view = ""
    if "<agent_library>" in prompt:
        view = prompt.split("<agent_library>\n", 1)[1].split("\n</agent_library>", 1)[0]
    return {"plan_tokens": tokens, "view_tokens": len(view) // 4 + (1 if view else 0), "view": view}


def _lookup_ms(names: list[str]) -> float:
    times = []
    for name in names:
        started = time.perf_counter()
        if library.reliable(name):
            library.lookup(name)
        times.append((time.perf_counter() - started) * 1000)
    return harness.median(times)


def run(options: harness.Options) -> harness.Report:
    repeat = options.repetitions(full=9, quick=3)
    agents = kept_agents()
    command = [*harness.cli_commands()[0][1], "library"]
    settings = {**harness.TASK_SETTINGS, "SANDBOX": "off", "MAX_PARALLEL_AGENTS": "4"}
    rows: list[list[Any]] = []
    figures: list[harness.Figure] = []
    data: dict[str, Any] = {"sizes": {}}
    with harness.environment(**settings) as home, harness.scripted_model() as factory:
        empty = _planned(factory)
        start_ms = harness.command_ms(command, repeat)
        data["empty"] = {"plan_tokens": empty["plan_tokens"], "command_ms": start_ms}
        done = 0
        for size in SIZES:
            began = time.perf_counter()
            fill(agents[done:size])
            fill_seconds = time.perf_counter() - began
            done = size
            planned = _planned(factory)
            offered = [name for name in MATCHING if f"- {name}: " in planned["view"]]
            listing_ms = harness.command_ms(command, repeat)
            lookup_ms = _lookup_ms([name for name, _, _ in agents[:size]][:50] * 3)
            facts = {
                "fill_seconds": fill_seconds,
                "plan_tokens": planned["plan_tokens"],
                "view_tokens": planned["view_tokens"],
                "offered_matching": offered,
                "command_ms": listing_ms,
                "lookup_ms": lookup_ms,
                "files": len(list(Path(home, "inventory", "agents").iterdir())),
            }
            data["sizes"][size] = facts
            figures += [
                harness.Figure(f"planner's library view at {size} kept agents",
                               planned["view_tokens"], "tokens", TARGET_VIEW_TOKENS),
                harness.Figure(f"the matching kept agents offered, at {size}", len(offered), "",
                               len(MATCHING), exact=True),
                harness.Figure(f"`agentgod library` at {size} agents, past start-up",
                               listing_ms - start_ms, "ms", TARGET_COMMAND_MS),
                harness.Figure(f"library lookup at {size} agents (in process)", lookup_ms, "ms",
                               TARGET_LOOKUP_MS),
            ]  # fmt: skip
            rows.append(
                [
                    size,
                    f"{planned['plan_tokens']:,}",
                    f"{planned['plan_tokens'] - empty['plan_tokens']:+,}",
                    f"{planned['view_tokens']:,}",
                    f"{len(offered)}/{len(MATCHING)}",
                    f"{listing_ms:.0f} ms",
                    f"{listing_ms - start_ms:+.0f} ms",
                    f"{lookup_ms:.2f} ms",
                    f"{fill_seconds:.1f} s",
                ]
            )
    flat = harness.Figure(
        f"plan request tokens, {SIZES[-1]} kept agents over none",
        data["sizes"][SIZES[-1]]["plan_tokens"] - data["empty"]["plan_tokens"],
        "tokens",
        TARGET_VIEW_TOKENS,
    )
    figures.append(flat)
    table = harness.Table(
        f"Library at scale: agents kept through library.remember (median of {repeat})",
        ["kept", "plan tokens", "over none", "view tokens", "matching", "library cmd",
         "past start", "lookup", "fill"],
        rows,
        [
            f"plan tokens: the plan request's input as the API counts it; with no agent kept: "
            f"{data['empty']['plan_tokens']:,}; the view is bounded at ~{TARGET_VIEW_TOKENS:g} "
            "tokens, so past that the plan stays flat",
            f"library cmd: `agentgod library` (plain, piped), whole process; start-up: the same "
            f"on an empty library, {start_ms:.0f} ms",
            f"task: {TASK!r}; matching: {', '.join(MATCHING)}",
        ],
    )  # fmt: skip
    return harness.Report("library", [table], figures, data)
