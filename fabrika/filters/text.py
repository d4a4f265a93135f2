"""Text views of sample rows, shared by the scorers.

A scorer is configured with a ``text_field``: ``prompt`` / ``completion`` (JSON
message lists: the ``content`` of their messages joined by newlines, tool-call
arguments included for completion so a call-only answer is not empty),
``user`` (only the user turns of the prompt: what a benchmark question would
look like), ``completion_values`` (the completion's text plus only the *string values*
of its call arguments — what the language scorer reads, since function names and
argument keys are English identifiers even in a natively Russian sample) or any other column: a JSON message list or a stored ``Dialogue``
(``{"messages": [...]}``) is joined like ``completion``, anything else used as is.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import razdel
from pydantic import BaseModel, ConfigDict

from fabrika.pipeline.columns import Column
from fabrika.schemas import Message


class SampleRow(BaseModel):
    """The columns the scorers read of a row (``SAMPLE_READS`` and their neighbours), as stored.

    Message and tool columns stay as stored (a JSON string, or plain text in ``generic.*`` rows,
    or an already decoded list): the scorers accept all three on purpose, and the lenient
    readers here and in :mod:`fabrika.schemas.chat` decode them, so a scorer reads every row the
    contract ``list[Message] | str`` admits. Other columns of the row are ignored.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str | None = None
    prompt: Any = None
    completion: Any = None
    tools: Any = None
    messages: Any = None
    ground_truth: Any = None
    meta: Any = None
    lang: str | None = None
    target_type: str | None = None
    expert: str | None = None

    @classmethod
    def of(cls, row: dict[str, Any]) -> "SampleRow":
        return cls.model_validate(row)


def _messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value) if value else []
        except json.JSONDecodeError:
            return [{"role": "user", "content": value}]
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def _string_values(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _string_values(v)]
    if isinstance(value, list):
        return [s for v in value for s in _string_values(v)]
    return []


def messages_text(value: Any, roles: Iterable[str] | None = None, with_calls: bool = False,
                  call_values_only: bool = False) -> str:
    """Join message contents (optionally only ``roles``; ``with_calls`` adds call names and arguments,
    ``call_values_only`` adds just the string values of the arguments)."""
    keep = set(roles) if roles is not None else None
    parts: list[str] = []
    for m in _messages(value):
        if keep is not None and m.get("role") not in keep:
            continue
        if m.get("content"):
            parts.append(str(m["content"]))
        if call_values_only:
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call) if isinstance(call, dict) else {}
                parts.extend(_string_values(fn.get("arguments")))
        elif with_calls:
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call) if isinstance(call, dict) else {}
                args = fn.get("arguments")
                args = args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)
                parts.append(f"{fn.get('name', '')} {args}")
    return "\n".join(parts)


def row_text(row: dict[str, Any], field: str) -> str:
    """The text a scorer looks at for ``row`` (see module doc for ``field``)."""
    if field in ("user", "prompt", "completion", "completion_values"):
        sample = SampleRow.of(row)
        if field == "user":
            return messages_text(sample.prompt, roles=("user",))
        if field == "prompt":
            return messages_text(sample.prompt)
        if field == "completion":
            return messages_text(sample.completion, with_calls=True)
        return messages_text(sample.completion, call_values_only=True)
    value = row.get(field)
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value
    if isinstance(value, dict) and isinstance(value.get("messages"), list):  # a stored Dialogue
        value = value["messages"]
    if isinstance(value, list) and value and all(isinstance(m, dict) and "role" in m for m in value):
        return messages_text(value, with_calls=True)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def norm_tokens(text: str) -> list[str]:
    """Lower-cased razdel word tokens (punctuation dropped, ё→е): the unit of n-grams and shingles."""
    return [t.text.lower().replace("ё", "е") for t in razdel.tokenize(text) if any(ch.isalnum() for ch in t.text)]


def count_tokens(text: str) -> int:
    """razdel token count (words, numbers and punctuation): the default length unit."""
    return sum(1 for _ in razdel.tokenize(text))


def text_columns(field: str) -> tuple[Column, ...]:
    """The input columns :func:`row_text` reads for ``field`` (a scorer's row contract)."""
    if field in ("user", "prompt"):
        return (Column("prompt", list[Message] | str, doc="prompt messages (or a plain prompt text)"),)
    if field in ("completion", "completion_values"):
        return (Column("completion", list[Message] | str, doc="completion messages (or text)"),)
    if field == "auto":  # filter.language: the completion, or the prompt of a prompt-only table
        return (Column("completion", Any, alternatives=("prompt",), doc="completion (else prompt) messages"),
                Column("prompt", list[Message] | str, required=False), Column("target_type", str, required=False))
    return (Column(field, Any, doc="the scored text (a string or messages)"),)
