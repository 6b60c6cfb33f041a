"""runlog.py — the answer outlives the terminal. No model calls.

Every finished task is archived twice under runs/: as `<UTC timestamp>_<slug>.md`, a Markdown file
a person can open (task, plan, each agent's result, time and short output, failures, answer,
cost), written here, and as rows in `history.db`, the SQLite database history.py keeps: there the
run is whole (every agent's code and output, every model call), for `agentgod show`.

Everything textual is redacted before it is written, so a key that leaked into an agent's output
never reaches the disk. Archiving is best effort: by the time it runs, the answer has been printed
and paid for, so a full disk or a locked database costs the archive, never the run.

The record itself is runrecord's; `runlog.RunRecord` and `runlog.AgentRecord` are the same
classes, named here because the orchestrator builds them for `archive`.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar, cast

import config
import history as store
import historydb
from historydb import PRIVATE_FILE
from kinds import RunStatus
from redact import redact
from replies import CostSummary
from runrecord import AgentRecord as AgentRecord  # the records are runlog's to hand over
from runrecord import RunRecord as RunRecord
from scratch import new_run_id
from signals import shield_from_signals
from ui import human_size

_V = TypeVar("_V")

SLUG_LENGTH = 40
PRIVATE_FOLDER = 0o700
"""runs/ is its owner's only, as every record in it is (historydb.PRIVATE_FILE)."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters except tab and newline: an ESC or BEL in a task must not reach a file that
someone later `cat`s to a terminal."""


# ---- writing ---------------------------------------------------------------------------------


class Redactions:
    """A run's texts redacted ahead of its archive, on a thread of their own.

    Redacting every agent's code (each carries the inlined runtime, ~22 KB) and output is most
    of the archive's cost. Handed over with `ahead` as soon as a round's agents are final, it is
    done while the model writes the merge and the verdict, instead of after them. `writer`
    gives exactly what redacting at the archive gives: a text is redacted again when the secrets
    redaction replaces are no longer those it was redacted with (a key read from a new .env).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._ahead: dict[str, Future[str]] = {}
        self._secrets = _secrets()
        self._worker = ThreadPoolExecutor(
            1, thread_name_prefix="agentgod-redact", initializer=shield_from_signals
        )

    def ahead(self, texts: Iterable[str]) -> None:
        """Redact these texts in the background, in order (none once closed)."""
        with self._lock:
            if self._closed:
                return
            for text in texts:
                if text and text not in self._ahead:
                    self._ahead[text] = self._worker.submit(_written, text)

    def writer(self) -> Callable[[str], str]:
        """`_written`, taking what was done ahead when the secrets are still the same."""
        with self._lock:
            ahead = dict(self._ahead) if _secrets() == self._secrets else {}

        def written(text: str) -> str:
            done = ahead.get(text)
            return done.result() if done is not None else _written(text)

        return written

    def close(self) -> None:
        """Drop what is still queued: the thread ends with the run."""
        with self._lock:
            self._closed = True
        self._worker.shutdown(wait=False, cancel_futures=True)


def _secrets() -> tuple[str, ...]:
    """What redact replaces literally, as far as it can change during a run: the key variables
    of the environment and the key config reads (the environment's, else .env's)."""
    return (
        os.environ.get("ANTHROPIC_API_KEY", ""),
        os.environ.get("ANTHROPIC_AUTH_TOKEN", ""),
        config.env("ANTHROPIC_API_KEY"),
    )


def archive(
    record: RunRecord,
    warn: Callable[[str], None] | None = None,
    settings: config.Settings | None = None,
    redactions: Redactions | None = None,
) -> Path | None:
    """Write the run's Markdown file and its history row; returns the file, or None.

    The two writes are independent: a database that refuses still leaves the file (and its path is
    returned), and a file that cannot be written still leaves a history row with no run_file. This
    never raises; what could not be written is told to `warn`, so the loss is never silent.
    `settings` is the run's snapshot (read now when not given): where runs/ is; `redactions`
    holds what was redacted ahead.
    """
    say = warn or (lambda text: None)
    try:
        clean = _redacted(record, redactions.writer() if redactions else _written)
        folder = (settings or config.settings()).runs_dir
    except Exception as error:  # never fail a run that is already answered and paid for
        say(f"the run was not archived: {_reason(error)}")
        return None
    run_file: Path | None = None
    try:
        _private_folder(folder)
        run_file = _write_new_file(folder, _file_stem(clean), _render(clean, folder))
    except Exception as error:
        say(
            f"the run file could not be written in {folder} ({_reason(error)}); "
            "check that AGENTGOD_HOME is writable and has space"
        )
        run_file = None
    try:
        store.insert(clean, run_file, folder / historydb.DB_NAME)
    except Exception as error:
        say(
            f"the run was not added to the history in {folder / historydb.DB_NAME} "
            f"({_reason(error)}), so "
            "`agentgod history` and `stats` will not show it; check that the file is writable "
            "and that no other program holds it locked"
        )
    return run_file


def _reason(error: BaseException) -> str:
    """An error as one short line for a warning: the OS's or SQLite's own words."""
    text = " ".join(str(error).split()) or type(error).__name__
    return redact(text[:300])


