"""cli.py — the command-line contract.

Imports only `kinds` from the project (standard library only), and only to build the parser, so
`--version`, `--help` and usage errors answer before any dependency is installed, even as
`python cli.py` in a checkout. `parse` turns argv into an `Invocation`; `overrides` says which
settings its flags set, by the setting's variable name, so a flag and a `.env` value take the same
road into config.settings() (the flag winning) and there is no second configuration system to keep
in sync — without writing anything into the process's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import signal
import sys
from dataclasses import dataclass
from typing import NoReturn, TextIO

__version__ = "0.1.0"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_HANGUP = 129
"""SIGHUP (the terminal closed): 128 + the signal's number, as a shell reports it."""
EXIT_INTERRUPTED = 130
"""SIGINT (Ctrl-C)."""
EXIT_TERMINATED = 143
"""SIGTERM (a polite kill)."""
EXIT_PIPE = 141
"""SIGPIPE: the reader of stdout went away (`agentgod history | head -1`); said nothing."""
EXITS_BY_SIGNAL: dict[int, int] = {
    signal.SIGHUP: EXIT_HANGUP,
    signal.SIGINT: EXIT_INTERRUPTED,
    signal.SIGTERM: EXIT_TERMINATED,
}
"""The exit code of a run a stop signal ended, by the signal."""

VERBS = ("library", "history", "stats", "last", "forget", "show", "retry", "key", "ui", "models")
VERB_USAGE: dict[str, str] = {"history": "[N]", "forget": "NAME", "show": "[RUN]", "retry": "[RUN]"}
"""What follows each verb in `--help` (and in README's table of commands, which a test holds to
it); a verb not named takes nothing, and `key` its actions."""
BATCH_ACTIONS = ("show", "resume")
"""`agentgod batch show [ID]` and `batch resume ID`; any other word after batch is its FILE."""
EVAL_ACTIONS = ("show", "resume", "compare", "list")
"""`agentgod eval show [ID]`, `eval resume ID`, `eval compare ID1 ID2`, `eval list`; any other
word after eval is its SUITE."""
MANY_USAGES = (
    "batch FILE|-",
    "batch show [ID]",
    "batch resume ID",
    "gateway",
    "eval SUITE",
    "eval --from-history N",
    "eval show [ID]",
    "eval resume ID",
    "eval compare ID1 ID2",
    "eval list",
)
"""The verbs of many runs as `--help` lists them, after the others (`_many`, `_eval_words`)."""
MAX_PARALLEL = 64
RUN_ID = re.compile(r"[0-9a-f]{8}")
"""A whole run id (what --run-id must be)."""
LISTEN = re.compile(r"(?P<host>[^\s:]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})")
KEY_ACTIONS = ("set", "check")
"""`agentgod key set` saves a key it has tested; `key check` tests the one configured."""
SHELLS = ("bash", "zsh", "fish")
COMPLETE = "--complete"
"""`agentgod --complete runs|agents|code WORDS…`: the values a completion script offers, one a
line; first on the command line or not at all, and in no help (it is the scripts')."""
RUN_VERBS = ("show", "retry")
ALL_VERBS = (*VERBS, "batch", "gateway", "eval")
"""Every word that is a command when it begins the command line."""
"""Verbs whose one optional word names a run (its id, or a unique prefix of it)."""
RUN_REF = re.compile(r"[0-9a-f]{4,8}")
"""What a run id, or a prefix of one that names a run, looks like."""
PROMPT_ONLY = ("help", "cost", "clear", "new", "quit", "exit")
"""Slash commands that mean something only at the interactive prompt."""
HINT = "try 'agentgod --help'"

# Invisible characters that editors and clipboards smuggle into piped text.
_INVISIBLE = dict.fromkeys(map(ord, "\ufeff\u200b\u200c\u200d\u2060\u180e"), None)


