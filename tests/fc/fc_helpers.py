"""Helpers of the FC tests: a scripted in-process LLM and a minimal stage context (import as fc_helpers)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Iterator

from fabrika.llm.types import ChatRequest, ChatResponse, Choice
from fabrika.pipeline.context import item_rng

Script = Callable[[ChatRequest], "str | Choice"]


class ScriptedLLM:
    """Answers by the longest matching tag prefix; records every request (for visibility asserts)."""

    def __init__(self, scripts: dict[str, Script]) -> None:
        self.scripts = scripts
        self.requests: list[ChatRequest] = []

    async def complete_one(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        prefix = max((p for p in self.scripts if request.tag.startswith(p)), key=len, default=None)
        if prefix is None:
            raise AssertionError(f"no script for tag {request.tag!r}")
        out = self.scripts[prefix](request)
        choice = out if isinstance(out, Choice) else Choice(content=out)
        return ChatResponse(choices=(choice,), backend="scripted")

    async def complete(self, requests: list[ChatRequest]) -> list[ChatResponse]:
        return [await self.complete_one(r) for r in requests]

    def tagged(self, tag: str) -> list[ChatRequest]:
        return [r for r in self.requests if r.tag.startswith(tag)]


class FakeCtx:
    """Just enough of the runner's StageContext for per-item stage tests."""

    def __init__(self, llm: Any, rows: dict[str, list[dict]] | None = None, seed: int = 0) -> None:
        self.llm, self.seed, self.rows = llm, seed, rows or {}
        self.run_dir, self.pipeline, self.backend_name = Path("."), None, "scripted"

    def iter_rows(self, stage_name: str, *, gated: bool = True, columns: list[str] | None = None) -> Iterator[dict]:
        for row in self.rows.get(stage_name, []):
            if not gated or row.get("status", "ok") == "ok":
                yield row

    def rng(self, *parts: Any) -> random.Random:
        return item_rng(self.seed, "test", *parts)

    def resource(self, name: str, factory: Callable[[], Any]) -> Any:
        return factory()


def sequence(*answers: "str | Choice") -> Script:
    """A script that gives ``answers`` in order, then repeats the last one."""
    state = {"i": 0}

    def script(_req: ChatRequest) -> "str | Choice":
        out = answers[min(state["i"], len(answers) - 1)]
        state["i"] += 1
        return out

    return script
