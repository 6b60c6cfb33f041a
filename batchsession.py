"""batchsession.py — `agentgod batch` and `agentgod gateway` at the command line.

A thin layer over batch.py: read the tasks (a file or stdin), record the batch, run it with the
engine asked for, print one JSON line per task as it finishes and a summary line at the end (the
answer, on stdout), and show the progress where a person watches (the ui; quiet in pipes).
`batch show [ID]` draws a recorded batch, `batch resume ID` runs what it left unfinished, and
`gateway` runs the key holder on its own. main dispatches here; errors reach main as usual.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agentgod import batch, batchrecord, cli, config, gateway, llm
from agentgod.kinds import BatchStatus, EngineName, TaskStatus
from agentgod.ledger import Usage
from agentgod.replies import BatchProgress, BatchTaskLine
from agentgod.ui import PlainUI, isatty

if TYPE_CHECKING:
    from agentgod.session import Session

TOKEN_FILE = "gateway-admin-token"
"""Where `agentgod gateway` leaves the token that mints capabilities (0600, in the home)."""


def run(session: Session, invocation: cli.Invocation) -> int:
    """Carry out `batch ...` or `gateway`; returns the exit code."""
    if invocation.mode == "gateway":
        return serve_gateway(session, invocation)
    action = invocation.verb or "run"
    if action == "show":
        return show(session, invocation)
    config.check_home()
    if action == "resume":
        return resume(session, invocation)
    return run_new(session, invocation)


# ---- the output ------------------------------------------------------------------------------


class _Printer:
    """The batch's events: each task's line on stdout, the progress to the ui."""

    def __init__(self, ui: PlainUI) -> None:
        self.ui = ui

    def task_finished(self, line: BatchTaskLine) -> None:
        if line["status"] == TaskStatus.INVALID and "error" in line:
            self.ui.warn(line["error"]["headline"])
        self.ui.output_line(json.dumps(line, ensure_ascii=False, default=str))

    def progress(self, progress: BatchProgress) -> None:
        self.ui.batch_progress(progress)


def _ui(session: Session) -> PlainUI:
    """The session's ui, quiet when stdout is not a terminal (a pipe reads only the lines)."""
    ui = session.ui
    if not isatty(sys.stdout):
        ui.quiet = True
    return ui


def _engine(name: str, options: batch.Options, settings: config.Settings) -> batch.Engine:
    if name == EngineName.RAY:
        from agentgod import rayengine

        return rayengine.RayEngine(options.parallel, settings)
    return batch.LocalEngine()


def _sit(session: Session, invocation: cli.Invocation, record: batchrecord.BatchRow) -> int:
    """Run the record's unfinished tasks; print the summary; the exit code."""
    options = batch.Options.from_json(record.options)
    ui = _ui(session)
    ui.info(
        f"batch {record.batch_id}: {len(record.unfinished())} tasks to run, "
        f"{options.parallel} at a time ({options.engine})"
    )
    listen = cli.listen_address(invocation.listen) if invocation.listen else None
    remote = os.environ.get("RAY_ADDRESS")
    if options.engine == EngineName.RAY and remote and not invocation.gateway_url:
        session.warn(
            "workers on other machines reach the gateway only through --gateway-url (a TLS "
            "proxy or a tunnel to --listen); without it, only this machine's workers can"
        )
    settings = session.settings()
    sitting = batch.Batch(
        record,
        options,
        engine=_engine(options.engine, options, settings),
        events=_Printer(ui),
        settings=settings,
        listen=listen,
        gateway_url=invocation.gateway_url,
    )
    code = cli.EXIT_OK
    try:
        finished = sitting.run()
    except KeyboardInterrupt as stop:
        finished = sitting.batch
        code = cli.EXITS_BY_SIGNAL.get(getattr(stop, "signum", 2), cli.EXIT_INTERRUPTED)
    line = batch.summary(finished)
    ui.output_line(json.dumps(line))
    ui.batch_finished(line)
    if code == cli.EXIT_OK and (
        finished.status is not BatchStatus.DONE
        or line["failed"]
        or line["capped"]
        or line["invalid"]
        or line["unfinished"]
    ):
        code = cli.EXIT_FAILED
    return code


