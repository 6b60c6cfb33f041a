"""verbs.py — the commands that read what earlier runs left: library, history, stats, last,
forget, and show (one run whole: its plan, every agent's inputs, output and code, its replay);
and `models`, the profiles of the models a run would call and where each came from.

They need no key and spend nothing, so a bad setting or a missing key never stops them; each
prints one JSON object with `--json`, else draws through the UI. Kept apart from the session so
`main` stays the conversation, and so these read-only views can grow (showing one run, replaying
it) without growing it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentgod import cli, config, eventlog, history, historydb, learned, library
from agentgod.agent_runtime import BODY_END, BODY_START, artifact_name_problem
from agentgod.replies import (
    HistoryRow,
    LibraryRow,
    ModelPrice,
    ModelRow,
    ModelsReply,
    StatsReply,
    TokenTotals,
)
from agentgod.runrecord import RunRecord
from agentgod.text import visible_code
from agentgod.ui import PlainUI, isatty

HISTORY_MOST = 1_000_000
"""`history N` lists at most this many runs: a larger N (twenty digits) means all of them."""


class Reader:
    """One read-only command, drawn by `ui` or printed as JSON."""

    def __init__(
        self,
        ui: PlainUI,
        *,
        json_mode: bool,
        warn: Callable[[str], None],
        settings: config.Settings | None = None,
        at_prompt: bool = False,
    ) -> None:
        self.ui = ui
        self.at_prompt = at_prompt
        """At the interactive prompt: advice names its slash commands, not the shell's."""
        self.json_mode = json_mode
        self.warn = warn
        """Where a notice about a repaired history goes (the session lists it in --json too)."""
        self.settings = settings
        """The session's settings (a trace's service name and contents); read when not given."""

    def run(
        self,
        verb: str,
        argument: str | None,
        *,
        code: str | None = None,
        full: bool = False,
        replay: bool = False,
        html: str | None = None,
        trace: str | None = None,
        port: int | None = None,
    ) -> int:
        """Carry out `verb`; the exit code of the CLI contract."""
        if verb == "show":
            return self.show_run(
                argument, code=code, full=full, replay=replay, html=html, trace=trace
            )
        if verb == "ui":
            return self.serve(port)
        if verb == "models":
            reply = models_reply(self.settings or config.settings())
            return self.show(reply, self.ui.models, "")
        if verb == "library":
            return self.show(library_rows(), self.ui.library, "The library is empty.")
        if verb == "history":
            if argument is not None and not cli.is_positive_number(argument):
                raise cli.UsageError(f"history takes a positive whole number, got {argument!r}")
            limit = min(int(argument), HISTORY_MOST) if argument else 10
            runs = [history_row(row) for row in history.history(limit)]
            return self.show(runs, self.ui.history, "No runs yet.")
        if verb == "stats":
            return self.show(stats_reply(history.stats()), self.ui.stats, "")
        if verb == "last":
            return self.last()
        if verb == "forget":
            return self.forget(argument)
        raise cli.UsageError(f"unknown verb {verb}")

    def notices(self) -> None:
        """Tell the person what had to be repaired: a damaged history.db, a damaged library
        index."""
        for notice in [*historydb.notices(), *library.notices()]:
            self.warn(notice)

    def show_run(
        self,
        ref: str | None,
        *,
        code: str | None,
        replay: bool,
        html: str | None = None,
        trace: str | None = None,
        full: bool = False,
    ) -> int:
        """One recorded run: drawn, as one JSON object, one agent's code, replayed, as a web
        page or as a trace."""
        found = find_run(ref)
        self.notices()
        if found is None:
            return self.missing(
                f"There is no run {ref}." if ref else "There are no runs yet.",
                f"{self.named('history')} lists the runs and their ids.",
            )
        if code is not None:
            return self.code(found, code, full=full)
        if replay:
            return self.replay(found)
        if html is not None:
            return self.page(found, html)
        if trace is not None:
            return self.trace(found, trace)
        if self.json_mode:
            cli.print_json(found.to_json())
        else:
            self.ui.stored_run(found.to_json())
        return cli.EXIT_OK

    def code(self, found: RunRecord, name: str, *, full: bool = False) -> int:
        """The code the model wrote for agent `name` (`full`: the whole file that ran, the
        trusted runtime around it too); `--json` always has the whole file, exactly."""
        agent = found.agent(name)
        if agent is None or not agent.source:
            names = ", ".join(a.name for a in found.agents if a.source) or "none"
            return self.missing(
                f"Run {found.run_id} has no code for an agent named {name}.",
                f"Agents of that run with code: {names}.",
            )
        if self.json_mode:
            cli.print_json({"run_id": found.run_id, "agent": name, "source": agent.source})
            return cli.EXIT_OK
        source = agent.source if full else model_part(agent.source)
        shown, flagged = visible_code(source)
        if flagged:
            lines = ", ".join(map(str, flagged[:10])) + (" and more" if len(flagged) > 10 else "")
            self.warn(
                f"the code of {name} holds invisible control or bidi characters (line "
                f"{lines}): code that reads one way in an editor can run another (Trojan "
                "Source); they are shown as escapes and <U+…> markers, and --json has the "
                "code exactly"
            )
        sys.stdout.write(shown if shown.endswith("\n") else shown + "\n")
        sys.stdout.flush()
        return cli.EXIT_OK

    def replay(self, found: RunRecord) -> int:
        """The run's live display again, from its event log, at its own pace."""
        log = eventlog.run_log(config.runs_dir(), found.run_id)
        if self.json_mode:
            raise cli.UsageError("--replay draws the display; it has no JSON form")
        self.ui.task_started(found.task)
        answers: list[str] = []

        def noted(note: eventlog.Event) -> None:
            if note.args.get("kind") == "answer":
                answers.append(str(note.args.get("text", "")))

        try:
            eventlog.replay(log, self.ui, on_note=noted)
        except FileNotFoundError:
            self.ui.task_finished()
            return self.missing(
                f"Run {found.run_id} has no event log.",
                "Runs recorded before event logs existed can be shown, not replayed.",
            )
        self.ui.task_finished()  # every phase settled, as the live display ended
        if answers:  # after the display, as the run showed it: not where the log noted it
            self.ui.answer(answers[-1])
        return cli.EXIT_OK

    def page(self, found: RunRecord, target: str) -> int:
        """The run as one self-contained web page (runpage), written to `target`."""
        from agentgod import runpage

        runs = config.runs_dir()
        folder = runs / found.run_id / "artifacts"

        def link(name: str) -> str | None:
            path = folder / name
            if artifact_name_problem(name) is None and path.is_file():
                return path.as_uri()
            return None

        events = _events(runs, found.run_id)
        text = runpage.page(found, events, run_id=found.run_id, artifact_link=link)
        return self.write_out(found, text, target, f"agentgod-run-{found.run_id}.html", "page")

    def trace(self, found: RunRecord, target: str) -> int:
        """The run's OpenTelemetry trace as OTLP JSON (otlp), written to `target`: the same
        trace an export sends."""
        import json

        from agentgod import otlp

        settings = self.settings or config.settings()
        data = otlp.trace(
            found,
            _events(config.runs_dir(), found.run_id),
            service_name=settings.service_name,
            content=settings.trace_content,
        )
        text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
        return self.write_out(found, text, target, "", "trace")

    def write_out(self, found: RunRecord, text: str, target: str, default: str, what: str) -> int:
        """`text` to stdout ("-", or no file given and stdout no terminal) or into a file
        (private to its owner, written whole or not at all); the file's path is said."""
        to_stdout = target == "-" or (not target and not isatty(sys.stdout))
        if to_stdout and self.json_mode:
            raise cli.UsageError(
                f"with --json stdout holds one JSON object; give the {what} a FILE"
            )
        if to_stdout:
            sys.stdout.write(text)
            sys.stdout.flush()
            return cli.EXIT_OK
        path = Path(target or default).expanduser()
        try:
            _write_private(path, text)
        except OSError as error:
            headline = f"Could not write the {what} of run {found.run_id} to {path}."
            advice = "Give a FILE in a folder you can write to, or '-' for stdout."
            if self.json_mode:
                detail = error.strerror or type(error).__name__
                problem = {"type": "io", "headline": headline, "advice": advice, "detail": detail}
                cli.print_json({"ok": False, "error": problem})
            self.ui.problem(headline, advice, error.strerror or "")
            return cli.EXIT_FAILED
        if self.json_mode:
            cli.print_json({"run_id": found.run_id, what: str(path.resolve())})
        else:
            self.ui.info(f"Wrote the {what} of run {found.run_id} to {path}")
        return cli.EXIT_OK

    def serve(self, port: int | None) -> int:
        """`agentgod ui`: the local, read-only viewer of every run, until Ctrl-C."""
        from agentgod import viewer

        if self.json_mode:
            raise cli.UsageError("agentgod ui serves pages; it has no JSON form")

        def show_url(url: str) -> None:  # the one line a person (or a script) must get
            sys.stdout.write(url + "\n")
            sys.stdout.flush()

        started = viewer.serve(
            port or 0, say=self.ui.info, problem=self.ui.problem, show_url=show_url
        )
        return cli.EXIT_OK if started else cli.EXIT_FAILED

    def last(self) -> int:
        found = history.last()
        self.notices()
        if found is None:
            return self.missing("There is no answer yet.", "Run a task first.")
        if self.json_mode:
            cli.print_json({"task": found.task, "answer": found.answer, "run_file": _path(found)})
        else:
            self.ui.answer(found.answer)
        return cli.EXIT_OK

    def forget(self, name: str | None) -> int:
        if not name:
            return self.missing(
                "Which agent?", f"{self.named('forget NAME')}; {self.named('library')} lists them."
            )
        if not library.forget(name):
            return self.missing(f"No agent named {name}.", f"{self.named('library')} lists them.")
        if self.json_mode:
            cli.print_json({"forgotten": name})
        else:
            self.ui.info(f"Forgot {name}.")
        return cli.EXIT_OK

    def show(self, data: Any, render: Callable[[Any], None], empty: str) -> int:
        self.notices()
        if self.json_mode:
            cli.print_json(data)
        elif not data and empty:
            self.ui.info(empty)
        else:
            render(data)
        return cli.EXIT_OK

    def named(self, command: str) -> str:
        """A command as the person would type it here: `/history` at the prompt, else
        `agentgod history`."""
        return f"/{command}" if self.at_prompt else f"`agentgod {command}`"

    def missing(self, headline: str, advice: str) -> int:
        if self.json_mode:
            cli.print_json(cli.not_found(headline, advice))
        self.ui.problem(headline, advice, "")
        return cli.EXIT_FAILED


