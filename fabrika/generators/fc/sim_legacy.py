"""The sim's legacy convention, for tools that are not its own (``fc.tools_import``, hand-written tools).

The sim cannot know how a person says the arguments of a tool it did not write, so
for those it keeps the old convention: the first sentence of the description is
the key phrase the user says, and each argument is said as ``<parameter
description> — <value>`` (objects as «(k: v / k: v)», lists as «… + …»). The sim
assistant reads the same shape back. Data made this way reads as slot filler and
is for offline runs only.
"""

from __future__ import annotations

import random
import re
from typing import Any

from fabrika.generators.fc.sim_catalogue import WORDS

# legacy parameters, for tools that are not the sim's own (imported tools): (name, ru, en, type, ru values, en values)
PARAMS: list[tuple[Any, ...]] = [
    ("city", "город", "city", "string", ["Москва", "Казань", "Тверь"], ["London", "Boston", "Leeds"]),
    ("date", "дата", "date", "date", ["2025-03-14", "2025-04-02", "2025-05-30"], ["2025-03-14", "2025-04-02"]),
    ("client_name", "имя клиента", "client name", "string", ["Иванов", "Петрова"], ["Smith", "Jones"]),
    ("order_id", "номер заказа", "order number", "string", ["A1024", "B77"], ["A1024", "B77"]),
    ("count", "количество", "quantity", "integer", [1, 2, 5], [1, 2, 5]),
    ("email", "почта", "e-mail", "email", ["anna@example.ru", "oleg.k@mail.example"], ["ann@example.com"]),
]


