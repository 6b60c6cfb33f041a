"""The project's layout as its tools see it: no module left out of the package or the type check."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def test_every_top_level_module_is_installed() -> None:
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    listed = set(tool["setuptools"]["py-modules"])
    assert listed == {path.stem for path in ROOT.glob("*.py")}


def test_every_test_module_gets_the_tests_lighter_type_check() -> None:
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    (override,) = tool["mypy"]["overrides"]
    assert {path.stem for path in (ROOT / "tests").glob("*.py")} <= set(override["module"])


def test_what_the_inlined_runtime_restates_agrees_with_its_one_definition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """agent_runtime may import nothing of ours (a kept agent runs with nothing installed), so
    it restates a few facts; they must never drift from the definitions the product uses."""
    import agent_runtime
    import config
    import models

    monkeypatch.delenv("MAX_SEARCHES_PER_AGENT", raising=False)
    assert agent_runtime.DEFAULT_MODEL == models.DEFAULT_MODEL
    assert agent_runtime.DEFAULT_BASE_URL == config.DEFAULT_BASE_URL
    assert config.settings().max_searches_per_agent == agent_runtime.DEFAULT_MAX_SEARCHES