def models_reply(settings: config.Settings) -> ModelsReply:
    """The profiles of every model `settings` may call (MODEL, FAST_MODEL, DEEP_MODEL, the
    fallbacks), each once, with what it is sent and costs and where each came from."""
    rows: list[ModelRow] = []
    roles: dict[tuple[str, str | None], list[str]] = {}
    named = [
        ("MODEL", settings.model, settings.endpoint_of(settings.model)),
        ("FAST_MODEL", settings.fast_model, settings.endpoint_of(settings.fast_model)),
        ("DEEP_MODEL", settings.deep_model, settings.endpoint_of(settings.deep_model)),
    ]
    named += [
        (f"fallback {n}", entry.model, entry.base_url or settings.base_url)
        for n, entry in enumerate(settings.fallbacks, start=1)
    ]
    for role, model, base in named:
        roles.setdefault((model, base), []).append(role)
    for (model, base), said in roles.items():
        profile = settings.profile(model, base)
        step, step_from = learned.start(profile, settings.home, base)
        price = profile.price
        rows.append(
            ModelRow(
                model=model,
                endpoint=learned.endpoint(base),
                roles=said,
                structured=step.value,
                structured_from=step_from,
                efforts=[level.value for level in profile.efforts],
                web=profile.web,
                documents=profile.documents,
                images=profile.images,
                caching=profile.caching,
                price=None
                if price is None
                else ModelPrice(
                    input=price.input, output=price.output, cache_read=price.cache_read
                ),
                price_from=profile.price_source,
                source=profile.source,
                needs_key=config.needs_key(model, base),
            )
        )
    return ModelsReply(
        models=rows,
        profiles_file=str(settings.home / config.MODELS_FILE),
        profiles_file_exists=(settings.home / config.MODELS_FILE).is_file(),
        learned_file=str(learned.path(settings.home)),
    )


