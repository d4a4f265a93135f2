"""Function-calling eval cases: BFCL-format files and fabrika's own held-out FC samples.

BFCL's public data (``BFCL_v3_<category>.json``, one JSON object per line):
``{"id": "simple_0", "question": [[{"role": "user", "content": …}]], "function": [{"name", "description",
"parameters": {"type": "dict", "properties": …, "required": […]}}]}`` and, in a separate file
(``possible_answer/BFCL_v3_<category>.json``), ``{"id": "simple_0", "ground_truth": [{"fn": {"param":
[allowed values]}}]}`` where ``""`` among the allowed values means the parameter may be left out.
Irrelevance categories have no possible answers: the right answer is no call; relevance categories
have none either: any call to an offered function is right.
BFCL's parameter types are Python-ish (``dict``, ``float``, ``tuple``, ``any``); they are mapped to JSON
Schema before the tools are sent. Function names with dots (``math.factorial``) are sent with ``_`` (OpenAI
names allow ``[a-zA-Z0-9_-]``) and mapped back when the answer is read. Only the first turn is asked
(BFCL's multi-turn categories need its state machine and are refused).

fabrika's FC samples: stored ``Sample`` rows or ``fabrika export`` records (JSONL or parquet) — ``prompt``
(messages), ``tools``, ``target_type`` and ``ground_truth: {"calls": […]}`` (GRPO export), or the reference
``completion``'s tool calls (SFT export); the category is ``meta.sample_type`` or ``target_type``.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from fabrika.errors import InputError
from fabrika.eval.logs import read_jsonl
from fabrika.schemas.chat import messages_to_chat

_TYPE_MAP = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer",
             "str": "string", "bool": "boolean", "String": "string", "Boolean": "boolean"}
_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_NAME_OK = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True)
class FCCase:
    """One question: messages, tools (OpenAI format, sanitized names), possible answers (None: no call)."""

    id: str
    category: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    expected: list[dict[str, dict[str, list[Any]]]] | str | None  # None: no call; "any": some valid call
    names: dict[str, str]  # sent name -> original name
    asks: list[str] | None = None  # a clarification case: the withheld slot(s) the question must ask for
    target_type: str | None = None  # fabrika samples: the FC reward's target type (a no-call case's rule)
    ground_truth: Any = None  # fabrika samples: what that rule reads (the withheld slots in ``asks``)

    def as_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {"id": self.id, "category": self.category, "messages": self.messages, "tools": self.tools,
                                "expected": self.expected, "names": self.names, "target_type": self.target_type,
                                "ground_truth": self.ground_truth}
        if self.asks is not None:
            item["asks"] = self.asks
        return item


def to_json_schema(schema: Any) -> Any:
    """BFCL's parameter schema with JSON Schema types (recursively)."""
    if isinstance(schema, list):
        return [to_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "type" and isinstance(v, str):
            if v == "any":
                continue
            mapped = _TYPE_MAP.get(v, v)
            # Java/JavaScript categories use their own type names (HashMap, Array…); BFCL sends them as strings
            out[k] = mapped if mapped in _JSON_TYPES else "string"
        elif k in ("properties",) and isinstance(v, dict):
            out[k] = {name: to_json_schema(p) for name, p in v.items()}
        elif k in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            out[k] = to_json_schema(v)
        else:
            out[k] = v
    return out


def sanitize_name(name: str) -> str:
    return _NAME_OK.sub("_", name)[:64]


def _tools(functions: list[dict[str, Any]], where: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    tools: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for fn in functions:
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InputError(f"{where}: every function needs a 'name'")
        sent = sanitize_name(fn["name"])
        if sent in names and names[sent] != fn["name"]:
            raise InputError(f"{where}: functions {names[sent]!r} and {fn['name']!r} collide as {sent!r}")
        names[sent] = fn["name"]
        params = to_json_schema(copy.deepcopy(fn.get("parameters") or {"type": "object", "properties": {}}))
        tools.append({"type": "function", "function": {"name": sent, "description": fn.get("description", ""),
                                                       "parameters": params}})
    return tools, names


def bfcl_category(case_id: str, path: Path) -> str:
    m = re.match(r"BFCL_v\d+_(.+)\.jsonl?$", path.name)
    if m:
        return m.group(1)
    return re.sub(r"_\d+(?:-.*)?$", "", case_id)


def read_possible_answers(answers: Path | None) -> dict[str, Any]:
    """A BFCL possible-answer file as ``{case id: ground_truth list}`` (empty without a file)."""
    gt: dict[str, Any] = {}
    if answers is not None:
        for n, row in read_jsonl(answers):
            if "id" not in row or not isinstance(row.get("ground_truth"), list):
                raise InputError(f"{answers}:{n}: a possible-answer row needs 'id' and a 'ground_truth' list")
            gt[str(row["id"])] = row["ground_truth"]
    return gt


def bfcl_questions(questions: Path) -> Iterator[tuple[str, str, list[Any], list[Any]]]:
    """``(where, case id, question turns, functions)`` per row of a BFCL question file, shape-checked."""
    for n, row in read_jsonl(questions):
        where = f"{questions}:{n}"
        cid = str(row.get("id", f"L{n}"))
        q, fns = row.get("question"), row.get("function")
        if not isinstance(q, list) or not q or not isinstance(fns, list):
            raise InputError(f"{where}: a BFCL row needs 'question' (a list of turns) and 'function' (a list)")
        yield where, cid, q, fns


def read_bfcl(questions: Path, answers: Path | None) -> list[FCCase]:
    """BFCL question file (+ its possible-answer file; irrelevance categories need none)."""
    gt = read_possible_answers(answers)
    cases = []
    for where, cid, q, fns in bfcl_questions(questions):
        if len(q) > 1:
            raise InputError(f"{where}: {cid} has {len(q)} turns; multi-turn BFCL categories are not supported "
                             f"(they need BFCL's own state machine) — evaluate single-turn categories")
        turn = q[0] if isinstance(q[0], list) else [q[0]]
        messages = [m for m in turn if isinstance(m, dict) and "role" in m and "content" in m]
        if not messages:
            raise InputError(f"{where}: the question's first turn holds no {{role, content}} messages")
        category = bfcl_category(cid, questions)
        tools, names = _tools(fns, where)
        expected: list[dict[str, dict[str, list[Any]]]] | str | None
        if "irrelevance" in category:
            expected = None
        elif "relevance" in category:
            expected = "any"  # BFCL's relevance categories: any call to an offered function is right
        elif cid in gt:
            expected = _bfcl_expected(gt[cid], f"{answers}: id {cid}")
        else:
            raise InputError(f"{where}: no possible answer for {cid!r}; pass the matching possible_answer file "
                             f"with --answers")
        cases.append(FCCase(cid, category, messages, tools, expected, names))
    return cases


def _bfcl_expected(ground_truth: list[Any], where: str) -> list[dict[str, dict[str, list[Any]]]]:
    out = []
    for entry in ground_truth:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise InputError(f"{where}: each ground_truth entry must be {{function_name: {{param: [values]}}}}")
        (name, params), = entry.items()
        if not isinstance(params, dict) or not all(isinstance(v, list) for v in params.values()):
            raise InputError(f"{where}: parameters of {name!r} must map to lists of allowed values")
        out.append({name: params})
    return out


def read_samples(path: Path) -> list[FCCase]:
    """fabrika FC sample rows (export JSONL); nested fields may be JSON strings."""
    cases = []
    for n, row in read_jsonl(path):
        where = f"{path}:{n}"
        row = {k: (json.loads(v) if k in ("prompt", "completion", "tools", "ground_truth", "meta")
                   and isinstance(v, str) and v.strip()[:1] in ("[", "{") else v) for k, v in row.items()}
        prompt, tools = row.get("prompt"), row.get("tools") or []
        if not isinstance(prompt, list) or not prompt:
            raise InputError(f"{where}: an FC sample needs 'prompt' (a list of messages)")
        asks = None
        if "ground_truth" in row and row["ground_truth"] is not None:
            calls = (row.get("ground_truth") or {}).get("calls") or []
            asks = (row.get("ground_truth") or {}).get("asks")
        else:  # an SFT export: the reference completion carries the calls
            completion = messages_to_chat(row.get("completion") or [], role="assistant")
            last = completion[-1] if completion else {}
            calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                     for c in last.get("tool_calls") or []]
        target = row.get("target_type") or ("tool_call" if calls else "text")
        if target == "tool_call" and not calls:
            raise InputError(f"{where}: target_type tool_call but ground_truth.calls is empty")
        functions = [t.get("function", t) for t in tools]
        sent_tools, names = _tools(functions, where)
        expected = None
        if target == "tool_call":
            expected = [{c["name"]: {k: [v] for k, v in (c.get("arguments") or {}).items()}} for c in calls]
        messages = messages_to_chat(prompt)
        for m in messages:  # the wire format carries arguments as a JSON string
            for call in m.get("tool_calls") or []:
                call["function"]["arguments"] = json.dumps(call["function"]["arguments"], ensure_ascii=False)
        category = (row.get("meta") or {}).get("sample_type") or target
        cases.append(FCCase(str(row.get("id", f"L{n}")), str(category), messages, sent_tools, expected, names,
                            asks=list(asks) if target == "clarification" and asks else None,
                            target_type=target, ground_truth=row.get("ground_truth")))
    return cases
