"""Requests of the topic stage: the response schemas and the messages, rendered from the ``fc`` catalogue
(:mod:`fabrika.generators.fc.prompts`: ``label`` and ``expand``, written natively per language, never translated)."""

from __future__ import annotations

import json
from typing import Any

from fabrika.generators.fc.prompts import CATALOGUE

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


def label_messages(lang: str, keywords: list[str], examples: list[str]) -> tuple[dict[str, str], ...]:
    return ({"role": "system", "content": CATALOGUE.text("label", lang, "system")},
            {"role": "user", "content": CATALOGUE.text("label", lang, "user", keywords=", ".join(keywords),
                                                       examples="\n".join(f"- {e}" for e in examples))})


def expand_messages(lang: str, seed_label: str, seed_description: str, known: list[str], n: int) -> tuple[dict[str, str], ...]:
    return ({"role": "system", "content": CATALOGUE.text("expand", lang, "system", n=n)},
            {"role": "user", "content": CATALOGUE.text("expand", lang, "user", label=seed_label,
                                                       description=seed_description,
                                                       known=json.dumps(known, ensure_ascii=False))})
