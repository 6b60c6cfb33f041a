"""jsontext.py — the JSON objects in a model's text, when the text is not only JSON.

A model asked for JSON without the API holding it to a schema (a local server that drops
`output_config.format`, a prompt that only describes the schema) answers the way people write:
"Here is the plan:", a fenced ```json block, a closing remark, sometimes a stray `{}` in the
prose before it. `objects` finds every top-level JSON object in such a text, in order, as the
standard library's own decoder reads it from each `{` (so braces and quotes inside strings are
never mistaken for structure); the caller validates them and takes the first that fits. Pure
functions, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

MAX_STARTS = 2_000
"""Opening braces tried at most: a text of many unmatched braces costs bounded time."""

_decoder = json.JSONDecoder()


def objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object in `text` not inside another one, in the order they appear."""
    at = text.find("{")
    starts = 0
    while at >= 0 and starts < MAX_STARTS:
        starts += 1
        try:
            value, end = _decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            at = text.find("{", at + 1)
            continue
        if isinstance(value, dict):
            yield value
        at = text.find("{", end)


def first_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text`, or None when it holds none."""
    return next(objects(text), None)
