"""Redaction (issue 31, point 8): every real key shape is caught, and ordinary text survives.

`redact` used to take any hyphenated word ending in "sk" followed by 16 characters for a key
(`ask-me-anything-2024-edition` became `a[redacted]`) in history, run files, event logs, `last`
and the conversation a follow-up is planned with. Keys are matched where a word begins and by the
shapes they really have; these properties hold for all the text hypothesis makes up.
"""

from __future__ import annotations

import string

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentgod import redact

ALNUM = string.ascii_letters + string.digits
BASE64URL = ALNUM + "-_"
HEX = "0123456789abcdef"


def _run(alphabet: str, low: int, high: int | None = None) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=low, max_size=high if high is not None else low)


# ---- ordinary text -------------------------------------------------------------------------------

WORDS = [
    "the", "a", "report", "team", "edition", "anything", "usage", "for", "me", "whole", "plan",
    "ask", "task", "disk", "risk", "desk", "flask", "whisk", "kiosk", "mask", "husk", "tusk",
    "secretary", "secrets", "tokens", "tokenizer", "passwordless", "keys", "keyboard", "skill",
    "sky", "sketch", "skeleton", "bearer", "Bearers", "AKIA", "akin", "hf", "xoxo", "github",
    "api", "key", "secret", "token", "password", "sk", "SK", "Sk", "risk-free", "Asia",
]  # fmt: skip
"""Words, some of them the clues of key shapes, none of them a key (a key's own prefix, such as
`glpat-` or `AIza`, begins no word of prose)."""
SK_WORDS = ["ask", "task", "disk", "risk", "desk", "flask", "whisk", "kiosk", "mask", "husk"]

_tail = _run(string.ascii_lowercase + string.digits + "-", 16, 48).filter(
    lambda tail: not tail.startswith("-")
)
_sk_compound = st.builds(lambda word, tail: f"{word}-{tail}", st.sampled_from(SK_WORDS), _tail)
"""`ask-me-anything-2024-edition`, `disk-usage-report-for-the-team`: a word ending in sk, then a
long hyphenated tail."""
_compound = st.lists(
    st.one_of(st.sampled_from(WORDS), st.integers(0, 99999).map(str)), min_size=2, max_size=8
).map("-".join)
_identifier = st.lists(
    st.one_of(st.sampled_from([w.lower() for w in WORDS]), st.integers(0, 999).map(str)),
    min_size=2,
    max_size=6,
).map("_".join)
_setting = st.builds(
    lambda name, value: f"{name}={value}",
    st.sampled_from(["max_tokens", "input_tokens", "secretary", "tokenizer_size", "keys", "risk"]),
    st.integers(0, 10**9).map(str),
)
_word = st.one_of(
    st.sampled_from(WORDS), _sk_compound, _compound, _identifier, _setting, st.integers().map(str)
)
_gap = st.sampled_from([" ", "  ", "\n", ", ", ". ", " - ", "; ", " (", ") ", "\t", " / "])
ordinary_text = st.lists(st.tuples(_word, _gap), min_size=1, max_size=30).map(
    lambda pairs: "".join(word + gap for word, gap in pairs)
)


@settings(max_examples=400)
@given(ordinary_text)
@example("ask-me-anything-2024-edition")
@example("disk-usage-report-for-the-team")
@example("Prepare the task-runner-configuration-v2 and the risk-assessment-2024-final.")
@example("max_tokens=128000 and the secretary, tokenizer_config")
@example("the bearer bonds-and-securities-report\nbearer\nthe-whole-team-and-the-plan")
def test_ordinary_prose_and_identifiers_survive(text: str) -> None:
    assert redact.redact(text) == text
    assert not redact.contains_secret(text)


# ---- real keys -----------------------------------------------------------------------------------

