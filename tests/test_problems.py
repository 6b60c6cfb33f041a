"""problems.explain: one test per branch, and the key never appears in any field."""

from __future__ import annotations

from dataclasses import fields

import anthropic
import httpx2
import pytest
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI, Reply
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentgod import config, ledger, llm, problems, redact, results, runrecord, sandbox, wire
from agentgod.kinds import AgentKind

_REQUEST = httpx2.Request("POST", "https://api.anthropic.com/v1/messages")


def status_error(
    cls: type[anthropic.APIStatusError], status: int, message: str, body: object = None
) -> anthropic.APIStatusError:
    """A real SDK status error, as the client raises it after its retries."""
    return cls(message, response=httpx2.Response(status, request=_REQUEST), body=body)


def connection_error(message: str = "Connection error.") -> anthropic.APIConnectionError:
    return anthropic.APIConnectionError(message=message, request=_REQUEST)


def failure(name: str, reason: str, kind: str) -> runrecord.Failure:
    return runrecord.Failure(name, reason, AgentKind(kind))


def all_failed(
    failures: list[runrecord.Failure], timeout_seconds: float = 300
) -> results.AllAgentsFailedError:
    return results.AllAgentsFailedError(failures, timeout_seconds)


def test_missing_key() -> None:
    problem = problems.explain(config.MissingApiKeyError("ANTHROPIC_API_KEY is not set"))
    assert problem.kind == "missing_key"
    assert "ANTHROPIC_API_KEY" in problem.advice


def test_sdk_missing_credentials_type_error_is_a_missing_key() -> None:
    error = TypeError("Could not resolve authentication method. Expected api_key")
    assert problems.explain(error).kind == "missing_key"


def test_wrong_key() -> None:
    error = status_error(anthropic.AuthenticationError, 401, "invalid x-api-key")
    problem = problems.explain(error)
    assert problem.kind == "authentication"
    assert "ANTHROPIC_API_KEY" in problem.advice


def test_permission_denied() -> None:
    error = status_error(anthropic.PermissionDeniedError, 403, "no")
    assert problems.explain(error).kind == "permission"


def test_unknown_model_names_the_model_and_the_way_to_change_it() -> None:
    body = {"type": "error", "error": {"type": "not_found_error", "message": "model: claude-x-9"}}
    error = status_error(anthropic.NotFoundError, 404, "Error code: 404", body)
    problem = problems.explain(error)
    assert "claude-x-9" in problem.headline
    assert "--model" in problem.advice
    assert "MODEL" in problem.advice


def test_rate_limit() -> None:
    error = status_error(anthropic.RateLimitError, 429, "slow down")
    problem = problems.explain(error)
    assert problem.kind == "rate_limit"
    assert "MAX_PARALLEL_AGENTS" in problem.advice


def test_overloaded_wins_over_its_parent_class() -> None:
    assert (
        problems.explain(status_error(anthropic.OverloadedError, 529, "Overloaded")).kind
        == "overloaded"
    )
    assert (
        problems.explain(status_error(anthropic.InternalServerError, 500, "boom")).kind
        == "server_error"
    )


@pytest.mark.parametrize(
    ("status", "kind"),
    [(529, "overloaded"), (429, "rate_limit"), (500, "server_error"), (400, "bad_request")],
)
def test_an_error_event_inside_a_streamed_reply_is_explained_by_its_type(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch, status: int, kind: str
) -> None:
    """The reply began with HTTP 200, so only the event's `error.type` says what went wrong."""
    monkeypatch.setenv("API_RETRIES", "0")
    fake_api.queue(Reply("Half an ans", stream_error=status, fail_after=1))
    with pytest.raises(wire.APIStatusError) as caught:
        llm.completion("Say it", model="claude-sonnet-5-5", effort=None, on_text=lambda _: None)
    assert caught.value.status_code == 200
    assert problems.explain(caught.value).kind == kind


