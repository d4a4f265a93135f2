"""Helpers in another module, reached by ``module.attr`` from llm_use_stages.py."""

from __future__ import annotations

from fabrika.llm.types import ChatRequest


async def rephrase(ctx, text: str) -> str:
    return (await _client(ctx).complete_one(ChatRequest(messages=({"role": "user", "content": text},)))).text


def _client(ctx):
    return ctx.llm


def word_count(text: str) -> int:
    return len(text.split())
