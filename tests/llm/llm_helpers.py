"""Helpers for the LLM tests (a uniquely named module: tests/ has no packages)."""

from __future__ import annotations

from typing import Any

from fabrika.llm import ChatRequest, LLMConfig
from fabrika.testing import FakeOpenAIServer

FAST_BACKOFF = {"backoff_initial_s": 0.001, "backoff_max_s": 0.01, "backoff_jitter_s": 0.0, "retry_after_max_s": 5.0}


def http_config(*servers: FakeOpenAIServer, transport: str = "raw", **overrides: Any) -> LLMConfig:
    fields: dict[str, Any] = {"backend": "openai", "model": "fake", "transport": transport,
                              "endpoints": [{"base_url": s.base_url, "api_key": "test"} for s in servers],
                              "timeout_s": 5.0, **FAST_BACKOFF}
    fields.update(overrides)
    return LLMConfig(**fields)


def req(text: str, **kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": text},), **kwargs)
