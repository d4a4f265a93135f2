"""Reading untrusted model answers: reasoning blocks, JSON verdicts, tool calls.

Real models (Qwen3, gpt-oss) put ``<think>…</think>`` before the answer, wrap
JSON in prose or fences, and get truncated. Everything here returns a value or
a reason string; nothing raises on a bad answer.

Note: a shared reasoning-strip helper is planned for ``fabrika.textutil``; until
it lands, :func:`strip_reasoning` is the one place that handles the blocks.
"""

from __future__ import annotations

import re
from typing import Any

from fabrika.generators.parsing import extract_json, is_failure

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|\Z)", re.DOTALL | re.IGNORECASE)
_ORPHAN_CLOSE = re.compile(r"^.*?</(?:think|thinking|reasoning)>", re.DOTALL | re.IGNORECASE)


def strip_reasoning(text: str | None) -> str:
    """``text`` without reasoning blocks; an unclosed block hides everything after it.

    A closing tag without an opening one (templates that pre-fill ``<think>``)
    drops everything before it.
    """
    if not text:
        return ""
    text = _ORPHAN_CLOSE.sub("", text, count=1) if re.search(r"</(?:think|thinking|reasoning)>", text, re.I) \
        and not re.search(r"<(?:think|thinking|reasoning)>", text, re.I) else text
    return _THINK.sub("", text).strip()


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
