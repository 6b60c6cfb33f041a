"""runfile.py — the run file: a run as Markdown for a person, and read back. No model calls.

`runs/<UTC stamp>_<slug>.md` holds the task, the plan, each agent's result, time and short
output, failures, files, answer and cost: a page someone opens without agentgod. Pass `render` a
redacted record (runlog.archive does). The format is read back by `read_run_file` when the
history database must be rebuilt, so the two live together and change together.
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
from datetime import UTC, datetime
from pathlib import Path

from agentgod.kinds import RunStatus
from agentgod.replies import CostSummary
from agentgod.runrecord import AgentRecord, Failure, RunRecord, new_run_id, utc
from agentgod.text import dollars, human_size

SLUG_LENGTH = 40

_OUTCOMES = {
    RunStatus.OK: "Answered",
    RunStatus.FAILED: "Failed",
    RunStatus.INTERRUPTED: "Interrupted",
    RunStatus.BUDGET: "Out of budget",
    RunStatus.RUNNING: "Running",
    RunStatus.CRASHED: "Crashed",
}
"""The summary line's first words, by status (read_run_file reads them back)."""
_UNSTATED = {
    RunStatus.OK: "The run failed without a stated reason.",
    RunStatus.FAILED: "The run failed without a stated reason.",
    RunStatus.INTERRUPTED: "The run was stopped before it could answer.",
    RunStatus.BUDGET: "The budget (BUDGET_USD) ran out before the run could answer.",
    RunStatus.RUNNING: "The run had not finished when this was written.",
    RunStatus.CRASHED: "The process running it ended before the run finished.",
}
SMALL_OUTPUT_CHARS = 600
SMALL_OUTPUT_LINES = 12
"""An agent's output up to this size is shown in the run file; a longer one is only in the
history (`agentgod show`), so the file stays a page a person reads."""


def render(record: RunRecord, runs_dir: Path) -> str:
    """The run as a Markdown document, written for a person (pass a redacted record).

    `runs_dir` is the folder the file goes in: artifacts are linked relative to it.
    """
    cost = record.cost
    outcome = _OUTCOMES[record.status]
    summary = (
        f"**{outcome}** · {utc(record.started_at):%Y-%m-%d %H:%M:%S} UTC · "
        f"{_duration(record.duration_seconds)} · {len(record.agents)} agents · {_dollars(cost)}"
    )
    parts = [
        f"# {_title(record.task)}",
        summary,
        "## Task",
        _quoted(record.task),
        "## Plan",
        _plan(record),
        "## Agents",
        _agent_table(record.agents) + _agent_details(record),
        "## Failures",
        _failures(record.failures),
    ]
    if record.warnings:
        parts += ["## Warnings", "\n".join(f"- {warning}" for warning in record.warnings)]
    if not record.ok:
        parts += ["## Error", record.error or _UNSTATED[record.status]]
    if record.attachments or record.artifacts:
        parts += ["## Files", _files(record, runs_dir)]
    if record.outputs:
        parts.append("## Agent outputs (not merged)")
        for name, text in record.outputs.items():
            parts += [f"### {name}", _fenced(text)]
    parts += [
        "## Answer",
        _answer(record),
        "## Cost",
        _cost_table(cost) + _phase_table(record.phases),
        "## Run",
        _run_facts(record),
    ]
    return "\n\n".join(parts) + "\n"


def _answer(record: RunRecord) -> str:
    """The answer; one a stopped run had paid for is shown too, said to be unjudged."""
    answer = record.answer.strip()
    if not answer:
        return "_No answer._"
    if record.ok:
        return answer
    if record.status is RunStatus.BUDGET and record.error:
        return f"_Partial: {record.error}_\n\n{answer}"
    return f"_Not judged: the run ended before the judge read it._\n\n{answer}"


_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
"""ANSI escape sequences (CSI, OSC, and the two-character ones): removed whole from a slug."""


