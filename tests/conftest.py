"""Shared fixtures: every test runs with its own AGENTGOD_HOME and never with a real key."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakeapi import FakeMessagesAPI  # noqa: E402

import config  # noqa: E402

TEST_KEY = "sk-ant-test-0123456789abcdefghijklmnop"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point AGENTGOD_HOME at a fresh directory and remove any real key or setting."""
    for name in config.SETTING_NAMES:
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
