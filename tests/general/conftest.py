"""Doubles for the general-chat stages: a teacher that behaves like a real server (n, truncation, reasoning)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Sequence

from fabrika.errors import LLMError
from fabrika.llm.types import ChatRequest, ChatResponse, Choice
from fabrika.pipeline.context import item_rng


class Teacher:
    """Answers with scripted choices; ``honours_n=False`` acts like a server that ignores ``n`` (one choice)."""

    def __init__(self, choices: list[Choice | None], honours_n: bool = True) -> None:
        self.choices, self.honours_n = choices, honours_n
        self.requests: list[ChatRequest] = []

    def _choice(self, i: int) -> Choice | None:
        return self.choices[i] if i < len(self.choices) else Choice(content=f"Ответ номер {i}.")

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        out = []
        for r in requests:
            self.requests.append(r)
            n = r.n if self.honours_n else 1
            picked = [self._choice(r.sample_index + j) for j in range(n)]
            if any(c is None for c in picked):
                out.append(ChatResponse(error=LLMError("timeout", "read timed out")))
            else:
                out.append(ChatResponse(choices=tuple(c for c in picked if c is not None), backend="fake"))
        return out


def context(llm: Any, seed: int = 0, stage: str = "general_teacher") -> SimpleNamespace:
    return SimpleNamespace(llm=llm, pipeline=None, rng=lambda *parts: item_rng(seed, stage, *parts),
                           resource=lambda name, factory: factory())