def test_bad_request() -> None:
    error = status_error(anthropic.BadRequestError, 400, "effort not supported")
    assert problems.explain(error).kind == "bad_request"


def test_connection_failure_mentions_base_url_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    problem = problems.explain(connection_error())
    assert problem.kind == "connection"
    assert "ANTHROPIC_BASE_URL" in problem.advice
    assert "127.0.0.1:9" in problem.advice


def test_connection_failure_without_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    problem = problems.explain(connection_error())
    assert "ANTHROPIC_BASE_URL" not in problem.advice
    assert "api.anthropic.com" in problem.advice


def test_timeout_wins_over_connection() -> None:
    assert problems.explain(anthropic.APITimeoutError(request=_REQUEST)).kind == "timeout"


def test_validation_error_from_a_structured_reply() -> None:
    from pydantic import BaseModel, ValidationError

    class Plan(BaseModel):
        agents: list[str]

    with pytest.raises(ValidationError) as caught:
        Plan.model_validate_json("{")
    assert problems.explain(caught.value).kind == "invalid_reply"
    assert problems.explain(llm.StructuredReplyError("empty")).kind == "invalid_reply"


def test_config_error_names_the_setting_and_allowed_values() -> None:
    error = config.ConfigError("LLM_EFFORT", "one of low, medium, high", "huge")
    problem = problems.explain(error)
    assert "LLM_EFFORT" in problem.headline
    assert "one of low, medium, high" in problem.advice


def test_every_agent_failed_with_one_shared_cause_is_one_story() -> None:
    failures = [failure(f"agent_{i}", "timed out", "timeout") for i in range(4)]
    problem = problems.explain(all_failed(failures, timeout_seconds=300))
    assert problem.headline == "4 agents timed out after 300 s."
    assert "AGENT_TIMEOUT_SECONDS" in problem.advice
    assert "agent_3: timed out" in problem.technical


def test_every_agent_failed_with_mixed_causes_leads_with_the_biggest() -> None:
    failures = [
        failure("a", "boom", "crash"),
        failure("b", "boom", "crash"),
        failure("c", "slow", "timeout"),
    ]
    problem = problems.explain(all_failed(failures, timeout_seconds=30))
    assert problem.headline == "2 agents crashed; 1 agent timed out after 30 s."
    assert "AGENT_REPAIR_ATTEMPTS" in problem.advice


def test_interrupt() -> None:
    assert problems.explain(KeyboardInterrupt()).kind == "interrupted"


def test_sandbox_unavailable() -> None:
    problem = problems.explain(sandbox.SandboxUnavailable("no landlock"))
    assert problem.kind == "sandbox"
    assert "SANDBOX" in problem.advice


def test_budget_exhausted_carries_the_figures() -> None:
    problem = problems.explain(ledger.BudgetExhaustedError(0.0123, 0.01))
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
        status_error(anthropic.AuthenticationError, 401, f"invalid key {TEST_KEY}"),
        status_error(
            anthropic.NotFoundError, 404, "404", {"error": {"message": f"model: {TEST_KEY}"}}
        ),
        connection_error(f"could not connect with Authorization: Bearer {TEST_KEY}"),
        config.ConfigError("MODEL", "a model id", TEST_KEY),
        all_failed([failure("a", f"printed {TEST_KEY}", "crash")]),
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


