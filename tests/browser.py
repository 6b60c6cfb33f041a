"""A real headless Chromium for the tests, driven over the DevTools protocol.

Debian's `chromium` package is the browser (`.ci/run` installs it); nothing is downloaded. It is
started with `--remote-debugging-port=0` and a profile of its own, and spoken to over its
websocket with a small client written here (the standard library has none, and the protocol
needs only text frames): `Browser.page()` opens a tab whose every network request, console
message, uncaught exception and JavaScript dialog is kept, so a test can assert there were none.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
"""The distribution's browser, or None (the tests that need it are then skipped)."""

FLAGS = (
    "--headless",
    "--no-sandbox",  # the tests run as root in CI; the page is ours
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--mute-audio",
    "--hide-scrollbars",
)


class _Socket:
    """A websocket client: the opening handshake, then masked text frames out and whole
    messages in (continuations joined, pings answered)."""

    def __init__(self, port: int, path: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the browser closed the websocket handshake")
            head += chunk
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(head.decode(errors="replace"))
        self.sock.settimeout(None)
        self.lock = threading.Lock()

    def send(self, text: str) -> None:
        data = text.encode("utf-8")
        mask = os.urandom(4)
        size = len(data)
        if size < 126:
            header = struct.pack("!BB", 0x81, 0x80 | size)
        elif size < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, size)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, size)
        masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(data))
        with self.lock:
            self.sock.sendall(header + mask + masked)

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("the browser closed the websocket")
            data += chunk
        return data

    def receive(self) -> str:
        parts: list[bytes] = []
        while True:
            first, second = self._exactly(2)
            opcode, size = first & 0x0F, second & 0x7F
            if size == 126:
                (size,) = struct.unpack("!H", self._exactly(2))
            elif size == 127:
                (size,) = struct.unpack("!Q", self._exactly(8))
            payload = self._exactly(size)
            if opcode == 0x8:
                raise ConnectionError("the browser closed the websocket")
            if opcode == 0x9:  # ping
                with self.lock:
                    self.sock.sendall(struct.pack("!BB", 0x8A, 0x80) + b"\0\0\0\0")
                continue
            if opcode in (0x1, 0x2, 0x0):
                parts.append(payload)
                if first & 0x80:
                    return b"".join(parts).decode("utf-8")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Page:
    """One tab (a flattened session of the browser's connection) and what it saw."""

    def __init__(self, browser: Browser, session: str, target: str) -> None:
        self.browser = browser
        self.session = session
        self.target = target
        self.requests: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.console: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.dialogs: list[dict[str, Any]] = []
        self.loads = 0

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session)

    def event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Network.requestWillBeSent":
            self.requests.append(params["request"])
        elif method == "Network.responseReceived":
            self.responses.append(params["response"])
        elif method == "Runtime.consoleAPICalled":
            self.console.append(params)
        elif method == "Runtime.exceptionThrown":
            self.errors.append(params)
        elif method == "Log.entryAdded":
            self.console.append(params["entry"])
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(params)  # dismissed off the reader's thread, which must read on
            threading.Thread(
                target=self.send, args=("Page.handleJavaScriptDialog",), kwargs={"accept": False}
            ).start()
        elif method == "Page.loadEventFired":
            self.loads += 1

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        loads = self.loads
        self.send("Page.navigate", url=url)
        self.browser.wait(lambda: self.loads > loads, f"{url} to load")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        reply = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression!r} threw: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float = 30.0) -> Any:
        """Wait until `expression` is truthy in the page; its value."""
        found: list[Any] = []

        def check() -> bool:
            value = self.evaluate(expression)
            if value:
                found.append(value)
            return bool(value)

        self.browser.wait(check, what, timeout)
        return found[-1]

    def screenshot(self, path: Path, width: int = 1280) -> None:
        """The whole page as a PNG."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def errors_seen(self) -> list[Any]:
        """Console errors and warnings, uncaught exceptions: what a clean page has none of."""
        noisy = [
            entry
            for entry in self.console
            if entry.get("level") in ("error", "warning")
            or entry.get("type") in ("error", "warning")
        ]
        return noisy + self.errors


class Browser:
    """A headless Chromium with a profile in `folder`; `close` ends it and everything it started."""

    def __init__(self, folder: Path) -> None:
        assert CHROMIUM, "chromium is not installed"
        profile = folder / "profile"
        profile.mkdir(parents=True)
        self.changed = threading.Condition()
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port_file = profile / "DevToolsActivePort"
        self.wait(
            lambda: port_file.is_file() and len(port_file.read_text().split()) >= 2, "DevTools"
        )
        port, path = port_file.read_text().split()[:2]
        self.socket = _Socket(int(port), path)
        self.ids = itertools.count(1)
        self.replies: dict[int, dict[str, Any]] = {}
        self.pages: dict[str, Page] = {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            while True:
                message = json.loads(self.socket.receive())
                with self.changed:
                    if "id" in message:
                        self.replies[message["id"]] = message
                    elif message.get("sessionId") in self.pages:
                        self.pages[message["sessionId"]].event(message["method"], message["params"])
                    self.changed.notify_all()
        except (ConnectionError, OSError, ValueError):
            with self.changed:
                self.changed.notify_all()

    def wait(self, ready: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        """Wait for observable state; a wait that times out fails the test."""
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            if self.process.poll() is not None:
                raise AssertionError(
                    f"chromium exited ({self.process.returncode}) waiting for {what}"
                )
            with self.changed:
                self.changed.wait(0.05)

    def send(
        self, method: str, params: dict[str, Any], session: str | None = None
    ) -> dict[str, Any]:
        number = next(self.ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.socket.send(json.dumps(message))
        self.wait(lambda: number in self.replies, method)
        reply = self.replies.pop(number)
        if "error" in reply:
            raise AssertionError(f"{method} failed: {reply['error']}")
        return reply.get("result", {})

    def page(self, *, isolated: bool = False) -> Page:
        """A new tab, watched from its first request; `isolated` gives it a fresh context (no
        cookie of another tab)."""
        params: dict[str, Any] = {"url": "about:blank"}
        if isolated:
            params["browserContextId"] = self.send("Target.createBrowserContext", {})[
                "browserContextId"
            ]
        target = self.send("Target.createTarget", params)["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, session, target)
        with self.changed:
            self.pages[session] = page
        for domain in ("Network", "Runtime", "Log", "Page"):
            page.send(f"{domain}.enable")
        return page

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("Browser.close", {})
        self.socket.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@contextlib.contextmanager
def chromium(folder: Path) -> Iterator[Browser]:
    browser = Browser(folder)
    try:
        yield browser
    finally:
        browser.close()
