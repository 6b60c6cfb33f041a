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