def say_value(value: Any, schema: dict[str, Any]) -> str:
    """How the sim user says a value of a foreign tool: plain for scalars, «(k: v / k: v)» for objects."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        return "(" + " / ".join(f"{props.get(k, {}).get('description', k)}: {say_value(v, props.get(k, {}))}"
                                for k, v in value.items()) + ")"
    if isinstance(value, list):
        return " + ".join(say_value(v, schema.get("items") or {}) for v in value)
    return str(value)


def read_value(text: str, schema: dict[str, Any]) -> Any:
    """Inverse of :func:`say_value` (the sim assistant's reading of the user's words)."""
    typ = schema.get("type")
    if typ == "object":
        props = schema.get("properties") or {}
        by_desc = {str(p.get("description", k)).lower(): k for k, p in props.items()}
        out: dict[str, Any] = {}
        for part in text.strip().strip("()").split(" / "):
            desc, _, raw = part.partition(": ")
            key = by_desc.get(desc.strip().lower())
            if key is not None:
                out[key] = read_value(raw, props[key])
        return out
    if typ == "array":
        return [read_value(p, schema.get("items") or {}) for p in text.split(" + ")]
    text = text.strip()
    if typ == "integer" and re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def _key(tool_fn: dict[str, Any]) -> str:
    return (tool_fn.get("tiers") or [tool_fn.get("description", "")])[0].split(".")[0].strip()


def _legacy_call(fn: dict[str, Any], lang: str, rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    props, required = fn["parameters"].get("properties", {}), fn["parameters"].get("required", [])
    by_name = {p[0]: p for p in PARAMS}
    args: dict[str, Any] = {}
    for pname, schema in props.items():
        if pname not in required and rng.random() < 0.5:
            continue
        values = schema.get("enum") or by_name.get(pname, PARAMS[0])[4 if lang == "ru" else 5]
        args[pname] = rng.choice(values)
    result = {"status": WORDS[lang]["ok"], "id": rng.randint(100, 999)}
    slots = {k: {"value": v, "say": say_value(v, props[k])} for k, v in args.items()}
    return {"name": fn["name"], "arguments": args, "result": result}, slots


def _legacy_say(fn: dict[str, Any], args: dict[str, Any], skip: str | None = None) -> str:
    props = fn["parameters"].get("properties", {})
    parts = [f"{props[k]['description']} — {say_value(v, props[k])}" for k, v in args.items() if k != skip]
    return _key(fn).lower() + (": " + ", ".join(parts) if parts else "")


def _legacy_step(fns: list[dict], lang: str, rng: random.Random, polite: str, joiner: str,
                 rounds_split: bool) -> dict[str, Any]:
    calls = [_legacy_call(fn, lang, rng) for fn in fns]
    say = polite + (joiner or ", ").join(_legacy_say(fn, c[0]["arguments"]) for fn, c in zip(fns, calls))
    rounds = [[c[0]] for c in calls] if rounds_split else [[c[0] for c in calls]]
    slots = {k: v for c in calls for k, v in c[1].items()}
    return {"kind": "tool_call", "intent": say, "user_message": say, "slots": slots, "rounds": rounds,
            "final_answer": f"{WORDS[lang]['done']}: {WORDS[lang]['ok']}."}


def _legacy_clarify(fn: dict[str, Any], lang: str, rng: random.Random, polite: str) -> list[dict[str, Any]]:
    """A request missing one required argument, the question, the user's answer and the call.

    A tool with no required argument (an imported ``GET /items`` with only optional or no
    parameters) leaves nothing to ask for — the sim assistant asks only for a missing required
    value — so the request is answered without a clarification: one ``tool_call`` step (a
    ``clarification`` plan built on it fails its shape check and is rejected as a plan, not a crash).
    """
    call, slots = _legacy_call(fn, lang, rng)
    required = [k for k in fn["parameters"].get("required", []) if k in call["arguments"]]
    if not required:
        return [_legacy_step([fn], lang, rng, polite, "", False)]
    hidden = rng.choice(required)
    first = polite + _legacy_say(fn, call["arguments"], skip=hidden)
    desc = fn["parameters"]["properties"][hidden]["description"]
    second = f"{desc} — {slots[hidden]['say']}"
    return [{"kind": "clarification", "intent": first, "user_message": first, "withheld": [hidden],
             "slots": {k: v for k, v in slots.items() if k != hidden}, "final_answer": WORDS[lang]["ask"].format(desc)},
            {"kind": "tool_call", "intent": second, "user_message": second, "slots": {hidden: slots[hidden]},
             "rounds": [[call]], "final_answer": f"{WORDS[lang]['done']}: {WORDS[lang]['ok']}."}]


def _legacy_correction(call: dict[str, Any], fn: dict[str, Any], lang: str, rng: random.Random) -> dict[str, Any] | None:
    by_name = {p[0]: p for p in PARAMS}
    props = fn["parameters"].get("properties", {})
    for arg in sorted(call["arguments"]):
        pool = props[arg].get("enum") or by_name.get(arg, PARAMS[0])[4 if lang == "ru" else 5]
        others = [v for v in pool if v != call["arguments"][arg]]
        if others:
            args = {**call["arguments"], arg: rng.choice(others)}
            say = f"{WORDS[lang]['correction'][0]} {_legacy_say(fn, args)}"
            return {"kind": "tool_call", "intent": say, "user_message": say,
                    "slots": {k: {"value": v, "say": say_value(v, props[k])} for k, v in args.items()},
                    "rounds": [[{**call, "arguments": args, "result": {**call["result"], "id": call["result"]["id"] + 1}}]],
                    "final_answer": f"{WORDS[lang]['done']}: {WORDS[lang]['ok']}."}
    return None


def _legacy_long_turns(tools: list[dict], turns: int, lang: str, rng: random.Random, polite: str) -> list[dict]:
    world: dict[str, Any] = {}
    steps = []
    for t in range(turns):
        fns = rng.sample(tools, 2)
        calls, slots = [], {}
        for fn in fns:
            call, _ = _legacy_call(fn, lang, rng)
            props = fn["parameters"].get("properties", {})
            for k in list(call["arguments"]):
                call["arguments"][k] = world.setdefault(k, call["arguments"][k])
                slots[k] = {"value": call["arguments"][k], "say": say_value(call["arguments"][k], props[k])}
            calls.append(call)
        say = (polite if t == 0 else "") + WORDS[lang]["then"].join(_legacy_say(fn, c["arguments"])
                                                                   for fn, c in zip(fns, calls))
        steps.append({"kind": "tool_call", "intent": say, "user_message": say, "slots": slots,
                      "rounds": [[c] for c in calls], "final_answer": f"{WORDS[lang]['done']}: {WORDS[lang]['ok']}."})
    return steps