_anthropic = st.builds(
    lambda kind, body: f"sk-ant-{kind}-{body}AA",
    st.sampled_from(["api03", "admin01", "oat01"]),
    _run(BASE64URL, 93),
)
_openai = st.one_of(
    _run(ALNUM, 48).map(lambda body: f"sk-{body}"),
    st.builds(
        lambda kind, body: f"sk-{kind}-{body}",
        st.sampled_from(["proj", "svcacct", "admin"]),
        _run(BASE64URL, 40, 160),
    ),
)
_openrouter = _run(HEX, 64).map(lambda body: f"sk-or-v1-{body}")
_hex_sk = _run(HEX, 32).map(lambda body: f"sk-{body}")
_stripe = st.builds(
    lambda kind, mode, body: f"{kind}_{mode}_{body}",
    st.sampled_from(["sk", "rk"]),
    st.sampled_from(["live", "test"]),
    _run(ALNUM, 24, 99),
)
_github = st.one_of(
    st.builds(lambda p, body: f"gh{p}_{body}", st.sampled_from("pousr"), _run(ALNUM, 36)),
    st.builds(lambda a, b: f"github_pat_{a}_{b}", _run(ALNUM, 22), _run(ALNUM, 59)),
)
_gitlab = _run(BASE64URL, 20).map(lambda body: f"glpat-{body}")
_aws = st.builds(
    lambda prefix, body: prefix + body,
    st.sampled_from(["AKIA", "ASIA"]),
    _run(string.ascii_uppercase + string.digits, 16),
)
_slack = st.builds(
    lambda kind, team, bot, body: f"xox{kind}-{team}-{bot}-{body}",
    st.sampled_from("abprs"),
    _run(string.digits, 10, 13),
    _run(string.digits, 10, 13),
    _run(ALNUM, 24),
)
_google = _run(BASE64URL, 35).map(lambda body: f"AIza{body}")
_huggingface = _run(ALNUM, 34).map(lambda body: f"hf_{body}")
key_shapes = st.one_of(
    _anthropic,
    _openai,
    _openrouter,
    _hex_sk,
    _stripe,
    _github,
    _gitlab,
    _aws,
    _slack,
    _google,
    _huggingface,
)
_before = st.sampled_from([" ", "\n", "=", ": ", '"', "'", "(", "<", "`", "key ", "\t", "/"])
_after = st.sampled_from([" ", ".", ",", '"', "'", ")", ">", "`", "\n", "; "])


@settings(max_examples=500)
@given(ordinary_text, _before, key_shapes, _after, ordinary_text)
def test_every_real_key_shape_is_caught_wherever_it_stands(
    head: str, before: str, key: str, after: str, tail: str
) -> None:
    text = f"{head}{before}{key}{after}{tail}"
    shown = redact.redact(text)
    assert shown.count(key) <= head.count(key) + tail.count(key), "only ordinary text's own"
    assert redact.REDACTED in shown
    assert redact.contains_secret(text)


_secret_names = st.sampled_from(
    [
        "API_KEY",
        "api-key",
        "x-api-key",
        "ANTHROPIC_API_KEY",
        "DB_PASSWORD",
        "password",
        "client_secret",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "access_token",
        "passwd",
    ]
)
_secret_values = _run(ALNUM + "_+/.-", 8, 40).filter(lambda value: any(c.isdigit() for c in value))


@settings(max_examples=300)
@given(
    ordinary_text,
    _secret_names,
    st.sampled_from(["=", ": ", " = ", '="', ":'"]),
    _secret_values,
    ordinary_text,
)
def test_a_named_secret_is_caught_and_its_name_kept(
    head: str, name: str, separator: str, value: str, tail: str
) -> None:
    text = f"{head}\n{name}{separator}{value}\n{tail}"
    assert redact.redact(text) == f"{head}\n{name}{separator}{redact.REDACTED}\n{tail}"


@given(_run(ALNUM + "._~+/-", 20, 60).filter(lambda token: any(c.isdigit() for c in token)))
def test_a_bearer_token_is_caught(token: str) -> None:
    assert token not in redact.redact(f"Authorization: Bearer {token}")


def test_the_documented_shapes_are_the_generated_ones() -> None:
    """Each shape the module documents has a generator above (and the other way round)."""
    documented = {name for name, _ in redact.KEY_SHAPES}
    assert documented == {
        "Anthropic",
        "OpenAI",
        "OpenRouter",
        "other sk- keys",
        "Stripe",
        "GitHub",
        "GitLab",
        "AWS",
        "Slack",
        "Google",
        "Hugging Face",
        "bearer tokens",
        "named secrets",
        "private keys",
    }