class UsageError(Exception):
    """The command line cannot be understood; exit 2 with one line and a hint."""

    def __init__(self, message: str, hint: str = HINT) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Invocation:
    """What the user asked for, fully parsed."""

    mode: str
    """"task" (text given), "stdin" (read the task from stdin), "repl", "verb", "version",
    "completion" (its shell in `task`), "complete" (what to list for a completion script in
    `task`: runs, agents or code), "batch" (its action in `verb`: run, show or resume; its FILE
    or ID in `verb_arg`), "gateway" or "eval"."""
    task: str | None = None
    """The task text for mode "task"."""
    verb: str | None = None
    """library, history, stats, last or forget, for mode "verb"."""
    verb_arg: str | None = None
    """N for history, NAME for forget."""
    plain: bool = False
    """No colour, no live display (--plain)."""
    quiet: bool = False
    """Only the answer (and errors) (-q/--quiet)."""
    json: bool = False
    """One JSON object on stdout (--json)."""
    model: str | None = None
    fallbacks: tuple[str, ...] = ()
    """Models to try in order when MODEL fails (--fallback, repeatable: sets MODEL_FALLBACKS)."""
    effort: str | None = None
    council: str | None = None
    keep: bool | None = None
    """True with --keep, False with --discard, None to ask."""
    no_input: bool = False
    """Never ask the person anything (--no-input)."""
    budget: float | None = None
    """Spending cap in USD (--budget)."""
    files: tuple[str, ...] = ()
    """Paths to attach, as given (--file PATH, repeatable); `@path` in the task adds more."""
    out: str | None = None
    """A folder to copy the run's artifacts into (--out DIR)."""
    no_web: bool = False
    """No agent may search or read the web this run (--no-web: sets WEB=off)."""
    resume: str | None = None
    """Continue this run's conversation (--resume RUN); "last" for -c/--continue."""
    code: str | None = None
    """show: print the code the model wrote for this agent (--code NAME)."""
    full: bool = False
    """show --code: the whole file that ran, the trusted runtime around the model's code too."""
    replay: bool = False
    """show: replay the run's live display from its event log (--replay)."""
    parallel: int | None = None
    """batch: how many runs at once (--parallel N)."""
    engine: str | None = None
    """batch: where the runs run, local or ray (--engine)."""
    listen: str | None = None
    """batch and gateway: the HOST:PORT the gateway listens on (--listen)."""
    gateway_url: str | None = None
    """batch: the URL the runs reach the gateway at, when not where it listens (--gateway-url)."""
    run_id: str | None = None
    """The new run's id, chosen by whoever started it (a batch: --run-id)."""
    html: str | None = None
    """show: write the run's page (--html [FILE]): None when not asked, "" for the default
    place (stdout when it is no terminal, else agentgod-run-<id>.html here), "-" for stdout."""
    trace: str | None = None
    """show: write the run's trace as OTLP JSON into this file, "-" for stdout (--trace FILE)."""
    port: int | None = None
    """ui: the port to listen on (--port N); None for any free one."""
    arms: str | None = None
    """eval: the arms to run, comma-separated (--arms)."""
    from_history: int | None = None
    """eval: take the last N tasks of the history as the suite (--from-history N)."""
    limit: int | None = None
    """eval: only the suite's first N cases (--limit N)."""
    verb_arg2: str | None = None
    """eval compare: the second eval's ID."""
    words: tuple[str, ...] = ()
    """complete: the command line being completed (the shell's words)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _positive_dollars(text: str) -> float:
    """A budget the BUDGET_USD setting accepts (kinds.BUDGET_USD_RANGE): the flag is the setting,
    so a value the setting would refuse is this flag's usage error, not a configuration one."""
    from agentgod.kinds import BUDGET_USD_RANGE

    low, high = BUDGET_USD_RANGE
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of dollars, got {text!r}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(
            f"must be from {low:g} to {high:,.0f} dollars, got {text!r}"
        )
    return value


def _positive_count(text: str) -> int:
    if not is_positive_number(text) or int(text) > MAX_PARALLEL:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {MAX_PARALLEL}")
    return int(text)


def _positive_whole(text: str) -> int:
    if not is_positive_number(text) or int(text) > 100_000:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 100000, got {text!r}")
    return int(text)