def run_new(session: Session, invocation: cli.Invocation) -> int:
    """`agentgod batch FILE|-`."""
    source = invocation.verb_arg or "-"
    settings = session.settings()
    if invocation.out and Path(invocation.out).expanduser().is_file():
        raise cli.UsageError(f"--out {invocation.out}: it is a file, not a folder")
    try:
        if source == "-":
            lines = sys.stdin.read().splitlines()
        else:
            lines = Path(source).expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise cli.UsageError(f"cannot read the tasks from {source}: {reason}") from None
    rows = batch.read_lines(lines, base=batch.source_base(source), settings=settings)
    if not rows:
        raise cli.UsageError(f"{source} holds no tasks", 'one JSON object a line: {"task": "..."}')
    session.ensure_key()  # once the tasks are read: a file that cannot be read needs no key
    options = batch.Options(
        parallel=invocation.parallel or batch.default_parallel(),
        budget_usd=invocation.budget if invocation.budget is not None else settings.budget_usd,
        out=str(Path(invocation.out).expanduser().resolve()) if invocation.out else None,
        flags=[*cli.run_flags(invocation), *(["--keep"] if invocation.keep is True else [])],
        models=batch.capability_models(settings),
        engine=invocation.engine or EngineName.LOCAL.value,
    )
    record = batch.start(rows, source, options.to_json())
    return _sit(session, invocation, record)


def _load(ref: str | None) -> batchrecord.BatchRow | None:
    try:
        return batchrecord.load(ref)
    except ValueError as error:
        raise cli.UsageError(str(error), "see 'agentgod batch show'") from None


def resume(session: Session, invocation: cli.Invocation) -> int:
    """`agentgod batch resume ID`: only the tasks not yet finished; --parallel, --budget and
    --engine may change how."""
    record = _load(invocation.verb_arg)
    if record is None:
        missing = f"There is no batch {invocation.verb_arg}."
        return session.missing(missing, "See agentgod batch show.")
    options = batch.Options.from_json(record.options)
    if invocation.parallel:
        options.parallel = invocation.parallel
    if invocation.budget is not None:
        options.budget_usd = invocation.budget
    if invocation.engine:
        options.engine = invocation.engine
    record.options = options.to_json()
    if not record.unfinished():
        session.ui.info(f"batch {record.batch_id}: every task has finished; nothing to resume")
        session.ui.output_line(json.dumps(batch.summary(record)))
        return cli.EXIT_OK
    session.ensure_key()
    return _sit(session, invocation, record)


def show(session: Session, invocation: cli.Invocation) -> int:
    """`agentgod batch show [ID]`: the batch (the newest without an ID), task by task."""
    record = _load(invocation.verb_arg)
    if record is None:
        what = f"batch {invocation.verb_arg}" if invocation.verb_arg else "batch yet"
        return session.missing(f"There is no {what}.", "Start one with agentgod batch FILE.")
    if invocation.json:
        cli.print_json(record.to_json())
    else:
        session.ui.stored_batch(record.to_json())
    return cli.EXIT_OK


# ---- the gateway on its own --------------------------------------------------------------------


def serve_gateway(session: Session, invocation: cli.Invocation) -> int:
    """`agentgod gateway`: hold the key and a ledger, serve until Ctrl-C.

    Capabilities are minted over HTTP with the admin token written to the home (0600); the
    first line on stdout says where it listens and where that token is.
    """
    home = config.check_home()
    session.ensure_key()
    settings = session.settings()
    host, port = cli.listen_address(invocation.listen) if invocation.listen else ("127.0.0.1", 0)
    token = secrets.token_urlsafe(32)
    token_file = home / TOKEN_FILE
    token_file.unlink(missing_ok=True)
    token_file.touch(mode=0o600)
    token_file.write_text(token + "\n", encoding="utf-8")

    relay = llm.relay_for(settings)
    ledger = Usage(budget_usd=invocation.budget, keep_calls=False)
    with gateway.Gateway(relay, ledger, host=host, port=port, admin_token=token) as server:
        session.ui.output_line(
            json.dumps(
                {
                    "url": server.url,
                    "admin_token_file": str(token_file),
                    "budget_usd": ledger.budget_usd,
                }
            )
        )
        session.ui.info(f"gateway on {server.url}; Ctrl-C stops it")
        try:
            threading.Event().wait()  # main.run turns Ctrl-C and the stop signals into this
        except KeyboardInterrupt:
            pass
        finally:
            token_file.unlink(missing_ok=True)
    spent = ledger.cost_summary()
    session.ui.info(f"the gateway sent {spent['llm_calls']} calls for ${spent['usd']:.4f}")
    return cli.EXIT_OK
