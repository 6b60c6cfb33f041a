"""llm.py — the one road to the model.

`complete` and `complete_structured` are the only two ways any part of AgentGOD reaches Claude,
and `get_client` the only place an SDK client is built. No temperature, ever; effort goes in
`output_config` only for models that accept it; stable system prompts are cached blocks. Under a
ledger with a budget, each call holds its worst case first and records its real usage after.
The SDK is imported lazily: `agentgod --version` must not pay for it.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import config
import models
from ledger import Usage, estimate_tokens
from signals import shield_from_signals

if TYPE_CHECKING:
    import anthropic
    from pydantic import BaseModel

    ModelT = TypeVar("ModelT", bound=BaseModel)

_clients: dict[tuple[str, str | None], anthropic.Anthropic] = {}
_clients_lock = threading.Lock()
client_ready = threading.Event()
"""Set once an SDK client exists: the expensive import is over and requests can leave."""


class StructuredReplyError(ValueError):
    """The model's structured reply was empty or refused (validation errors come from pydantic)."""


def preload_sdk() -> threading.Thread:
    """Import the SDK on a background thread while start-up (or a person typing) goes on.

    `import anthropic` costs about two seconds; overlapping it with everything else start-up does
    is the difference between a first request that leaves at once and one that waits for it.
    """

    def load() -> None:
        shield_from_signals()
        with contextlib.suppress(Exception):
            import anthropic  # noqa: F401

            get_client()  # the HTTP stack loads with the client; needs the key, so may not yet

    thread = threading.Thread(target=load, name="agentgod-preload", daemon=True)
    thread.start()
    return thread


def get_client() -> anthropic.Anthropic:
    """The only place an SDK client is built; one per (key, base URL), shared across threads."""
    key = config.api_key()
    base_url = config.env("ANTHROPIC_BASE_URL") or None
    with _clients_lock:
        client = _clients.get((key, base_url))
        if client is None:
            import anthropic

            client = anthropic.Anthropic(api_key=key, base_url=base_url)
            _clients[(key, base_url)] = client
            client_ready.set()
        return client


def response_text(message: Any) -> str:
    """Join the text blocks of a reply; a reasoning model's first block is thinking, not text."""
    return "".join(
        getattr(block, "text", "") for block in message.content if block.type == "text"
    ).strip()


def _request(
    prompt: str, *, model: str, effort: str | None, system: str | None, max_tokens: int
) -> dict[str, Any]:
    """Keyword arguments for messages.create/parse. Never a temperature."""
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if system:
        request["system"] = [
            {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
        ]
    level = models.effort_for_model(model, effort) if effort else None
    if level:
        request["output_config"] = {"effort": level.value}
    return request


def _send(send: Callable[..., Any], request: dict[str, Any], usage: Usage | None) -> Any:
    """Make the call within the budget (if any) and count what it spent."""
    if usage is None:
        return send(**request)
    sent = json.dumps(request, default=str)
    schema = request.get("output_format")
    if schema is not None:
        sent += json.dumps(schema.model_json_schema())
    hold = usage.hold(
        request["model"], input_tokens=estimate_tokens(sent), max_tokens=request["max_tokens"]
    )
    try:
        reply = send(**{**request, "max_tokens": hold.tokens})
        usage.record(request["model"], reply.usage)
        return reply
    finally:
        usage.release(hold)


def forward(request: dict[str, Any]) -> Any:
    """Send a request someone else has already decided and metered: the broker's, for an agent.

    The broker validates the agent's request, clamps it to the budget and bills the reply
    itself, so this only adds the key (through the client) and the SDK's retries.
    """
    return get_client().messages.create(**request)


def complete(
    prompt: str,
    *,
    model: str,
    effort: str | None,
    system: str | None = None,
    max_tokens: int = 4096,
    usage: Usage | None = None,
) -> str:
    """One plain call; returns the reply's text. `effort=None` sends no effort at all."""
    request = _request(prompt, model=model, effort=effort, system=system, max_tokens=max_tokens)
    reply = _send(get_client().messages.create, request, usage)
    return response_text(reply)


def complete_structured(
    prompt: str,
    output_format: type[ModelT],
    *,
    model: str,
    effort: str | None,
    system: str | None = None,
    max_tokens: int = 4096,
    usage: Usage | None = None,
) -> ModelT:
    """One call constrained to `output_format`'s JSON schema, parsed and validated by the SDK."""
    request = _request(prompt, model=model, effort=effort, system=system, max_tokens=max_tokens)
    reply = _send(get_client().messages.parse, {**request, "output_format": output_format}, usage)
    parsed: ModelT | None = reply.parsed_output
    if parsed is None:
        raise StructuredReplyError(
            f"{output_format.__name__}: the reply held no parsable JSON "
            f"(stop_reason={reply.stop_reason})"
        )
    return parsed
