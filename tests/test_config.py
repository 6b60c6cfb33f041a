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


# ---- models: fallbacks, profiles, keys (issue 26) ---------------------------------------------


def test_model_fallbacks_name_models_and_their_own_endpoints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentgod import cli

    monkeypatch.setenv(
        "MODEL_FALLBACKS",
        "claude-haiku-5-5, qwen3:8b@http://127.0.0.1:11434/ vertex-model@20250929",
    )
    refs = config.settings().fallbacks
    assert [str(ref) for ref in refs] == [
        "claude-haiku-5-5",
        "qwen3:8b@http://127.0.0.1:11434",
        "vertex-model@20250929",
    ], "an @ that starts no URL is the model id's own"
    told = cli.overrides(cli.parse(["--fallback", "a-model", "--fallback", "bb@http://h:1", "x"]))
    assert told["MODEL_FALLBACKS"] == "a-model,bb@http://h:1"
    assert [str(ref) for ref in config.settings(told).fallbacks] == ["a-model", "bb@http://h:1"]
    monkeypatch.setenv("MODEL_FALLBACKS", "ok-model, bad model!")
    with pytest.raises(config.ConfigError, match="MODEL_FALLBACKS"):
        config.settings()
    monkeypatch.setenv("MODEL_FALLBACKS", "m@ftp://host")
    with pytest.raises(config.ConfigError, match="MODEL_FALLBACKS"):
        config.settings()


def test_a_local_model_does_the_fast_jobs_too_has_no_web_and_needs_no_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODEL", "qwen3:8b")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:11434")
    settings = config.settings()
    assert (settings.fast_model, settings.deep_model) == ("qwen3:8b", "qwen3:8b")
    assert settings.web is False, "no server tools: the planner is told the web is off"
    assert config.api_key() == "" and config.key_of(settings) == ""
    assert settings.effort_for("qwen3:8b", "high") is None
    monkeypatch.setenv("MODEL", "claude-sonnet-5-5")
    with pytest.raises(config.MissingApiKeyError):
        config.api_key()  # a Claude model, even through a local proxy, needs the key
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    monkeypatch.setenv("MODEL", "qwen3:8b")
    with pytest.raises(config.MissingApiKeyError):
        config.api_key()  # the Anthropic API always does


def test_the_key_goes_only_to_its_own_endpoint_and_the_anthropic_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-00000000000000000")
    settings = config.settings()
    assert config.key_for(settings, "claude-haiku-5-5", None) == settings.api_key
    assert config.key_for(settings, "claude-haiku-5-5", "https://api.anthropic.com") == (
        settings.api_key
    )
    assert config.key_for(settings, "qwen3:8b", "http://127.0.0.1:11434") == ""
    assert config.key_for(settings, "claude-haiku-5-5", "https://proxy.example") == ""


def test_models_toml_is_read_from_the_home_and_a_broken_one_says_where(
    isolated_home: Path,
) -> None:
    from agentgod import models, problems

    models_file = isolated_home / config.MODELS_FILE
    models_file.write_text('[models."qwen*"]\nweb = true\nprice = [1, 2]\n', encoding="utf-8")
    settings = config.settings({"MODEL": "qwen3:8b"})
    assert settings.profile("qwen3:8b").web and settings.web
    assert settings.price_of("qwen3:8b") == models.Price(1.0, 2.0, 0.1)
    models_file.write_text('[models."qwen*"]\nstructured = "json"\n', encoding="utf-8")
    with pytest.raises(config.ModelsFileError) as raised:
        config.settings()
    assert str(models_file) in str(raised.value) and "structured" in str(raised.value)
    problem = problems.explain(raised.value)
    assert str(models_file) in problem.headline and "native, tool, prompt" in problem.advice
    assert config.settings({config.MODELS_FILE: ""}).profiles == (), "set aside for a verb"
    models_file.write_text("[models\n", encoding="utf-8")
    with pytest.raises(config.ModelsFileError, match="valid TOML"):
        config.settings()
