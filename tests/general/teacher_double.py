"""The general-chat teacher: scripted choices behind the real engine (n, truncation, reasoning, failures)."""

from __future__ import annotations

from typing import Any

from fabrika.llm.config import LLMConfig
from fabrika.llm.types import ChatRequest, Choice
from fabrika.testing import HarnessContext, ScriptedLLM, llm_error, stage_context


def teacher_llm(choices: list[Choice | None], honours_n: bool = True) -> ScriptedLLM:
    """Sample ``i`` answers ``choices[i]`` (``None``: that sample's request times out); past the list,
    ``Ответ номер i.``. ``honours_n=False`` acts like a server that ignores ``n`` (one choice back), which
    the engine treats as a ``server`` error. No retries, so ``.requests`` reads like the server's log."""
    def choice(i: int) -> Choice | None:
        return choices[i] if i < len(choices) else Choice(content=f"Ответ номер {i}.")

    def answer(request: ChatRequest) -> Any:
        picked = choice(request.sample_index)
        return llm_error("timeout") if picked is None else picked

    return ScriptedLLM(answer, split_samples=honours_n, config=LLMConfig(max_retries=0))


def context(llm: Any, seed: int = 0, stage: str = "general_teacher") -> HarnessContext:
    return stage_context(llm, seed=seed, stage=stage)
