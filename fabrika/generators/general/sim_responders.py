"""``sim`` answers for ``general.teacher``: varied lengths, reasoning blocks and truncation, like a real teacher.

A real reasoning model wraps part of its answers in ``<think>…</think>``, answers the
same prompt at very different lengths and is now and then cut off at ``max_tokens``;
the responder does all three (deterministically per request and sample), so the
teacher stage's reasoning stripping and its "truncated never enters L0" rule run offline.
"""

from __future__ import annotations

import random

from fabrika.llm.sim import register_sim_responder
from fabrika.llm.types import ChatRequest, Choice

_OPENERS = ["Коротко:", "Если по сути, то так.", "Хороший вопрос.", "Попробую объяснить по шагам.",
            "Вот что можно сказать."]
_OPENERS_EN = ["In short:", "Good question.", "Here is how I would approach it."]
_SENTENCES_EN = [
    "Start with the simplest option and check whether it solves the problem.",
    "Context matters: the same answer does not fit everyone.",
    "If in doubt, compare two or three approaches on a small example.",
    "Write down what you learn along the way so you can come back to it.",
    "Check the result on real data before drawing conclusions.",
]
_SENTENCES = [
    "Начните с самого простого варианта и проверьте, решает ли он задачу.",
    "Важно учитывать контекст: одно и то же решение подходит не всем.",
    "Если сомневаетесь, сравните два-три подхода на небольшом примере.",
    "Обратите внимание на сроки и ресурсы, которые у вас есть.",
    "Полезно записать промежуточные выводы, чтобы к ним вернуться.",
    "Не стоит усложнять там, где хватает простого ответа.",
    "В большинстве случаев этого достаточно, но бывают исключения.",
    "Проверьте результат на реальных данных, прежде чем делать выводы.",
]


def sim_teacher(request: ChatRequest, rng: random.Random) -> Choice:
    """A teacher answer of 1–8 sentences; ~25 % with a reasoning block, ~10 % truncated."""
    user = next((m.get("content") or "" for m in reversed(request.messages) if m.get("role") == "user"), "")
    latin = sum("a" <= ch.lower() <= "z" for ch in user) > sum("а" <= ch.lower() <= "я" for ch in user)
    openers, sentences = (_OPENERS_EN, _SENTENCES_EN) if latin else (_OPENERS, _SENTENCES)
    body = " ".join([rng.choice(openers)] + rng.sample(sentences, rng.randint(1, len(sentences))))
    if rng.random() < 0.25:
        body = f"<think>Пользователь спрашивает; надо ответить по делу.</think>\n\n{body}"
    if rng.random() < 0.1:
        return Choice(content=body[: max(10, len(body) // 3)], finish_reason="length")
    return Choice(content=body)


def register() -> None:
    register_sim_responder("general.teacher", sim_teacher)


register()
