"""Shared fixtures: every test runs with its own AGENTGOD_HOME and never with a real key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
IMPORT_ROOT = ROOT / ".pkg"
"""Where this checkout is importable as `agentgod` (.pkg/agentgod links to it), whatever the
clone's folder is called and whichever checkout an editable install points at."""
sys.path[:0] = [str(IMPORT_ROOT), str(Path(__file__).resolve().parent), str(ROOT)]

from fakeapi import FakeMessagesAPI  # noqa: E402
from terminal import Terminal  # noqa: E402

from agentgod import config, runrecord  # noqa: E402

if TYPE_CHECKING:
    from fakeapi import Request
    from scripted import Factory

    from agentgod.broker import Channel

TEST_KEY = "sk-ant-test-0123456789abcdefghijklmnop"

CONSOLE_SCRIPT = Path(sys.executable).parent / "agentgod"
"""Where `pip install -e .` into this interpreter puts the command: found without PATH, so
`venv/bin/python -m pytest` needs no activated venv."""


_archived_minutes = iter(range(1, 100_000))
"""Minutes after noon: each archived record starts later than the one before."""


def archived_record(task: str, **overrides: Any) -> runrecord.RunRecord:
    """A finished run's record, as the archive takes it: one agent, four calls, each record
    started a minute after the one before (so history lists them in the order made)."""
    values: dict[str, Any] = {
        "task": task,
        "ok": True,
        "answer": f"answer to {task}",
        "error": "",
        "complexity": "simple",
        "waves": [["fact_finder"]],
        "agents": [runrecord.AgentRecord("fact_finder", "finds facts", False, True, 1, 1.5, "ok")],
        "failures": [],
        "revisions": 0,
        "council_improved": False,
        "cost": {
            "llm_calls": 4,
            "input_tokens": 1200,
            "output_tokens": 300,
            "cache_write_tokens": 0,
            "cache_read_tokens": 50,
            "web_searches": 0,
            "usd": 0.0042,
            "estimate": False,
        },
        "duration_seconds": 83.0,
        "started_at": datetime(2026, 5, 1, 12, tzinfo=UTC)
        + timedelta(minutes=next(_archived_minutes)),
    }
    values.update(overrides)
    return runrecord.RunRecord(**values)


def agentgod_command() -> list[str]:
    """How the tests start the product: the console script, else its entry point run by us."""
    if CONSOLE_SCRIPT.is_file():
        return [str(CONSOLE_SCRIPT)]
    return [sys.executable, "-m", "agentgod"]


def agentgod_env(home: Path, **variables: str) -> dict[str, str]:
    """A minimal environment for the product that imports this checkout's modules.

    PYTHONPATH is searched before an editable install's finder, which may point at another
    checkout (the console script imports whatever was installed last).
    """
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "AGENTGOD_HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(IMPORT_ROOT),
        **variables,
    }


def _redirects(name: str) -> bool:
    """Whether a variable changes what we do or where our requests go.

    Our settings; every ANTHROPIC_* the SDK reads (custom headers, logging, profiles, identity
    federation); and every *_proxy in any case, the rule urllib's getproxies applies and the SDK's
    HTTP client takes its proxies from, so a developer's proxy never sits between a test and the
    fake API on 127.0.0.1.
    """
    return (
        name in config.SETTING_NAMES
        or name.startswith("ANTHROPIC_")
        or name.lower().endswith("_proxy")
    )


# Gone for the whole session, not only inside each test: the SDK reads ANTHROPIC_LOG when it is
# first imported, which may happen in a preloading thread between two tests, when monkeypatch has
# put the developer's variables back.
for _name in [name for name in os.environ if _redirects(name)]:
    del os.environ[_name]


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point AGENTGOD_HOME at a fresh directory; no real key, setting or proxy gets through.

    Every setting is registered with monkeypatch even when unset, so whatever a test (or the
    product) writes into os.environ is gone again after it.
    """
    for name in {*config.SETTING_NAMES, *(name for name in os.environ if _redirects(name))}:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("AGENTGOD_HOME", str(home))
    return home


@pytest.fixture
def distinct_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three different model ids, so a request shows which one a module chose."""
    monkeypatch.setenv("MODEL", "claude-sonnet-5-5")
    monkeypatch.setenv("FAST_MODEL", "claude-haiku-5-5")
    monkeypatch.setenv("DEEP_MODEL", "claude-opus-5-5")


def cached_system(prompt: str) -> list[dict[str, Any]]:
    """A system prompt as config sends it: one block marked for the prompt cache."""
    return [{"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}}]


@pytest.fixture
def fake_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMessagesAPI]:
    """A running fake Messages API, with ANTHROPIC_BASE_URL and a test key pointing at it."""
    api = FakeMessagesAPI().start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    try:
        yield api
    finally:
        api.stop()


OpenDoor = Callable[..., "Channel"]


@pytest.fixture
def door(fake_api: FakeMessagesAPI) -> Iterator[OpenDoor]:
    """Opens broker channels to the fake API, as a run's broker would: `door(name, **grant)`.

    The broker holds the key (from the fake_api fixture) and meters into `door.ledger`; an agent
    given a channel reaches the model through it and nothing else.
    """
    from agentgod import broker, ledger, llm, models

    spent = ledger.Usage()
    with broker.Broker(
        llm.forward,
        spent,
        price=lambda model: models.price_of(model)[0],
        effort_for_model=models.effort_for_model,
        budget_error=ledger.BudgetExhaustedError,
    ) as the_broker:

        def open_door(name: str = "agent", **grant: Any) -> Channel:
            grant.setdefault("model", config.settings().model)
            return the_broker.open_channel(name, **grant)

        open_door.ledger = spent  # type: ignore[attr-defined]
        yield open_door


def scripted_env(home: Path, api: FakeMessagesAPI | None, **extra: str) -> dict[str, str]:
    """agentgod's environment for a test: SANDBOX off (unless `extra` says otherwise), and the
    fake API with a key if given."""
    env = agentgod_env(home, **{"SANDBOX": "off", **extra})
    if api is not None:
        env |= {"ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": TEST_KEY}
    return env


def agentgod(
    home: Path,
    api: FakeMessagesAPI | None,
    *args: str,
    stdin: str = "",
    cwd: Path | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """Run this checkout's agentgod once, to completion, against `api` (in `cwd`, if given)."""
    return subprocess.run(
        [*agentgod_command(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=scripted_env(home, api, **env),
    )


@pytest.fixture
def open_terminal() -> Iterator[Callable[..., Terminal]]:
    """Start agentgod on a pseudo-terminal; whatever a failed test leaves running is killed."""
    started: list[Terminal] = []

    def start(env: dict[str, str], *args: str) -> Terminal:
        started.append(Terminal([*agentgod_command(), *args], env))
        return started[-1]

    yield start
    for each in started:
        each.stop()


def stopped_once_working(
    home: Path, factory: Factory, *args: str, stop: int = signal.SIGINT
) -> subprocess.CompletedProcess[str]:
    """Run agentgod until an agent's first model call reaches the fake, then send `stop`.

    The factory's agent replies are taken over to see that moment; the finished process (its
    exit code and both streams) comes back.
    """
    working = threading.Event()

    def agent_reply(name: str, request: Request) -> str:
        working.set()
        return f"result from {name}"

    factory.agent_reply = agent_reply
    process = subprocess.Popen(
        [*agentgod_command(), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=scripted_env(home, factory.api),
    )
    try:
        assert working.wait(60), "no agent ever called the model"
        process.send_signal(stop)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
