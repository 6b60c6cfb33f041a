"""forkserver.py — the batch's run starter: the product imported once, a fresh fork per run.

`python -m agentgod.forkserver` imports everything a run needs (the pipeline, the road's HTTP,
the schemas of its structured outputs) with no key in its environment and no thread started,
then reads one JSON line per run on stdin and forks: the child adds the run's environment to the
server's own (the batch's, without the real key) — its capability as the key, the gateway as
the base URL — takes its folder and output files, and runs the `agentgod` command's own entry
point with the run's arguments: the same code path as the command a person types, minus the
imports. Each start ({id, pid}) and end ({id, exit}) is reported on stdout. The server ignores
SIGINT and SIGTERM (its children get them, from the terminal or from the batch); it ends when
stdin closes and its children have ended. Stdin closing while runs are still at work means the
batch is gone (killed outright): they are stopped (SIGTERM), so each archives itself as
interrupted for `agentgod batch resume` to retry, rather than going on without their gateway.
childrun.ForkServer is its client.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn


def _load() -> None:
    """Import what every run imports, and build what its first requests would build, so no
    fork pays for it again."""
    from agentgod import (  # noqa: F401
        config,
        council,
        crew,
        intake,
        judgment,
        llm,
        main,
        merger,
        orchestrator,
        planner,
        scratch,
        session,
    )

    with contextlib.suppress(Exception):  # a bad setting is each run's to report, not ours
        llm.prepare_forks(_output_formats(config.settings().max_agents))


def _output_formats(max_agents: int) -> list[type[Any]]:
    """The structured outputs a run asks for (their schemas are built once, here); one that
    cannot be had (a model changed) is left out, and its runs build it themselves."""
    from agentgod import council, intake, judgment, planner

    makers: list[Callable[[], type[Any]]] = [
        lambda: judgment.Verdict,
        lambda: council.Challenge,
        lambda: intake.Screen,
        lambda: planner.plan_model(max_agents),
    ]
    formats = []
    for make in makers:
        with contextlib.suppress(Exception):
            formats.append(make())
    return formats


def _child(request: dict[str, Any], wakeup: tuple[int, int]) -> NoReturn:
    """In the forked process: become the run, then exit with its code."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for fd in wakeup:
            os.close(fd)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})  # on the base
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for source, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(source, target)
            os.close(source)
        sys.argv = ["agentgod", *request["args"]]
        from agentgod import main

        main.cli_main()  # ends the process itself (os._exit)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:  # a run that cannot even start reports it on its stderr
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    os._exit(code)


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _load()
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    children: dict[int, int] = {}
    buffer = b""
    open_input = True
    _say({"ready": True})
    stdin = sys.stdin.fileno()
    while open_input or children:
        watched = [read_end, stdin] if open_input else [read_end]
        with contextlib.suppress(InterruptedError):
            ready, _, _ = select.select(watched, [], [], 1.0)
        if read_end in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(read_end, 4096)
        _reap(children)
        if open_input and stdin in ready:
            chunk = os.read(stdin, 65536)
            if not chunk:
                open_input = False
                _stop(children)  # the batch closes stdin only once its runs are over
                continue
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                request = json.loads(line)
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request, (read_end, write_end))
                children[pid] = int(request["id"])
                _say({"id": request["id"], "pid": pid})
    return 0


def _stop(children: dict[int, int]) -> None:
    """The batch is gone while these runs are at work: each is stopped as a signal stops a run
    (it archives itself as interrupted, what it paid for kept)."""
    for pid in list(children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def _reap(children: dict[int, int]) -> None:
    """Report every child that has ended."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        number = children.pop(pid, None)
        if number is not None:
            code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _say({"id": number, "exit": code})


if __name__ == "__main__":
    sys.exit(serve())
