"""main.py — the entry point: a parsed command line becomes a Session's work and an exit code.

It decides the mode (a verb, a key command, one-shot, a pipe, the REPL), checks what must hold
before anything is spent (the home, `--out`), and turns every way a run can end — an answer, a
usage error, a Ctrl-C or a signal, a failure — into the CLI contract's exit code and, with
`--json`, its one reply object. The conversation itself is session.py; the REPL's line reader,
replinput.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn, TextIO

from agentgod import cli, config, signals
from agentgod.replies import ErrorDetail
from agentgod.session import Session, stdin_is_tty
from agentgod.ui import PlainUI, isatty

STDIN_AT_A_TERMINAL = (
    "agentgod: reading the task from stdin: type or paste it, then press Ctrl-D on a line of "
    "its own (Ctrl-C to leave)"
)
LAUNCHED = time.monotonic()
"""When this process began to work for the person (its first module of ours): a one-shot run's
duration counts its start-up too."""


def cli_main() -> NoReturn:
    """The `agentgod` console script and `python -m agentgod`."""
    answered = cli.answer_early(sys.argv[1:])
    code = answered if isinstance(answered, int) else run(answered)
    # Background threads may still be waiting on a model reply, or half-way through importing
    # the pipeline (the REPL's warm-up): finalising the interpreter under them can abort it, so
    # the exit is made here, once what was written has been flushed.
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os._exit(code)


def _exit_code(stop: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP: 128 + the signal, as shells report it."""
    signum = stop.signum if isinstance(stop, signals.Stopped) else 0
    return cli.EXITS_BY_SIGNAL.get(signum, cli.EXIT_INTERRUPTED)


def run(invocation: cli.Invocation) -> int:
    """Carry out a parsed command line; returns the exit code of the CLI contract.

    SIGTERM and SIGHUP stop it the way Ctrl-C does (signals.Stopped, a KeyboardInterrupt).
    """
    with signals.stop_on_signals():
        return _run(invocation)


def _run(invocation: cli.Invocation) -> int:
    interactive = stdin_is_tty() and not invocation.no_input and invocation.mode != "stdin"
    ui = make_ui(
        plain=invocation.plain,
        quiet=invocation.quiet,
        json_mode=invocation.json,
        interactive=interactive,
    )
    if invocation.mode == "complete":
        from agentgod import verbs

        verbs.complete(invocation.task or "", invocation.words)
        return cli.EXIT_OK
    session = Session(ui, invocation, interactive)
    if invocation.mode != "repl":  # at the prompt, each run starts when Enter is pressed
        session.launched = LAUNCHED
    try:
        session.sweep()
        if invocation.mode in ("batch", "gateway"):
            from agentgod import batchsession

            return batchsession.run(session, invocation)
        if invocation.mode == "eval":
            from agentgod import evalsession

            return evalsession.run(session, invocation)
        if invocation.mode == "verb" and invocation.verb == "key":
            config.check_home()
            return session.key(invocation.verb_arg or "check")
        if invocation.mode == "verb" and invocation.verb != "retry":
            session.settle_settings()
            return session.verb(invocation.verb or "", invocation.verb_arg)
        if invocation.mode == "stdin" and stdin_is_tty():
            # `agentgod -` at a terminal: say what it waits for, rather than sit there silent.
            print(STDIN_AT_A_TERMINAL, file=sys.stderr, flush=True)
        if invocation.mode not in ("repl", "verb"):
            session.task = invocation.task or cli.read_task(sys.stdin)
        config.check_home()  # before anything is spent or started
        _check_out(invocation.out)
        # A bad setting is found now, before anything is spent; the connection to the API
        # opens while the rest of start-up goes on.
        from agentgod import llm

        llm.connect_ahead(session.settings())
        if invocation.resume:
            session.resume(invocation.resume)
        if invocation.mode == "repl":
            return session.repl()
        if invocation.mode == "verb":
            return session.retry(invocation.verb_arg)  # asks for a key once it has a run
        session.ensure_key()
        return session.answer(session.task)
    except cli.UsageError as error:
        if invocation.json:
            cli.print_json({"ok": False, "task": session.task, "error": _usage_json(error)})
        return cli.usage_error(error)
    except KeyboardInterrupt as stop:
        code = _exit_code(stop)
        with contextlib.suppress(OSError, ValueError):  # the terminal that hung up is gone
            session.fail(stop, code)
        return code
    except BrokenPipeError:
        # The reader went away (`agentgod history | head -1`): what it wanted, it has. Silence,
        # and the exit a shell reports for a pipe closed under a writer.
        return cli.EXIT_PIPE
    except Exception as error:
        return session.fail(error, cli.EXIT_FAILED)


# ---- the display -------------------------------------------------------------------------------


def make_ui(
    *,
    plain: bool = False,
    quiet: bool = False,
    json_mode: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    interactive: bool = False,
    input_stream: TextIO | None = None,
) -> PlainUI:
    """Choose the renderer once per session. --plain, AGENTGOD_PLAIN, --json, --quiet, a stdout
    that is not a terminal, a terminal rich cannot drive (TERM=dumb: its live display would show
    nothing until the end) or a missing rich all mean PlainUI. --json also silences narration,
    since stdout then carries nothing but the session's one JSON object; --quiet leaves the answer
    as plain text on stdout (problems and warnings still reach stderr)."""
    out = out or sys.stdout
    quiet = quiet or json_mode

    def build(kind: type[PlainUI]) -> PlainUI:
        return kind(
            out=out, err=err, quiet=quiet, interactive=interactive, input_stream=input_stream
        )

    if plain or quiet or _plain_requested() or not isatty(out):
        return build(PlainUI)
    try:
        from agentgod.richui import RichUI, can_drive
    except ImportError:
        return build(PlainUI)
    return build(RichUI if can_drive(out) else PlainUI)


def _plain_requested() -> bool:
    value = os.environ.get("AGENTGOD_PLAIN", "").strip().lower()
    return value not in ("", "0", "false")


# ---- the JSON contract -------------------------------------------------------------------------


def _usage_json(error: cli.UsageError) -> ErrorDetail:
    return ErrorDetail(type="usage", headline=str(error), advice=error.hint, detail="")


def _check_out(out: str | None) -> None:
    """--out must be a folder that can be written, or one that can be made; found out now, not
    after the run is paid for (nothing is left behind by looking)."""
    if out is None:
        return
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise cli.UsageError(f"--out {out}: it is a file, not a folder")
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise cli.UsageError(f"--out {out}: {existing} is a file, not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".agentgod-probe-", dir=existing))
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise cli.UsageError(
            f"--out {out}: the files could not be written there ({reason})",
            "give --out a folder you can write to",
        ) from None
