"""runlog.py — the answer outlives the terminal. No model calls.

Every finished task is archived twice under runs/: as `<UTC timestamp>_<slug>.md`, a Markdown file
a person can open (task, plan, each agent's result, time and short output, failures, answer,
cost; runfile.py renders it), and as rows in `history.db`, the SQLite database history.py keeps:
there the run is whole (every agent's code and output, every model call), for `agentgod show`.

Everything textual is redacted before it is written, so a key that leaked into an agent's output
never reaches the disk. Archiving is best effort: by the time it runs, the answer has been printed
and paid for, so a full disk or a locked database costs the archive, never the run.
The record itself (`runrecord.RunRecord`) is built by the orchestrator and handed to `archive`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TypeVar, cast

from agentgod import config, historydb, runfile
from agentgod import history as store
from agentgod.historydb import PRIVATE_FILE
from agentgod.redact import redact
from agentgod.runrecord import AgentRecord, RunRecord
from agentgod.signals import shield_from_signals
from agentgod.text import clean

_V = TypeVar("_V")

PRIVATE_FOLDER = 0o700
"""runs/ is its owner's only, as every record in it is (historydb.PRIVATE_FILE)."""


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
                    self._ahead[text] = self._worker.submit(scrubbed_text, text)

    def writer(self) -> Callable[[str], str]:
        """`scrubbed_text`, taking what was done ahead when the secrets are still the same."""
        with self._lock:
            ahead = dict(self._ahead) if _secrets() == self._secrets else {}

        def written(text: str) -> str:
            done = ahead.get(text)
            return done.result() if done is not None else scrubbed_text(text)

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
    *,
    into: Path | None = None,
    again: bool = False,
    wait_seconds: float | None = None,
    wrote: Callable[[Path], None] | None = None,
) -> Path | None:
    """Write the run's Markdown file and its history row; returns the file, or None.

    The two writes are independent: a database that refuses still leaves the file (and its path is
    returned), and a file that cannot be written still leaves a history row with no run_file. This
    never raises; what could not be written is told to `warn`, so the loss is never silent.
    `settings` is the run's snapshot (read now when not given): where runs/ is; `redactions`
    holds what was redacted ahead. `again` says this run was archived before (stopped while it
    was): its history row is replaced, and `into`, the run file that archive wrote, rewritten, so
    one run has one file and one row. `wait_seconds` bounds the wait for another process's lock
    on the history. `wrote` hears of the run file the moment it exists, before the history is
    written (a stop may come while that waits).
    """
    say = warn or (lambda text: None)
    try:
        scrubbed = redacted(record, redactions.writer() if redactions else scrubbed_text)
        folder = (settings or config.settings()).runs_dir
    except Exception as error:  # never fail a run that is already answered and paid for
        say(f"the run was not archived: {_reason(error)}")
        return None
    run_file: Path | None = None
    try:
        _private_folder(folder)
        text = runfile.render(scrubbed, folder)
        if into is not None and into.parent == folder and into.is_file():
            run_file = _rewrite(into, text)
        else:
            # The slug from the task redacted but not yet cleaned: an escape sequence in it goes
            # whole (runfile.slugify), where cleaning leaves its remnants ("31mred").
            stem = runfile.file_stem(scrubbed, task=redact(record.task))
            run_file = _write_new_file(folder, stem, text)
        if wrote is not None:
            wrote(run_file)
    except Exception as error:
        say(
            f"the run file could not be written in {folder} ({_reason(error)}); "
            "check that AGENTGOD_HOME is writable and has space"
        )
        run_file = None
    try:
        waits = {} if wait_seconds is None else {"wait_seconds": wait_seconds}
        store.insert(scrubbed, run_file, folder / historydb.DB_NAME, again=again, **waits)
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


def _private_folder(folder: Path) -> None:
    """runs/, created or tightened to its owner only."""
    folder.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        folder.chmod(PRIVATE_FOLDER)


def scrubbed_text(text: str) -> str:
    """Text as it may be stored: redacted, and without control characters (text.clean), since an
    ESC or BEL in a task must not reach a file that someone later `cat`s to a terminal."""
    return clean(redact(text))


def _scrub(value: object, written: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return written(value)
    if isinstance(value, list | tuple):
        return [_scrub(item, written) for item in value]
    if isinstance(value, dict):
        return {_scrub(key, written): _scrub(item, written) for key, item in value.items()}
    return value


def redacted(record: RunRecord, written: Callable[[str], str] = scrubbed_text) -> RunRecord:
    """A copy of the record with every piece of text passed through redact (and text.clean).

    `written` does it: `scrubbed_text`, or a run's `Redactions` that did part of it ahead.
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
        agents=[redacted_agent(agent, written) for agent in record.agents],
        failures=[
            replace(failure, name=written(failure.name), reason=written(failure.reason))
            for failure in record.failures
        ],
        sandbox=[written(layer) for layer in record.sandbox],
        warnings=[written(warning) for warning in record.warnings],
        outputs={written(name): written(text) for name, text in record.outputs.items()},
    )


def redacted_agent(
    agent: AgentRecord, written: Callable[[str], str] = scrubbed_text
) -> AgentRecord:
    """A copy of one agent's record with every text in it `written`."""
    return replace(
        agent,
        name=written(agent.name),
        role=written(agent.role),
        kind=written(agent.kind),
        error=written(agent.error),
        source=written(agent.source),
        inputs=[written(name) for name in agent.inputs],
        output=written(agent.output),
    )


def _rewrite(path: Path, text: str) -> Path:
    """Replace a run file whole (a new file renamed over it): a reader sees one or the other."""
    fresh = path.with_name(f".{path.name}.{os.getpid()}.new")
    descriptor = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        fresh.replace(path)
    except BaseException:
        fresh.unlink(missing_ok=True)
        raise
    return path


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
