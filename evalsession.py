"""evalsession.py — `agentgod eval` at the command line.

A thin layer over evaluation.py and evalreport.py: read the suite (a file, a built-in, or the
user's archive), record the eval, run it with its progress shown where a person watches, and
print the table (or, with `--json`, one object). `eval show [ID]` draws a recorded eval again,
case by case; `eval resume ID` runs what it left unfinished; `eval compare ID1 ID2` says what
changed between two; `eval list` lists them. main dispatches here; errors reach main as usual.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from agentgod import cli, config, evalrecord, evalreport
from agentgod.evalrecord import EvalRow
from agentgod.kinds import BatchStatus
from agentgod.replies import BatchProgress
from agentgod.ui import PlainUI

if TYPE_CHECKING:
    from agentgod.session import Session


def run(session: Session, invocation: cli.Invocation) -> int:
    """Carry out `eval ...`; returns the exit code."""
    action = invocation.verb or "run"
    if action == "list":
        rows = evalrecord.listing()
        if invocation.json:
            cli.print_json({"evals": rows})
        else:
            session.ui.eval_list(rows)
        return cli.EXIT_OK
    if action == "show":
        return show(session, invocation)
    if action == "compare":
        return compare(session, invocation)
    config.check_home()
    if action == "resume":
        return resume(session, invocation)
    return run_new(session, invocation)


class _Watcher:
    """The eval's progress to the ui (nothing with --json), its warnings to stderr."""

    def __init__(self, session: Session, shown: bool) -> None:
        self.session = session
        self.shown = shown

    def progress(self, progress: BatchProgress) -> None:
        if self.shown:
            self.session.ui.batch_progress(progress)

    def warn(self, text: str) -> None:
        self.session.warn(text)


def _ui(session: Session, invocation: cli.Invocation) -> PlainUI:
    """The session's ui, silent with --json (stdout then holds only the one object)."""
    ui = session.ui
    if invocation.json:
        ui.quiet = True
    return ui


def _refused(session: Session, invocation: cli.Invocation, headline: str, lines: list[str]) -> int:
    """A suite or a request that cannot be run: said whole, nothing spent; exit 2."""
    advice = "\n".join(lines)
    if invocation.json:
        detail = {"type": "usage", "headline": headline, "advice": advice, "detail": ""}
        cli.print_json({"ok": False, "error": detail})
    session.ui.problem(headline, advice, "")
    return cli.EXIT_USAGE


def run_new(session: Session, invocation: cli.Invocation) -> int:
    """`agentgod eval SUITE` or `agentgod eval --from-history N`."""
    from agentgod import batch, evalsuite, evaluation

    settings = session.settings()
    try:
        arms = evaluation.parse_arms(invocation.arms)
        eval_id = evalrecord.new_eval_id()
        if invocation.from_history is not None:
            suite = evalsuite.from_history(invocation.from_history, settings)
        else:
            suite = evalsuite.load(
                invocation.verb_arg or "",
                folder=evaluation.folder(eval_id) / "files",
                settings=settings,
                limit=invocation.limit,
            )
    except (evalsuite.SuiteError, evaluation.EvalError) as error:
        lines = getattr(error, "lines", None) or [
            f"arms: {', '.join(evaluation.ARMS)} (single always runs)"
        ]
        return _refused(session, invocation, str(error), lines)
    for note in suite.notes:
        session.warn(note)
    try:
        session.ensure_key()  # once the suite is known to hold cases: a bad one needs no key
    except BaseException:
        shutil.rmtree(evaluation.folder(eval_id), ignore_errors=True)  # no eval was started
        raise
    parallel = invocation.parallel or batch.default_parallel()
    budget = invocation.budget if invocation.budget is not None else settings.budget_usd
    options: dict[str, Any] = {
        "parallel": parallel,
        "budget_usd": budget,
        "model": settings.model,
        "effort": settings.effort.value,
        "flags": cli.run_flags(invocation),
        "limit": invocation.limit,
    }
    record = evaluation.start(
        suite,
        arms,
        options,
        eval_id=eval_id,
        batch_options=batch.Options(
            parallel=parallel,
            budget_usd=budget,
            flags=cli.run_flags(invocation),
            models=batch.capability_models(settings),
        ),
    )
    return _sit(session, invocation, record, parallel, budget)


