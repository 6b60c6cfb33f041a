"""viewer.py — `agentgod ui`: a local, read-only web viewer of the home's runs.

It lists the runs (search by task or id, filter by status, each with its cost) and shows each as
its page (runpage), updating a run in progress from its event log as it grows. It reads the
history and the logs; it writes nothing, changes no record, starts nothing.

Locked down, as a notebook server is, and tighter:
- it listens on 127.0.0.1 only, on the port asked for or any free one;
- every request needs the random token of the URL it prints (in the query, or in the
  HttpOnly, SameSite=Strict cookie the first request with it sets) and a Host header naming
  this loopback address and port (so a web page elsewhere cannot reach it by rebinding a name
  to 127.0.0.1); anything else gets 403;
- only GET and HEAD; only the paths below, built from a run id (8 hex digits) and, for a file,
  a name the run's record lists, inside that run's artifacts folder, not followed through a
  link; nothing outside the home's runs is ever read for a request;
- every response forbids framing, sniffing and caching, and pages carry the Content-Security-
  Policy of runpage (their style and their one script by hash, requests to itself only); a
  file an agent made is sent as a download under a policy that lets nothing in it run.

    /                                  the runs (?q= search, ?status= filter)
    /runs/<id>                         one run's page
    /runs/<id>/page.html               the same page as a file (what `show --html` writes)
    /runs/<id>/trace.json              its trace as OTLP JSON (what `show --trace` writes)
    /runs/<id>/artifacts/<name>        a file its agents made
    ...?part=main&v=<version>          the page's <main> again, or 204 while it is unchanged

Ctrl-C (or SIGTERM) stops it: the listening socket is closed and the command ends with 0.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from agentgod import config, eventlog, history, otlp, runpage
from agentgod.agent_runtime import artifact_name_problem
from agentgod.eventlog import Event
from agentgod.kinds import RunStatus
from agentgod.runpage import esc
from agentgod.runrecord import RunRecord
from agentgod.signals import shield_from_signals
from agentgod.text import dollars

HOST = "127.0.0.1"
RUN_ID = re.compile(r"[0-9a-f]{8}")
LIST_LIMIT = 500
"""The most runs the list shows at once (the newest that match)."""
STATUSES = ("ok", "failed", "interrupted", "budget", "crashed", "running")
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
PAGE_POLICY = runpage.policy(script=True, connect=True) + "; frame-ancestors 'none'"
FILE_POLICY = "default-src 'none'; sandbox; frame-ancestors 'none'"
"""For a file an agent made: nothing in it may load or run, even if a browser shows it."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


def _html(status: int, text: str, *headers: tuple[str, str]) -> Reply:
    return Reply(
        status, text.encode("utf-8"), headers=(("Content-Security-Policy", PAGE_POLICY), *headers)
    )


def _refusal(status: int, headline: str, advice: str) -> Reply:
    body = f"<main><h1>{esc(headline)}</h1><p>{esc(advice)}</p></main>"
    return _html(status, runpage.document(headline, body, script=False, meta_policy=False))


