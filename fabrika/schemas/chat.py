"""Stored messages and tools → chat form (what chat templates and TRL consume).

Rows in the store are ``fabrika.schemas.to_row(Sample)`` rows: ``prompt``,
``completion``, ``tools``, ``ground_truth`` and ``meta`` are JSON strings.

* messages are reduced to chat form exactly like :meth:`fabrika.schemas.Message.to_chat`
  (``train``/``flag``/``reasoning`` and ``None`` keys dropped), except that a tool
  call's ``function.arguments`` is a **dict**, not a JSON string. Both forms render
  identically with the Qwen3 template (it ``tojson``-s a dict and pastes a string),
  but transformers' chat-template convention and most other templates expect a
  dict, and a string inside a string column is where double encoding starts;
* tools stay OpenAI tool dicts.

The conversion is a plain-dict fast path (the export handles 10^5–10^6 rows); a
test pins it to ``Message.to_chat`` so the two cannot drift. Scorers (length,
difficulty), the export, the report and eval all use it, so it sits at the bottom
layer; the export's GRPO record is built on it in :mod:`fabrika.export.records`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fabrika.schemas.fastjson import dumps, loads

#: Columns copied as scalars into every exported record when the source has them.
SCALAR_COLUMNS: tuple[str, ...] = ("id", "expert", "lang", "target_type")


def json_field(value: Any, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        return loads(value) if value else default
    return value


def _arguments_dict(arguments: Any) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        arguments = loads(arguments)
    if not isinstance(arguments, dict):
        raise ValueError(f"tool call arguments must be a JSON object, got {type(arguments).__name__}")
    return arguments


def tool_call_to_chat(call: dict[str, Any]) -> dict[str, Any]:
    """A stored ``ToolCall`` dict (or an OpenAI-shaped one) → chat form with dict arguments."""
    if "function" in call and "name" not in call:
        fn = call["function"] or {}
        name, arguments, call_id = fn.get("name"), fn.get("arguments"), call.get("id")
    else:
        name, arguments, call_id = call.get("name"), call.get("arguments"), call.get("id")
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": _arguments_dict(arguments)}}
    if call_id is not None:
        out["id"] = call_id
    return out


def message_to_chat(message: dict[str, Any]) -> dict[str, Any]:
    """Mirror of ``Message.to_chat`` on a plain dict, with dict arguments."""
    content = message.get("content")
    out: dict[str, Any] = {"role": message["role"], "content": content if content is not None else ""}
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [tool_call_to_chat(c) for c in calls]
    if message.get("tool_call_id") is not None:
        out["tool_call_id"] = message["tool_call_id"]
    if message.get("name") is not None:
        out["name"] = message["name"]
    return out


def messages_to_chat(value: Any, role: str = "user") -> list[dict[str, Any]]:
    """A JSON string (or list) of stored messages → chat messages.

    Plain text (``generic.*`` stages store prompt and answer as text) becomes one
    message of ``role``.
    """
    if isinstance(value, str) and value:
        try:
            parsed = loads(value) if value.lstrip().startswith("[") else None
        except ValueError:
            parsed = None
        if not (isinstance(parsed, list) and all(isinstance(m, dict) and "role" in m for m in parsed)):
            return [{"role": role, "content": value}]
        value = parsed
    return [message_to_chat(m) for m in json_field(value, [])]


def tools_to_chat(value: Any) -> list[dict[str, Any]]:
    """A JSON string (or list) of OpenAI tools → list of tool dicts (unchanged content)."""
    tools = json_field(value, [])
    if not isinstance(tools, list):
        raise ValueError(f"tools must be a JSON list, got {type(tools).__name__}")
    return tools


@lru_cache(maxsize=4096)
def tool_elements(value: str) -> tuple[str, ...]:
    """Each tool of a tools JSON string as its own JSON text (cached: episodes repeat their tool sets)."""
    return tuple(dumps(t) for t in tools_to_chat(value))


def message_elements(value: Any, role: str = "user") -> list[str]:
    """Each chat message of a stored message list as its own JSON text."""
    return [dumps(m) for m in messages_to_chat(value, role)]


def sft_record(row: dict[str, Any]) -> dict[str, Any]:
    """TRL conversational prompt–completion record: ``prompt``, ``completion``, ``tools`` + scalars."""
    rec: dict[str, Any] = {c: row[c] for c in SCALAR_COLUMNS if c in row}
    rec["prompt"] = messages_to_chat(row.get("prompt"))
    rec["completion"] = messages_to_chat(row.get("completion"), role="assistant")
    rec["tools"] = tools_to_chat(row.get("tools"))
    return rec
