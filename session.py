"""session.py — the conversation. The only module that talks to a person, and it does so through ui.

One Session per invocation: the verbs (no key needed), one-shot and pipe runs, and the REPL. It
checks the key, asks the clarifying question when someone can answer it, hands each run's events
to the UI, asks keep-or-discard for new agents, and cleans up scratch files — in a `finally`, so
a failed or interrupted run still does. One failed task never ends a REPL session. The heavy
modules (pydantic, the road to the model, the pipeline) are imported only when a run needs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agentgod import cli, config, ledger, problems, redact, replinput, signals
from agentgod.conversation import Conversation, Turn
from agentgod.kinds import TASK_MAX_CHARS, BudgetOwner, RunStatus, Spend
from agentgod.replies import (
    ArtifactReply,
    ErrorDetail,
    ErrorReply,
    KeepChoice,
    chat_reply,
)
from agentgod.text import estimate_note
from agentgod.ui import PlainUI

if TYPE_CHECKING:
    from agentgod.artifacts import Artifact
    from agentgod.attachments import Attached
    from agentgod.intake import Screening
    from agentgod.llm import Ahead
    from agentgod.orchestrator import Retry
    from agentgod.planner import Planning
    from agentgod.results import PendingAgent, TaskResult

ATTACH_ADVICE = (
    "Save the text to a file and attach it instead (`@notes.txt` in a short task, or --file): "
    "the planner sees a sample of it, and the agents' own code reads it whole."
)
KEY_VARIABLE = "ANTHROPIC_API_KEY"
_EXPORTED_KEY = (
    "The key comes from ANTHROPIC_API_KEY in your environment, which wins over {}: correct or "
    "unset that variable (`unset ANTHROPIC_API_KEY`, and your shell's startup file); "
    "`agentgod key set` then saves a working one. Keys are at "
    "https://console.anthropic.com/settings/keys."
)
_GIVEN_KEY = (
    "The key given may be mistyped, revoked or for another organisation; nothing was saved. "
    "Keys are at https://console.anthropic.com/settings/keys."
)
RETRIABLE = frozenset(
    {"budget", "all_agents_failed", "merge_failed", "merge_refused", "interrupted", "timeout",
     "overloaded", "rate_limit", "server_error", "connection", "invalid_reply"}
)  # fmt: skip
"""Problems a run can end with after it began, for which `agentgod retry RUN` is the way on."""
KEY_ASKS = 3
"""How often a key the API rejects is asked for again at a terminal, before giving up."""
WAITING = "reading the task"
"""What the spinner says between Enter and the run's own display."""
CHAT_MAX_WORDS = 12
"""Only input this short is worth a small-talk check; anything longer is a task."""
CHARS_PER_TOKEN = 3.5
"""A cautious guess at the characters in a token, for the estimate before a large task."""
SENT_WAIT_SECONDS = 5.0
"""How long the intake waits for the plan's request to leave first; only a plan request that
cannot even be built or sent (and then fails) could take longer."""


class TaskTooLargeError(Exception):
    """A task above TASK_MAX_CHARS, refused before anything was spent (no one could confirm it,
    or the person said no); problems tells it with its size, what it would cost and `@file`."""

    def __init__(self, headline: str) -> None:
        super().__init__(headline)
        self.headline = headline