def _port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    from agentgod.kinds import CouncilMode, Effort, EngineName

    parser = _Parser(
        prog="agentgod",
        description="An agent factory: plans, writes, guards and runs a team of LLM agents "
        "for your task, then merges and judges their answer.",
        epilog=f"verbs (only as the whole command): {' | '.join(verb_usages())}.  With no task "
        "at a terminal, an interactive prompt starts; with piped stdin, stdin is the task.",
    )
    parser.add_argument("words", nargs="*", metavar="TASK", help="the task; '-' reads stdin")
    parser.add_argument(
        "--task", metavar="TEXT", help="everything after --task is the task, flags included"
    )
    out = parser.add_argument_group("output")
    out.add_argument("--plain", action="store_true", help="no colour or live display")
    out.add_argument("-q", "--quiet", action="store_true", help="print only the answer")
    out.add_argument("--json", action="store_true", help="print one JSON object")
    run = parser.add_argument_group("this run")
    run.add_argument("-m", "--model", metavar="M", help="model id (sets MODEL)")
    run.add_argument(
        "--fallback",
        action="append",
        default=[],
        metavar="M",
        help="a model to try when the one asked fails with 429, 529, 5xx or a timeout "
        "(repeatable, in order; M@URL for one served elsewhere; sets MODEL_FALLBACKS)",
    )
    run.add_argument(
        "--effort", choices=[e.value for e in Effort], help="reasoning effort (sets LLM_EFFORT)"
    )
    run.add_argument(
        "--council", choices=[m.value for m in CouncilMode], help="adversarial review (COUNCIL)"
    )
    run.add_argument("--budget", type=_positive_dollars, metavar="USD", help="spending cap")
    run.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="attach a file or folder for the agents to read (repeatable; or @PATH in the task)",
    )
    run.add_argument("--out", metavar="DIR", help="copy the files the agents made into DIR")
    run.add_argument("--no-web", action="store_true", help="agents may not search the web")
    talk = run.add_mutually_exclusive_group()
    talk.add_argument(
        "-c",
        "--continue",
        dest="resume",
        action="store_const",
        const="last",
        help="continue the last run's conversation",
    )
    talk.add_argument("--resume", metavar="RUN", help="continue the conversation of run RUN")
    shown = parser.add_argument_group("show RUN")
    shown.add_argument(
        "--code", metavar="NAME", help="print the code the model wrote for agent NAME"
    )
    shown.add_argument(
        "--full", action="store_true", help="with --code: the whole file that ran, runtime and all"
    )
    shown.add_argument("--replay", action="store_true", help="replay the run's live display")
    shown.add_argument(
        "--html",
        nargs="?",
        const="",
        metavar="FILE",
        help="write the run as one self-contained web page (to FILE; '-' for stdout)",
    )
    shown.add_argument(
        "--trace", metavar="FILE", help="write the run's OpenTelemetry trace as OTLP JSON"
    )
    viewer = parser.add_argument_group("ui")
    viewer.add_argument(
        "--port", type=_port, metavar="N", help="the local viewer's port (default: any free one)"
    )
    keep = run.add_mutually_exclusive_group()
    keep.add_argument("--keep", action="store_true", help="keep new agents without asking")
    keep.add_argument("--discard", action="store_true", help="discard new agents without asking")
    run.add_argument("--no-input", action="store_true", help="never ask questions")
    run.add_argument("--run-id", metavar="ID", help=argparse.SUPPRESS)
    many = parser.add_argument_group("batch FILE|- | batch show [ID] | batch resume ID | gateway")
    many.add_argument(
        "--parallel", type=_positive_count, metavar="N", help="runs at once (default: 2 per core)"
    )
    many.add_argument(
        "--engine",
        choices=[e.value for e in EngineName],
        help="local (default), or ray for a cluster",
    )
    many.add_argument("--listen", metavar="HOST:PORT", help="where the key's gateway listens")
    many.add_argument(
        "--gateway-url", metavar="URL", help="how runs reach the gateway (a TLS proxy, a tunnel)"
    )
    judged = parser.add_argument_group(
        "eval SUITE | eval --from-history N | eval show [ID] | eval resume ID | "
        "eval compare ID1 ID2 | eval list"
    )
    judged.add_argument(
        "--arms",
        metavar="A,B",
        help="arms beside single: factory, factory-nojudge, factory-nocouncil, factory-warm",
    )
    judged.add_argument(
        "--from-history",
        type=_positive_whole,
        metavar="N",
        help="the suite is your last N tasks, judged pairwise",
    )
    judged.add_argument("--limit", type=_positive_whole, metavar="N", help="the first N cases")
    parser.add_argument("-V", "--version", action="store_true", help="print the version")
    parser.add_argument(
        "--completion", choices=SHELLS, help="print a shell completion script for SHELL"
    )
    return parser


def verb_usages() -> list[str]:
    """Each verb as `--help` lists it: `history [N]`, `key set|check`."""
    shapes = {**VERB_USAGE, "key": "|".join(KEY_ACTIONS)}
    return [f"{verb} {shapes[verb]}" if verb in shapes else verb for verb in VERBS] + list(
        MANY_USAGES
    )


def _split_task(argv: list[str]) -> tuple[list[str], str | None]:
    """Everything after the first --task is task text, even flag-shaped words like --json; so is
    everything after a bare `--` (POSIX: the options end there): `agentgod -- --json` is the
    task "--json", and `agentgod -- history` the task "history"."""
    for index, token in enumerate(argv):
        if token in ("--", "--task"):
            return argv[:index], " ".join(argv[index + 1 :])
        if token.startswith("--task="):
            return argv[:index], " ".join([token[len("--task=") :], *argv[index + 1 :]])
    return argv, None


