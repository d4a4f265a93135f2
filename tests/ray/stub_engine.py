"""A CPU stand-in for the in-process vLLM backend, built inside each engine actor (``ray.engine_backend``).

It behaves like the real one where the Ray path can go wrong: answers take time and are
deterministic per request, the first attempt of a ``flaky`` request is a retryable
``server`` error (an aborted request after an engine restart), an over-long prompt is a
terminal ``context_length`` error, and usage is counted in tokens.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os

from fabrika.errors import LLMError
from fabrika.llm.types import ChatRequest, ChatResponse, Choice, Usage

MAX_PROMPT_WORDS = 200


class StubVLLM:
    name = "vllm"

    def __init__(self, llm) -> None:
        self.model = llm.model
        self.seen_flaky: set[str] = set()

    async def send(self, request: ChatRequest) -> ChatResponse:
        text = " ".join(str(m.get("content") or "") for m in request.messages)
        await asyncio.sleep(0.5 if "slow" in text else 0.005)  # a long generation
        words = len(text.split())
        if words > MAX_PROMPT_WORDS:
            raise LLMError("context_length", f"prompt of {words} words exceeds max_model_len")
        key = hashlib.sha256(json.dumps([request.messages, request.sample_index], sort_keys=True).encode()).hexdigest()
        if "flaky" in text and key not in self.seen_flaky:
            self.seen_flaky.add(key)
            raise LLMError("server", "request aborted (engine restarted)")
        return ChatResponse(choices=(Choice(content=f"answer {key[:12]}"),), usage=Usage(words, 3),
                            model=self.model or "stub", backend=self.name)

    async def aclose(self) -> None:
        return None


def engine_pid() -> int:
    return os.getpid()