class Session:
    """One invocation: its UI, its flags, and the tokens it has spent so far."""

    def __init__(self, ui: PlainUI, invocation: cli.Invocation, interactive: bool) -> None:
        self.ui = ui
        self.invocation = invocation
        self.interactive = interactive
        self.overrides: dict[str, str] = cli.overrides(invocation)
        """What this session was told, over the environment and .env: its flags, a key typed at
        the prompt, a bad setting set aside for a read-only verb. Never written to os.environ."""
        self.usage = ledger.Usage()
        self.conversation = Conversation()
        """This session's tasks and answers so far: a follow-up is planned with them."""
        self.task = ""
        self.unjudged: str | None = None
        """The answer a stopped run had paid for, never judged: shown, and in `--json`."""
        self._shown = False
        """Whether the current run's display has begun (ui.task_started)."""
        self.warnings: list[str] = []
        """The current run's warnings from before it started (the pipeline keeps its own)."""
        self.run_id: str | None = None
        """The current run's id once it has begun: a failure after that names the run."""
        self.launched: float | None = None
        """When the command was launched (time.monotonic()): the first run's duration starts
        there, so it counts start-up; later ones (the REPL's) start at Enter."""

    # ---- failures ------------------------------------------------------------------------------

    def warn(self, text: str) -> None:
        """Shown now (stderr, even when quiet), and listed in this run's `--json` reply."""
        self.warnings.append(text)
        self.ui.warn(text)

    def missing(self, headline: str, advice: str) -> int:
        """A batch or an eval that is not there: said (and as `--json`'s one object)."""
        if self.invocation.json:
            cli.print_json(cli.not_found(headline, advice))
        self.ui.problem(headline, advice, "")
        return cli.EXIT_FAILED

    def fail(self, error: BaseException, code: int) -> int:
        problem = problems.explain(error)
        if self.run_id is not None and problem.kind in RETRIABLE:
            way_on = self._way_on()
            if way_on:
                problem = dataclasses.replace(problem, advice=f"{problem.advice} {way_on}")
        self.report(problem)
        return code

    def report(self, problem: problems.Problem) -> None:
        """A failure, as the person (or, with --json, the program) is told it."""
        if self.invocation.json:
            task = self.task if len(self.task) <= TASK_MAX_CHARS else self.task[:200] + "…"
            reply = ErrorReply(ok=False, task=redact.redact(task), error=error_json(problem))
            if self.run_id is not None:
                reply["run_id"] = self.run_id
            if self.unjudged is not None:
                reply["answer"], reply["unjudged"] = self.unjudged, True
            cli.print_json(reply)
        self.ui.problem(problem.headline, problem.advice, problem.technical)

    def _way_on(self) -> str:
        """A run that began is recorded, whatever stopped it: its id, and retry when it has
        something to reuse (a plan)."""
        run_id = self.run_id
        with contextlib.suppress(Exception):  # the record is a courtesy here, never a new failure
            from agentgod import history

            found = history.load(run_id)
            if found is not None and found.plan:
                return (
                    f"The run is recorded as {run_id}: `agentgod retry {run_id}` runs it again, "
                    "reusing what was paid for."
                )
            if found is not None:
                return f"The run is recorded as {run_id} (`agentgod show {run_id}`)."
        return ""

    def sweep(self) -> None:
        """What runs killed outright left behind is finished and cleared (scratch.sweep); the
        person hears of each such run once."""
        if not config.home().is_dir():
            return  # nothing was ever run here, and nothing is created by looking
        from agentgod import scratch

        for run_id in scratch.sweep():
            self.ui.info(
                f"Run {run_id} ended without finishing (its process was killed); "
                f"what it had done and spent is in `agentgod show {run_id}`."
            )

    def settings(self) -> config.Settings:
        """The settings as this session was told them, read now (config.settings's snapshot)."""
        return config.settings(self.overrides)

    def settle_settings(self) -> None:
        """A read-only verb works despite a bad setting: warn, and use its default instead.

        An empty override hides the environment's and the `.env` value and means "the
        default", so the bad setting is set aside for this session only.
        """
        for _ in config.SETTING_NAMES:
            try:
                self.settings()
                return
            except config.ConfigError as error:
                self.warn(f"{error}; its default is used for this command")
                self.overrides[error.setting] = ""

    # ---- the key -------------------------------------------------------------------------------

    def ensure_key(self) -> None:
        """The key from the environment or .env; at a terminal, ask, test and offer to save it."""
        try:
            config.api_key(self.overrides)
            return
        except config.MissingApiKeyError:
            if not self.interactive:
                raise
        self.ui.info("An Anthropic API key is needed: https://console.anthropic.com/settings/keys")
        key = ""
        for attempt in range(KEY_ASKS):
            key = self.ui.ask_secret("Anthropic API key (input hidden):") or ""
            if not key:
                missing = config.MissingApiKeyError("no key was entered")
                missing.asked = True
                raise missing
            try:
                self._test_key(key)
                break
            except Exception as error:
                if attempt == KEY_ASKS - 1 or problems.explain(error).kind != "authentication":
                    raise
                self.ui.warn("The API rejected that key; check it and paste it again.")
        env_file = config.home() / ".env"
        if self.ui.confirm(f"Save it to {env_file} (readable only by you)?", default=True):
            save_key(env_file, key)
            self.ui.info(f"Saved to {env_file}.")

    def _test_key(self, key: str, works: str = "The key works.") -> None:
        """One tiny call with `key`; the session goes on with it only if it works."""
        from agentgod import llm

        redact.register(key)
        told = {**self.overrides, "ANTHROPIC_API_KEY": key}
        with self.ui.waiting("testing the key"):
            settings = config.settings(told)
            llm.complete(
                "Reply with OK.",
                model=settings.fast_model,
                effort=None,
                max_tokens=16,
                settings=settings,
            )
        self.overrides = told
        self.ui.info(works)

    def key(self, action: str) -> int:
        """`agentgod key set`: read a key (hidden at a terminal, else one line of stdin), test it,
        save it to AGENTGOD_HOME/.env (0600). `key check`: test the configured one, and say where
        it came from. An exported ANTHROPIC_API_KEY wins over the file: both say so."""
        env_file = config.home() / ".env"
        exported = os.environ.get(KEY_VARIABLE, "").strip()
        source = f"{KEY_VARIABLE} in your environment" if exported else str(env_file)
        if action == "check":
            try:
                self._test_key(config.api_key(self.overrides), f"The key works (from {source}).")
            except Exception as error:
                problem = problems.explain(error)
                if exported and problem.kind in ("authentication", "permission"):
                    problem = dataclasses.replace(problem, advice=_EXPORTED_KEY.format(env_file))
                self.report(problem)
                return cli.EXIT_FAILED
        else:
            if stdin_is_tty():
                key = self.ui.ask_secret("Anthropic API key (input hidden):") or ""
            else:
                key = sys.stdin.readline().strip()
            if not key:
                missing = config.MissingApiKeyError("no key was given")
                missing.asked = stdin_is_tty()
                raise missing
            try:
                self._test_key(key)
            except Exception as error:
                problem = problems.explain(error)
                if problem.kind == "authentication":  # the key given, not ANTHROPIC_API_KEY
                    problem = dataclasses.replace(problem, advice=_GIVEN_KEY)
                self.report(problem)
                return cli.EXIT_FAILED
            save_key(env_file, key)
            self.ui.info(f"Saved to {env_file} (readable only by you).")
            if exported and exported != key:
                self.warn(
                    f"{KEY_VARIABLE} is set in your environment and wins over {env_file}: the "
                    f"key just saved is used only once you unset it (`unset {KEY_VARIABLE}`, "
                    "and take it out of your shell's startup file)"
                )
                source = f"{KEY_VARIABLE} in your environment (not the key saved)"
            else:
                source = str(env_file)
        if self.invocation.json:
            cli.print_json(
                {"ok": True, "key": "works", "source": source, "warnings": self.warnings}
            )
        return cli.EXIT_OK

    # ---- one task ------------------------------------------------------------------------------

    def run_task(
        self,
        task: str,
        attached: Attached | None = None,
        spent: ledger.Usage | None = None,
        retry: Retry | None = None,
        *,
        planning: Planning | None = None,
        gate: Callable[[], Planning | None] | None = None,
        settings: config.Settings | None = None,
        started: float | None = None,
    ) -> int:
        """Run, report, keep, clean up. Returns the exit code for this task.

        `task` is as the person wrote it. `spent` is the run's ledger if calls were already made
        for it (the intake, the plan asked for ahead); `planning` that plan; `gate` what decides,
        once the run has begun, whether it goes on (orchestrator.Gate: small talk withdraws it,
        an answered question plans it again); `retry` the earlier run this one retries;
        `settings` the snapshot those calls were made with (read now when none is given).
        """
        self.task = task
        self._shown = False
        spent = spent or ledger.Usage()
        with self.ui.waiting(WAITING):  # the pipeline's first import, unless already done
            from agentgod import orchestrator, scratch
        settings = settings or self.settings()  # the run's snapshot, from here on
        if gate is None:
            self._start_showing(task, settings)
        written: list[Path] = []
        unjudged: list[str] = []
        keep_files = False
        space = scratch.RunSpace(self.invocation.run_id)  # a batch names its runs
        self.run_id = space.id
        try:
            result = orchestrator.handle_task(
                task,
                settings=settings,
                events=self.ui,
                usage=spent,
                written=written,
                unjudged=unjudged,
                space=space,
                attached=attached,
                conversation=self.conversation,
                retry=retry,
                planning=planning,
                gate=gate,
                started=started,
            )
        except orchestrator.Withdrawn as chat:
            self.run_id = None  # small talk is no run
            self.usage.merge(spent)
            space.close()
            self._chat(task, str(chat), spent)
            return cli.EXIT_OK
        except KeyboardInterrupt:
            self.unjudged = unjudged[-1] if unjudged else None
            if self._shown:
                with contextlib.suppress(OSError, ValueError):  # after SIGHUP, no terminal is left
                    self.ui.task_finished()
                    if self.unjudged is not None and not self.invocation.json:
                        self.ui.answer(self.unjudged)  # paid for: shown, though never judged
                        self.ui.warn("the answer above was not judged: the run was stopped first")
            self.usage.merge(spent)
            space.close()
            raise  # a stop is no time for questions: the run's files go with it
        except BaseException:
            if self._shown:
                self.ui.task_finished()
            keep_files = not self._may_remove(written)
            self.usage.merge(spent)
            space.close(keep_files=keep_files)
            raise
        self.usage.merge(spent)
        space.close()
        self.ui.task_finished()
        self.conversation.add(self.task, result.answer, run_id=result.run_id)
        self._history_notices()
        made = self.deliver(result.artifact_files)
        cut = self._budget_cut(result)
        if self.invocation.json:
            answer = result.reply(self._keep(result.pending))
            answer["task"] = self.task  # as the person wrote it, before clarification
            answer["warnings"] = [*self.warnings, *result.warnings]
            estimated = estimate_note(result.cost)
            if estimated:  # the reply's usd carries no "~": say why it is a guess
                answer["warnings"].append(f"the cost is {estimated}")
            answer["artifacts"] = made
            if cut is not None:
                answer["error"] = error_json(cut)
            cli.print_json(answer)
        else:
            self.ui.answer(result.answer)
            if made:
                self.ui.artifacts(made)
            self.ui.cost(result.cost, result.duration_seconds)
            self.ui.transcript(result.transcript())
            if cut is not None:  # after the answer, where it is read: the answer is partial
                self.ui.problem(cut.headline, cut.advice, cut.technical)
            self._keep(result.pending)
        return cli.EXIT_OK if cut is None else cli.EXIT_FAILED

    @staticmethod
    def _budget_cut(result: TaskResult) -> problems.Problem | None:
        """A run the budget stopped answered in part: what is missing, whose budget it was, and
        the way on."""
        if result.status is not RunStatus.BUDGET:
            return None
        run_id = result.run_id
        owner = result.budget_owner or BudgetOwner.RUN
        if owner is BudgetOwner.BATCH:
            advice = (
                "The batch's budget is spent: resuming the batch with a larger one "
                "(`agentgod batch resume ID --budget USD`) finishes it on what it paid for, "
                f"as does `agentgod retry {run_id}` on its own."
            )
        else:
            advice = (
                f"`agentgod retry {run_id}` finishes it, reusing every output already paid for "
                "(give it more room with --budget or BUDGET_USD)."
            )
        return problems.Problem(
            result.error or "The budget stopped the run before it finished: the answer is partial.",
            advice,
            "",
            "budget",
            owner,
        )

    def deliver(self, made: list[Artifact]) -> list[ArtifactReply]:
        """The run's artifacts as the person should see them: copied to --out DIR when given.

        The answer is paid for, so a folder that cannot take the copies is a warning, and the
        files stay where the run put them.
        """
        from agentgod import artifacts

        rows = [item.reply() for item in made]
        if not made or self.invocation.out is None:
            return rows
        try:
            copies = artifacts.copy_out(made, Path(self.invocation.out).expanduser())
        except OSError as error:
            reason = error.strerror or type(error).__name__
            self.warn(f"the files could not be copied to {self.invocation.out}: {reason}")
            return rows
        for row, copy in zip(rows, copies, strict=True):
            row["path"] = str(copy)
        return rows

    def _keep(self, pending: list[PendingAgent]) -> list[str]:
        """--keep, --discard, or ask (never when quiet or answering in JSON, whose one object
        is for a program: the question would stand between it and the answer); the chosen new
        agents join the library."""
        from agentgod import library

        if not pending:
            return []
        names = [p.name for p in pending]
        if self.invocation.keep is True:
            chosen = names
        elif (
            self.invocation.keep is False
            or self.invocation.quiet
            or self.invocation.json
            or not self.interactive
        ):
            chosen = []  # nobody to ask, or the answer alone: no question after it
        else:
            chosen = self.ui.choose_keep([KeepChoice(name=p.name, role=p.role) for p in pending])
        kept: list[str] = []
        for agent in pending:
            if agent.name not in chosen:
                continue
            try:
                before = library.lookup(agent.name)
                entry = library.remember(agent.name, agent.role, agent.source)
            except Exception as error:  # the answer is already the person's: never lose it here
                self.warn(f"{agent.name} could not be kept: {problems.explain(error).technical}")
                continue
            kept.append(agent.name)
            if entry.generation > 1 and before != agent.source:
                # Another agent of that name was kept (earlier, or by a run at the same time):
                # it is replaced, never silently.
                self.warn(
                    f"{agent.name} replaced the library's earlier agent of that name (kept "
                    f"before, or by another run meanwhile): it is generation {entry.generation} "
                    "now, and its wins and losses start over"
                )
        if kept:
            self.ui.info("Kept in the library: " + ", ".join(kept))
        return kept

    def _history_notices(self) -> None:
        """Tell the person when the run history had to be repaired (a damaged history.db)."""
        from agentgod import verbs

        verbs.Reader(self.ui, json_mode=self.invocation.json, warn=self.warn).notices()

    def _may_remove(self, written: list[Path]) -> bool:
        """Whether the agent files a failed run wrote may go (yes unless the person says no)."""
        if not written:
            return True
        if self.ui.confirm(f"Remove the {len(written)} agent files this run wrote?", True):
            return True
        self.ui.info(f"Kept in {written[0].parent}")
        return False

    # ---- the REPL ------------------------------------------------------------------------------

    def repl(self) -> int:
        self.ui.banner(cli.__version__, self.settings().model, str(config.home()))
        self.ensure_key()
        _warm_up(self.settings())
        prompt = replinput.Prompt(config.home() / ".history")
        while True:
            try:
                line = prompt.read()
            except EOFError:  # Ctrl-D: the shell's prompt goes on a line of its own
                with contextlib.suppress(OSError, ValueError):
                    sys.stdout.write("\n")
                    sys.stdout.flush()
                return cli.EXIT_OK
            except KeyboardInterrupt as stop:
                if isinstance(stop, signals.Stopped) and stop.ends_session:
                    raise
                if prompt.buffer_was_empty():
                    return cli.EXIT_INTERRUPTED
                signals.resume()
                continue
            text = line.strip()
            if not text:
                continue
            if text.lower() in ("quit", "exit", "/quit", "/exit"):
                return cli.EXIT_OK
            command = replinput.as_command(text)
            if command:
                try:
                    self.slash(command)
                except KeyboardInterrupt as stop:
                    if isinstance(stop, signals.Stopped) and stop.ends_session:
                        raise
                    signals.resume()
                except Exception as error:  # a command's failure never ends the session
                    self.fail(error, cli.EXIT_FAILED)
                continue
            near = replinput.near_command(text)
            if near is not None:
                self.ui.warn(
                    f"did you mean /{near}? {text!r} was not run: one word is no task "
                    "(write a few words to make it one)"
                )
                continue
            try:
                self.answer(text)
            except KeyboardInterrupt as stop:
                if isinstance(stop, signals.Stopped) and stop.ends_session:
                    raise  # SIGTERM or SIGHUP: the session ends too
                self.fail(stop, cli.EXIT_INTERRUPTED)  # back to the prompt, not out
                signals.resume()
            except Exception as error:
                self.fail(error, cli.EXIT_FAILED)

    def answer(self, text: str) -> int:
        """Small talk gets one cheap reply; anything else is a task for a team.

        Attachments are found and vetted first: a file that may not be attached is refused
        before anything is spent, and a task with files is never small talk. Then the plan is
        asked for at once, and the small-talk check and the clarifying question (one call) go
        out beside it, so neither stands before the plan; the run begins meanwhile (its first
        agent processes start), and at its gate — before anything is shown or built — small
        talk withdraws it (the plan's stream closed, what it had cost counted) and an answer to
        the question has the plan made again with it.
        """
        started = self._began()
        self.warnings = []
        self.run_id = None
        with self.ui.waiting(WAITING):  # on screen at once: the first model reply takes seconds
            attached = self.attach(text)
            settings = self.settings()  # the run's snapshot, from its first call on
        self._check_size(attached.task, settings)
        with self.ui.waiting(WAITING):
            # The run's ledger from its first call: the plan's and the intake's are counted in it.
            spent = ledger.Usage(budget_usd=settings.budget_usd)
            planning = self._plan_ahead(attached.task, attached, settings, spent)
            try:
                screening = self._screen(text, attached, settings, spent, planning)
            except BaseException:
                planning.cancel(wait=False)
                self.usage.merge(spent)
                raise
        gate = None
        if screening is not None:
            gate = functools.partial(self._gate, screening, attached, settings, spent, planning)
        return self.run_task(
            attached.task,
            attached,
            spent,
            planning=planning,
            gate=gate,
            settings=settings,
            started=started,
        )

    def _began(self) -> float:
        """When the person began to wait for this run: the launch for a command's first run,
        else now (Enter at the prompt)."""
        launched, self.launched = self.launched, None
        return launched if launched is not None else time.monotonic()

    def _check_size(self, task: str, settings: config.Settings) -> None:
        """A task above TASK_MAX_CHARS is said before any spend, with its size and what it would
        cost: a person at a terminal may still send it; anyone else is refused."""
        if len(task) <= TASK_MAX_CHARS:
            return
        from agentgod.models import price_of
        from agentgod.text import dollars, human_size

        tokens = int(len(task) / CHARS_PER_TOKEN)
        calls = 4 if settings.task_revisions else 3  # the plan, one agent, the merge (the judge)
        per_million = 3 * price_of(settings.model)[0].input
        if settings.task_revisions:
            per_million += price_of(settings.fast_model)[0].input
        size = human_size(len(task.encode("utf-8")))
        headline = (
            f"The task is {size} (about {tokens:,} tokens), and a task goes whole into every "
            f"model call of its run: at least {calls} calls, at least "
            f"{dollars(tokens * per_million / 1e6)} of input at list prices before any output."
        )
        if self.interactive and not self.invocation.json:
            self.ui.warn(f"{headline} {ATTACH_ADVICE}")
            if self.ui.confirm("Send it as the task anyway?", default=False):
                return
        raise TaskTooLargeError(headline)

    def _plan_ahead(
        self, task: str, attached: Attached, settings: config.Settings, spent: ledger.Usage
    ) -> Planning:
        """The run's plan, asked for now on a thread of its own (the run takes it later)."""
        from agentgod import library, planner

        return planner.Planning(
            task,
            settings=settings,
            usage=spent.phase(Spend.PLAN),
            library_hint=library.describe_for_planner(settings=settings),
            attachments=attached.describe(),
            conversation=self.conversation.context(),
        )

    def _screen(
        self,
        text: str,
        attached: Attached,
        settings: config.Settings,
        spent: ledger.Usage,
        planning: Planning,
    ) -> Ahead[Screening] | None:
        """The intake call (small talk, the clarifying question), sent once the plan's request
        is out; None when neither can be: only short input without files can be small talk, and
        only a person at a terminal, at the start of a conversation, is asked a question."""
        from agentgod import intake, llm

        chat = not attached.files and len(text.split()) <= CHAT_MAX_WORDS and "\n" not in text
        ask = self.interactive and not self.conversation.turns
        if not (chat or ask):
            _load_pipeline(settings)
            return None
        planning.sent.wait(SENT_WAIT_SECONDS)  # the plan's request goes out first
        call = llm.Ahead(
            functools.partial(
                intake.screen,
                text,
                chat=chat,
                ask=ask,
                usage=spent.phase(Spend.INTAKE),
                settings=settings,
            ),
            name="agentgod-intake",
        )
        _load_pipeline(settings)
        return call

    def _gate(
        self,
        screening: Ahead[Screening],
        attached: Attached,
        settings: config.Settings,
        spent: ledger.Usage,
        planning: Planning,
    ) -> Planning | None:
        """The run's gate (orchestrator.Gate): the intake's verdict, once the run has begun.

        The check is a courtesy: if its call failed, the task goes on to its team.
        """
        from agentgod import intake, orchestrator

        with self.ui.waiting(WAITING):
            try:
                found = screening.result()
            except Exception:
                found = intake.Screening()
        if found.reply is not None:
            raise orchestrator.Withdrawn(found.reply)
        replanned: Planning | None = None
        if found.question:
            reply = self.ui.ask(found.question)
            if reply:
                clarified = (
                    f"{attached.task}\n\nClarification asked before the run: "
                    f"{found.question}\nAnswer: {reply}"
                )
                if planning.cancel():
                    self.ui.info("Planning again with your answer (the first plan is in the cost).")
                replanned = self._plan_ahead(clarified, attached, settings, spent)
        self._start_showing(replanned.task if replanned else attached.task, settings)
        return replanned

    def _start_showing(self, task: str, settings: config.Settings) -> None:
        """The run's own display begins (and the warning it always carries, if any)."""
        from agentgod.sandbox import unconfined_warning

        if unconfined := unconfined_warning(settings.sandbox):
            self.warn(unconfined)
        self.ui.task_started(task)
        self._shown = True

    def _chat(self, text: str, reply: str, spent: ledger.Usage) -> None:
        """Small talk's direct answer; the plan asked for meanwhile was cancelled, and its cost
        (what the API had billed when its stream was closed) is in the reply's."""
        if self.invocation.json:
            cli.print_json(chat_reply(text, reply, spent.cost_summary()))
        else:
            self.ui.answer(reply)

    def attach(self, text: str) -> Attached:
        """The task's `@path`s and the --file paths, vetted, listed for the person to see."""
        from agentgod import attachments

        settings = self.settings()
        attached = attachments.gather(
            text,
            self.invocation.files,
            max_bytes=settings.attach_max_bytes,
            max_files=settings.attach_max_files,
        )
        for note in attached.skipped:
            self.warn(f"not attached: {note}")
        if attached.files:
            self.ui.attachments([item.reply() for item in attached.files])
        return attached

    def slash(self, text: str) -> None:
        command, _, argument = text.partition(" ")
        argument = argument.strip()
        verbs = {
            "/library": "library",
            "/history": "history",
            "/stats": "stats",
            "/last": "last",
            "/forget": "forget",
            "/show": "show",
            "/models": "models",
        }
        if command == "/history" and argument and not cli.is_positive_number(argument):
            self.ui.problem(
                f"/history takes a positive whole number of runs, not {argument!r}.",
                "For example /history 5; /history alone shows the last 10.",
                "",
            )
        elif command in verbs:
            try:  # the command line's rules: `/show a b` is one word too many
                found = cli.verb_of([command, *argument.split()])
                self.verb(verbs[command], found[1] if found else None)
            except cli.UsageError as error:
                self.ui.problem(f"{command}: {error}.", "/help lists the commands.", "")
        elif command == "/new":
            self.conversation = Conversation()
            self.ui.info("A new conversation: earlier tasks and answers are set aside.")
        elif command == "/cost":
            self.ui.session_cost(self.usage.cost_summary())
        elif command == "/clear":
            self.ui.clear()
        elif command == "/help":
            self.ui.help(replinput.SLASH_COMMANDS)
        else:
            self.ui.warn(f"Unknown command {command}; /help lists them.")

    # ---- verbs (no key needed) -----------------------------------------------------------------

    def verb(self, verb: str, argument: str | None) -> int:
        from agentgod import verbs

        asked = self.invocation
        try:
            settings: config.Settings | None = self.settings()
        except config.ConfigError:
            settings = None  # a verb needs none it cannot read again (settle_settings warned)
        reader = verbs.Reader(
            self.ui,
            json_mode=asked.json,
            warn=self.warn,
            settings=settings,
            at_prompt=asked.mode == "repl",
        )
        return reader.run(
            verb,
            argument,
            code=asked.code,
            full=asked.full,
            replay=asked.replay,
            html=asked.html,
            trace=asked.trace,
            port=asked.port,
        )

    # ---- earlier runs: continued, retried --------------------------------------------------

    def resume(self, ref: str) -> None:
        """Continue a recorded conversation: the last run's ("last") or run `ref`'s."""
        from agentgod import history, verbs

        up_to = None
        if ref == "last":
            found_id = history.last_conversation_id()
        else:
            found = verbs.find_run(ref)
            if found is None:
                raise cli.UsageError(f"there is no run {ref}", "see 'agentgod history'")
            found_id, up_to = found.conversation_id, found.run_id
        if found_id is None:
            self.warn("there is no earlier conversation to continue; this one starts afresh")
            return
        told = history.conversation(found_id, up_to=up_to)  # as it stood at that run
        turns = [Turn(task, answer) for task, answer in told]
        self.conversation = Conversation(found_id, turns)

    def retry(self, ref: str | None) -> int:
        """Run a failed, interrupted or budget-stopped run (or one whose agents partly failed)
        again, keeping what it delivered: its plan stands, and its agents that produced output
        are neither built nor run again."""
        from agentgod import attachments, orchestrator, planner, verbs

        found = verbs.find_run(ref)
        reader = verbs.Reader(self.ui, json_mode=self.invocation.json, warn=self.warn)
        if found is None:
            return reader.missing(f"There is no run {ref or 'yet'}.", "See `agentgod history`.")
        if found.status is RunStatus.OK and all(agent.ok for agent in found.agents):
            return reader.missing(
                f"Run {found.run_id} answered with every agent; there is nothing to retry.",
                f"`agentgod show {found.run_id}` shows it; run the task again for a new answer.",
            )
        if not found.plan:
            return reader.missing(
                f"Run {found.run_id} stopped before it had a plan; there is nothing to reuse.",
                "Run the task again.",
            )
        independent = not any(spec.get("depends_on") for spec in found.plan)
        plan = planner.plan_model(len(found.plan)).model_validate(
            {
                "complexity": found.complexity or "standard",
                "agents": list(found.plan),
                "independent": independent,
                "reasoning": found.reasoning,
            }
        )
        planned = {spec.name for spec in plan.agents}
        outputs = {a.name: a.output for a in found.agents if a.ok and a.name in planned}
        self.ensure_key()  # only now: a retry of nothing never asks for a key
        self.task = found.task
        self.warnings = []
        if found.conversation_id:
            self.resume(found.run_id)
        settings = self.settings()
        attached = attachments.gather(
            found.task,
            [item["path"] for item in found.attachments],
            max_bytes=settings.attach_max_bytes,
            max_files=settings.attach_max_files,
        )
        seed = orchestrator.Retry(found.run_id, plan, outputs)
        return self.run_task(found.task, attached, retry=seed, started=self._began())