_OUTCOMES = {
    RunStatus.OK: "Answered",
    RunStatus.FAILED: "Failed",
    RunStatus.INTERRUPTED: "Interrupted",
    RunStatus.BUDGET: "Out of budget",
}
"""The summary line's first words, by status (read_run_file reads them back)."""
_UNSTATED = {
    RunStatus.OK: "The run failed without a stated reason.",
    RunStatus.FAILED: "The run failed without a stated reason.",
    RunStatus.INTERRUPTED: "The run was stopped before it could answer.",
    RunStatus.BUDGET: "The budget (BUDGET_USD) ran out before the run could answer.",
}
SMALL_OUTPUT_CHARS = 600
SMALL_OUTPUT_LINES = 12
"""An agent's output up to this size is shown in the run file; a longer one is only in the
history (`agentgod show`), so the file stays a page a person reads."""


def _render(record: RunRecord, runs_dir: Path) -> str:
    """The run as a Markdown document, written for a person (pass a redacted record).

    `runs_dir` is the folder the file goes in: artifacts are linked relative to it.
    """
    cost = record.cost
    outcome = _OUTCOMES[record.status]
    summary = (
        f"**{outcome}** · {store.utc(record.started_at):%Y-%m-%d %H:%M:%S} UTC · "
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
        record.answer.strip() if record.ok and record.answer.strip() else "_No answer._",
        "## Cost",
        _cost_table(cost) + _phase_table(record.phases),
        "## Run",
        _run_facts(record),
    ]
    return "\n\n".join(parts) + "\n"


def slugify(task: str) -> str:
    """The task's lowercase ASCII words joined by hyphens: at most SLUG_LENGTH long, never empty."""
    folded = unicodedata.normalize("NFKD", task).encode("ascii", "ignore").decode().lower()
    words = re.findall(r"[a-z0-9]+", folded)
    slug = ""
    for word in words:
        longer = f"{slug}-{word}" if slug else word
        if len(longer) > SLUG_LENGTH:
            break
        slug = longer
    return slug or (words[0][:SLUG_LENGTH] if words else "task")


def _private_folder(folder: Path) -> None:
    """runs/, created or tightened to its owner only."""
    folder.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        folder.chmod(PRIVATE_FOLDER)


def _written(text: str) -> str:
    """Text as it may be stored: redacted, and without control characters."""
    return _CONTROL.sub("", redact(text.replace("\r\n", "\n")))


def _scrub(value: object, written: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return written(value)
    if isinstance(value, list | tuple):
        return [_scrub(item, written) for item in value]
    if isinstance(value, dict):
        return {_scrub(key, written): _scrub(item, written) for key, item in value.items()}
    return value


def _redacted(record: RunRecord, written: Callable[[str], str] = _written) -> RunRecord:
    """A copy of the record with every piece of text passed through redact (and _CONTROL).

    `written` does it: `_written`, or a run's `Redactions` that did part of it ahead.
    """

    def optional(text: str | None) -> str | None:
        return None if text is None else written(text)

    def scrubbed(value: _V) -> _V:
        """A JSON-like value (str, list, dict, numbers) with every string in it `written`."""
        return cast(_V, _scrub(value, written))

    return replace(
        record,
        run_id=written(record.run_id),
        conversation_id=optional(record.conversation_id),
        retry_of=optional(record.retry_of),
        model=written(record.model),
        effort=optional(record.effort),
        reasoning=written(record.reasoning),
        plan=scrubbed(record.plan),
        calls=[
            replace(call, phase=written(call.phase), model=written(call.model))
            for call in record.calls
        ],
        phases=scrubbed(record.phases),
        attachments=scrubbed(record.attachments),
        artifacts=scrubbed(record.artifacts),
        task=written(record.task),
        answer=written(record.answer),
        error=written(record.error),
        complexity=written(record.complexity) if record.complexity else record.complexity,
        waves=[[written(name) for name in wave] for wave in record.waves],
        agents=[
            replace(
                agent,
                name=written(agent.name),
                role=written(agent.role),
                kind=written(agent.kind),
                error=written(agent.error),
                source=written(agent.source),
                inputs=[written(name) for name in agent.inputs],
                output=written(agent.output),
            )
            for agent in record.agents
        ],
        failures=[(written(name), written(reason)) for name, reason in record.failures],
        sandbox=[written(layer) for layer in record.sandbox],
        warnings=[written(warning) for warning in record.warnings],
        outputs={written(name): written(text) for name, text in record.outputs.items()},
    )


def _file_stem(record: RunRecord) -> str:
    return f"{store.utc(record.started_at):%Y%m%dT%H%M%SZ}_{slugify(record.task)}"


def _write_new_file(folder: Path, stem: str, text: str) -> Path:
    """Create a file that did not exist before (`_2`, `_3`... on a clash) and fill it."""
    number = 1
    while True:
        path = folder / (f"{stem}.md" if number == 1 else f"{stem}_{number}.md")
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        except FileExistsError:
            number += 1
            continue
        handle = os.fdopen(descriptor, "w", encoding="utf-8")
        try:
            with handle:
                handle.write(text)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path


# ---- Markdown pieces -------------------------------------------------------------------------


def _dollars(cost: CostSummary) -> str:
    return f"${cost['usd']:.4f}" + (" (estimated)" if cost["estimate"] else "")


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
            f"| ${agent.usd:.4f} |"
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
    lines += [f"| {name} | {c['llm_calls']} | ${c['usd']:.4f} |" for name, c in phases.items()]
    return "\n".join(lines)


def _failures(failures: list[tuple[str, str]]) -> str:
    if not failures:
        return "None."
    return "\n\n".join(f"### `{name}`\n\n{_fenced(reason)}" for name, reason in failures)


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
            f"- Started: {store.utc(record.started_at).isoformat(timespec='seconds')}",
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
    """What a run file written by _render says about its run, or None if it is not one."""
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
