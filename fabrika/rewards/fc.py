"""Function-calling exact-match reward (binary) and the call parser it needs.

The reward is the one the FC expert is trained with (GRPO) and the matcher the
simulation uses to check assistant steps, so both agree on what "correct"
means: the predicted calls equal the expected calls as a *multiset* (order of
parallel calls is free), an int is accepted where the schema says ``number``,
and an optional parameter left at its schema default is the same as omitting
it. Pure Python (no torch), so reward workers import it cheaply.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from typing import Any, Iterable, Mapping, Sequence

from fabrika.rewards.fc_text import is_clarification, is_refusal_with_reason
from fabrika.schemas.tools import Tool
from fabrika.textutil.answers import is_failure
from fabrika.textutil.tool_calls import read_calls

__all__ = ["calls_match", "completion_text", "fc_reward", "parse_completion_calls", "text_target_ok", "values_equal"]

def values_equal(a: Any, b: Any) -> bool:
    """Structural JSON equality where ``1 == 1.0`` but ``True != 1`` and ``"1" != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _tool_schemas(tools: Iterable[Any] | None) -> dict[str, dict[str, Any]]:
    """name → parameters schema, from Tool models, OpenAI dicts or a JSON string of them."""
    if tools is None:
        return {}
    if isinstance(tools, str):
        tools = json.loads(tools)
    out: dict[str, dict[str, Any]] = {}
    for t in tools:
        if isinstance(t, Tool):
            t = t.to_openai()  # its dump, made once per tool (read only here)
        elif hasattr(t, "model_dump"):
            t = t.model_dump(mode="json")
        fn = t.get("function", t)
        out[fn["name"]] = fn.get("parameters") or {}
    return out


def _canonical(value: Any, schema: Any) -> Any:
    """``value`` in the one form its schema makes equivalent to every other, and nothing more.

    Equivalent by the schema: an optional property left at its ``default`` (at any
    depth) equals its absence; a ``uniqueItems`` array is a set; ``date-time``
    strings naming the same instant (``Z`` = ``+00:00``) are equal; strings are
    compared in Unicode NFC. Not equivalent: case, spacing, inflection («Казани» ≠
    «Казань»), a number given as a string.
    """
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(value, str):
        text = unicodedata.normalize("NFC", value)
        if schema.get("format") == "date-time":
            try:
                moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                return text
            return moment.astimezone(UTC).isoformat() if moment.tzinfo else moment.isoformat()
        return text
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        return {k: _canonical(v, props.get(k)) for k, v in value.items()
                if not (k not in required and isinstance(props.get(k), dict) and "default" in props[k]
                        and values_equal(v, props[k]["default"]))}
    if isinstance(value, list):
        items = [_canonical(v, schema.get("items")) for v in value]
        if schema.get("uniqueItems"):
            items.sort(key=lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False))
        return items
    return value