def _load_pipeline(settings: config.Settings) -> None:
    """What the run's first agents need before they can start, done while the model is busy:
    the pipeline's modules, the agents' interpreter (its venv made on first use) and the probe
    of the machine's sandbox layers (each once per process)."""
    from agentgod import agentvenv, orchestrator, sandbox, scratch  # noqa: F401

    with contextlib.suppress(Exception):  # the run itself says what is wrong with either
        agentvenv.agent_python(settings)
        if settings.sandbox != "off":
            sandbox.probe()


def _warm_up(settings: config.Settings) -> threading.Thread:
    """While the person types, load what the first run needs, so its first request leaves at once.

    The pipeline's modules (pydantic's models among them) and the connection to the API
    (TCP, and TLS to the real one) are ready by the time a person has typed a task.
    """

    def load() -> None:
        signals.shield_from_signals()
        with contextlib.suppress(Exception):
            from agentgod import intake, library, llm, planner  # noqa: F401

            llm.connect_ahead(settings)
            _load_pipeline(settings)

    thread = threading.Thread(target=load, name="agentgod-warm-up", daemon=True)
    thread.start()
    return thread


def save_key(env_file: Path, key: str) -> None:
    """Write or replace ANTHROPIC_API_KEY in .env, readable by the owner only."""
    env_file.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    if env_file.exists():
        lines = [
            line
            for line in env_file.read_text(encoding="utf-8").splitlines()
            if not line.strip().startswith("ANTHROPIC_API_KEY")
        ]
    lines.append(f"ANTHROPIC_API_KEY={key}")
    descriptor = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    env_file.chmod(0o600)


def stdin_is_tty() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


# ---- the JSON contract -------------------------------------------------------------------------


def error_json(problem: problems.Problem) -> ErrorDetail:
    detail = ErrorDetail(
        type=problem.kind,
        headline=problem.headline,
        advice=problem.advice,
        detail=problem.technical,
    )
    if problem.budget_of:
        detail["budget_of"] = problem.budget_of
    return detail
