"""config: settings read at call time, validated, from the environment and .env."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgod import config


def test_defaults() -> None:
    s = config.settings()
    assert (s.model, s.fast_model, s.deep_model) == (
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-sonnet-5-5",
    )
    assert (s.effort, s.max_agents, s.max_parallel_agents) == ("medium", 6, 4)
    assert (s.agent_timeout_seconds, s.agent_repair_attempts, s.generation_attempts) == (300, 2, 3)
    assert (s.task_revisions, s.council, s.sandbox, s.budget_usd) == (1, "auto", "auto", None)


def test_deep_model_defaults_to_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL", "claude-opus-5-5")
    assert config.settings().deep_model == "claude-opus-5-5"


def test_settings_are_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.settings().max_agents == 6
    monkeypatch.setenv("MAX_AGENTS", "3")
    assert config.settings().max_agents == 3


def test_dotenv_is_read_and_the_real_environment_wins(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated_home / ".env").write_text("MAX_AGENTS=2\nCOUNCIL=off\n")
    assert config.settings().max_agents == 2
    assert config.settings().council == "off"
    monkeypatch.setenv("MAX_AGENTS", "5")
    assert config.settings().max_agents == 5


def test_home_directories_follow_agentgod_home(isolated_home: Path) -> None:
    s = config.settings()
    assert s.home == isolated_home.resolve()
    assert s.agents_dir == isolated_home / "generated_agents"
    assert s.runs_dir == isolated_home / "runs"
    assert s.venv_dir == isolated_home / ".agent_venv"


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("MAX_AGENTS", "abc", "whole number"),
        ("MAX_AGENTS", "0", "from 1 to 12"),
        ("MAX_PARALLEL_AGENTS", "-1", "whole number"),
        ("LLM_EFFORT", "huge", "low, medium, high, xhigh, max"),
        ("COUNCIL", "sometimes", "auto, always, off"),
        ("SANDBOX", "maybe", "auto, strict, off"),
        ("AGENT_TIMEOUT_SECONDS", "soon", "number"),
        ("AGENT_TIMEOUT_SECONDS", "0", "from 1 to 3600"),
        ("TASK_REVISIONS", "1.5", "whole number"),
        ("BUDGET_USD", "-3", "from"),
        ("BUDGET_USD", "nan", "from"),
        ("MODEL", "bad model name!", "model id"),
    ],
)
def test_bad_values_raise_config_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, allowed: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(config.ConfigError) as caught:
        config.settings()
    message = str(caught.value)
    assert name in message
    assert allowed in message
    assert repr(value) in message


def test_the_default_home_is_never_the_source_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An editable install must not keep the key and the library in the source tree."""
    monkeypatch.delenv("AGENTGOD_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config.home() == tmp_path / ".agentgod"
    assert config.settings().home == tmp_path / ".agentgod"
