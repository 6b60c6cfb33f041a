"""eventlog.py — every moment of a run on disk, a JSON line each, and the display replayed from it.

`EventLog` is a `TaskEvents`: the orchestrator talks to it exactly as it talks to a renderer, so a
run's log holds what its display was shown, in order, with the time of each moment. Each line is
`{"at": ISO-8601 UTC with ms, "t": seconds since the log was opened, "event": hook name,
"args": {parameter: value}}`, the arguments as plain JSON (StrEnums as their values, TypedDict rows
as objects, tuples as lists) and every string redacted. `note(kind, text)` records a moment that
is no hook (an interruption, the answer) in the same shape, as event "note".
A streamed answer's `answer_delta` pieces are joined into one line before the next moment is
written: redaction sees the whole text, so a key split across two pieces cannot reach the log.

A hook only queues a copy of its arguments and the time; the log's own thread redacts and writes
each line, in order, one `write` per whole line on a file opened O_APPEND (0600, in a 0700 folder
made if missing), so no thread running the agents waits on the disk. A reader never sees half a
line except the last one of a crashed process, and `read` skips that. It never raises into the
run — an OSError (a full disk, a folder taken away) stops the log and is kept in `failed` for the
caller to mention once — because losing the record must not lose the run.

`Tee` shows one run to several watchers (the UI and the log). `replay` re-emits a log into a UI at
its original pace (sped up, long pauses cut), turning each argument back into the type its hook
declares. The hooks, their parameters and those types come from the `TaskEvents` Protocol itself,
read once at import, so a hook added there is logged and replayed without a change here; a log
written by another version replays what still fits and skips the rest.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import json
import math
import os
import queue
import threading
import time
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentgod.events import HOOKS, TaskEvents
from agentgod.redact import redact
from agentgod.signals import shield_from_signals

NOTE = "note"
"""The event name of a `note`: a moment of the run that is not a TaskEvents hook."""
STREAMED = "answer_delta"
"""The hook whose pieces are joined before they are logged."""


@dataclass(frozen=True)
class _Hook:
    signature: inspect.Signature
    """The hook's parameters, without self."""
    hints: dict[str, Any]
    """Each parameter's declared type, resolved (so replay can rebuild a Phase from "plan")."""


def _hook(name: str) -> _Hook:
    function = getattr(TaskEvents, name)
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())[1:]
    return _Hook(signature.replace(parameters=parameters), typing.get_type_hints(function))


_HOOKS: dict[str, _Hook] = {name: _hook(name) for name in HOOKS}


# ---- writing ------------------------------------------------------------------------------------


def _plain(value: Any, text: Callable[[str], str]) -> Any:
    """A hook argument as JSON: enums as their values, rows as objects, every string (and key)
    through `text` (redact; str to copy as it is)."""
    if isinstance(value, enum.Enum):
        return _plain(value.value, text)
    if isinstance(value, str):
        return text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {text(str(key)): _plain(item, text) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(item, text) for item in value]
    return text(str(value))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_log(runs_dir: Path, run_id: str) -> Path:
    """Where a run's event log lives: runs/<run id>/events.jsonl, beside its artifacts."""
    return runs_dir / run_id / "events.jsonl"


