"""Generate instances of a JSON Schema from a seeded RNG.

The ``sim`` backend and the fake OpenAI server both need answers that are
*valid* against a schema they were handed (a ``response_format`` json_schema or a
tool's ``parameters``) without any model. This covers the subset real tool and
response schemas use: ``type`` (also lists), ``properties``/``required``,
``items``/``minItems``/``maxItems``, ``enum``/``const``, numeric bounds,
``minLength``/``maxLength``, ``anyOf``/``oneOf``/``allOf`` and local ``$ref``
(``#/$defs/...``, ``#/definitions/...``). Strings are marked (``"[sim] city"``)
so simulated data never passes for real data.
"""

from __future__ import annotations

import random
from typing import Any

_MAX_DEPTH = 8

_FORMAT_SAMPLES: dict[str, list[str]] = {
    "date": ["2024-03-15", "2025-11-02", "2023-07-30"],
    "date-time": ["2024-03-15T10:30:00Z", "2025-11-02T08:00:00Z"],
    "time": ["10:30:00", "18:45:00"],
    "email": ["user@example.com", "ivan.petrov@example.org"],
    "uri": ["https://example.com/item/1", "https://example.org/a"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000"],
}


def _resolve_ref(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref are supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _pick_type(schema: dict[str, Any], rng: random.Random) -> str | None:
    t = schema.get("type")
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        return rng.choice(non_null) if non_null else "null"
    if t is not None:
        return t
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def _string(schema: dict[str, Any], name: str, rng: random.Random, marker: str) -> str:
    fmt = schema.get("format")
    if fmt in _FORMAT_SAMPLES:
        return rng.choice(_FORMAT_SAMPLES[fmt])
    base = f"{marker} {name or 'text'}"
    if rng.random() < 0.5:
        base = f"{base} {rng.randint(1, 999)}"
    min_len = int(schema.get("minLength", 0))
    max_len = schema.get("maxLength")
    if len(base) < min_len:
        base = base + "x" * (min_len - len(base))
    if max_len is not None and len(base) > int(max_len):
        base = base[: int(max_len)]
    return base


def _number(schema: dict[str, Any], rng: random.Random, integer: bool) -> int | float:
    lo = schema.get("minimum")
    hi = schema.get("maximum")
    if "exclusiveMinimum" in schema and not isinstance(schema["exclusiveMinimum"], bool):
        lo = schema["exclusiveMinimum"] + (1 if integer else 1e-6)
    if "exclusiveMaximum" in schema and not isinstance(schema["exclusiveMaximum"], bool):
        hi = schema["exclusiveMaximum"] - (1 if integer else 1e-6)
    lo = 0 if lo is None else lo
    hi = (lo + 100) if hi is None else hi
    if integer:
        lo_i, hi_i = int(-(-lo // 1)), int(hi // 1)
        value: int | float = rng.randint(lo_i, max(lo_i, hi_i))
        mult = schema.get("multipleOf")
        if isinstance(mult, int) and mult > 0:
            value = max(lo_i, (value // mult) * mult)
        return value
    value = round(rng.uniform(lo, hi), 3)
    return min(max(value, lo), hi)  # rounding must not step outside the bounds


def generate_instance(
    schema: dict[str, Any] | bool | None,
    rng: random.Random,
    *,
    marker: str = "[sim]",
    name: str = "",
    root: dict[str, Any] | None = None,
    depth: int = 0,
    all_optional: bool = False,
) -> Any:
    """Return one value valid against ``schema`` (``None``/``True``/``{}`` → a marked string).

    ``all_optional`` includes every optional property (otherwise each is kept
    with probability 1/2); required ones are always present.
    """
    if schema is None or schema is True or schema == {}:
        return f"{marker} {name or 'value'}"
    if schema is False:
        raise ValueError("schema `false` admits no instance")
    root = schema if root is None else root
    if "$ref" in schema:
        return generate_instance(_resolve_ref(schema["$ref"], root), rng, marker=marker, name=name,
                                 root=root, depth=depth, all_optional=all_optional)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema and schema["enum"]:
        return rng.choice(list(schema["enum"]))
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = [s for s in schema[key] if not (isinstance(s, dict) and s.get("type") == "null")]
            choice = rng.choice(options or schema[key])
            return generate_instance(choice, rng, marker=marker, name=name, root=root, depth=depth,
                                     all_optional=all_optional)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            part = _resolve_ref(part["$ref"], root) if "$ref" in part else part
            for k, v in part.items():
                if k == "properties":
                    merged.setdefault("properties", {}).update(v)
                elif k == "required":
                    merged.setdefault("required", []).extend(v)
                else:
                    merged[k] = v
        return generate_instance(merged, rng, marker=marker, name=name, root=root, depth=depth,
                                 all_optional=all_optional)

    kind = _pick_type(schema, rng)
    if kind == "object":
        props: dict[str, Any] = schema.get("properties", {}) or {}
        required = set(schema.get("required", []) or [])
        out: dict[str, Any] = {}
        for key, sub in props.items():
            if key in required or (depth < _MAX_DEPTH and (all_optional or rng.random() < 0.5)):
                out[key] = generate_instance(sub, rng, marker=marker, name=key, root=root,
                                             depth=depth + 1, all_optional=all_optional)
        return out
    if kind == "array":
        lo = int(schema.get("minItems", 1 if depth < _MAX_DEPTH else 0))
        hi = int(schema.get("maxItems", max(lo, 3)))
        count = rng.randint(lo, max(lo, min(hi, lo + 3))) if depth < _MAX_DEPTH else lo
        items = schema.get("items", {})
        values = [generate_instance(items, rng, marker=marker, name=name, root=root, depth=depth + 1,
                                    all_optional=all_optional) for _ in range(count)]
        if schema.get("uniqueItems"):
            seen: list[Any] = []
            for v in values:
                if v not in seen:
                    seen.append(v)
            values = seen
        return values
    if kind == "string":
        return _string(schema, name, rng, marker)
    if kind == "integer":
        return _number(schema, rng, integer=True)
    if kind == "number":
        return _number(schema, rng, integer=False)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return f"{marker} {name or 'value'}"


def response_format_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON Schema inside an OpenAI ``response_format`` (``json_schema`` type), else ``None``.

    ``{"type": "json_object"}`` yields ``{"type": "object"}`` (any object is valid).
    """
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema")
        return schema if isinstance(schema, dict) else {"type": "object"}
    if kind == "json_object":
        return {"type": "object"}
    return None


def tool_name(tool: dict[str, Any]) -> str:
    """Name of an OpenAI-shaped tool (``{"type": "function", "function": {...}}``) or a bare function spec."""
    fn = tool.get("function", tool)
    return str(fn.get("name", ""))


def tool_parameters(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function", tool)
    params = fn.get("parameters")
    return params if isinstance(params, dict) else {"type": "object", "properties": {}}


def choose_tool(tools: list[dict[str, Any]] | tuple[dict[str, Any], ...], tool_choice: Any,
                rng: random.Random) -> dict[str, Any] | None:
    """The tool a simulated model calls, honouring ``tool_choice`` (``None`` when it must answer in text)."""
    if not tools or tool_choice == "none":
        return None
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        for tool in tools:
            if tool_name(tool) == wanted:
                return tool
    return rng.choice(list(tools))
