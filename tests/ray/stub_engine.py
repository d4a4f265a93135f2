"""A CPU stand-in for the in-process vLLM backend, built inside each engine actor (``ray.engine_backend``).

It behaves like a real vLLM engine where the Ray path can go wrong:

* answers take time and are deterministic per (prompt, effective seed); ``n > 1`` returns ``n``
  choices, choice ``j`` seeded ``seed + sample_index + j`` — what vLLM's v1 engine does with an
  ``n``-sample request (``n`` child requests seeded ``seed + index``), so one ``n=K`` request gives
  exactly the K answers of K single requests;
* an answer is several tokens long (words here) and ``max_tokens`` cuts it: the choice then ends
  with ``finish_reason="length"``, as vLLM reports a truncated generation;
* a prompt longer than ``MAX_PROMPT_WORDS`` is a terminal ``context_length`` error;
* an engine restart aborts every request in flight: a prompt containing ``crash`` restarts the
  engine the first time it is seen; the requests then running (and it) fail as retryable
  ``server`` errors (vLLM: ``EngineDeadError`` / aborted outputs), and the engine serves again;
* ``if.verifiers`` requests get a verifier (function + cases) chosen by the effective seed, so a
  pipeline's rows show which sample each answer was;
* usage is counted in tokens (words), and :meth:`stats` reports what the engine saw (routing keys,
  ``n`` per request, its peak of sequences in flight) for the routing tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections import Counter
from typing import Any

from fabrika.errors import LLMError
from fabrika.llm.types import ChatRequest, ChatResponse, Choice, Usage

MAX_PROMPT_WORDS = 600  # the verifier prompt (it names the pre-check allow-list) runs ~220 words
WORDS = ("ответ", "модель", "данные", "пример", "текст", "вывод", "шаг", "итог", "план", "запрос")


class StubVLLM:
    name = "vllm"

    def __init__(self, llm) -> None:
        self.model = llm.model
        self.crashed: set[str] = set()
        self.running: set[asyncio.Future] = set()
        self.sequences = 0  # sequences in flight (an n-sample request holds n)
        self.peak = 0
        self.restarts = 0
        self.keys: Counter[str] = Counter()
        self.ns: list[int] = []

    @staticmethod
    def _answer(text: str, seed: int) -> list[str]:
        digest = hashlib.sha256(json.dumps([text, seed]).encode()).digest()
        length = 4 + digest[0] % 9  # 4..12 tokens
        return [digest.hex()[:12]] + [WORDS[b % len(WORDS)] for b in digest[1:length]]

    @staticmethod
    def _verifier(seed: int) -> str:
        """An ``if.verifiers`` answer: a different function per effective seed (what tells samples apart)."""
        bodies = ["return response == response.lower()", "return ',' not in response",
                  "return len(response.split()) >= 5", "return len(response) > 3", "не код вовсе ("]
        code = "def evaluate(response):\n    " + bodies[seed % len(bodies)]
        cases = [{"input": "пример текста без запятых", "output": True}, {"input": "Да, Нет", "output": seed % 2 == 0}]
        return json.dumps({"func": code, "cases": cases}, ensure_ascii=False)

    def _restart(self) -> None:
        """The engine process died and came back: everything in flight is aborted."""
        self.restarts += 1
        for fut in list(self.running):
            if not fut.done():
                fut.set_exception(LLMError("server", "vllm: EngineDeadError: engine restarted; request aborted"))

    async def send(self, request: ChatRequest) -> ChatResponse:
        text = " ".join(str(m.get("content") or "") for m in request.messages)
        words = len(text.split())
        if words > MAX_PROMPT_WORDS:
            raise LLMError("context_length", f"prompt of {words} words exceeds max_model_len")
        n = max(1, request.n)
        self.keys[request.routing_key or ""] += 1
        self.ns.append(n)
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.running.add(done)
        self.sequences += n
        self.peak = max(self.peak, self.sequences)
        try:
            if "crash" in text and text not in self.crashed:
                self.crashed.add(text)
                await asyncio.sleep(0.05)  # mid-generation
                self._restart()
            generation = asyncio.ensure_future(asyncio.sleep(0.5 if "slow" in text else 0.005))
            await asyncio.wait([generation, done], return_when=asyncio.FIRST_COMPLETED)
            if done.done():
                generation.cancel()
                done.result()  # raises the abort
        finally:
            self.running.discard(done)
            self.sequences -= n
        base = (request.seed or 0) + request.sample_index
        choices, completion = [], 0
        for j in range(n):
            if request.tag.startswith("if.verifiers"):
                choices.append(Choice(content=self._verifier(base + j), finish_reason="stop"))
                completion += 20
                continue
            tokens = self._answer(text, base + j)
            finish = "stop"
            if request.max_tokens is not None and len(tokens) > request.max_tokens:
                tokens, finish = tokens[: request.max_tokens], "length"
            completion += len(tokens)
            choices.append(Choice(content=" ".join(tokens), finish_reason=finish))
        return ChatResponse(choices=tuple(choices), usage=Usage(words, completion),
                            model=self.model or "stub", backend=self.name)

    def stats(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "keys": dict(self.keys), "ns": list(self.ns), "peak_sequences": self.peak,
                "restarts": self.restarts}

    async def aclose(self) -> None:
        return None


def engine_pid() -> int:
    return os.getpid()