# Whole secrets in every shape the patterns know, pieces of them, near misses, and names that
# match only under Unicode case folding (the long s, the Kelvin sign), joined at random.
_SECRETISH = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "sk-ant-api03-abcdefghijklmnopqr",
                "Authorization: Bearer abcdefghijklmnop",
                "bEaReR\n\tabcdefghijklmnop",
                "api_key=abcdef1",
                "X_API-KEY : 'abcdefgh'",
                "SeCrEt=abcdefgh",
                "my_token: abcdefgh",
                "PASSWD=abcdefgh",
                "password = abcdefgh",
                "\u017fecret=abcdefgh",
                "api_\u212aey=abcdefgh",
                "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----",
                "AKIAABCDEFGHIJKLMNOP",
                "ghp_abcdefghijklmnopqrstuvwxyz01234",
                "ghs_ABCDEFGHIJKLMNOPQRSTUVWXYZ01234",
                "sk_live_abcdefghijklmnop1",
                "glpat-abcdefghijklmnopqrst1",
                "xoxb-123-abcdefghijk",
                "AIzaabcdefghijklmnopqrstuvwxyz012345678",
                "hf_abcdefghijklmnopqrstuvwxyz01234",
                "token-id = abcdefgh1",
                "AUTHORIZATION:bearer 12345abcdefgh",
                "sk-",
                "Bearer ",
                "secret",
                "passw",
                "=",
                ": ",
                "'",
                ",",
                "-----BEGIN ",
                "AKIA",
                "ghx_",
                "İ",
                "é",
                "\n",
                " ",
                "_",
                "[redacted]",
            ]
        ),
        st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"),
        st.text(max_size=5),
    ),
    max_size=8,
).map("".join)


@settings(max_examples=400)
@given(_SECRETISH)
@example("\u017fecret=abcdefgh")  # matched under Unicode case folding, though "secret" is not in it
@example("api_\u212aey=abcdefgh")  # the Kelvin sign
def test_a_pattern_skipped_for_want_of_its_clues_could_not_have_matched(text: str) -> None:
    for pattern, clues, folded in redact._RULES:
        if pattern.search(text) is not None:
            assert redact._may_match(clues, folded, text), (pattern.pattern, text)


@settings(max_examples=400)
@given(_SECRETISH)
@example("\u017fecret=abcdefgh")
def test_redaction_is_what_every_pattern_applied_to_every_text_gives(text: str) -> None:
    expected = text
    for pattern in redact._PATTERNS:
        expected = pattern.sub(redact._replace, expected)
    assert redact.redact(text) == expected


@settings(max_examples=400)
@given(_SECRETISH)
@example("\u017fecret=abcdefgh")
@example("api_\u212aey=abcdefgh")
@example("bearer bearer\nabcdefghijklmnop")
@example("key key=1234567x\nBEARER   abcdefghijkl0 token: 'abcdefgh1'")
@example("Authorization: Bearer abcdefghijk1 and x-api-key-v2=abcdefgh1")
def test_a_long_text_searched_around_its_clues_gives_every_match_a_whole_search_gives(
    text: str,
) -> None:
    """An attached file's 4 MB are searched for secrets only around the clues of the patterns
    that ignore case: the same matches, in the same order, as searching the whole text."""
    letters = redact._Letters(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redact, "_WINDOW_FROM", 0)
        rules = zip(redact._RULES, redact._SHAPES, redact._AFTER_CLUE, strict=True)
        for (pattern, clues, _), shape, after in rules:
            found = redact._matches(pattern, clues, shape, text, letters, after)
            around = [m.span() for m in found]
            assert around == [m.span() for m in pattern.finditer(text)], (pattern.pattern, text)
        windowed = redact.contains_secret(text)
        patch.setattr(redact, "_WINDOW_FROM", 10**12)
        assert redact.contains_secret(text) is windowed


def test_a_foreign_class_with_an_sdk_name_is_not_taken_for_the_sdk_s() -> None:
    class ValidationError(Exception):
        """Another library's ValidationError: nothing to do with a structured reply."""

    class RateLimitError(Exception):
        pass

    assert problems.explain(ValidationError("bad form field")).kind == "error"
    assert problems.explain(RateLimitError("slow")).kind == "error"


@pytest.mark.parametrize(
    "kind", [k for k in AgentKind if k not in (AgentKind.OK, AgentKind.PENDING)]
)
def test_every_failure_kind_has_its_own_story_and_advice(kind: AgentKind) -> None:
    problem = problems.explain(all_failed([failure("solo", "why", kind)], timeout_seconds=9))
    assert "failed." not in problem.headline, "a kind with no story falls back to 'failed'"
    assert problem.advice != "Retry the task."