VERB_WORDS: dict[str, tuple[int, int, str]] = {
    "history": (0, 1, "at most one number of runs"),
    "forget": (1, 1, "the NAME of one library agent"),
    "show": (0, 1, "at most one run id"),
    "retry": (0, 1, "at most one run id"),
    "key": (1, 1, "one action, set or check"),
}
"""How many words may follow a verb (fewest, most) and what they are; a verb not named here takes
none. Whatever the verb, a word more is a usage error, never a paid task."""
KEY_ON_THE_LINE = (
    "key set reads the key from the prompt or stdin; a key on the command line lands in your "
    "shell history"
)


def near_verb(word: str, verbs: tuple[str, ...] = ALL_VERBS) -> str | None:
    """The verb `word` is one edit away from (a letter changed, added, dropped or two swapped;
    `histroy`, `History`), else None. Short verbs (`ui`, `key`) only by case: one edit from them
    is another word (`hi`, `hey`)."""
    lowered = word.lower()
    for verb in verbs:
        if lowered == verb or (len(verb) >= 4 and _one_edit(lowered, verb)):
            return verb
    return None


def _one_edit(a: str, b: str) -> bool:
    """Whether `a` and `b` differ by exactly one edit (Damerau: a swap of neighbours is one)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diffs = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diffs) == 1:
            return True
        i = diffs[0]
        return len(diffs) == 2 and diffs[1] == i + 1 and a[i] == b[i + 1] and a[i + 1] == b[i]
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def verb_of(words: list[str]) -> tuple[str, str | None] | None:
    """A verb when the words begin with one; None for a task.

    A verb takes only the words `VERB_WORDS` allows it: one more is a usage error (`history 5 6`,
    `show a b`, `key set sk-ant-…`), because a paid run is the wrong answer to a mistyped
    command. A one-word task one edit from a verb (`histroy`) asks whether the verb was meant.
    A slash command given on the command line (`agentgod /history`) is the verb it names.
    `--task` runs any of these words as a task.
    """
    if not words:
        return None
    first = words[0]
    if first.startswith("/") and re.fullmatch(r"/[A-Za-z]+", first):
        name = first[1:].lower()
        if name in PROMPT_ONLY:
            raise UsageError(
                f"{first} is a command of the interactive prompt",
                "run 'agentgod' with no task to start the prompt",
            )
        if name not in VERBS:
            if len(words) == 1:
                near = near_verb(name)
                meant = f"; did you mean {near}?" if near else ""
                raise UsageError(f"unknown command {first}{meant}", f"verbs: {', '.join(VERBS)}")
            return None
        first = name
    elif first not in VERBS:
        near = near_verb(first) if len(words) == 1 else None
        if near is not None:
            raise UsageError(
                f"did you mean `{near}`? {first!r} is no command, and one word is no task",
                f"to run it as a task: agentgod --task {first}",
            )
        return None
    verb, rest = first, words[1:]
    fewest, most, takes = VERB_WORDS.get(verb, (0, 0, "no argument"))
    as_task = f"to run it as a task: agentgod --task {' '.join(words)}"
    if verb == "key":
        # Never echoed: the word after `key` may be the key itself.
        if rest[:1] == ["set"] and len(rest) > 1:
            raise UsageError(KEY_ON_THE_LINE, "run 'agentgod key set' and paste the key when asked")
        if not rest:
            raise UsageError("key needs an action: set or check", "e.g. 'agentgod key check'")
        if len(rest) > 1 or rest[0] not in KEY_ACTIONS:
            raise UsageError(f"key takes {takes}", "e.g. 'agentgod key check'")
        return verb, rest[0]
    if len(rest) < fewest:
        if verb == "forget":
            raise UsageError("forget needs the NAME of a library agent", "see 'agentgod library'")
        raise UsageError(f"{verb} needs {takes}", HINT)
    if len(rest) > most:
        count = f"{len(rest)} word{'s' if len(rest) > 1 else ''}"
        raise UsageError(f"{verb} takes {takes}, got {count}: {' '.join(rest)!r}", as_task)
    if not rest:
        return verb, None
    if verb in RUN_VERBS:
        if RUN_REF.fullmatch(rest[0]):
            return verb, rest[0]
        raise UsageError(
            f"{verb} takes a run id such as 3f9a2b1c (its first 4 characters are enough; see "
            f"'agentgod history'), got {rest[0]!r}",
            as_task,
        )
    if verb == "history":
        if is_positive_number(rest[0]):
            return verb, rest[0]
        raise UsageError(
            f"history takes a positive whole number of runs, got {rest[0]!r}",
            f"e.g. 'agentgod history 5'; {as_task}",
        )
    return verb, rest[0]


def parse(argv: list[str], *, stdin_is_tty: bool | None = None) -> Invocation:
    """Parse argv into an Invocation; raises UsageError (exit 2), SystemExit(0) for --help."""
    if argv[:1] == [COMPLETE] and len(argv) > 1:
        # What a completion script asks (not for people): the rest is the shell's words, as is.
        return Invocation("complete", task=argv[1], words=tuple(argv[2:]))
    head, task_text = _split_task(list(argv))
    args = build_parser().parse_intermixed_args(head)
    options = {
        "plain": args.plain,
        "quiet": args.quiet,
        "json": args.json,
        "model": args.model,
        "fallbacks": tuple(args.fallback),
        "effort": args.effort,
        "council": args.council,
        "keep": True if args.keep else (False if args.discard else None),
        "no_input": args.no_input,
        "budget": args.budget,
        "files": tuple(args.file),
        "out": args.out,
        "no_web": args.no_web,
        "resume": args.resume,
        "code": args.code,
        "full": args.full,
        "replay": args.replay,
        "parallel": args.parallel,
        "engine": args.engine,
        "listen": args.listen,
        "gateway_url": args.gateway_url,
        "run_id": args.run_id,
        "html": args.html,
        "trace": args.trace,
        "port": args.port,
        "arms": args.arms,
        "from_history": args.from_history,
        "limit": args.limit,
    }
    _check_batch_flags(args)
    if args.resume not in (None, "last") and not RUN_REF.fullmatch(args.resume):
        raise UsageError(
            f"--resume takes a run id such as 3f9a2b1c (its first 4 characters are enough), "
            f"got {args.resume!r}",
            "`agentgod history` lists the runs and their ids",
        )
    if any(not path.strip() for path in args.file):
        raise UsageError("--file needs a path")
    if args.out is not None and not args.out.strip():
        raise UsageError("--out needs a folder")
    if args.model is not None and not args.model.strip():
        raise UsageError("--model needs a model id")
    if any(not model.strip() for model in args.fallback):
        raise UsageError("--fallback needs a model id")
    if args.version:
        return Invocation("version", **options)
    if args.completion:
        return Invocation("completion", task=args.completion, **options)
    words: list[str] = args.words
    if task_text is not None:
        if words:
            raise UsageError("give the task either as words or after --task (or --), not both")
        task = _clean_task(task_text, "the task after --task (or --)")
        return Invocation("task", task=task, **options)
    evaluated = _eval_words(words, args)
    if evaluated is not None:
        action, first, second = evaluated
        return Invocation("eval", verb=action, verb_arg=first, verb_arg2=second, **options)
    if any(options[name] is not None for name in ("arms", "from_history", "limit")):
        raise UsageError("--arms, --from-history and --limit belong to 'agentgod eval'")
    many = _many(words)
    if many is not None:
        mode, action, arg = many
        viewing = [flag for flag in ("code", "replay", "html", "trace", "port") if options[flag]]
        if viewing or options["html"] is not None:
            raise UsageError(
                "--code, --replay, --html and --trace belong to 'agentgod show [RUN]', "
                "--port to 'agentgod ui'"
            )
        return Invocation(mode, verb=action, verb_arg=arg, **options)
    if any(options[name] is not None for name in ("parallel", "engine", "gateway_url")) or (
        args.listen is not None
    ):
        raise UsageError(
            "--parallel, --engine, --listen and --gateway-url belong to 'agentgod batch' "
            "(and --listen to 'agentgod gateway')"
        )
    if words == ["-"]:
        return Invocation("stdin", **options)
    if "-" in words:
        raise UsageError("'-' reads the task from stdin and cannot be mixed with other words")
    if words == ["show"] and args.html and RUN_REF.fullmatch(args.html):
        # `show --html 3f9a`: the word is the run, not a file named like one.
        words, options["html"] = ["show", args.html], ""
    verb = verb_of(words)
    shows = [
        flag for flag in ("code", "replay", "html", "trace") if options[flag] not in (None, False)
    ]
    if shows and (verb is None or verb[0] != "show"):
        raise UsageError("--code, --replay, --html and --trace belong to 'agentgod show [RUN]'")
    if len(shows) > 1:
        raise UsageError(
            f"show takes one of --code, --replay, --html and --trace, got {len(shows)}"
        )
    if args.full and args.code is None:
        raise UsageError("--full belongs to 'agentgod show RUN --code NAME'")
    if options["trace"] is not None and not str(options["trace"]).strip():
        raise UsageError("--trace needs a file ('-' for stdout)")
    if args.port is not None and (verb is None or verb[0] != "ui"):
        raise UsageError("--port belongs to 'agentgod ui'")
    if args.run_id is not None and verb is not None and verb[0] != "retry":
        raise UsageError("--run-id names one run: give it with a task, or with retry")
    if verb:
        return Invocation("verb", verb=verb[0], verb_arg=verb[1], **options)
    if words:
        return Invocation("task", task=_clean_task(" ".join(words), "the task"), **options)
    if stdin_is_tty is None:
        stdin_is_tty = sys.stdin is not None and sys.stdin.isatty()
    if stdin_is_tty and args.run_id is not None:
        raise UsageError("--run-id names one run: give it with a task, or with retry")
    return Invocation("repl" if stdin_is_tty else "stdin", **options)


def _many(words: list[str]) -> tuple[str, str, str | None] | None:
    """`batch FILE|-`, `batch show [ID]`, `batch resume ID`, `gateway`: (mode, action, arg).

    Only as the whole command line, like the other verbs: a word more than these take is a usage
    error, never a paid task (`--task` runs any of them as one).
    """
    if not words or words[0] not in ("batch", "gateway"):
        return None
    as_task = f"to run it as a task: agentgod --task {' '.join(words)}"
    if words[0] == "gateway":
        if len(words) > 1:
            raise UsageError(f"gateway takes no argument, got {words[1]!r}", as_task)
        return "gateway", "serve", None
    rest = words[1:]
    if not rest:
        raise UsageError(
            "batch needs a FILE of tasks, one JSON object a line ('-' reads stdin)",
            "e.g. agentgod batch tasks.jsonl; or agentgod batch show ID, batch resume ID",
        )
    if rest[0] in BATCH_ACTIONS and len(rest) <= 2:
        ref = rest[1] if len(rest) == 2 else None
        if ref is not None and not RUN_REF.fullmatch(ref):
            raise UsageError(
                f"batch {rest[0]} takes a batch id such as 3f9a2b1c, got {ref!r}", as_task
            )
        if rest[0] == "resume" and ref is None:
            raise UsageError("batch resume needs the batch's ID", "see 'agentgod batch show'")
        return "batch", rest[0], ref
    if len(rest) == 1:
        if not rest[0].strip():
            raise UsageError("batch needs a FILE of tasks")
        return "batch", "run", rest[0]
    count = f"{len(rest)} words"
    raise UsageError(
        f"batch takes one FILE, or show [ID] or resume ID; got {count}: {' '.join(rest)!r}",
        as_task,
    )


def _eval_words(
    words: list[str], args: argparse.Namespace
) -> tuple[str, str | None, str | None] | None:
    """`eval SUITE`, `eval --from-history N`, `eval show [ID]`, `eval resume ID`,
    `eval compare ID1 ID2`, `eval list`: (action, arg, second arg). Only as the whole command
    line; `--task` runs such words as a task."""
    if not words or words[0] != "eval":
        return None
    as_task = f"to run it as a task: agentgod --task {' '.join(words)}"
    rest = words[1:]
    viewing = [flag for flag in ("code", "replay", "trace", "port") if getattr(args, flag)]
    if viewing or args.html is not None or args.run_id is not None:
        raise UsageError("--code, --replay, --html, --trace, --port and --run-id are not eval's")
    if args.engine is not None or args.gateway_url is not None:
        raise UsageError("an eval runs on this machine: --engine and --gateway-url are batch's")
    if rest and rest[0] in EVAL_ACTIONS:
        action, refs = rest[0], rest[1:]
        wanted = {"show": (0, 1), "resume": (1, 1), "compare": (2, 2), "list": (0, 0)}[action]
        if not wanted[0] <= len(refs) <= wanted[1]:
            shapes = {
                "show": "eval show [ID]",
                "resume": "eval resume ID",
                "compare": "eval compare ID1 ID2",
                "list": "eval list",
            }
            raise UsageError(f"that is not {shapes[action]}", "see 'agentgod eval list'")
        for ref in refs:
            if not RUN_REF.fullmatch(ref):
                raise UsageError(f"eval {action} takes eval ids such as 3f9a2b1c, got {ref!r}")
        if args.from_history is not None or args.limit is not None or args.arms is not None:
            raise UsageError(f"--arms, --from-history and --limit start an eval, not {action}")
        return action, refs[0] if refs else None, refs[1] if len(refs) > 1 else None
    if args.from_history is not None:
        if rest:
            raise UsageError("give a SUITE or --from-history N, not both", as_task)
        return "run", None, None
    if len(rest) != 1 or not rest[0].strip():
        raise UsageError(
            "eval needs a SUITE: a JSONL file of cases, adversarial or humaneval",
            "e.g. agentgod eval adversarial; or agentgod eval --from-history 20",
        )
    return "run", rest[0], None


def _check_batch_flags(args: argparse.Namespace) -> None:
    if args.run_id is not None and not RUN_ID.fullmatch(args.run_id):
        raise UsageError(f"--run-id takes a run id of 8 hex characters, got {args.run_id!r}")
    if args.listen is not None and not LISTEN.fullmatch(args.listen):
        raise UsageError(f"--listen takes HOST:PORT, such as 127.0.0.1:8787, got {args.listen!r}")
    if args.gateway_url is not None and not re.fullmatch(r"https?://\S+", args.gateway_url):
        raise UsageError(f"--gateway-url takes an http(s) URL, got {args.gateway_url!r}")


def listen_address(text: str) -> tuple[str, int]:
    """--listen's HOST:PORT as a (host, port) pair (an IPv6 host without its brackets)."""
    match = LISTEN.fullmatch(text)
    if match is None or not 0 <= int(match["port"]) <= 65535:
        raise UsageError(f"--listen takes HOST:PORT, got {text!r}")
    return match["host"].strip("[]"), int(match["port"])


