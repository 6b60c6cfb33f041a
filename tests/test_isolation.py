"""The suite's isolation: a developer's shell (a proxy, SDK variables) never reaches a test."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI

from agentgod import config, llm

ROOT = Path(__file__).resolve().parent.parent

# What a developer's shell may hold that would send the tests' requests elsewhere or change them:
# a dead proxy for every scheme, an extra header on every SDK request, SDK debug logging.
SHELL = {
    **dict.fromkeys(
        ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"),
        "http://127.0.0.1:9",
    ),
    "ANTHROPIC_CUSTOM_HEADERS": "x-from-the-shell: yes",
    "ANTHROPIC_LOG": "debug",
}


def test_requests_reach_the_fake_api_directly(
    fake_api: FakeMessagesAPI, caplog: pytest.LogCaptureFixture
) -> None:
    """Through llm, as the main agent calls, and through urllib, as generated agents do."""
    assert llm.complete("through llm", model=config.settings().model, effort=None) == "ok"
    body = {"model": "claude-sonnet-5-5", "max_tokens": 16, "messages": []}
    request = urllib.request.Request(
        fake_api.base_url + "/v1/messages",
        json.dumps(body).encode(),
        {"content-type": "application/json", "x-api-key": TEST_KEY},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    sdk, plain = fake_api.messages()
    assert "x-from-the-shell" not in sdk.headers
    assert "x-stainless-lang" not in plain.headers
    assert not [record for record in caplog.records if record.levelno < logging.INFO], (
        "the road logs no debug records"
    )


def test_a_developer_shell_does_not_reach_the_tests() -> None:
    """The test above, in a fresh pytest whose environment holds all of SHELL."""
    env = {**os.environ, **SHELL}
    env.pop("PYTEST_ADDOPTS", None)
    probe = f"{__file__}::{test_requests_reach_the_fake_api_directly.__name__}"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