def library_rows() -> list[LibraryRow]:
    """Every kept agent, from one read of the library (each row's verdict from its own record)."""
    return [
        LibraryRow(
            name=entry.name,
            role=entry.role,
            generation=entry.generation,
            wins=entry.wins,
            losses=entry.losses,
            uses=entry.uses,
            reliable=entry.reliable,
            evolved=entry.evolved,
        )
        for entry in library.entries()
    ]


def _events(runs: Path, run_id: str) -> list[eventlog.Event]:
    """A run's event log; none for a run recorded before logs were kept (or whose log is gone)."""
    try:
        return eventlog.read(eventlog.run_log(runs, run_id))
    except OSError:
        return []


def _write_private(path: Path, text: str) -> None:
    """Write `text` into `path` whole (a temporary file beside it, renamed over it), readable by
    its owner only: a run's page holds the task and the answers."""
    folder = path.parent if str(path.parent) else Path(".")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def complete(what: str, words: tuple[str, ...]) -> None:
    """What a completion script offers as a value, one per line: `runs` (recent run ids),
    `agents` (the library's), `code` (the agents with code of the run the command line names
    after `show`, else of the last run). Nothing at all when there is nothing, or on any error:
    a shell's Tab must never print a traceback."""
    found: list[str] = []
    with contextlib.suppress(Exception):
        if what == "runs":
            found = [row.run_id for row in history.history(50)]
        elif what == "agents":
            found = [entry.name for entry in library.entries()]
        elif what == "code":
            named = [word for word in words if cli.RUN_REF.fullmatch(word)]
            run = history.load(named[0] if named else None)
            found = [agent.name for agent in run.agents if agent.source] if run else []
    sys.stdout.write("".join(f"{name}\n" for name in found))


