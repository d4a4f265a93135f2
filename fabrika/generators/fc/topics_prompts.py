"""Prompts of the topic stage, written natively per language (never translated)."""

from __future__ import annotations

import json
from typing import Any

LABEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string"}, "description": {"type": "string"}},
    "required": ["label", "description"],
    "additionalProperties": False,
}

EXPAND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "topics": {
            "type": "array",
            "items": LABEL_SCHEMA,
        }
    },
    "required": ["topics"],
    "additionalProperties": False,
}

_LABEL_SYSTEM = {
    "ru": (
        "Ты помогаешь собрать пул тем для обучения ассистента, который вызывает функции (API). "
        "По ключевым словам и примерам запросов одного кластера дай теме короткое название "
        "(2–6 слов) и одно предложение описания: какие задачи пользователя в ней решаются с помощью сервисов. "
        "Пиши только по-русски. Ответ — JSON вида {\"label\": \"...\", \"description\": \"...\"}."
    ),
    "en": (
        "You help build a pool of topics for training an assistant that calls functions (APIs). "
        "Given the keywords and sample requests of one cluster, give the topic a short name (2-6 words) "
        "and a one-sentence description of the user tasks in it that services can solve. "
        "Write in English only. Answer with JSON: {\"label\": \"...\", \"description\": \"...\"}."
    ),
}

_EXPAND_SYSTEM = {
    "ru": (
        "Ты расширяешь пул тем для синтетических диалогов с вызовом функций. По исходной теме предложи "
        "{n} новых тем: смежных, конкретных и не повторяющих исходную и уже известные. В каждой теме "
        "пользователю нужна помощь сервиса или API (бронирование, поиск, расчёт, управление устройством и т. п.). "
        "Пиши только по-русски. Ответ — JSON вида {{\"topics\": [{{\"label\": \"...\", \"description\": \"...\"}}]}}."
    ),
    "en": (
        "You expand a pool of topics for synthetic function-calling dialogues. From the seed topic propose "
        "{n} new topics: related, specific, and different from the seed and from the known ones. In each topic "
        "the user needs a service or API (booking, search, calculation, device control, etc.). "
        "Write in English only. Answer with JSON: {{\"topics\": [{{\"label\": \"...\", \"description\": \"...\"}}]}}."
    ),
}


def label_messages(lang: str, keywords: list[str], examples: list[str]) -> tuple[dict[str, str], ...]:
    head = "Ключевые слова" if lang == "ru" else "Keywords"
    ex = "Примеры запросов" if lang == "ru" else "Sample requests"
    user = f"{head}: {', '.join(keywords)}\n{ex}:\n" + "\n".join(f"- {e}" for e in examples)
    return ({"role": "system", "content": _LABEL_SYSTEM[lang]}, {"role": "user", "content": user})


def expand_messages(lang: str, seed_label: str, seed_description: str, known: list[str], n: int) -> tuple[dict[str, str], ...]:
    if lang == "ru":
        user = f"Исходная тема: {seed_label} — {seed_description}\nУже есть: {json.dumps(known, ensure_ascii=False)}"
    else:
        user = f"Seed topic: {seed_label} — {seed_description}\nAlready known: {json.dumps(known, ensure_ascii=False)}"
    return ({"role": "system", "content": _EXPAND_SYSTEM[lang].format(n=n)}, {"role": "user", "content": user})