class EventLog(TaskEvents):
    """Appends one JSON line per hook call to `path`; thread safe; never raises into the run.

    A hook only takes a copy of its arguments and the time, and queues them: the log's own
    thread redacts, encodes and writes each line, in the order the hooks fired. The threads that
    run the agents therefore never wait on the disk, nor on each other's lines (each write lets
    the interpreter lock go, and a line written under the run's event lock held it meanwhile).
    `flush` waits until every line queued so far is written; `close` writes the rest and stops.

    `failed` is None while the log is being written, else why it stopped (redacted, one line;
    current after `flush`). A call that does not fit its hook's signature (a programming error
    the UI will report) is left out of the log rather than raised. Lines reach the kernel one
    `write` each, moments after their hook; they are not fsynced, so a crash of the process loses
    at most its last moments' lines, not a machine's.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failed: str | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._fd: int | None = None
        self._opened = time.monotonic()
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self._fd = os.open(path, flags, 0o600)
        except OSError as exc:
            self._fail(exc)
            return
        self._writer = threading.Thread(target=self._drain, name="agentgod-eventlog", daemon=True)
        self._writer.start()

    def note(self, kind: str, text: str) -> None:
        """A moment that is not a hook: `note("interrupted", "SIGINT")`, `note("answer", text)`."""
        self._line(NOTE, {"kind": kind, "text": text})

    def flush(self) -> None:
        """Wait until every line queued so far is written (or the log has stopped)."""
        done = threading.Event()
        if self._put(_Flush(done)):
            done.wait()

    def close(self) -> None:
        """Write what is queued (a pending stream too) and stop; later calls are ignored."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._queue.put(None)
        if self._writer is not None:
            self._writer.join()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _fail(self, exc: Exception) -> None:
        if self.failed is None:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            self.failed = redact(f"the event log {self.path} stopped: {reason}")

    # ---- the hooks' side: a copy and the time, queued ----------------------------------------

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            bound = _HOOKS[name].signature.bind(*args, **kwargs)
        except TypeError:
            return
        bound.apply_defaults()
        if name == STREAMED:
            self._put(_Piece(str(bound.arguments["text"])))
            return
        self._line(name, dict(bound.arguments))

    def _line(self, event: str, args: dict[str, Any]) -> None:
        # A copy now (plain JSON, not yet redacted): the caller may change what it passed.
        self._put(_Line(event, _plain(args, str), _now(), self._age()))

    def _put(self, item: _Item) -> bool:
        with self._lock:  # never behind close's end marker
            if self._closed or self._writer is None:
                return False
            self._queue.put(item)
            return True

    # ---- the log's own thread ----------------------------------------------------------------

    def _drain(self) -> None:
        shield_from_signals()
        streamed: list[str] = []
        """answer_delta pieces not yet written: the streamed answer is logged (and redacted) as
        one line, so a key split across two pieces cannot slip past redaction into the log."""
        while True:
            item = self._queue.get()
            if isinstance(item, _Piece):
                streamed.append(item.text)
                continue
            if streamed:  # written when the next moment comes, stamped with its time
                at, t = (item.at, item.t) if isinstance(item, _Line) else (_now(), self._age())
                self._write(_Line(STREAMED, {"text": "".join(streamed)}, at, t))
                streamed = []
            if isinstance(item, _Line):
                self._write(item)
            elif isinstance(item, _Flush):
                item.done.set()
            else:
                break
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError as exc:
                self._fail(exc)

    def _age(self) -> float:
        return time.monotonic() - self._opened

    def _write(self, line: _Line) -> None:
        """One line, redacted, in one write. Whatever goes wrong stops the log, never its
        thread: a flush or close waiting on it must still return."""
        fd = self._fd
        if fd is None:
            return
        try:
            shape = {"at": line.at, "t": round(line.t, 3), "event": line.event}
            shape["args"] = _plain(line.args, redact)
            data = memoryview((json.dumps(shape) + "\n").encode("ascii"))
            while data:
                data = data[os.write(fd, data) :]
        except Exception as exc:
            self._fail(exc)
            self._fd = None
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass(frozen=True)
class _Line:
    """One moment, as the hook gave it, waiting for the log's thread."""

    event: str
    args: dict[str, Any]
    """Plain JSON, not yet redacted."""
    at: str
    """The wall-clock time it happened (ISO-8601 UTC, ms)."""
    t: float
    """Seconds since the log was opened."""


@dataclass(frozen=True)
class _Piece:
    """One piece of a streamed answer."""

    text: str


@dataclass(frozen=True)
class _Flush:
    """Set once every item queued before it is written."""

    done: threading.Event


_Item = _Line | _Piece | _Flush | None
"""What the log's thread is handed; None: write the rest and stop."""


def _log_hook(name: str) -> Callable[..., None]:
    def hook(self: EventLog, *args: Any, **kwargs: Any) -> None:
        self._call(name, args, kwargs)

    hook.__name__ = name
    hook.__doc__ = getattr(TaskEvents, name).__doc__
    return hook


class Tee(TaskEvents):
    """Forwards every hook to each target in order, and every target is called.

    A target that raises does not stop the ones after it (a UI that fails must not lose the log
    line, nor the log the UI's). Once all were called, the first exception is raised again, as
    it would have been without the tee; later ones are added to it as notes. This holds for
    KeyboardInterrupt too: the other targets are quick, and the log should see the moment.
    """

    def __init__(self, *targets: TaskEvents) -> None:
        self.targets = targets


def _tee_hook(name: str) -> Callable[..., None]:
    def hook(self: Tee, *args: Any, **kwargs: Any) -> None:
        first: BaseException | None = None
        for target in self.targets:
            try:
                getattr(target, name)(*args, **kwargs)
            except BaseException as exc:
                if first is None:
                    first = exc
                else:
                    first.add_note(
                        f"{name} also raised in {type(target).__name__}: "
                        + redact(f"{type(exc).__name__}: {exc}")
                    )
        if first is not None:
            raise first

    hook.__name__ = name
    hook.__doc__ = getattr(TaskEvents, name).__doc__
    return hook


for _name in HOOKS:
    setattr(EventLog, _name, _log_hook(_name))
    setattr(Tee, _name, _tee_hook(_name))


