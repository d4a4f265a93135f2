"""``sim``: the offline, deterministic stand-in for a model — and honest about it.

Every response it produces says ``backend="sim"``, and generic text starts with
``"[sim]"``, so simulated data can never pass for model output downstream.

Public API (stable; pipelines rely on it)::

    from fabrika.llm.sim import register_sim_responder

    def planner(request: ChatRequest, rng: random.Random) -> Choice | str:
        return '{"steps": [...]}'

    register_sim_responder("fc.planner", planner)

A responder is chosen by the **longest registered prefix** of ``request.tag``
(``"fc"`` answers ``"fc.user"`` unless ``"fc.user"`` itself is registered).
Register responders in the module that owns the role, at import time. ``rng``
is seeded from the request's cache key, the choice index and
``SimConfig.seed`` — the same request always gets the same answer.

Without a matching responder the generic fallback answers:

* ``response_format`` with a JSON schema → a schema-valid JSON instance;
* ``tools`` given and ``tool_choice != "none"`` → one tool call whose arguments
  are drawn from the tool's ``parameters`` schema (required keys, enums, types);
* otherwise a short text starting with ``"[sim]"``.

``SimConfig.error_rate`` makes a fraction of attempts fail with a retryable
:class:`~fabrika.errors.LLMError` (deterministic per request and attempt) to
exercise the error paths; ``latency_ms`` adds an ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import random
import sys
from typing import Callable

from fabrika.errors import LLMError, LLMErrorKind
from fabrika.llm.cache import content_key
from fabrika.llm.schema_gen import (
    choose_tool,
    generate_instance,
    response_format_schema,
    tool_name,
    tool_parameters,
)
from fabrika.llm.types import ChatRequest, ChatResponse, Choice, Usage

SimResponder = Callable[[ChatRequest, random.Random], Choice | str]

_RESPONDERS: dict[str, SimResponder] = {}

SIM_BACKEND_NAME = "sim"

_RETRYABLE_SIM_KINDS: tuple[LLMErrorKind, ...] = ("rate_limit", "server", "timeout", "connection")


def register_sim_responder(tag_prefix: str, fn: SimResponder) -> None:
    """Answer every request whose ``tag`` starts with ``tag_prefix`` with ``fn(request, rng)``.

    Re-registering a prefix replaces the previous responder (module reloads stay
    harmless). ``fn`` returns a :class:`Choice` (for tool calls or an explicit
    ``finish_reason``) or a plain string (text content, ``finish_reason="stop"``).
    """
    if not isinstance(tag_prefix, str):
        raise TypeError(f"tag_prefix must be a str, got {type(tag_prefix).__name__}")
    if not callable(fn):
        raise TypeError(f"sim responder for {tag_prefix!r} must be callable, got {fn!r}")
    _RESPONDERS[tag_prefix] = fn


def unregister_sim_responder(tag_prefix: str) -> None:
    """Remove a responder (tests that register temporary ones)."""
    _RESPONDERS.pop(tag_prefix, None)


def registered_sim_responders() -> dict[str, SimResponder]:
    """A copy of the registry, prefix → responder."""
    return dict(_RESPONDERS)


def find_sim_responder(tag: str) -> SimResponder | None:
    """The responder whose prefix is the longest prefix of ``tag`` (``None`` when nothing matches)."""
    best: str | None = None
    for prefix in _RESPONDERS:
        if tag.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return _RESPONDERS[best] if best is not None else None


@functools.lru_cache(maxsize=256)
def _responder_code(fn: SimResponder) -> str:
    """Digest of the source of the module that defines ``fn``: an edited responder is another model,
    so its answers are not served from the cache (the pipeline's lineage redoes its stages)."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        source = ""
    return hashlib.sha256(source.encode()).hexdigest()[:12]


def estimate_tokens(text: str) -> int:
    """Rough token count (chars / 4, at least 1 for non-empty text)."""
    return (len(text) + 3) // 4


def _prompt_chars(request: ChatRequest) -> int:
    total = 0
    for m in request.messages:
        c = m.get("content")
        if isinstance(c, str):
            total += len(c)
        elif c is not None:
            total += len(json.dumps(c, ensure_ascii=False))
    if request.tools:
        total += len(json.dumps(request.tools, ensure_ascii=False))
    return total


def _last_user_text(request: ChatRequest) -> str:
    for m in reversed(request.messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return ""


def generic_choice(request: ChatRequest, rng: random.Random, marker: str = "[sim]") -> Choice:
    """The fallback answer described in the module docstring."""
    schema = response_format_schema(request.response_format)
    if schema is not None:
        value = generate_instance(schema, rng, marker=marker)
        return Choice(content=json.dumps(value, ensure_ascii=False))
    tool = choose_tool(request.tools or (), request.tool_choice, rng)
    if tool is not None:
        args = generate_instance(tool_parameters(tool), rng, marker=marker)
        call_id = f"call_{rng.getrandbits(48):012x}"
        return Choice(
            content=None,
            tool_calls=({"id": call_id, "name": tool_name(tool),
                         "arguments": json.dumps(args, ensure_ascii=False)},),
            finish_reason="tool_calls",
        )
    snippet = _last_user_text(request)[:60]
    text = f"{marker} ответ #{rng.randint(1, 10**6)}" + (f" на: {snippet}" if snippet else "")
    return Choice(content=text)


def _coerce(value: Choice | str, tag: str) -> Choice:
    if isinstance(value, Choice):
        return value
    if isinstance(value, str):
        return Choice(content=value)
    raise TypeError(f"sim responder for tag {tag!r} returned {type(value).__name__}; "
                    "return a fabrika.llm.types.Choice or a str")


def _unit(*parts: object) -> float:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class SimBackend:
    """The ``sim`` backend (see module docstring). Implements :class:`fabrika.llm.base.Backend`.

    Args:
        seed: mixed into every RNG; changing it changes every answer.
        error_rate: fraction of attempts that raise a retryable ``LLMError``.
        latency_ms: simulated latency per attempt.
        model: model name reported in responses when the request names none.
    """

    name = SIM_BACKEND_NAME

    def __init__(self, *, seed: int = 0, error_rate: float = 0.0, latency_ms: float = 0.0,
                 model: str = "sim") -> None:
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"llm.sim.error_rate must be in [0, 1], got {error_rate}")
        self.seed = seed
        self.error_rate = error_rate
        self.latency_s = latency_ms / 1000.0
        self.model = model
        self._attempts: dict[str, int] = {}

    def respond(self, request: ChatRequest, key: str | None = None) -> ChatResponse:
        """Synchronously build the answer to ``request`` (no latency, no injected errors)."""
        key = key or content_key(request, self.model)
        responder = find_sim_responder(request.tag)
        choices = []
        for i in range(max(1, request.n)):
            rng = random.Random(f"{self.seed}:{key}:{i}")
            if responder is not None:
                choices.append(_coerce(responder(request, rng), request.tag))
            else:
                choices.append(generic_choice(request, rng))
        completion = 0
        for c in choices:
            completion += estimate_tokens(c.content or "")
            for call in c.tool_calls:
                completion += estimate_tokens(call.get("arguments", "")) + 2
        return ChatResponse(
            choices=tuple(choices),
            usage=Usage(prompt_tokens=(_prompt_chars(request) + 3) // 4, completion_tokens=completion),
            model=request.model or self.model,
            backend=self.name,
        )

    async def send(self, request: ChatRequest) -> ChatResponse:
        key = content_key(request, self.model)
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        if self.error_rate > 0.0:
            attempt = self._attempts.get(key, 0)
            self._attempts[key] = attempt + 1
            u = _unit(self.seed, key, attempt)
            if u < self.error_rate:
                kind = _RETRYABLE_SIM_KINDS[int(u * 1e6) % len(_RETRYABLE_SIM_KINDS)]
                raise LLMError(kind, f"sim: injected {kind} error (attempt {attempt + 1}, "
                                     f"error_rate={self.error_rate})")
            self._attempts.pop(key, None)
        return self.respond(request, key)

    def cache_scope(self, request: ChatRequest) -> str:
        """What the cache key adds for a sim answer: its seed, the tag, and which responder answers it.

        The responder is named so that switching sim profiles (e.g. the realistic FC profile,
        registered over the basic one) never serves the other profile's cached answers, and its
        module's code is hashed so that an edited responder answers afresh.
        """
        fn = find_sim_responder(request.tag or "")
        who = "generic" if fn is None else f"{fn.__module__}.{getattr(fn, '__qualname__', type(fn).__name__)}"
        return f"sim/{self.seed}/{request.tag}/{who}" + ("" if fn is None else f"@{_responder_code(fn)}")

    async def aclose(self) -> None:
        self._attempts.clear()
