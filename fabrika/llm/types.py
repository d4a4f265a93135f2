"""Frozen request/response types of the LLM layer.

Every backend takes :class:`ChatRequest` and returns :class:`ChatResponse`.
Tool calls travel in OpenAI shape (``{"id", "name", "arguments": <JSON str>}``)
because the answer is untrusted: parsing it into :class:`fabrika.schemas.ToolCall`
is the caller's job, and a parse failure is a recorded rejection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fabrika.errors import LLMError


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat-completion request.

    Fields that change the output (everything but ``tag`` and ``meta``) go into
    the cache key. ``tag`` names the role that asks (``"fc.planner"``,
    ``"if.verifier"``): accounting groups by it and the ``sim`` backend picks its
    responder by it. ``sample_index`` distinguishes repeated samples of the same
    prompt (K verifiers, k policy samples) so each gets its own cache entry.
    ``routing_key`` (the episode id for agent turns) tells the affinity router
    which requests share a prompt prefix, so they go to the server that holds
    it in its KV cache; like ``tag`` it is not part of the cache key (where a
    request is served does not change its answer).
    """

    messages: tuple[dict[str, Any], ...]
    model: str | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    n: int = 1
    seed: int | None = None
    sample_index: int = 0
    response_format: dict[str, Any] | None = None
    stop: tuple[str, ...] | None = None
    extra_body: dict[str, Any] | None = None
    tag: str = "default"
    routing_key: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Choice:
    """One sampled answer. ``finish_reason == "length"`` means truncated."""

    content: str | None
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = "stop"
    reasoning: str | None = None

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """The answer to one request, or the error that ended it (``error`` set, ``choices`` empty).

    ``backend`` is the backend that produced it (``"sim"`` data says so
    everywhere downstream); ``cached`` tells whether it came from the cache. ``endpoint``: the
    server that answered (its base URL without credentials or query, :func:`fabrika.llm.redact.public_url`),
    for the run's request log; never cached, never part of a key.
    """

    choices: tuple[Choice, ...] = ()
    usage: Usage = Usage()
    model: str = ""
    backend: str = ""
    cached: bool = False
    attempts: int = 1
    error: LLMError | None = None
    endpoint: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str | None:
        """Content of the first choice (``None`` on error)."""
        return self.choices[0].content if self.choices else None
