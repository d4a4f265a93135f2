"""Reading untrusted model answers: reasoning blocks, JSON verdicts, tool calls.

Real models (Qwen3, gpt-oss) put ``<think>…</think>`` before the answer, wrap
JSON in prose or fences, and get truncated. Everything here returns a value or
a reason string; nothing raises on a bad answer.

Reasoning blocks are removed by the shared :mod:`fabrika.textutil.reasoning`.
"""

from __future__ import annotations

from typing import Any

from fabrika.textutil.answers import extract_json, is_failure
from fabrika.textutil.reasoning import split_reasoning


def strip_reasoning(text: str | None) -> str:
    """``text`` as the user sees it (:func:`fabrika.textutil.reasoning.split_reasoning`).

    An unclosed block means the model was cut off while thinking: nothing is left.
    """
    return split_reasoning(text).answer


def parse_object(text: str | None, required: tuple[str, ...] = ()) -> dict[str, Any] | str:
    """The first JSON object in the answer (after reasoning), or a reason string.

    Keys are matched case-insensitively to ``required``; a missing one is a reason.
    """
    value = extract_json(strip_reasoning(text), expect=dict)
    if is_failure(value):
        return str(value)
    lowered = {str(k).lower(): v for k, v in value.items()}
    missing = [k for k in required if k.lower() not in lowered]
    if missing:
        return f"missing_keys: {', '.join(missing)}"
    return {k: lowered[k.lower()] for k in required} | {k: v for k, v in value.items() if k.lower() not in required}


def json_schema_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI ``response_format`` asking for JSON that matches ``schema``."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
