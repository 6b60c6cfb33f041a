"""models: effort support and effort per grade."""

from __future__ import annotations

import pytest

from agentgod import models
from agentgod.kinds import Effort


@pytest.mark.parametrize(
    ("complexity", "configured", "expected"),
    [
        ("simple", "high", "low"),
        ("standard", "medium", "medium"),
        ("standard", "xhigh", "xhigh"),
        ("deep", "low", "high"),
        ("deep", "max", "max"),
    ],
)
def test_effort_for_complexity(complexity: str, configured: str, expected: str) -> None:
    assert models.effort_for(complexity, Effort(configured)) == expected


@pytest.mark.parametrize(
    ("model", "accepts"),
    [
        ("claude-sonnet-5-5", True),
        ("claude-haiku-5-5", True),
        ("claude-opus-4-7", True),
        ("claude-haiku-4-5", False),
        ("claude-sonnet-4-5", False),
        ("claude-sonnet-4-5-20250929", False),
        ("claude-3-5-sonnet-20241022", False),
        ("claude-opus-4-1", False),
    ],
)
def test_which_models_accept_effort(model: str, accepts: bool) -> None:
    assert bool(models.supported_efforts(model)) is accepts


# ---- profiles (issue 26) -----------------------------------------------------------------------


def test_a_claude_model_keeps_its_rules_and_its_price() -> None:
    profile = models.resolve("claude-sonnet-5-5", local=True)
    assert profile.structured == "native" and profile.efforts == models.supported_efforts(
        "claude-sonnet-5-5"
    )
    assert profile.web and profile.documents and profile.images and profile.caching
    assert profile.price == models.PRICES["claude-sonnet-5-5"], "a proxy on localhost still bills"


def test_a_claude_id_without_a_known_price_is_never_priced_as_another_model() -> None:
    profile = models.resolve("claude-opus-9", local=False)
    assert profile.price is None and profile.price_source == models.NO_PRICE
    assert profile.efforts, "a new Claude model keeps today's effort rules"
    assert models.price_of("claude-opus-9") == (models.FREE, True)


@pytest.mark.parametrize(
    ("base_url", "local"),
    [
        ("http://127.0.0.1:11434", True),
        ("http://localhost:8080/v1", True),
        ("http://[::1]:8000", True),
        ("http://192.168.1.20:8000", True),
        ("http://10.0.0.7", True),
        ("http://gpu-box.local:8000", True),
        ("https://api.anthropic.com", False),
        ("https://openrouter.ai/api", False),
        (None, False),
        ("http://8.8.8.8", False),
    ],
)
def test_an_unknown_model_gets_safe_defaults_free_only_where_it_is_served_locally(
    base_url: str | None, local: bool
) -> None:
    assert models.is_local(base_url) is local
    profile = models.resolve("qwen3:8b", local=models.is_local(base_url))
    assert (profile.efforts, profile.web, profile.documents, profile.images) == (
        (),
        False,
        False,
        False,
    )
    assert not profile.caching and profile.structured == "native"
    assert profile.price == (models.FREE if local else None)


def test_models_toml_entries_change_a_profile_by_name_or_pattern() -> None:
    entries = models.parse_profiles(
        {
            "models": {
                "qwen*": {"structured": "tool", "price": [0.5, 1.5]},
                "qwen3:8b": {"effort": ["low", "high"], "images": True},
                "claude-sonnet-5-5": {"price": "unknown", "caching": False},
            }
        }
    )
    exact = models.resolve("qwen3:8b", local=True, overrides=entries)
    assert exact.efforts == (Effort.LOW, Effort.HIGH) and exact.images
    assert exact.structured == "native", "the exact entry wins and says nothing of the step"
    assert exact.price == models.FREE
    pattern = models.resolve("qwen2.5", local=True, overrides=entries)
    assert pattern.structured == "tool" and pattern.structured_told
    assert pattern.price == models.Price(0.5, 1.5, 0.05) and pattern.price_source == "models.toml"
    assert pattern.source == 'models.toml [models."qwen*"]'
    claude = models.resolve("claude-sonnet-5-5", local=False, overrides=entries)
    assert claude.price is None and not claude.caching and claude.web


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"model": {}}, "a top-level key"),
        ({"models": {"x": {"structure": "tool"}}}, 'a key of [models."x"]'),
        ({"models": {"x": {"structured": "json"}}}, "structured must be one of native"),
        ({"models": {"x": {"effort": ["huge"]}}}, "effort must be false, true"),
        ({"models": {"x": {"web": "yes"}}}, "web must be true or false"),
        ({"models": {"x": {"price": [1]}}}, "price must be"),
        ({"models": {"x": {"price": [1, -2]}}}, "price must be"),
        ({"models": {"x": 3}}, "must be a table"),
    ],
)
def test_a_wrong_models_toml_entry_is_named_never_ignored(data: dict, said: str) -> None:
    with pytest.raises(models.ProfileError) as raised:
        models.parse_profiles(data)
    assert said in str(raised.value)