def _load(ref: str | None) -> EvalRow | None:
    try:
        return evalrecord.load(ref)
    except ValueError as error:
        raise cli.UsageError(str(error), "see 'agentgod eval list'") from None


def resume(session: Session, invocation: cli.Invocation) -> int:
    """`agentgod eval resume ID`: only what is unfinished, nothing paid for twice; --parallel
    and --budget (a new cap for the whole eval, earlier sittings included) may change."""
    record = _load(invocation.verb_arg)
    if record is None:
        missing = f"There is no eval {invocation.verb_arg}."
        return session.missing(missing, "See agentgod eval list.")
    session.ensure_key()
    parallel = invocation.parallel or int(record.options.get("parallel") or 1)
    budget = (
        invocation.budget if invocation.budget is not None else record.options.get("budget_usd")
    )
    return _sit(session, invocation, record, parallel, budget)


def _sit(
    session: Session,
    invocation: cli.Invocation,
    record: EvalRow,
    parallel: int,
    budget: float | None,
) -> int:
    from agentgod import evaluation

    ui = _ui(session, invocation)
    ui.info(
        f"eval {record.eval_id}: {len(record.cases)} cases x {len(record.arms)} arms "
        f"({', '.join(record.arms)}), {parallel} at a time"
    )
    sitting = evaluation.Sitting(
        record,
        evaluation.SittingOptions(parallel, budget, dict(session.overrides)),
        settings=session.settings(),
        watcher=_Watcher(session, not invocation.json),
        listen=cli.listen_address(invocation.listen) if invocation.listen else None,
    )
    code = cli.EXIT_OK
    try:
        record = sitting.run()
    except KeyboardInterrupt as stop:
        record = sitting.record
        code = cli.EXITS_BY_SIGNAL.get(getattr(stop, "signum", 2), cli.EXIT_INTERRUPTED)
    except evaluation.EvalError as error:
        session.ui.problem(str(error), "", "")
        return cli.EXIT_FAILED
    _answer(session, invocation, record)
    if code == cli.EXIT_OK and record.status is not BatchStatus.DONE:
        code = cli.EXIT_FAILED
    return code


def _answer(session: Session, invocation: cli.Invocation, record: EvalRow) -> None:
    report = evalreport.report(record)
    if invocation.json:
        cli.print_json({"ok": record.status is BatchStatus.DONE, **report})
    else:
        session.ui.eval_report(report)


def show(session: Session, invocation: cli.Invocation) -> int:
    """`agentgod eval show [ID]`: the eval (the newest without an ID), then case by case."""
    record = _load(invocation.verb_arg)
    if record is None:
        what = f"eval {invocation.verb_arg}" if invocation.verb_arg else "eval yet"
        return session.missing(f"There is no {what}.", "Start one with agentgod eval SUITE.")
    report = evalreport.report(record)
    if invocation.json:
        cli.print_json({"ok": record.status is BatchStatus.DONE, **report})
        return cli.EXIT_OK
    session.ui.eval_report(report)
    session.ui.eval_cases(report)
    return cli.EXIT_OK


def compare(session: Session, invocation: cli.Invocation) -> int:
    """`agentgod eval compare ID1 ID2`: ID2's scores against ID1's, case by case."""
    before, after = _load(invocation.verb_arg), _load(invocation.verb_arg2)
    for ref, found in ((invocation.verb_arg, before), (invocation.verb_arg2, after)):
        if found is None:
            return session.missing(f"There is no eval {ref}.", "See agentgod eval list.")
    assert before is not None and after is not None
    comparison = evalreport.compare(before, after)
    if invocation.json:
        cli.print_json(comparison)
    else:
        session.ui.eval_comparison(comparison)
    return cli.EXIT_OK