# ---- reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One line of a log: when (wall clock and seconds since the log opened), which hook, with
    which arguments (as JSON, not yet turned back into the hook's types)."""

    at: str
    t: float
    event: str
    args: dict[str, Any]


def _event(raw: bytes) -> Event | None:
    try:
        line = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(line, dict):
        return None
    at, t, event, args = (line.get(key) for key in ("at", "t", "event", "args"))
    if isinstance(t, bool) or not isinstance(t, int | float):
        return None
    if not (isinstance(at, str) and isinstance(event, str) and isinstance(args, dict)):
        return None
    return Event(at=at, t=float(t), event=event, args=args)


def read_counted(path: Path) -> tuple[list[Event], int]:
    """The events of a log, and how many lines were skipped as malformed (a torn last line of a
    crashed run, or anything that is not one of our lines). Raises OSError: a missing log is
    for the caller to report."""
    events: list[Event] = []
    skipped = 0
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        parsed = _event(raw)
        if parsed is None:
            skipped += 1
        else:
            events.append(parsed)
    return events, skipped


def read(path: Path) -> list[Event]:
    """The events of a log, malformed lines left out (`read_counted` says how many)."""
    return read_counted(path)[0]


# ---- replaying ----------------------------------------------------------------------------------


class _Misfit(ValueError):
    """A logged value no longer fits the type its hook declares."""


def _decode(hint: Any, value: Any) -> Any:
    """`value` (JSON) turned back into `hint`, the type a hook's parameter declares."""
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in arguments:
            return None
        for option in arguments:
            try:
                return _decode(option, value)
            except _Misfit:
                continue
        raise _Misfit(hint)
    if origin is typing.Literal:
        if value in arguments:
            return value
        raise _Misfit(hint)
    if origin is list and isinstance(value, list):
        (item,) = arguments or (Any,)
        return [_decode(item, element) for element in value]
    if origin is tuple and isinstance(value, list):
        if len(arguments) == 2 and arguments[1] is Ellipsis:
            return tuple(_decode(arguments[0], element) for element in value)
        if len(arguments) != len(value):
            raise _Misfit(hint)
        return tuple(_decode(a, element) for a, element in zip(arguments, value, strict=True))
    if origin is dict and isinstance(value, dict):
        _, item = arguments or (str, Any)
        return {key: _decode(item, element) for key, element in value.items()}
    if typing.is_typeddict(hint) and isinstance(value, dict):
        fields = typing.get_type_hints(hint)
        if not hint.__required_keys__ <= value.keys():
            raise _Misfit(hint)
        return {key: _decode(fields[key], value[key]) for key in fields if key in value}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise _Misfit(hint) from None
    if hint is type(None) and value is None:
        return None
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is str and isinstance(value, str):
        return value
    raise _Misfit(hint)


def arguments(event: Event) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The call a logged hook stands for — positional and keyword arguments of the types its hook
    declares today — or None when it is no hook or no longer fits: an unknown parameter is
    dropped, a missing one with a default takes it, a missing required one or a value of the
    wrong type leaves the event out."""
    hook = _HOOKS.get(event.event)
    if hook is None:
        return None
    decoded: dict[str, Any] = {}
    try:
        for name in hook.signature.parameters:
            if name in event.args:
                decoded[name] = _decode(hook.hints.get(name, Any), event.args[name])
        bound = hook.signature.bind(**decoded)
    except (_Misfit, TypeError):
        return None
    return bound.args, bound.kwargs


def replay(
    path: Path,
    events: TaskEvents,
    *,
    speed: float = 1.0,
    wait: Callable[[float], None] = time.sleep,
    max_gap: float = 2.0,
    on_note: Callable[[Event], None] | None = None,
) -> int:
    """Show a logged run again: each hook re-emitted into `events` after the pause it had in the
    run divided by `speed` (at most `max_gap` seconds; none before the first). Notes go to
    `on_note` when given, else are skipped; events that no longer fit are skipped (see
    `arguments`), their time folded into the next pause. Returns how many hooks were replayed
    (notes not counted). Exceptions from `events` propagate; OSError from reading the log too."""
    if not speed > 0 or not max_gap >= 0:
        raise ValueError("speed must be above 0 and max_gap at least 0")
    replayed = 0
    previous: float | None = None
    for event in read(path):
        show: Callable[[], None]
        if event.event == NOTE:
            if on_note is None:
                continue
            show = functools.partial(on_note, event)
        else:
            call = arguments(event)
            if call is None:
                continue
            show = functools.partial(getattr(events, event.event), *call[0], **call[1])
        if previous is not None:
            pause = min(max_gap, max(0.0, event.t - previous) / speed)
            if pause > 0:
                wait(pause)
        previous = event.t
        show()
        replayed += event.event != NOTE
    return replayed