def _clean_task(text: str, source: str) -> str:
    cleaned = text.translate(_INVISIBLE).strip()
    if not cleaned:
        raise UsageError(f"{source} is empty")
    return cleaned


def read_task(stream: TextIO | None) -> str:
    """The task from stdin: UTF-8, BOM and zero-width characters removed; empty, or bytes that
    are no UTF-8 text, is a usage error."""
    source = "the task read from stdin"
    raw = getattr(stream, "buffer", None)
    if raw is None:
        text = stream.read() if stream is not None else ""
    else:
        data = raw.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UsageError(
                f"{source} is not UTF-8 text (byte 0x{data[error.start]:02x} at offset "
                f"{error.start})",
                "save the text as UTF-8; attach other files with @PATH or --file PATH",
            ) from None
    return _clean_task(text, source)


def overrides(invocation: Invocation) -> dict[str, str]:
    """The settings the flags set, by variable name (config.settings reads them before the
    environment and .env); a flag not given sets nothing."""
    given = {
        "MODEL": invocation.model,
        "MODEL_FALLBACKS": ",".join(invocation.fallbacks) if invocation.fallbacks else None,
        "LLM_EFFORT": invocation.effort,
        "COUNCIL": invocation.council,
        "BUDGET_USD": None if invocation.budget is None else repr(invocation.budget),
        "WEB": "off" if invocation.no_web else None,
    }
    return {name: value.strip() for name, value in given.items() if value is not None}