def _normalize_call(call: Any, schemas: Mapping[str, dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """(name, arguments in canonical form); ``None`` when the call is malformed."""
    if hasattr(call, "model_dump"):
        call = call.model_dump(mode="json")
    if not isinstance(call, Mapping):
        return None
    if "function" in call and "name" not in call:
        call = call["function"] or {}
    name = call.get("name")
    args = call.get("arguments", {})
    if args is None or args == "":
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(name, str) or not isinstance(args, dict):
        return None
    schema = schemas.get(name)
    if schema:
        props = schema.get("properties") or {}
        for k, v in args.items():
            # An integer schema does not accept 2.5; a number schema accepts 2 (values_equal handles it).
            if isinstance(props.get(k), dict) and props[k].get("type") == "integer" and isinstance(v, float) \
                    and not v.is_integer():
                return None
        args = _canonical(args, {"type": "object", **schema})
    else:
        args = _canonical(args, None)
    return name, args


def calls_match(predicted: Sequence[Any], expected: Sequence[Any], tools: Iterable[Any] | None = None) -> bool:
    """True when ``predicted`` equals ``expected`` as a multiset of calls.

    Calls are ``{"name": str, "arguments": dict | JSON str}`` (or OpenAI's
    ``{"function": {...}}`` shape, or :class:`fabrika.schemas.ToolCall`). With
    ``tools``, optional arguments equal to their schema default are ignored.
    A malformed call on either side never matches.
    """
    schemas = _tool_schemas(tools)
    pred = [c for c in (_normalize_call(c, schemas) for c in predicted) if c is not None]
    exp = [c for c in (_normalize_call(c, schemas) for c in expected) if c is not None]
    if len(pred) != len(predicted) or len(exp) != len(expected) or len(pred) != len(exp):  # a malformed call
        return False
    unused = list(pred)
    for name, args in exp:
        for i, cand in enumerate(unused):
            if cand[0] == name and values_equal(cand[1], args):
                del unused[i]
                break
        else:
            return False
    return True


def completion_text(completion: Any) -> str:
    """The completion's visible answer: reasoning and call markup of every format removed."""
    read = read_calls(completion)
    return "" if is_failure(read) else read.text


def parse_completion_calls(completion: Any, tools: Iterable[Any] | None = None) -> list[dict[str, Any]]:
    """Every call in a completion's answer, as ``{"name", "arguments": dict}``, in any common format.

    Accepts a string, a message dict with OpenAI ``tool_calls``, or a TRL
    conversational completion (list of messages; the last assistant message
    counts); the formats are those of :func:`fabrika.textutil.tool_calls.read_calls`
    (Hermes/Qwen, Llama 3, Mistral, gpt-oss harmony, bare JSON). Calls inside
    reasoning are not calls. ``tools`` (the offered tools) lets a bare JSON or
    Python-syntax answer count only when it names one of them.

    Raises:
        ValueError: a call is malformed (not JSON, no ``name``, non-object
            arguments, an unclosed tag); the message is the reason.
    """
    read = read_calls(completion, tools=tools)
    if is_failure(read):
        raise ValueError(str(read))
    return [dict(c) for c in read.calls]


def _tool_list(tools: Any) -> list[Any] | None:
    """The offered tools of one sample (a list, or its JSON string as datasets store it)."""
    if tools is None:
        return None
    if isinstance(tools, str):
        return list(json.loads(tools)) if tools else None
    return list(tools)


def _expected_calls(gt: Any) -> list[Any]:
    if isinstance(gt, str):
        gt = json.loads(gt) if gt else {}
    if gt is None:
        return []
    if isinstance(gt, Mapping):
        return list(gt.get("calls") or [])
    return list(gt)


def fc_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    ground_truth: Sequence[Any],
    target_type: Sequence[str | None],
    tools: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: 1.0 for an exact FC match, else 0.0.

    ``ground_truth[i]`` is ``{"calls": [...]}`` (or its JSON string, as stored
    in datasets; ``asks`` — or its older name ``withheld`` — lists a clarification's
    missing arguments: ``{"calls": [], "asks": ["city"]}``, and a question about another
    slot then scores 0). Only the visible answer counts: reasoning is removed first, and a
    completion cut off while reasoning (or with nothing after it) scores 0.

    * ``tool_call``: the parsed calls equal the expected ones;
    * ``text``: no call and non-empty text;
    * ``clarification``: no call, and a question naming the missing information
      (:func:`fabrika.rewards.fc_text.is_clarification`);
    * ``irrelevance``: no call, and a refusal that says why
      (:func:`fabrika.rewards.fc_text.is_refusal_with_reason`).

    Malformed output scores 0.
    """
    del prompts, kwargs
    rewards: list[float] = []
    for i, completion in enumerate(completions):
        sample_tools = tools[i] if tools is not None else None
        read = read_calls(completion, tools=_tool_list(sample_tools))
        if is_failure(read):
            rewards.append(0.0)
            continue
        predicted, text = list(read.calls), read.text
        kind = target_type[i] or "tool_call"
        if not read.complete:
            ok = False
        elif kind == "tool_call":
            expected = _expected_calls(ground_truth[i])
            ok = bool(expected) and calls_match(predicted, expected, sample_tools)
        else:
            ok = not predicted and text_target_ok(kind, text, ground_truth[i], sample_tools)
        rewards.append(1.0 if ok else 0.0)
    return rewards


def text_target_ok(target_type: str | None, text: str, ground_truth: Any = None, tools: Any = None) -> bool:
    """The verdict on a no-call answer for a text-like target — the ONE rule the FC reward and ``eval fc`` share.

    ``text`` is the visible answer (reasoning removed). An empty or whitespace-only answer
    is never right; ``clarification`` must ask for the missing information
    (:func:`fabrika.rewards.fc_text.is_clarification`), ``irrelevance`` must decline and say
    why (:func:`fabrika.rewards.fc_text.is_refusal_with_reason`); any other text target
    (``text``) needs only some text.
    """
    if not text.strip():
        return False
    if target_type == "clarification":
        return is_clarification(text, ground_truth, tools)
    if target_type == "irrelevance":
        return is_refusal_with_reason(text)
    return True