def slugify(task: str) -> str:
    """The task's lowercase ASCII words joined by hyphens: at most SLUG_LENGTH long, never empty."""
    task = _ESCAPES.sub(" ", task)  # a terminal's escape sequence is no word of the task
    folded = unicodedata.normalize("NFKD", task).encode("ascii", "ignore").decode().lower()
    words = re.findall(r"[a-z0-9]+", folded)
    slug = ""
    for word in words:
        longer = f"{slug}-{word}" if slug else word
        if len(longer) > SLUG_LENGTH:
            break
        slug = longer
    return slug or (words[0][:SLUG_LENGTH] if words else "task")


def file_stem(record: RunRecord, task: str | None = None) -> str:
    """The file's name before `.md`: when the run started, then what it was about (`task`, when
    given: the task as typed, escape sequences and all, already redacted)."""
    return (
        f"{utc(record.started_at):%Y%m%dT%H%M%SZ}_{slugify(record.task if task is None else task)}"
    )


# ---- Markdown pieces -------------------------------------------------------------------------


def _dollars(cost: CostSummary) -> str:
    return dollars(cost["usd"]) + (" (estimated)" if cost["estimate"] else "")


def _cost_table(cost: CostSummary) -> str:
    rows = [
        ("Input", cost["input_tokens"]),
        ("Output", cost["output_tokens"]),
        ("Cache write", cost["cache_write_tokens"]),
        ("Cache read", cost["cache_read_tokens"]),
    ]
    lines = ["| Tokens | Count |", "|---|---:|"]
    lines += [f"| {label} | {value:,} |" for label, value in rows]
    searches = cost["web_searches"]
    searched = f" · {searches} web searches" if searches else ""
    return "\n".join(lines) + f"\n\n{cost['llm_calls']} model calls{searched} · {_dollars(cost)}"


def _plan(record: RunRecord) -> str:
    lines = [f"- Complexity: {record.complexity or 'not graded'}"]
    if record.waves:
        lines += [
            f"- Wave {number}: " + ", ".join(f"`{name}`" for name in wave)
            for number, wave in enumerate(record.waves, 1)
        ]
    else:
        lines.append("- No agents were planned.")
    lines.append(f"- Revisions asked for by the judge: {record.revisions}")
    lines.append(f"- Council improved the answer: {'yes' if record.council_improved else 'no'}")
    if record.budget_exhausted or record.status is RunStatus.BUDGET:
        lines.append("- The budget (BUDGET_USD) ran out before the run could finish.")
    if record.model:
        lines.append(f"- Model: `{record.model}`, effort {record.effort or 'not chosen'}")
    if record.reasoning.strip():
        lines.append(f"- Reasoning: {_first_line(record.reasoning, 200)}")
    return "\n".join(lines)