def run_flags(invocation: Invocation) -> list[str]:
    """The flags that shape a run (model, fallbacks, effort, council, web), as each run a batch
    or an eval starts is given them: the runs run as the command line asked."""
    flags: list[str] = []
    for flag, value in (
        ("--model", invocation.model),
        ("--effort", invocation.effort),
        ("--council", invocation.council),
    ):
        if value is not None:
            flags += [flag, value]
    for model in invocation.fallbacks:
        flags += ["--fallback", model]
    if invocation.no_web:
        flags.append("--no-web")
    return flags


def completion_script(shell: str) -> str:
    """A completion script for `shell`, made from the parser itself, so it never lags a flag.

    bash and zsh (through bashcompinit) complete flags and verbs; fish gets one `complete` line
    per flag and verb.
    """
    parser = build_parser()
    flags = sorted(
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--")
    )
    values = {  # a flag's closed set of values, from the parser itself
        option: [str(choice) for choice in action.choices]
        for action in parser._actions
        if action.choices
        for option in action.option_strings
        if option.startswith("--")
    }
    if shell == "fish":
        lines = [
            f"complete -c agentgod -f -n __fish_use_subcommand -a {verb}" for verb in ALL_VERBS
        ]
        lines += [
            f"complete -c agentgod -l {flag[2:]}"
            + (f" -xa '{' '.join(values[flag])}'" if flag in values else "")
            for flag in flags
        ]
        asked = "(agentgod --complete {} (commandline -opc) 2>/dev/null)"
        lines += [
            "complete -c agentgod -f -n '__fish_seen_subcommand_from key' -a 'set check'",
            "complete -c agentgod -f -n '__fish_seen_subcommand_from show retry' "
            f"-a '{asked.format('runs')}'",
            "complete -c agentgod -f -n '__fish_seen_subcommand_from forget' "
            f"-a '{asked.format('agents')}'",
            f"complete -c agentgod -l resume -xa '{asked.format('runs')}'",
            f"complete -c agentgod -l code -xa '{asked.format('code')}'",
        ]
        return "\n".join(lines) + "\n"
    words = " ".join([*ALL_VERBS, *flags])
    cases = "".join(
        f'        {flag}) COMPREPLY=($(compgen -W "{" ".join(choices)}" -- "$word")); return;;\n'
        for flag, choices in values.items()
    )
    asked = '$(agentgod --complete {} "${{COMP_WORDS[@]}}" 2>/dev/null)'
    script = (
        "_agentgod() {\n"
        '    local word="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"\n'
        '    case "$prev" in\n'
        f"{cases}"
        f'        key) COMPREPLY=($(compgen -W "{" ".join(KEY_ACTIONS)}" -- "$word")); return;;\n'
        f'        show|retry|--resume) COMPREPLY=($(compgen -W "{asked.format("runs")}" '
        '-- "$word")); return;;\n'
        f'        forget) COMPREPLY=($(compgen -W "{asked.format("agents")}" -- "$word")); '
        "return;;\n"
        f'        --code) COMPREPLY=($(compgen -W "{asked.format("code")}" -- "$word")); '
        "return;;\n"
        "        --file|--out|--html|--trace) COMPREPLY=(); return;;\n"
        "    esac\n"
        f'    COMPREPLY=($(compgen -W "{words}" -- "$word"))\n'
        "}\n"
        "complete -o default -F _agentgod agentgod\n"
    )
    if shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def is_positive_number(text: str) -> bool:
    """A count of runs: digits only, above zero (so "-3", "0" and "abc" are not)."""
    return text.isascii() and text.isdigit() and int(text) > 0


