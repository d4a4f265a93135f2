"""BFCL-style AST scoring of a model's function calls, with the FC reward's matcher.

A prediction is correct when its calls equal the expected calls as a multiset
under :func:`fabrika.rewards.fc.calls_match` — the matcher the FC expert is
trained with — after each expected parameter is resolved against BFCL's list
of allowed values (the predicted value when it is allowed, nothing when ``""``
is allowed and the parameter is absent; dict answers are templates whose keys
have their own allowed lists). Strings are compared exactly by default — as the
FC reward does — or, with ``strings="bfcl"`` (``--strings bfcl``), in BFCL's
lenient form (lower case, spaces and ``,./-_*^`` removed).

Components reported per category (the decomposition of the T-pro report's FC table):

* ``decision`` — call vs text: a call was made iff one was expected;
* ``tool_choice`` — the multiset of called function names is the expected one;
* ``required_args`` — every call names all ``required`` parameters of its function;
* ``schema_valid`` — every call names a known function and its arguments validate against its schema;
* ``arg_values`` / ``accuracy`` — the calls match exactly (for no-call cases: no call and some text —
  for a clarification case with ``asks`` (fabrika's own samples), a question about the withheld slot;
  for BFCL's relevance cases: some schema-valid call to an offered function).

Calls are read from the API's ``tool_calls``, from Hermes/Qwen ``<tool_call>`` blocks, and —
for models run without a tool parser, as in BFCL's prompting mode — from an answer that is
*nothing but* calls: Python call syntax (``[get_weather(city="Paris"), …]``, parsed with
:mod:`ast`, never executed) or a JSON call object / list of them, naming offered functions.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

import jsonschema

from fabrika.eval.answers import strip_reasoning
from fabrika.llm import ChatRequest, ChatResponse
from fabrika.rewards.fc import calls_match, text_target_ok, values_equal
from fabrika.textutil.answers import is_failure
from fabrika.textutil.tool_calls import read_calls

FC_TAG = "eval.fc"
COMPONENTS = ("decision", "tool_choice", "required_args", "schema_valid", "arg_values")


PROMPT_MODE_SYSTEM = (
    "Тебе доступны функции, описанные ниже в формате JSON. Если для ответа на запрос нужно вызвать функции, "
    "ответь только вызовами в синтаксисе Python, списком: [имя_функции(параметр=значение, ...), ...] — без "
    "пояснений. Если ни одна функция не подходит, ответь обычным текстом без вызовов.\n\n"
    "You have access to the functions described below as JSON. If the request needs function calls, answer "
    "only with the calls in Python syntax, as a list: [func_name(param=value, ...), ...] with no other text. "
    "If no function fits, answer in plain text without calls.\n\n{functions}")


def fc_requests(item: dict[str, Any], *, temperature: float = 0.0, max_tokens: int | None = None) -> list[ChatRequest]:
    """The model's request: tools through the API (``mode: fc``, default) or described in the system
    prompt for servers without a tool parser (``mode: prompt``, BFCL's prompting mode)."""
    if item.get("mode") == "prompt" and item["tools"]:
        names = item["names"]
        functions = [{**t["function"], "name": names.get(t["function"]["name"], t["function"]["name"])}
                     for t in item["tools"]]
        system = PROMPT_MODE_SYSTEM.format(functions=json.dumps(functions, ensure_ascii=False, indent=1))
        messages = list(item["messages"])
        if messages and messages[0].get("role") == "system":
            messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{system}"}
        else:
            messages.insert(0, {"role": "system", "content": system})
        return [ChatRequest(messages=tuple(messages), temperature=temperature, max_tokens=max_tokens, tag=FC_TAG)]
    return [ChatRequest(messages=tuple(item["messages"]), tools=tuple(item["tools"]) or None,
                        tool_choice="auto" if item["tools"] else None, temperature=temperature,
                        max_tokens=max_tokens, tag=FC_TAG)]


def text_calls(text: str, known: set[str]) -> list[dict[str, Any]] | None:
    """Calls written as the whole answer (Python call syntax or JSON) naming ``known`` functions, or ``None``.

    Only literal keyword arguments are accepted (``ast.literal_eval``); nothing is executed.
    """
    read = read_calls(text, tools=known)
    if is_failure(read) or not read.calls or read.text or not set(read.formats) <= {"json", "pythonic"}:
        return None
    return [dict(c) for c in read.calls]


def predicted_calls(resp: ChatResponse, names: dict[str, str]) -> tuple[list[dict[str, Any]] | None, str, str | None]:
    """(calls with original names, visible text, malformed reason), in every format the shared reader knows."""
    choice = resp.choices[0]
    msg = {"content": choice.content, "reasoning_content": choice.reasoning,
           "tool_calls": [{"name": c.get("name"), "arguments": c.get("arguments")} for c in choice.tool_calls]}
    read = read_calls(msg, tools=set(names) | set(names.values()))
    if is_failure(read):
        return None, strip_reasoning(choice.content), str(read)
    calls = [dict(c) for c in read.calls]
    for c in calls:
        c["name"] = names.get(c["name"], c["name"])
    return calls, read.text, None


_OMIT = object()
_BFCL_STRIP = re.compile(r"[\s,./\-_*^]")


def bfcl_string(value: Any) -> Any:
    """BFCL's lenient string form, recursively: lower case, no spaces or ``,./-_*^``, ``'`` as ``"``."""
    if isinstance(value, str):
        return _BFCL_STRIP.sub("", value).lower().replace("'", '"')
    if isinstance(value, list):
        return [bfcl_string(v) for v in value]
    if isinstance(value, dict):
        return {k: bfcl_string(v) for k, v in value.items()}
    return value


def _is_template(a: Any) -> bool:
    """A BFCL dict answer: each key maps to its own list of allowed values."""
    return isinstance(a, dict) and bool(a) and all(isinstance(v, list) for v in a.values())


def _resolve(present: bool, value: Any, allowed: list[Any], eq: Any) -> Any:
    """The allowed value that ``value`` matches (``value`` itself), ``_OMIT``, or the first allowed one."""
    concrete = [a for a in allowed if a != ""]
    if not present:
        return _OMIT if ("" in allowed or not concrete) else concrete[0]
    for a in concrete:
        if eq(value, a):
            return value
        if _is_template(a) and isinstance(value, dict):
            sub = {k: _resolve(k in value, value.get(k), v, eq) for k, v in a.items()}
            sub = {k: v for k, v in sub.items() if v is not _OMIT}
            if eq(value, sub):
                return value
    return concrete[0] if concrete else None


def resolve_expected(predicted: list[dict[str, Any]], expected: list[dict[str, dict[str, list[Any]]]],
                     *, strings: str = "exact") -> list[dict[str, Any]]:
    """Concrete expected calls: each allowed-values list resolved toward a predicted call.

    Each expected call is paired with the first unused predicted call of the same name that
    it matches after resolution (else the first of that name), so parallel calls in any order
    and with any allowed alternative resolve correctly.
    """
    eq = (lambda x, y: values_equal(bfcl_string(x), bfcl_string(y))) if strings == "bfcl" else values_equal
    unused = list(range(len(predicted)))
    out = []
    for entry in expected:
        (name, params), = entry.items()

        def concrete(pred_args: dict[str, Any], params: dict[str, Any] = params) -> dict[str, Any]:
            args = {p: _resolve(p in pred_args, pred_args.get(p), allowed, eq) for p, allowed in params.items()}
            return {k: v for k, v in args.items() if v is not _OMIT}

        same = [i for i in unused if predicted[i]["name"] == name]
        pair = next((i for i in same if eq(predicted[i]["arguments"], concrete(predicted[i]["arguments"]))),
                    same[0] if same else None)
        if pair is not None:
            unused.remove(pair)
        out.append({"name": name, "arguments": concrete(predicted[pair]["arguments"] if pair is not None else {})})
    return out


def score_case(item: dict[str, Any], resp: ChatResponse) -> dict[str, Any]:
    """One case's verdicts (the record kept in results.jsonl)."""
    names: dict[str, str] = item["names"]
    schemas = {names[t["function"]["name"]]: t["function"].get("parameters") or {} for t in item["tools"]}
    orig_tools = [{"name": n, "parameters": s} for n, s in schemas.items()]
    calls, text, malformed = predicted_calls(resp, names)
    truncated = bool(resp.choices and resp.choices[0].truncated)
    expected = item["expected"]
    rec: dict[str, Any] = {"category": item["category"], "expects_call": expected is not None,
                           "calls": calls, "text": text[:500], "malformed": malformed, "truncated": truncated}
    if calls is None:
        rec.update({k: False for k in COMPONENTS}, correct=False)
        return rec
    if expected is None:  # the FC reward's own verdict for the case's text-like target (one rule for both)
        ground_truth = item.get("ground_truth")
        if item.get("asks"):  # a clarification: it must ask for what was withheld, not for another slot
            rec["asks"] = list(item["asks"])
            if not isinstance(ground_truth, dict) or not ground_truth.get("asks"):
                ground_truth = {**(ground_truth if isinstance(ground_truth, dict) else {}), "asks": item["asks"]}
        target_type = item.get("target_type") or ("clarification" if item.get("asks") else None)
        ok = not calls and text_target_ok(target_type, text, ground_truth, item["tools"])
        rec.update(decision=not calls, correct=ok)
        return rec
    rec["decision"] = bool(calls)
    if expected == "any":
        rec["tool_choice"] = bool(calls) and all(c["name"] in schemas for c in calls)
    else:
        rec["tool_choice"] = sorted(c["name"] for c in calls) == sorted(next(iter(e)) for e in expected)
    required_ok = schema_ok = bool(calls)
    for c in calls:
        schema = schemas.get(c["name"])
        if schema is None:
            required_ok = schema_ok = False
            continue
        if not set(schema.get("required") or []) <= set(c["arguments"]):
            required_ok = False
        try:
            jsonschema.validate(c["arguments"], schema)
        except jsonschema.ValidationError:
            schema_ok = False
        except jsonschema.SchemaError:
            pass  # a broken schema in the eval file is not the model's fault
    rec["required_args"] = required_ok
    rec["schema_valid"] = schema_ok
    if expected == "any":
        rec["arg_values"] = None  # nothing to compare with
        rec["correct"] = bool(rec["tool_choice"]) and schema_ok
    else:
        strings = item.get("strings", "exact")
        want = resolve_expected(calls, expected, strings=strings)
        got = calls
        if strings == "bfcl":
            got = [{"name": c["name"], "arguments": bfcl_string(c["arguments"])} for c in calls]
            want = [{"name": c["name"], "arguments": bfcl_string(c["arguments"])} for c in want]
        rec["arg_values"] = rec["correct"] = calls_match(got, want, orig_tools)
    return rec


def fc_report(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy and component shares per category and overall."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by[r["category"]].append(r)

    def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
        calls = [r for r in rows if r["expects_call"]]
        out: dict[str, Any] = {"n": len(rows), "accuracy": sum(r["correct"] for r in rows) / len(rows),
                               "decision": sum(bool(r["decision"]) for r in rows) / len(rows),
                               "malformed": sum(r["malformed"] is not None for r in rows),
                               "truncated": sum(r["truncated"] for r in rows)}
        for k in COMPONENTS[1:]:
            scored = [r for r in calls if r.get(k) is not None]
            out[k] = sum(bool(r[k]) for r in scored) / len(scored) if scored else None
        return out

    return {"overall": summary(records) if records else None,
            "per_category": {c: summary(rows) for c, rows in sorted(by.items())}}