def _agent_table(agents: list[AgentRecord]) -> str:
    if not agents:
        return "No agents ran."
    lines = [
        "| Agent | Role | Source | Result | Attempts | Time | Cost |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for agent in agents:
        result = "ok" if agent.ok else f"failed ({agent.kind})"
        if agent.error.strip():
            result += " — " + _first_line(agent.error, 100)
        lines.append(
            f"| `{agent.name}` | {_cell(agent.role)} | {'library' if agent.reused else 'new'} "
            f"| {_cell(result)} | {agent.attempts} | {_duration(agent.seconds)} "
            f"| {dollars(agent.usd)} |"
        )
    return "\n".join(lines)


def _agent_details(record: RunRecord) -> str:
    """Per agent: what it was given, its output when short, and how to see the rest and its code.

    Code never goes into the file (it is in the history): a run file stays readable.
    """
    show = f"agentgod show {record.run_id}"
    blocks: list[str] = []
    for agent in record.agents:
        output = agent.output.strip()
        shown = bool(output) and _small(output)
        facts: list[str] = []
        if agent.inputs:
            facts.append("Inputs: " + ", ".join(f"`{name}`" for name in agent.inputs))
        if agent.source:
            facts.append(f"Code: `{show} --code {agent.name}`")
        if output and not shown:
            facts.append(f"Output: {len(output):,} characters, `{show}`")
        if not facts and not shown:
            continue
        block = [f"### `{agent.name}`"]
        block += [" · ".join(facts)] if facts else []
        block += [_fenced(output)] if shown else []
        blocks.append("\n\n".join(block))
    return "".join(f"\n\n{block}" for block in blocks)


def _small(text: str) -> bool:
    """Short enough for the run file, and no line that could pass for one of its headings."""
    lines = text.splitlines()
    return (
        len(text) <= SMALL_OUTPUT_CHARS
        and len(lines) <= SMALL_OUTPUT_LINES
        and not any(line.startswith("#") for line in lines)
    )


def _phase_table(phases: dict[str, CostSummary]) -> str:
    """Where the money went, phase by phase; nothing when no phase spent anything."""
    if not phases:
        return ""
    lines = ["", "", "| Phase | Calls | Cost |", "|---|---:|---:|"]
    lines += [f"| {name} | {c['llm_calls']} | {dollars(c['usd'])} |" for name, c in phases.items()]
    return "\n".join(lines)


def _failures(failures: list[Failure]) -> str:
    if not failures:
        return "None."
    return "\n\n".join(f"### `{each.name}`\n\n{_fenced(each.reason)}" for each in failures)


def _files(record: RunRecord, runs_dir: Path) -> str:
    """The attachments by name and path, the artifacts as links relative to the run file."""
    lines = [
        f"- Attached: `{item['name']}` ({human_size(item['bytes'])}, {item['kind']}) "
        f"from `{item['path']}`"
        for item in record.attachments
    ]
    for item in record.artifacts:
        link = Path(item["path"])
        with contextlib.suppress(ValueError):  # not under runs/: a plain path will do
            link = link.relative_to(runs_dir)
        lines.append(
            f"- Made by `{item['agent']}`: [{item['name']}]({link.as_posix()}) "
            f"({human_size(item['bytes'])})"
        )
    return "\n".join(lines)


def _run_facts(record: RunRecord) -> str:
    layers = ", ".join(record.sandbox) if record.sandbox else "none recorded"
    return "\n".join(
        [
            f"- Started: {utc(record.started_at).isoformat(timespec='seconds')}",
            f"- Duration: {_duration(record.duration_seconds)}",
            f"- Sandbox layers: {layers}",
            f"- Run id: `{record.run_id}` (`agentgod show {record.run_id}`)",
            *([f"- Conversation: `{record.conversation_id}`"] if record.conversation_id else []),
            *([f"- Retry of: `{record.retry_of}`"] if record.retry_of else []),
        ]
    )


def _title(task: str) -> str:
    line = _first_line(task, 80)
    return f"Run: {line}" if line else "Run"


def _first_line(text: str, limit: int) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _quoted(text: str) -> str:
    lines = text.strip().splitlines() or [""]
    return "\n".join(f"> {line}".rstrip() for line in lines)


def _fenced(text: str) -> str:
    """A code block whose fence is longer than any backtick run inside, so it cannot close early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.strip()}\n{fence}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


# ---- reading a run file back (history rebuilds a damaged database from them) -------------------

_SUMMARY = re.compile(
    rf"^\*\*({'|'.join(_OUTCOMES.values())})\*\* · (\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d) UTC · "
    r"([^·]+) · ",
    re.MULTILINE,
)
_STATUSES = {words: status for status, words in _OUTCOMES.items()}


def read_run_file(run_file: Path) -> RunRecord | None:
    """What a run file written by render says about its run, or None if it is not one."""
    try:
        text = run_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    summary = _SUMMARY.search(text)
    task = _section(text, "Task")
    if summary is None or task is None:
        return None
    status = _STATUSES[summary.group(1)]
    ok = status is RunStatus.OK
    facts = text.rpartition("\n\n## Run\n\n")[2]
    answer = text.partition("\n\n## Answer\n\n")[2].rpartition("\n\n## Cost\n\n")[0]
    cost_text = text.rpartition("\n\n## Cost\n\n")[2]
    calls = re.search(
        r"^(\d+) model calls(?: · (\d+) web searches)? · \$([0-9.]+)", cost_text, re.MULTILINE
    )
    complexity = re.search(r"^- Complexity: (\S+)$", text, re.MULTILINE)
    revisions = re.search(r"^- Revisions asked for by the judge: (\d+)$", text, re.MULTILINE)
    model = re.search(r"^- Model: `([^`]+)`, effort (.+)$", text, re.MULTILINE)

    def fact(label: str) -> str | None:
        found = re.search(rf"^- {label}: `([^`]+)`", facts, re.MULTILINE)
        return found.group(1) if found else None

    def tokens(label: str) -> int:
        found = re.search(rf"^\| {label} \| ([0-9,]+) \|$", cost_text, re.MULTILINE)
        return int(found.group(1).replace(",", "")) if found else 0

    return RunRecord(
        task="\n".join(line.removeprefix(">").removeprefix(" ") for line in task.splitlines()),
        ok=ok,
        answer=answer.strip() if ok else "",
        error=(_section(text, "Error") or "") if not ok else "",
        complexity=None
        if complexity is None or complexity.group(1) == "not"
        else complexity.group(1),
        waves=[],
        agents=_agents_from(_section(text, "Agents") or ""),
        failures=[],
        revisions=int(revisions.group(1)) if revisions else 0,
        council_improved="- Council improved the answer: yes" in text,
        cost=CostSummary(
            llm_calls=int(calls.group(1)) if calls else 0,
            input_tokens=tokens("Input"),
            output_tokens=tokens("Output"),
            cache_write_tokens=tokens("Cache write"),
            cache_read_tokens=tokens("Cache read"),
            web_searches=int(calls.group(2) or 0) if calls else 0,
            usd=float(calls.group(3)) if calls else 0.0,
            estimate="(estimated)" in (calls.group(0) if calls else ""),
        ),
        duration_seconds=_seconds(summary.group(3)),
        started_at=datetime.strptime(summary.group(2), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC),
        budget_exhausted="- The budget (BUDGET_USD) ran out" in text,
        status=status,
        conversation_id=fact("Conversation"),
        retry_of=fact("Retry of"),
        model=model.group(1) if model else "",
        effort=model.group(2) if model and model.group(2) != "not chosen" else None,
        run_id=fact("Run id") or new_run_id(),
    )


def _section(text: str, heading: str) -> str | None:
    """The body of the first `## heading` section (up to the next `## `)."""
    start = text.find(f"\n## {heading}\n\n")
    if start < 0:
        return None
    body = text[start + len(heading) + 6 :]
    end = body.find("\n\n## ")
    return (body if end < 0 else body[:end]).strip()


def _seconds(shown: str) -> float:
    """_duration's text back to seconds: "83.2 s" or "1 min 23 s"."""
    minutes = re.match(r"\s*(\d+) min (\d+) s", shown)
    if minutes:
        return int(minutes.group(1)) * 60 + int(minutes.group(2))
    plain = re.match(r"\s*([0-9.]+) s", shown)
    return float(plain.group(1)) if plain else 0.0


def _agents_from(table: str) -> list[AgentRecord]:
    """The agent rows of _agent_table, as far as a table cell keeps them (the details that
    follow the table are not read: an output could hold anything)."""
    agents: list[AgentRecord] = []
    for line in table.split("\n\n", 1)[0].splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 7 or not cells[0].startswith("`"):
            continue
        name, role, source, result, attempts, seconds, usd = cells
        outcome = re.match(r"failed \((\w+)\)(?: — (.*))?", result)
        agents.append(
            AgentRecord(
                name=name.strip("`"),
                role=role.replace("\\|", "|"),
                reused=source == "library",
                ok=outcome is None,
                attempts=int(attempts) if attempts.isdigit() else 0,
                seconds=_seconds(seconds),
                kind=outcome.group(1) if outcome else "ok",
                error=(outcome.group(2) or "") if outcome else "",
                usd=float(usd.lstrip("$") or 0) if re.fullmatch(r"\$[0-9.]+", usd) else 0.0,
            )
        )
    return agents
