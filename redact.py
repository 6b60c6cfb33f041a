"""Secret redaction: the one rule for everything that leaves the process as text.

Errors, run archives and history rows all pass through `redact` before they are shown or written,
so a key that leaked into an agent's output or an exception message never reaches a terminal, a file
or a database. Standard library only, because problems.py and runlog.py must work without the SDK.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

REDACTED = "[redacted]"

_WORD_START = r"(?<![A-Za-z0-9])"
"""A key begins a word: `ask-me-anything-2024-edition` and `disk-usage-report-for-the-team`
hold "sk-" but no key, because a letter stands before it."""

KEY_SHAPES: tuple[tuple[str, str], ...] = (
    ("Anthropic", "sk-ant-api03-…, sk-ant-admin01-…, sk-ant-oat01-…"),
    ("OpenAI", "sk-proj-…, sk-svcacct-…, sk-admin-…, and sk- with 32 letters and digits or more"),
    ("OpenRouter", "sk-or-v1-…"),
    ("other sk- keys", "sk- and 20 or more letters and digits, a digit among them (DeepSeek …)"),
    ("Stripe", "sk_live_…, sk_test_…, rk_live_…, rk_test_…"),
    ("GitHub", "ghp_…, gho_…, ghu_…, ghs_…, ghr_…, github_pat_…"),
    ("GitLab", "glpat-…"),
    ("AWS", "AKIA… and ASIA… access key ids"),
    ("Slack", "xoxb-…, xoxp-…, xoxa-…, xoxr-…, xoxs-…"),
    ("Google", "AIza…"),
    ("Hugging Face", "hf_…"),
    ("bearer tokens", "Authorization: Bearer …"),
    ("named secrets", "api_key=…, SECRET: …, token=…, password=… (a word of the name, not a part)"),
    ("private keys", "-----BEGIN … PRIVATE KEY----- … -----END … PRIVATE KEY-----"),
)
"""What `redact` catches, by the real shapes the keys have (documentation, and what the property
test generates): keys are matched where a word begins and by their own prefixes, never by "sk"
somewhere inside an ordinary word."""

_PATTERNS: tuple[re.Pattern[str], ...] = (
    # Anthropic, OpenAI and OpenRouter keys by their prefixes; other sk- keys by a long run of
    # letters and digits (a digit among them unless the run is key-length on its own).
    re.compile(
        _WORD_START + r"sk-(?:(?:ant|proj|svcacct|admin|None|or-v1)-[A-Za-z0-9_\-]{16,}"
        r"|[A-Za-z0-9]{32,}|(?=[A-Za-z]*[0-9])[A-Za-z0-9]{20,})"
    ),
    # Authorization headers and bearer tokens: the scheme as a header writes it (any case after
    # "Authorization:"), the token on the same line with a digit in it; "the bearer of
    # ask-2024-news" is prose.
    re.compile(
        r"(?:(?i:\bauthorization:[ \t]*bearer)|\bBearer|\bBEARER)[ \t]+"
        r"(?=[A-Za-z._~+/=\-]*[0-9])[A-Za-z0-9._~+/=\-]{12,}"
    ),
    # key=value or key: value pairs whose name says secret: the telling word is a whole part of
    # the name (`DB_PASSWORD`, `x-api-key`, `client_secret`), never inside another word
    # (`secretary`, `max_tokens`); the match starts at that word, the name's start stays.
    re.compile(
        r"(?i)(?<![A-Z0-9])((?:api[_\-]?key|secret|token|password|passwd)[0-9]*"
        r"(?:[_\-][A-Z0-9]+)*)(?![A-Z0-9])"
        r"([ \t]*[=:][ \t]*[\"']?)([^\s\"',;]{6,})"
    ),
    # PEM private keys, whole block.
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL),
    # AWS access key ids (long-term and temporary).
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    # GitHub tokens, classic and fine-grained.
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    # Stripe secret and restricted keys.
    re.compile(_WORD_START + r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    # GitLab personal access tokens.
    re.compile(_WORD_START + r"glpat-[A-Za-z0-9_\-]{20,}"),
    # Slack tokens: xoxb-123-456-abc…
    re.compile(_WORD_START + r"xox[abprs]-[0-9]+-[A-Za-z0-9\-]{10,}"),
    # Google API keys.
    re.compile(_WORD_START + r"AIza[0-9A-Za-z_\-]{35}"),
    # Hugging Face tokens.
    re.compile(_WORD_START + r"hf_[A-Za-z0-9]{30,}"),
)

_BEARER = 1
"""The bearer pattern ignores case only in part; its clue is looked for in the lowered text."""
_CLUES: tuple[tuple[str, ...], ...] = (
    ("sk-",),
    ("bearer",),
    ("key", "secret", "token", "passw"),
    ("-----BEGIN ",),
    ("AKIA", "ASIA"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ("k_live_", "k_test_"),
    ("glpat-",),
    ("xox",),
    ("AIza",),
    ("hf_",),
)
"""Per pattern, substrings one of which every match contains: a text holding none of them cannot
match, and most texts (event fields, short record strings) hold none, so the regex never runs.
Lowercase for the patterns that ignore case (see `_may_match`)."""


_SHAPES: tuple[str, ...] = ("", "line", "line", "", "", "", "", "", "", "", "")
"""Per pattern, where its matches lie around its clues, for the patterns that ignore case (no
literal prefix speeds their search, so a long text is searched only around its clues,
`_matches`): "line", every match lies within the line holding a clue (the pattern matches no
line break; a bearer token may begin at "Authorization:", before its clue); "" (the others):
search the whole text."""
_AFTER_CLUE: tuple[re.Pattern[bytes] | None, ...] = (
    None,
    None,
    re.compile(rb"[a-z0-9_\-]*[ \t]*[=:]"),
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
)
"""Per pattern, what must follow the clue a match holds, in the lowered ASCII text: a line whose
clues are none of them so followed holds no match and is not searched (`name = value`: the
clue's word, spaces or tabs, then `=` or `:`)."""
_WINDOW_FROM = 64 * 1024
"""A text this long is searched around its clues (`_matches`): an attached file's 4 MB in tens
of milliseconds rather than half a second."""
_ASCII_LOOKALIKES = "\u0130\u0131\u017f\u212a"
"""The characters that ignoring case matches to ASCII letters (capital I with a dot, dotless i,
long s and the Kelvin sign, as the `re` module documents): a text holding one is searched
whole."""


_RULES: tuple[tuple[re.Pattern[str], tuple[str, ...], bool], ...] = tuple(
    (pattern, clues, bool(pattern.flags & re.IGNORECASE) or index == _BEARER)
    for index, (pattern, clues) in enumerate(zip(_PATTERNS, _CLUES, strict=True))
)
"""Each pattern with its clues and whether it ignores case (read once: flags are slow enums)."""


def _may_match(clues: tuple[str, ...], folded: bool, text: str) -> bool:
    """Whether a pattern with these clues could match `text`; False only when it cannot.

    For a pattern that ignores case (`folded`) the clues are looked for in the lowered text, but
    only when the text is ASCII: there lowering is exactly what IGNORECASE matches, while Unicode
    case folding matches more (the long s U+017F matches "s"), so other text goes to the regex.
    """
    if folded:
        if not text.isascii():
            return True
        text = text.lower()
    return any(clue in text for clue in clues)


_KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
_registered: set[str] = set()


def register(secret: str) -> None:
    """Remember a secret that never went through os.environ (a key read from .env or typed in)."""
    if secret:
        _registered.add(secret)


def _replace(match: re.Match[str]) -> str:
    """Keep the name of a `name=value` pair so the reader still sees what was there.

    A value that is itself the name of a key variable ("MissingApiKeyError: ANTHROPIC_API_KEY
    is not set") is no secret, and redacting it hides the one fact the message is about.
    """
    if match.re.groups == 3:
        if match.group(3) in _KEY_VARIABLES:
            return match.group(0)
        return f"{match.group(1)}{match.group(2)}{REDACTED}"
    return REDACTED


def redact(text: str, *, secrets: tuple[str, ...] = ()) -> str:
    """Return `text` with the live key, the given secrets and anything key-shaped replaced."""
    if not text:
        return text
    literal = [s for s in (*secrets, *_live_secrets()) if s and len(s) >= 8]
    for secret in sorted(set(literal), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern, clues, folded in _RULES:
        if _may_match(clues, folded, text):
            text = pattern.sub(_replace, text)
    return text


_PLACEHOLDER = re.compile(
    r"(?i)your|example|placeholder|changeme|dummy|here|x{4,}|\.\.\.|\*{3}|[<>]"
)
_SECRET_VALUE = re.compile(r"[A-Za-z0-9_\-+/=.]{8,}")


def contains_secret(text: str) -> bool:
    """Whether `text` holds what looks like a real secret: a file that does is never attached.

    Stricter than `redact` about what counts, because refusing a file costs the user its use:
    a documented placeholder (`API_KEY=your-key-here`, `sk-ant-...`) and code that merely names
    a secret (`password = getpass()`) are not secrets; a live key, a PEM private key or a
    key-shaped value is.
    """
    if any(len(secret) >= 8 and secret in text for secret in _live_secrets()):
        return True
    letters = _Letters(text)
    windowed = len(text) >= _WINDOW_FROM
    for (pattern, clues, folded), shape, after in zip(_RULES, _SHAPES, _AFTER_CLUE, strict=True):
        if not (shape and windowed) and not _may_match(clues, folded, text):
            continue  # (a pattern searched around its clues needs no look for them first)
        for match in _matches(pattern, clues, shape, text, letters, after):
            if pattern.groups == 3:
                value = match.group(3)
                code_or_name = not _SECRET_VALUE.fullmatch(value) or value in _KEY_VARIABLES
                if code_or_name or not any(c.isdigit() for c in value):
                    continue
            else:
                value = match.group(0)
            if not _PLACEHOLDER.search(value):
                return True
    return False


class _Letters:
    """A long text as lowered ASCII bytes, made once for every pattern that asks: one byte a
    character (every other character a "?"), so a position there is the same position in the
    text, and bytes are searched at the speed of memory. None when the text holds a character
    that ignoring case matches to an ASCII letter (_ASCII_LOOKALIKES)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._folded: bytes | None = None
        self._made = False

    def folded(self) -> bytes | None:
        if not self._made:
            self._made = True
            if not any(lookalike in self.text for lookalike in _ASCII_LOOKALIKES):
                self._folded = self.text.encode("ascii", "replace").lower()
        return self._folded

    def positions(
        self, clues: tuple[str, ...], after: re.Pattern[bytes] | None = None
    ) -> list[int] | None:
        """Where the (lowercase ASCII) clues occur, ignoring case as the patterns do, in order
        (only those `after` matches right after); None when that cannot be told this way."""
        folded = self.folded()
        if folded is None:
            return None
        hits: list[int] = []
        for clue in clues:
            needle = clue.encode("ascii")
            at = folded.find(needle)
            while at >= 0:
                if after is None or after.match(folded, at + len(needle)):
                    hits.append(at)
                at = folded.find(needle, at + 1)
        return sorted(hits)


def _matches(
    pattern: re.Pattern[str],
    clues: tuple[str, ...],
    shape: str,
    text: str,
    letters: _Letters,
    after: re.Pattern[bytes] | None = None,
) -> Iterator[re.Match[str]]:
    """`pattern.finditer(text)`, the same matches in the same order, found in a long text only
    around the clues of a pattern whose matches hold one (`_SHAPES`, `_AFTER_CLUE`)."""
    hits = letters.positions(clues, after) if shape and len(text) >= _WINDOW_FROM else None
    if hits is None:
        yield from pattern.finditer(text)
        return
    done = 0
    """Where the last line searched ended: a clue before it was searched with its line."""
    for hit in hits:
        if hit < done:
            continue
        start = text.rfind("\n", 0, hit) + 1
        end = text.find("\n", hit)
        done = len(text) if end < 0 else end
        yield from pattern.finditer(text, start, done)


def _live_secrets() -> list[str]:
    """The key variables as the process sees them now, read at call time."""
    return [*(os.environ.get(name, "") for name in _KEY_VARIABLES), *_registered]