def model_part(source: str) -> str:
    """What the model wrote of an agent's file: the lines between the runtime's header and its
    footer (the whole file when it has no such markers, as a file from before them)."""
    lines = source.split("\n")
    try:
        start, end = lines.index(BODY_START), lines.index(BODY_END)
    except ValueError:
        return source
    return "\n".join(lines[start + 1 : end]).strip("\n") + "\n"


def find_run(ref: str | None) -> RunRecord | None:
    """The run `ref` names (an id or a unique prefix; None: the last), or None if none does."""
    try:
        return history.load(ref)
    except ValueError as error:  # too short, or the start of several ids
        raise cli.UsageError(
            str(error), "`agentgod history` lists the runs and their ids"
        ) from None


def _path(row: history.HistoryRow | history.LastAnswer) -> str | None:
    return str(row.run_file) if row.run_file else None


def history_row(row: history.HistoryRow) -> HistoryRow:
    return HistoryRow(
        id=row.id,
        run_id=row.run_id,
        status=row.status,
        started_at=row.started_at.isoformat(),
        task=row.task,
        ok=row.ok,
        complexity=row.complexity,
        usd=row.usd,
        duration_seconds=row.duration_seconds,
        agents=row.agents,
        run_file=_path(row),
        retry_of=row.retry_of,
    )


def stats_reply(stats: history.Stats) -> StatsReply:
    return StatsReply(
        runs=stats.runs,
        succeeded=stats.succeeded,
        success_rate=stats.success_rate,
        llm_calls=stats.llm_calls,
        tokens=TokenTotals(
            input=stats.input_tokens,
            output=stats.output_tokens,
            cache_write=stats.cache_write_tokens,
            cache_read=stats.cache_read_tokens,
        ),
        usd=stats.usd,
        mean_duration=stats.mean_duration_seconds if stats.runs else None,
        most_used=list(stats.most_used_agents),
        most_reliable=list(stats.most_reliable_agents),
    )
