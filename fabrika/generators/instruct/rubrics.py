"""Rubrics of the multi-turn IF dialogues: the writer's request, parsing, and the decidability check.

A rubric is one mandatory natural-language check of a single assistant reply. The writer
returns 1–5 of them as JSON; optional ones ("желательно…", "ideally…") are dropped (they caused
a length bias in the reference recipe), and an LLM check keeps only the rubrics it judges
decidable from one reply. Every drop is recorded with its reason.
"""

from __future__ import annotations

import re
from typing import Any

from fabrika.llm.types import ChatRequest
from fabrika.rewards.rubric import parse_verdicts, render_prompt, strip_reasoning
from fabrika.textutil.answers import ParseFailure, extract_json, is_failure

TAG_RUBRIC_WRITER = "if.dialogue.rubrics"
TAG_DECIDABLE = "if.dialogue.decidable"
MAX_RUBRICS = 5

RUBRICS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"rubrics": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_RUBRICS}},
    "required": ["rubrics"],
    "additionalProperties": False,
}
DECIDABLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"verdicts": {"type": "array", "items": {
        "type": "object",
        "properties": {"index": {"type": "integer", "minimum": 1}, "reason": {"type": "string"},
                       "decidable": {"type": "boolean"}},
        "required": ["index", "reason", "decidable"], "additionalProperties": False}}},
    "required": ["verdicts"],
    "additionalProperties": False,
}

# Hedges that make a rubric optional (checked on word boundaries, case-insensitive).
_OPTIONAL = re.compile(
    r"(?i)(?<!\w)(желательно|по возможности|если возможно|если получится|при желании|необязательно|"
    r"не обязательно|в идеале|бонус\w*|ideally|if possible|where possible|preferably|optional(?:ly)?|"
    r"bonus|nice to have|if it can)(?!\w)")


def _json_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def writer_request(persona: str, rules: list[str], topic: str, *, lang: str, model: str | None,
                   temperature: float = 0.7) -> ChatRequest:
    """Ask for 1–5 mandatory rubrics that check every assistant reply of a dialogue."""
    return ChatRequest(messages=render_prompt("writer", lang, persona=persona, rules=rules, topic=topic), model=model,
                       temperature=temperature, tag=TAG_RUBRIC_WRITER, response_format=_json_format("rubrics",
                                                                                                      RUBRICS_SCHEMA))


def decidable_request(rubrics: list[str], *, lang: str, model: str | None) -> ChatRequest:
    """Ask, per rubric, whether one reply decides it."""
    return ChatRequest(messages=render_prompt("decidable", lang, rubrics=rubrics), model=model, temperature=0.0,
                       tag=TAG_DECIDABLE, response_format=_json_format("decidable", DECIDABLE_SCHEMA))


def is_optional(rubric: str) -> bool:
    """Does the rubric hedge ("желательно", "if possible") instead of stating a must?"""
    return bool(_OPTIONAL.search(rubric))


def parse_rubrics(text: str | None) -> tuple[list[str], list[dict[str, str]]] | ParseFailure:
    """``(kept, dropped)`` from a writer answer; dropped rubrics carry their reason.

    Failures: invalid JSON, no ``rubrics`` list, more than five rubrics, none left after dropping.
    """
    value = extract_json(strip_reasoning(text), expect=dict)
    if is_failure(value):
        return value
    items = value.get("rubrics")
    if not isinstance(items, list) or not items:
        return ParseFailure("no_rubrics: answer has no non-empty 'rubrics' list")
    if len(items) > MAX_RUBRICS:
        return ParseFailure(f"too_many_rubrics: {len(items)} > {MAX_RUBRICS}")
    kept: list[str] = []
    dropped: list[dict[str, str]] = []
    for item in items:
        if isinstance(item, dict):  # {"text": ...} is a common variation
            item = next((item[k] for k in ("text", "rubric", "criterion", "check", "description") if item.get(k)),
                        None)
        if not isinstance(item, str) or not item.strip():
            dropped.append({"rubric": str(item), "reason": "not_text"})
            continue
        rubric = " ".join(item.split())
        if is_optional(rubric):
            dropped.append({"rubric": rubric, "reason": "optional"})
        elif rubric in kept:
            dropped.append({"rubric": rubric, "reason": "duplicate"})
        else:
            kept.append(rubric)
    if not kept:
        return ParseFailure("no_mandatory_rubrics: every rubric was dropped "
                            f"({', '.join(d['reason'] for d in dropped)})")
    return kept, dropped


def parse_decidable(text: str | None, n: int) -> list[bool] | ParseFailure:
    """One decidable/undecidable verdict per rubric (all indices required)."""
    return parse_verdicts(text, n, key="decidable")


def language_problem(text: str, lang: str) -> str | None:
    """``None`` when ``text`` reads as ``lang`` (ru/en), else the reason."""
    if lang == "ru":
        from fabrika.textutil.lang import check_russian

        return check_russian(text)
    letters = [c for c in text if c.isalpha()]
    if len(letters) < 3:
        return "garbled: too few letters"
    latin = sum(c.isascii() for c in letters) / len(letters)
    if latin < 0.6:
        return f"not_english: latin share {latin:.2f} < 0.6"
    from fabrika.textutil.lang import detect_language  # the shared, cached detector

    found = detect_language(text)
    if found is not None and found != "en":
        return f"not_english: detected {found}"
    return None