class Viewer:
    """What the viewer answers, apart from the socket: one request's path, query, host and
    cookie in, one Reply out. The HTTP handler below only carries these across."""

    def __init__(self, port: int, token: str, runs: Path) -> None:
        self.port = port
        self.token = token
        self.runs = runs
        self.cookie = f"agentgod_ui_{port}"
        """Named by the port: cookies are shared across a host's ports, tokens are not."""

    # ---- the gate ---------------------------------------------------------------------------

    def admitted(self, host: str | None, token: str | None, cookie: str | None) -> Reply | None:
        """None when the request may be answered, else the 403 it gets."""
        if host not in (f"{HOST}:{self.port}", f"localhost:{self.port}"):
            return _refusal(
                HTTPStatus.FORBIDDEN,
                "This viewer answers only at its own address.",
                f"Open http://{HOST}:{self.port}/ with the token agentgod ui printed.",
            )
        given = token if token is not None else cookie
        if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
            return _refusal(
                HTTPStatus.FORBIDDEN,
                "This viewer needs its token.",
                "Open the URL agentgod ui printed (it ends in ?token=...).",
            )
        return None

    def answer(self, target: str, *, host: str | None, cookie_header: str | None) -> Reply:
        """The reply to GET `target` (a path and query)."""
        parts = urlsplit(target)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        cookies = _cookies(cookie_header)
        refused = self.admitted(host, query.get("token"), cookies.get(self.cookie))
        if refused is not None:
            return refused
        reply = self.route(unquote(parts.path), query)
        if "token" in query:  # the first visit: later ones carry the cookie instead
            cookie = f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/"
            reply = Reply(
                reply.status,
                reply.body,
                reply.content_type,
                (*reply.headers, ("Set-Cookie", cookie)),
            )
        return reply

    def route(self, path: str, query: dict[str, str]) -> Reply:
        if path == "/":
            return self.listing(query)
        parts = path.strip("/").split("/")
        if len(parts) < 2 or parts[0] != "runs" or not RUN_ID.fullmatch(parts[1]):
            return _refusal(HTTPStatus.NOT_FOUND, "Nothing is here.", "The list of runs is at /.")
        run_id, rest = parts[1], parts[2:]
        if not rest:
            return self.run_page(run_id, query)
        if rest == ["page.html"]:
            return self.download_page(run_id)
        if rest == ["trace.json"]:
            return self.download_trace(run_id)
        if len(rest) == 2 and rest[0] == "artifacts":
            return self.artifact(run_id, rest[1])
        return _refusal(HTTPStatus.NOT_FOUND, "Nothing is here.", "The list of runs is at /.")

    # ---- one run ----------------------------------------------------------------------------

    def facts(self, run_id: str) -> tuple[RunRecord | None, list[Event], str] | None:
        """A run's record (None while it is in progress), its log, and what they are now (the
        page's version); None when there is no such run."""
        record = history.load(run_id)
        if record is not None and record.status is RunStatus.RUNNING:
            record = None  # the journal's row of a run still going: its log tells more
        log = eventlog.run_log(self.runs, run_id)
        try:
            seen = log.stat()
            events = eventlog.read(log)
            mark = f"{seen.st_size}.{seen.st_mtime_ns}"
        except OSError:
            events, mark = [], "none"
        if record is None and not events:
            return None
        return record, events, f"{'r' if record is not None else 'p'}{mark}"

    def recorded(self, run_id: str) -> tuple[RunRecord | None, list[Event]]:
        found = self.facts(run_id)
        return (found[0], found[1]) if found is not None else (None, [])

    def run_page(self, run_id: str, query: dict[str, str]) -> Reply:
        found = self.facts(run_id)
        if found is None:
            return _refusal(
                HTTPStatus.NOT_FOUND, f"There is no run {run_id}.", "The list of runs is at /."
            )
        record, events, version = found
        if query.get("part") == "main" and query.get("v") == version:
            return Reply(HTTPStatus.NO_CONTENT)
        live = runpage.Live(f"/runs/{run_id}?part=main", version, record is None)

        def link(name: str) -> str | None:
            return f"/runs/{run_id}/artifacts/{quote(name, safe='')}"

        main = runpage.main(record, events, run_id=run_id, live=live, artifact_link=link)
        if query.get("part") == "main":
            return _html(HTTPStatus.OK, main)
        downloads = (
            f' <a href="/runs/{run_id}/page.html" download>page</a>'
            f' <a href="/runs/{run_id}/trace.json" download>trace</a>'
            if record is not None
            else ""
        )
        top = (
            f'<header class="top"><a href="/">All runs</a><span>run {esc(run_id)}</span>'
            f"<span>{downloads}</span></header>"
        )
        title = f"AgentGOD run {run_id}"
        return _html(
            HTTPStatus.OK, runpage.document(title, top + main, script=True, meta_policy=False)
        )

    def download_page(self, run_id: str) -> Reply:
        record, events = self.recorded(run_id)
        if record is None:
            return _refusal(
                HTTPStatus.NOT_FOUND, f"Run {run_id} has no record yet.", "Wait for it to end."
            )
        text = runpage.page(record, events, run_id=run_id)
        return Reply(
            HTTPStatus.OK,
            text.encode("utf-8"),
            "text/html; charset=utf-8",
            (
                ("Content-Disposition", f'attachment; filename="agentgod-run-{run_id}.html"'),
                ("Content-Security-Policy", FILE_POLICY),
            ),
        )

    def download_trace(self, run_id: str) -> Reply:
        record, events = self.recorded(run_id)
        if record is None:
            return _refusal(
                HTTPStatus.NOT_FOUND, f"Run {run_id} has no record yet.", "Wait for it to end."
            )
        data = otlp.trace(record, events)
        return Reply(
            HTTPStatus.OK,
            (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8"),
            "application/json",
            (
                ("Content-Disposition", f'attachment; filename="agentgod-trace-{run_id}.json"'),
                ("Content-Security-Policy", FILE_POLICY),
            ),
        )

    def artifact(self, run_id: str, name: str) -> Reply:
        """A file the run's agents made: only a name its record lists, only from its folder."""
        record = history.load(run_id)
        listed = record is not None and any(item.get("name") == name for item in record.artifacts)
        if not listed or artifact_name_problem(name) is not None:
            return _refusal(
                HTTPStatus.NOT_FOUND, "No such file.", "The run's page lists its files."
            )
        folder = (self.runs / run_id / "artifacts").resolve()
        path = folder / name
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return _refusal(
                HTTPStatus.NOT_FOUND, "The file is gone.", "It was removed from the run's folder."
            )
        with os.fdopen(descriptor, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode) or path.parent != folder:
                return _refusal(
                    HTTPStatus.NOT_FOUND, "No such file.", "The run's page lists its files."
                )
            data = stream.read()
        return Reply(
            HTTPStatus.OK,
            data,
            "application/octet-stream",
            (
                ("Content-Disposition", f"attachment; filename*=UTF-8''{quote(name, safe='')}"),
                ("Content-Security-Policy", FILE_POLICY),
            ),
        )

    # ---- the list ---------------------------------------------------------------------------

    def in_progress(self, matching: str) -> list[tuple[str, str, float]]:
        """Runs with a log and no record yet: (id, task, seconds so far), newest first."""
        try:
            folders = [entry for entry in os.scandir(self.runs) if RUN_ID.fullmatch(entry.name)]
        except OSError:
            return []
        recorded = history.run_ids()
        found: list[tuple[str, str, float, float]] = []
        for folder in folders:
            if folder.name in recorded:
                continue
            log = eventlog.run_log(self.runs, folder.name)
            try:
                events = eventlog.read(log)
                changed = log.stat().st_mtime
            except OSError:
                continue
            task = next(
                (
                    str(e.args.get("text", ""))
                    for e in events
                    if e.event == eventlog.NOTE and e.args.get("kind") == "task"
                ),
                "",
            )
            if matching and matching.lower() not in f"{task} {folder.name}".lower():
                continue
            found.append((folder.name, task, changed, events[-1].t if events else 0.0))
        found.sort(key=lambda item: item[2], reverse=True)
        return [(run_id, task, seconds) for run_id, task, _, seconds in found]

    def listing(self, query: dict[str, str]) -> Reply:
        matching = query.get("q", "").strip()[:200]
        status = query.get("status", "")
        status = status if status in STATUSES else ""
        going = self.in_progress(matching) if status in ("", "running") else []
        rows = [
            row
            for row in (
                history.history(LIST_LIMIT, matching=matching, status=status)
                if status != "running"
                else []
            )
            if row.status is not RunStatus.RUNNING  # listed above, from their logs
        ]
        body = [
            "<table class='runs'><thead><tr><th>run</th><th>started</th><th>status</th>"
            "<th>task</th><th class='n'>agents</th><th class='n'>cost</th>"
            "<th class='n'>took</th></tr></thead><tbody>"
        ]
        for run_id, task, seconds in going:
            body.append(
                f"<tr class='run' data-run='{esc(run_id)}'><td><a href='/runs/{esc(run_id)}'>"
                f"{esc(run_id)}</a></td><td></td><td>{_badge('running')}</td>"
                f"<td>{esc(_first_line(task))}</td><td></td><td></td>"
                f"<td class='n'>{seconds:.0f} s so far</td></tr>"
            )
        for row in rows:
            body.append(
                f"<tr class='run' data-run='{esc(row.run_id)}'>"
                f"<td><a href='/runs/{esc(row.run_id)}'>{esc(row.run_id)}</a></td>"
                f"<td>{esc(row.started_at.strftime('%Y-%m-%d %H:%M'))}</td>"
                f"<td>{_badge(row.status.value)}</td><td>{esc(_first_line(row.task))}</td>"
                f"<td class='n'>{row.agents}</td><td class='n'>{esc(dollars(row.usd))}</td>"
                f"<td class='n'>{row.duration_seconds:.1f} s</td></tr>"
            )
        body.append("</tbody></table>")
        count = len(going) + len(rows)
        if not count:
            body = [
                "<p class='note'>No runs match.</p>"
                if matching or status
                else "<p class='note'>No runs yet.</p>"
            ]
        summary = (
            f"<p class='note'>{count} run{'' if count == 1 else 's'}"
            + (f" (the newest {LIST_LIMIT})" if len(rows) >= LIST_LIMIT else "")
            + "</p>"
        )
        inner = summary + "".join(body)
        version = hashlib.sha256(inner.encode("utf-8")).hexdigest()[:16]
        if query.get("part") == "main" and query.get("v") == version:
            return Reply(HTTPStatus.NO_CONTENT)
        poll = "/?part=main" + "".join(
            f"&{key}={quote(value, safe='')}"
            for key, value in (("q", matching), ("status", status))
            if value
        )
        main = (
            f'<main id="runs" data-poll="{esc(poll)}" data-version="{version}" data-live="1">'
            f"{inner}</main>"
        )
        if query.get("part") == "main":
            return _html(HTTPStatus.OK, main)
        options = "".join(
            f"<option value='{value}'{' selected' if value == status else ''}>{label}</option>"
            for value, label in (("", "any status"), *((s, s) for s in STATUSES))
        )
        top = (
            "<header class='top'><b>AgentGOD runs</b>"
            "<form class='search' method='get' action='/'>"
            f"<input type='search' name='q' value='{esc(matching)}' "
            "placeholder='search tasks and ids'>"
            f"<select name='status'>{options}</select><button type='submit'>Search</button></form>"
            "</header>"
        )
        return _html(
            HTTPStatus.OK,
            runpage.document("AgentGOD runs", top + main, script=True, meta_policy=False),
        )


def _badge(status: str) -> str:
    tone = {"ok": "ok", "running": "running"}.get(status, "failed")
    return f'<span class="badge st-{tone}">{esc(status)}</span>'


def _first_line(text: str, limit: int = 140) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _cookies(header: str | None) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in (header or "").split(";"):
        name, equals, value = part.strip().partition("=")
        if equals:
            found.setdefault(name, value)
    return found


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    server_version = "agentgod-ui"
    sys_version = ""

    def do_GET(self) -> None:
        self.reply(head=False)

    def do_HEAD(self) -> None:
        self.reply(head=True)

    def reply(self, *, head: bool) -> None:
        try:
            answer = self.server.viewer.answer(
                self.path, host=self.headers.get("Host"), cookie_header=self.headers.get("Cookie")
            )
        except Exception:  # a bug or a damaged record must not take the viewer down
            answer = _refusal(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                "This page could not be made.",
                "The run's record may be damaged; `agentgod show RUN` says more.",
            )
        self.send_response(answer.status)
        for name, value in HEADERS.items():
            self.send_header(name, value)
        for name, value in answer.headers:
            self.send_header(name, value)
        if answer.status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if not head and answer.status != HTTPStatus.NO_CONTENT:
            self.wfile.write(answer.body)

    def refuse_method(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = refuse_method

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a request line would put the token in the terminal's scrollback."""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, port: int, token: str, runs: Path) -> None:
        super().__init__((HOST, port), _Handler)
        self.viewer = Viewer(self.server_address[1], token, runs)


def serve(
    port: int,
    *,
    say: Callable[[str], None],
    problem: Callable[[str, str, str], None],
    show_url: Callable[[str], None],
) -> bool:
    """Serve the home's runs until Ctrl-C (or SIGTERM); False when it could not start.

    `show_url` is handed the URL with its token (the one thing a person must see), `say` the
    rest, `problem` why it could not listen.
    """
    token = secrets.token_urlsafe(24)
    try:
        server = _Server(port, token, config.runs_dir())
    except OSError as error:
        problem(
            f"The viewer could not listen on {HOST}:{port}.",
            "Another program has that port: give another with --port, or none for any free one.",
            error.strerror or type(error).__name__,
        )
        return False
    bound = server.server_address[1]
    stopped = threading.Event()

    def loop() -> None:
        shield_from_signals()
        try:
            server.serve_forever(poll_interval=0.2)
        finally:
            stopped.set()

    worker = threading.Thread(target=loop, name="agentgod-ui", daemon=True)
    worker.start()
    show_url(f"http://{HOST}:{bound}/?token={token}")
    say("The viewer shows this home's runs, read-only; Ctrl-C stops it.")
    try:
        while not stopped.wait(0.5):
            pass
    except KeyboardInterrupt:
        say("Stopping the viewer.")
    finally:
        server.shutdown()
        server.server_close()
        worker.join(timeout=5)
    return True