_TERMINAL_UNSAFE = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What JSON leaves raw (ensure_ascii off) that a terminal acts on: DEL and C1 controls, bidi
controls. Escaped as \\uXXXX, the same JSON to a program."""


def not_found(headline: str, advice: str) -> dict[str, object]:
    """The `--json` reply for a run, a batch or an eval that is not there."""
    error = {"type": "not_found", "headline": headline, "advice": advice, "detail": ""}
    return {"ok": False, "error": error}


def print_json(data: object) -> None:
    """The JSON contract: stdout carries exactly one object and a newline."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    text = _TERMINAL_UNSAFE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def usage_error(error: UsageError, stream: TextIO | None = None) -> int:
    """Print one line and a hint on stderr; return the usage exit code."""
    stream = stream or sys.stderr
    print(f"agentgod: {error}", file=stream)
    print(f"hint: {error.hint}", file=stream)
    return EXIT_USAGE


def answer_early(argv: list[str]) -> Invocation | int:
    """Answer what needs nothing installed — usage errors, --version, --completion (and --help,
    which exits) — and return the exit code; anything else comes back as its Invocation."""
    try:
        invocation = parse(argv)
    except UsageError as error:
        if "--json" in _split_task(argv)[0]:
            # The JSON contract holds for usage errors too: one object on stdout, exit 2.
            headline = {"type": "usage", "headline": str(error), "advice": error.hint, "detail": ""}
            print(json.dumps({"ok": False, "task": "", "error": headline}))
        return usage_error(error)
    if invocation.mode == "version":
        print(f"agentgod {__version__}")
        return EXIT_OK
    if invocation.mode == "completion":
        sys.stdout.write(completion_script(invocation.task or "bash"))
        return EXIT_OK
    return invocation


if __name__ == "__main__":
    # `python cli.py …`: the early answers here, before anything is imported; the rest is
    # `python -m agentgod …`. In a checkout, the checkout is the package, importable as
    # `agentgod` through its .pkg link.
    if not __package__:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), ".pkg"))
    answered = answer_early(sys.argv[1:])
    if isinstance(answered, int):
        sys.exit(answered)
    runpy.run_module("agentgod", run_name="__main__", alter_sys=True)
