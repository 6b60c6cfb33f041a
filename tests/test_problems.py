"""problems.explain: one test per branch, and the key never appears in any field."""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest
from conftest import TEST_KEY

import config
import problems
import redact


def _named(name: str, base: type[BaseException] = Exception) -> type[BaseException]:
    """An exception class with the SDK's name, without importing the SDK."""
    return type(name, (base,), {})


class _StatusError(Exception):
    def __init__(self, message: str, status_code: int, body: object = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body


APIStatusError = type("APIStatusError", (_StatusError,), {})
InternalServerError = type("InternalServerError", (APIStatusError,), {})
OverloadedError = type("OverloadedError", (InternalServerError,), {})
APIConnectionError = _named("APIConnectionError")
APITimeoutError = type("APITimeoutError", (APIConnectionError,), {})


@dataclass
class Failure:
    name: str
    reason: str
    kind: str


class AllAgentsFailedError(RuntimeError):
    def __init__(self, failures: list[Failure], timeout_seconds: float = 300) -> None:
        super().__init__(f"{len(failures)} agents failed")
        self.failures = failures
        self.timeout_seconds = timeout_seconds


def test_missing_key() -> None:
    problem = problems.explain(config.MissingApiKeyError("ANTHROPIC_API_KEY is not set"))
    assert problem.kind == "missing_key"
    assert "ANTHROPIC_API_KEY" in problem.advice


def test_sdk_missing_credentials_type_error_is_a_missing_key() -> None:
    error = TypeError("Could not resolve authentication method. Expected api_key")
    assert problems.explain(error).kind == "missing_key"


def test_wrong_key() -> None:
    error = type("AuthenticationError", (APIStatusError,), {})("invalid x-api-key", 401)
    problem = problems.explain(error)
    assert problem.kind == "authentication"
    assert "ANTHROPIC_API_KEY" in problem.advice


def test_permission_denied() -> None:
    error = type("PermissionDeniedError", (APIStatusError,), {})("no", 403)
    assert problems.explain(error).kind == "permission"


def test_unknown_model_names_the_model_and_the_way_to_change_it() -> None:
    body = {"type": "error", "error": {"type": "not_found_error", "message": "model: claude-x-9"}}
    error = type("NotFoundError", (APIStatusError,), {})("Error code: 404", 404, body)
    problem = problems.explain(error)
    assert "claude-x-9" in problem.headline
    assert "--model" in problem.advice
    assert "MODEL" in problem.advice


def test_rate_limit() -> None:
    error = type("RateLimitError", (APIStatusError,), {})("slow down", 429)
    problem = problems.explain(error)
    assert problem.kind == "rate_limit"
    assert "MAX_PARALLEL_AGENTS" in problem.advice


def test_overloaded_wins_over_its_parent_class() -> None:
    assert problems.explain(OverloadedError("Overloaded", 529)).kind == "overloaded"
    assert problems.explain(InternalServerError("boom", 500)).kind == "server_error"


def test_bad_request() -> None:
    error = type("BadRequestError", (APIStatusError,), {})("effort not supported", 400)
    assert problems.explain(error).kind == "bad_request"


def test_connection_failure_mentions_base_url_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    problem = problems.explain(APIConnectionError("Connection error."))
    assert problem.kind == "connection"
    assert "ANTHROPIC_BASE_URL" in problem.advice
    assert "127.0.0.1:9" in problem.advice


def test_connection_failure_without_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    problem = problems.explain(APIConnectionError("Connection error."))
    assert "ANTHROPIC_BASE_URL" not in problem.advice
    assert "api.anthropic.com" in problem.advice


def test_timeout_wins_over_connection() -> None:
    assert problems.explain(APITimeoutError("Request timed out.")).kind == "timeout"


def test_validation_error_from_a_structured_reply() -> None:
    from pydantic import BaseModel, ValidationError

    class Plan(BaseModel):
        agents: list[str]

    with pytest.raises(ValidationError) as caught:
        Plan.model_validate_json("{")
    assert problems.explain(caught.value).kind == "invalid_reply"
    assert problems.explain(config.StructuredReplyError("empty")).kind == "invalid_reply"


def test_config_error_names_the_setting_and_allowed_values() -> None:
    error = config.ConfigError("LLM_EFFORT", "one of low, medium, high", "huge")
    problem = problems.explain(error)
    assert "LLM_EFFORT" in problem.headline
    assert "one of low, medium, high" in problem.advice


def test_every_agent_failed_with_one_shared_cause_is_one_story() -> None:
    failures = [Failure(f"agent_{i}", "timed out", "timeout") for i in range(4)]
    problem = problems.explain(AllAgentsFailedError(failures, timeout_seconds=300))
    assert problem.headline == "4 agents timed out after 300 s."
    assert "AGENT_TIMEOUT_SECONDS" in problem.advice
    assert "agent_3: timed out" in problem.technical


def test_every_agent_failed_with_mixed_causes_leads_with_the_biggest() -> None:
    failures = [
        Failure("a", "boom", "crash"),
        Failure("b", "boom", "crash"),
        Failure("c", "slow", "timeout"),
    ]
    problem = problems.explain(AllAgentsFailedError(failures, timeout_seconds=30))
    assert problem.headline == "2 agents crashed; 1 agent timed out after 30 s."
    assert "AGENT_REPAIR_ATTEMPTS" in problem.advice


def test_interrupt() -> None:
    assert problems.explain(KeyboardInterrupt()).kind == "interrupted"


def test_sandbox_unavailable() -> None:
    problem = problems.explain(_named("SandboxUnavailable", RuntimeError)("no landlock"))
    assert problem.kind == "sandbox"
    assert "SANDBOX" in problem.advice


def test_budget_exhausted_carries_the_figures() -> None:
    error = _named("BudgetExhaustedError", RuntimeError)("over budget")
    error.spent_usd, error.budget_usd = 0.0123, 0.01  # type: ignore[attr-defined]
    problem = problems.explain(error)
    assert problem.kind == "budget"
    assert "$0.0123" in problem.headline
    assert "--budget" in problem.advice


def test_generic_fallback_never_uses_the_class_name_as_headline() -> None:
    problem = problems.explain(ZeroDivisionError("division by zero"))
    assert problem.kind == "error"
    assert "ZeroDivisionError" not in problem.headline
    assert "division by zero" in problem.technical


@pytest.mark.parametrize(
    "error",
    [
        config.MissingApiKeyError(f"bad {TEST_KEY}"),
        type("AuthenticationError", (APIStatusError,), {})(f"invalid key {TEST_KEY}", 401),
        type("NotFoundError", (APIStatusError,), {})(
            "404", 404, {"error": {"message": f"model: {TEST_KEY}"}}
        ),
        APIConnectionError(f"could not connect with Authorization: Bearer {TEST_KEY}"),
        config.ConfigError("MODEL", "a model id", TEST_KEY),
        AllAgentsFailedError([Failure("a", f"printed {TEST_KEY}", "crash")]),
        RuntimeError(f"ANTHROPIC_API_KEY={TEST_KEY}"),
        ValueError(f"x-api-key: {TEST_KEY}"),
    ],
)
def test_the_key_never_appears_in_any_field(
    monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    problem = problems.explain(error)
    for field in fields(problem):
        assert TEST_KEY not in getattr(problem, field.name)


def test_a_key_read_from_dotenv_is_redacted_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    secret = "plainsecretwithoutprefix1234"
    redact.register(secret)
    problem = problems.explain(RuntimeError(f"echo {secret}"))
    assert secret not in problem.technical


def test_redaction_of_key_value_pairs_stays_on_one_line() -> None:
    caret_line = "    except KeyError as secret:\n               ^^^^^^^^^^^^^^^\n"
    assert redact.redact(caret_line + "api_key = abcdef123456") == (
        caret_line + "api_key = [redacted]"
    )
