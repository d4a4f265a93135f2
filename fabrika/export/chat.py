"""Stored sample rows → training records in chat form (SFT and GRPO).

Rows in the store are ``fabrika.schemas.to_row(Sample)`` rows: ``prompt``,
``completion``, ``tools``, ``ground_truth`` and ``meta`` are JSON strings. The
export turns them into the records TRL consumes:

* messages are reduced to chat form exactly like :meth:`fabrika.schemas.Message.to_chat`
  (``train``/``flag``/``reasoning`` and ``None`` keys dropped), except that a tool
  call's ``function.arguments`` is a **dict**, not a JSON string. Both forms render
  identically with the Qwen3 template (it ``tojson``-s a dict and pastes a string),
  but transformers' chat-template convention and most other templates expect a
  dict, and a string inside a string column is where double encoding starts;
* tools stay OpenAI tool dicts.

The conversion is a plain-dict fast path (the export handles 10^5–10^6 rows); a
test pins it to ``Message.to_chat`` so the two cannot drift.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final, Literal

from fabrika.export.fastjson import dumps, loads

ExportKind = Literal["sft", "grpo"]

#: Columns copied as scalars into every exported record when the source has them.
SCALAR_COLUMNS: tuple[str, ...] = ("id", "expert", "lang", "target_type")
#: Optional numeric columns the GRPO record carries when the source has them: the IF RM correction's α
#: (``teacher_rm_mean``), the general expert's R (``rm_score``) and L0 (``ref_length``), and the stored
#: difficulty the trainer's dynamic sampling pre-filters on (``difficulty_pass_rate``); ``length_unit`` is the unit
#: of a stored L0 (``general.teacher``), which the trainer checks against its own ``length_unit``.
GRPO_OPTIONAL_COLUMNS: tuple[str, ...] = ("teacher_rm_mean", "teacher_rm_k", "rm_id", "rm_score", "ref_length",
                                          "difficulty_pass_rate", "length_unit")
#: Unit of a derived ``ref_length``: the general reward's default ``length_unit`` (``fabrika.rewards.general``).
REF_LENGTH_UNIT: Final = "chars"


def _loads(value: Any, default: Any) -> Any:
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
    return [message_to_chat(m) for m in _loads(value, [])]


def tools_to_chat(value: Any) -> list[dict[str, Any]]:
    """A JSON string (or list) of OpenAI tools → list of tool dicts (unchanged content)."""
    tools = _loads(value, [])
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


def grpo_record(row: dict[str, Any]) -> dict[str, Any]:
    """GRPO record: ``prompt``, ``tools``, ``ground_truth`` + scalars (+ ``constraints`` and optional scores).

    ``constraints`` is lifted out of ``ground_truth`` for IF rows because TRL passes
    extra dataset columns to reward functions as keyword arguments.
    """
    rec: dict[str, Any] = {c: row[c] for c in SCALAR_COLUMNS if c in row}
    rec["prompt"] = messages_to_chat(row.get("prompt"))
    rec["tools"] = tools_to_chat(row.get("tools"))
    gt = _loads(row.get("ground_truth"), None)
    rec["ground_truth"] = gt
    rec["constraints"] = gt.get("constraints") if isinstance(gt, dict) else None
    for col in GRPO_OPTIONAL_COLUMNS:
        if col in row:
            rec[col] = row[col]
    if "ref_length" in row or "completion" in row:
        rec["ref_length"] = ref_length(row.get("ref_length"), row.get("completion"))
    return rec


def ref_length(stored: Any, completion: Any) -> float | None:
    """L0 of the general reward: the stored value, else the reference completion's visible text length.

    A stored ``ref_length`` is taken as is (it must be in the trainer's
    ``length_unit``); a derived one is in :data:`REF_LENGTH_UNIT` (chars), measured
    exactly as :func:`fabrika.rewards.general.completion_length` measures L(y).
    ``None`` when there is no reference answer (the trainer rejects null L0 up front).
    """
    if stored is not None:
        return float(stored)
    from fabrika.rewards.general import completion_length

    messages = messages_to_chat(completion, role="assistant")
    length = completion_length(messages, REF_LENGTH_UNIT) if messages else 0
    return float(length) if length > 0 else None


def to_record(row: dict[str, Any], kind: ExportKind) -> dict[str, Any]:
    """Dispatch on the export kind."""
    if kind == "sft":
        return sft_record(row)
    if kind == "grpo":
        return grpo_record(row)
    raise ValueError(f"export kind must be 'sft' or 'grpo', got {kind!r}")


#: Nested (JSON-valued) fields of each kind's record.
NESTED_FIELDS: dict[str, tuple[str, ...]] = {
    "sft": ("prompt", "completion", "tools"),
    "grpo": ("prompt", "tools", "ground_truth", "constraints"),
}
#: Of those, the ones that are lists stored element-wise (``List(Json())``).
LIST_FIELDS: frozenset[str] = frozenset({"prompt", "completion", "tools"})
