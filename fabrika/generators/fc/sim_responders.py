"""``sim`` stand-ins for every FC role — deterministic, small and honestly fake.

They exist so the whole FC pipeline runs offline (tests, demo, benches); the
data they make is marked ``llm_backend="sim"`` by the runner and must never be
trained on as if a model wrote it. Each responder reads only its request, the
way a model would: the structured part of every FC prompt is a fenced ``json``
block, and the assistant reads the request's ``tools``.

The conventions that make the sim self-consistent: the first sentence of every
sim tool description (tier 0) is a key phrase that the sim planner puts into the
user's words, and each argument is said as ``<parameter description> — <value>``.
The sim assistant finds the key phrases in the user's words, fills arguments
from them, asks when a required one is missing, and errs on purpose with
probability ``request.meta["sim_error_rate"]`` (wrong value, unknown tool or a
missing required argument) so the retry and injection paths run.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from fabrika.generators.fc.answer_judge import answer_judge_responder
from fabrika.llm.types import ChatRequest, Choice

_BLOCK = re.compile(r"```json\s*\n(.*?)```", re.DOTALL)
_TRANSLIT = dict(zip("абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
                     "a b v g d e e zh z i y k l m n o p r s t u f h ts ch sh sch _ y _ e yu ya".split()))
VERBS = {"ru": ["найти", "создать", "проверить", "отменить", "забронировать", "показать"],
         "en": ["find", "create", "check", "cancel", "book", "show"]}
VERBS_EN = VERBS["en"]  # tool names are English in both languages
# (name, ru description, en description, type, ru values, en values); "type" may name a shape below
PARAMS = [
    ("city", "город", "city", "string", ["Москва", "Казань", "Тверь"], ["London", "Boston", "Leeds"]),
    ("date", "дата", "date", "date", ["2025-03-14", "2025-04-02", "2025-05-30"], ["2025-03-14", "2025-04-02"]),
    ("client_name", "имя клиента", "client name", "string", ["Иванов", "Петрова"], ["Smith", "Jones"]),
    ("order_id", "номер заказа", "order number", "string", ["A1024", "B77"], ["A1024", "B77"]),
    ("category", "категория", "category", "enum", ["эконом", "стандарт", "премиум"], ["economy", "standard", "premium"]),
    ("count", "количество", "quantity", "integer", [1, 2, 5], [1, 2, 5]),
    ("email", "почта", "e-mail", "email", ["anna@example.ru", "oleg.k@mail.example"], ["ann@example.com"]),
    ("address", "адрес", "address", "object", [{"city": "Казань", "street": "Баумана"}, {"city": "Тверь", "street": "Советская"}],
     [{"city": "Leeds", "street": "Park Row"}]),
    ("items", "позиции", "items", "array", [[{"title": "хлеб", "qty": 2}], [{"title": "молоко", "qty": 1}, {"title": "сыр", "qty": 3}]],
     [[{"title": "bread", "qty": 2}]]),
]
SUB = {"city": ("город", "city"), "street": ("улица", "street"), "title": ("название", "title"), "qty": ("количество", "qty")}


def _param_schema(name: str, ru: str, en: str, typ: str, values: list[Any], lang: str) -> dict[str, Any]:
    desc = ru if lang == "ru" else en
    sub = lambda k: SUB[k][0 if lang == "ru" else 1]  # noqa: E731
    if typ == "enum":
        return {"type": "string", "enum": values, "description": desc, "default": values[1 % len(values)]}
    if typ in ("date", "email"):
        return {"type": "string", "format": typ, "description": desc}
    if typ == "integer":
        return {"type": "integer", "minimum": 1, "maximum": 10, "description": desc}
    if typ == "object":
        return {"type": "object", "description": desc, "required": ["city"],
                "properties": {"city": {"type": "string", "description": sub("city")},
                               "street": {"type": "string", "description": sub("street")}}}
    if typ == "array":
        return {"type": "array", "description": desc, "minItems": 1,
                "items": {"type": "object", "required": ["title", "qty"],
                          "properties": {"title": {"type": "string", "description": sub("title")},
                                         "qty": {"type": "integer", "minimum": 1, "description": sub("qty")}}}}
    return {"type": typ, "description": desc}


def say_value(value: Any, schema: dict[str, Any]) -> str:
    """How the sim user says a value: plain for scalars, «(k: v / k: v)» for objects, «… + …» for lists."""
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


WORDS = {
    "ru": {"then": ", затем ", "also": ", а также ", "done": "Готово", "ask": "Уточните, пожалуйста: {}?",
           "none": "К сожалению, ни один из доступных мне инструментов не умеет этого. Могу помочь с чем-то другим.",
           "chat": "Здравствуйте! Спасибо за помощь, всего доброго.", "chat_answer": "Рад помочь! Обращайтесь.",
           "ok": "выполнено", "issue": "Реплика пользователя звучит неестественно, перепиши её.",
           "fits": "Функция «{}» подходит для просьбы.", "polite": ["", "Пожалуйста, ", "Здравствуйте! ", "Добрый день! "],
           "works": "Работает с темой «{}»", "unavailable": "сервис временно недоступен, повторите запрос",
           "correction": "нет, давайте иначе. ", "params": "Параметры: {}", "returns": "Возвращает результат в формате JSON"},
    "en": {"then": ", then ", "also": ", and also ", "done": "Done", "ask": "Could you tell me the {}?",
           "none": "Sorry, none of the tools I have can do that. I can help with something else.",
           "chat": "Hi! Thanks for the help, have a nice day.", "chat_answer": "Glad to help! Anytime.",
           "ok": "done", "issue": "The user's message sounds unnatural; rewrite it.",
           "fits": "The function '{}' fits the request.", "polite": ["", "Please, ", "Hello! ", "Good afternoon! "],
           "works": "Works with the topic '{}'", "unavailable": "service temporarily unavailable, retry",
           "correction": "actually, let's change it. ", "params": "Parameters: {}", "returns": "Returns the result as JSON"},
}


def json_blocks(request: ChatRequest, which: int = 0) -> list[Any]:
    """JSON blocks of message ``which`` (user messages only; negative indexes count from the end)."""
    users = [m.get("content") or "" for m in request.messages if m.get("role") == "user"]
    return [json.loads(b) for b in _BLOCK.findall(users[which])] if users else []


def request_lang(request: ChatRequest) -> str:
    text = " ".join(str(m.get("content") or "") for m in request.messages[:2])
    return "ru" if re.search(r"[А-Яа-яЁё]", text) else "en"


def _slug(text: str) -> str:
    out = "".join(_TRANSLIT.get(ch, ch) for ch in text.lower())
    out = re.sub(r"[^a-z0-9]+", "_", out).strip("_")
    return out[:24].strip("_") or "item"


def tools_responder(request: ChatRequest, rng: random.Random) -> str:
    """``fc.tools``: n tools whose tier-0 description is the key phrase '<verb> — <topic>'."""
    topic = json_blocks(request)[0]
    lang = topic.get("lang") or request_lang(request)
    count = re.search(r"(\d+)", request.messages[0]["content"])
    n = int(count.group(1)) if count else 3  # the prompt states how many tools it wants
    label = re.sub(r"[.?!]", "", str(topic.get("topic") or "тема")).strip()
    words = WORDS[lang]
    tools = []
    for vi in rng.sample(range(len(VERBS_EN)), min(n, len(VERBS_EN))):
        params = rng.sample(PARAMS, rng.randint(1, 3))
        props: dict[str, Any] = {}
        for name, ru, en, typ, ru_vals, en_vals in params:
            props[name] = _param_schema(name, ru, en, typ, ru_vals if lang == "ru" else en_vals, lang)
        t0 = f"{VERBS[lang][vi].capitalize()} — {label}"
        t1 = f"{t0}. {words['works'].format(label)}"
        t2 = f"{t1}. {words['params'].format(', '.join(p['description'] for p in props.values()))}"
        t3 = f"{t2}. {topic.get('description') or ''} {words['returns']}.".replace("  ", " ")
        keyword = str((topic.get("keywords") or [label])[0])
        required = [k for k in props if "default" not in props[k]][: max(1, len(props) - 1)] or list(props)[:1]
        tools.append({"name": f"{VERBS_EN[vi]}_{_slug(keyword)}",
                      "parameters": {"type": "object", "properties": props, "required": required},
                      "tiers": [t0, t1, t2, t3]})
    return json.dumps({"tools": tools}, ensure_ascii=False)


def _key(tool_fn: dict[str, Any]) -> str:
    return (tool_fn.get("tiers") or [tool_fn.get("description", "")])[0].split(".")[0].strip()


def _call(fn: dict[str, Any], lang: str, rng: random.Random, withheld: bool = False) -> tuple[dict, dict, str | None]:
    """(expected call, slots {arg: {value, say}}, withheld parameter) for one sim tool, values from PARAMS."""
    props, required = fn["parameters"].get("properties", {}), fn["parameters"].get("required", [])
    by_name = {p[0]: p for p in PARAMS}
    args: dict[str, Any] = {}
    for pname, schema in props.items():
        if pname not in required and rng.random() < 0.5:
            continue
        values = schema.get("enum") or by_name.get(pname, PARAMS[0])[4 if lang == "ru" else 5]
        args[pname] = rng.choice(values)
    hidden = rng.choice(required) if withheld and required else None
    result = {"status": WORDS[lang]["ok"], "id": rng.randint(100, 999)}
    slots = {k: {"value": v, "say": say_value(v, props[k])} for k, v in args.items()}
    return {"name": fn["name"], "arguments": args, "result": result}, slots, hidden


def _say(fn: dict[str, Any], args: dict[str, Any], skip: str | None = None) -> str:
    props = fn["parameters"].get("properties", {})
    parts = [f"{props[k]['description']} — {say_value(v, props[k])}" for k, v in args.items() if k != skip]
    return _key(fn).lower() + (": " + ", ".join(parts) if parts else "")


def planner_responder(request: ChatRequest, rng: random.Random) -> str:
    """``fc.planner``: a plan of the requested type built from the task's tools.

    ``request.meta["sim_turns"]`` (a workload knob for benches; off by default) makes every
    ``multi_turn`` plan that many user turns, each a chain of two calls in two rounds
    («…, затем …»), as long real episodes with several tool-call rounds per user turn are.
    """
    task = json_blocks(request, 0)[-1]  # the task is the prompt's last JSON block
    lang, kind, tools = task["lang"], task["sample_type"], task["tools"]
    w = WORDS[lang]
    polite = w["polite"][min(3, sum(1 for m in request.messages if m.get("role") == "assistant"))]

    def step(fns: list[dict], joiner: str, rounds_split: bool) -> dict:
        calls = [_call(fn, lang, rng) for fn in fns]
        say = polite + joiner.join(_say(fn, c[0]["arguments"]) for fn, c in zip(fns, calls))
        rounds = [[c[0]] for c in calls] if rounds_split else [[c[0] for c in calls]]
        slots = {k: v for c in calls for k, v in c[1].items()}
        return {"kind": "tool_call", "intent": say, "user_message": say, "slots": slots, "rounds": rounds,
                "final_answer": f"{w['done']}: {w['ok']}."}

    def clarify(fn: dict) -> list[dict]:
        call, slots, hidden = _call(fn, lang, rng, withheld=True)
        first = polite + _say(fn, call["arguments"], skip=hidden)
        desc = fn["parameters"]["properties"][hidden]["description"]
        second = f"{desc} — {slots[hidden]['say']}"
        return [{"kind": "clarification", "intent": first, "user_message": first, "withheld": [hidden],
                 "slots": {k: v for k, v in slots.items() if k != hidden}, "final_answer": w["ask"].format(desc)},
                {"kind": "tool_call", "intent": second, "user_message": second, "slots": {hidden: slots[hidden]},
                 "rounds": [[call]], "final_answer": f"{w['done']}: {w['ok']}."}]

    def correction(first: dict, fn: dict) -> dict | None:
        """The user changes one value after the first answer («нет, давайте иначе…»): the call is made again."""
        call = first["rounds"][0][0]
        by_name = {p[0]: p for p in PARAMS}
        props = fn["parameters"].get("properties", {})
        for arg in sorted(call["arguments"]):
            pool = props[arg].get("enum") or by_name.get(arg, PARAMS[0])[4 if lang == "ru" else 5]
            others = [v for v in pool if v != call["arguments"][arg]]
            if others:
                args = {**call["arguments"], arg: rng.choice(others)}
                say = w["correction"] + _say(fn, args)
                return {"kind": "tool_call", "intent": say, "user_message": say,
                        "slots": {k: {"value": v, "say": say_value(v, props[k])} for k, v in args.items()},
                        "rounds": [[{**call, "arguments": args, "result": {**call["result"], "id": call["result"]["id"] + 1}}]],
                        "final_answer": f"{w['done']}: {w['ok']}."}
        return None

    picks = rng.sample(tools, min(2, len(tools)))
    turns = int(request.meta.get("sim_turns") or 0)
    if kind == "multi_turn" and turns >= 2 and len(tools) >= 2:
        steps = _long_turns(tools, turns, lang, rng, polite)
    elif kind in ("single", "multi_turn"):
        steps = [step(picks[:1], "", False)]
        if kind == "multi_turn":
            variant = rng.randrange(3)
            later = next((t for t in tools if t is not picks[0] and t["parameters"].get("required")), None)
            fixed = correction(steps[0], picks[0]) if variant == 1 else None
            if fixed is not None:
                steps.append(fixed)
            elif variant == 2 and later is not None:  # a required value missing later, not only at step 0
                steps += clarify(later)
            else:
                steps.append(step(picks[-1:], "", False))
    elif kind in ("parallel", "multi_step"):
        steps = [step(picks, w["also"] if kind == "parallel" else w["then"], kind == "multi_step")]
    elif kind == "error_recovery":
        first = step(picks[:1], "", False)
        call = first["rounds"][0][0]
        failed = {**call, "result": {"error": w["unavailable"]}}
        first["rounds"] = [[failed], [dict(call)]]
        steps = [first]
    elif kind == "clarification":
        steps = clarify(next((t for t in tools if t["parameters"].get("required")), tools[0]))
    elif kind == "irrelevance":
        say = polite + (task.get("unavailable") or [w["chat"]])[0]
        steps = [{"kind": "irrelevance", "intent": say, "user_message": say, "final_answer": w["none"]}]
    else:
        steps = [{"kind": "text", "intent": polite + w["chat"], "user_message": polite + w["chat"],
                  "final_answer": w["chat_answer"]}]
    return json.dumps({"steps": steps}, ensure_ascii=False)


def _long_turns(tools: list[dict], turns: int, lang: str, rng: random.Random, polite: str) -> list[dict]:
    """``turns`` user turns, each a chain of two calls in two rounds («…, затем …»), over one consistent
    world: an argument keeps its value for the whole episode (a chain's second call reuses the first's
    order number, the user's city stays the same), and the city is not one an address names (a turn
    that says the address would otherwise already say a later turn's city) — so the plan passes the
    rule checks as a real planner's good plan would."""
    w = WORDS[lang]
    by_name = {p[0]: p for p in PARAMS}
    address_cities = {str(a.get("city")) for a in by_name["address"][4 if lang == "ru" else 5]}
    cities = [c for c in by_name["city"][4 if lang == "ru" else 5] if c not in address_cities]
    world: dict[str, Any] = {}
    steps = []
    for t in range(turns):
        fns = rng.sample(tools, 2)
        calls, slots = [], {}
        for fn in fns:
            call, _slots, _ = _call(fn, lang, rng)
            props = fn["parameters"].get("properties", {})
            args = call["arguments"]
            for k in list(args):
                if k == "city" and k not in world and cities:
                    world[k] = rng.choice(cities)
                args[k] = world.setdefault(k, args[k])
                slots[k] = {"value": args[k], "say": say_value(args[k], props[k])}
            calls.append(call)
        say = (polite if t == 0 else "") + w["then"].join(_say(fn, c["arguments"]) for fn, c in zip(fns, calls))
        steps.append({"kind": "tool_call", "intent": say, "user_message": say, "slots": slots,
                      "rounds": [[c] for c in calls], "final_answer": f"{w['done']}: {w['ok']}."})
    return steps


def judge_responder(request: ChatRequest, rng: random.Random) -> str:
    """``fc.judge``: approves most plans; the rest get an issue so the revise loop runs."""
    lang = request_lang(request)
    if rng.random() < 0.8:
        return json.dumps({"approved": True, "issues": []})
    return json.dumps({"approved": False, "issues": [WORDS[lang]["issue"]]}, ensure_ascii=False)


def user_responder(request: ChatRequest, rng: random.Random) -> str:
    """``fc.user``: says the goal card's reference words (the basic sim user never paraphrases); the goal is the
    last JSON block (the transcript comes before it)."""
    return json_blocks(request, -1)[-1]["say"]


def tool_responder(request: ChatRequest, rng: random.Random) -> str:
    """``fc.tool``: the plan's expected result, or a plausible one when there is none."""
    blocks = json_blocks(request, -1)
    expected = blocks[2] if len(blocks) > 2 else None
    if expected is not None:
        return json.dumps(expected, ensure_ascii=False)
    return json.dumps({"status": WORDS[request_lang(request)]["ok"], "id": rng.randint(100, 999)}, ensure_ascii=False)


def _context(messages: tuple[dict[str, Any], ...]) -> tuple[str, set[str], list[Any]]:
    """(user words of this request, tools already answered since the last user turn, their results)."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    prev_tool = max((i for i, m in enumerate(messages[:last_user]) if m.get("role") == "tool"), default=-1)
    words = "\n".join(m.get("content") or "" for m in messages[prev_tool + 1:last_user + 1] if m.get("role") == "user")
    done: set[str] = set()
    results: list[Any] = []
    for m in messages[last_user + 1:]:
        if m.get("role") == "tool" and "error" not in (m.get("content") or ""):
            done.add(m.get("name") or "")
            results.append(m.get("content"))
    return words, done, results


def assistant_responder(request: ChatRequest, rng: random.Random) -> Choice:
    """``fc.assistant``: call the tools whose key phrases the user said, with the values said."""
    lang = request_lang(request)
    w = WORDS[lang]
    words, done, results = _context(request.messages)
    low = words.lower()
    fns = [t.get("function", t) for t in request.tools or ()]
    mentioned = sorted(((low.find(_key(fn).lower()), fn) for fn in fns if _key(fn) and _key(fn).lower() in low),
                       key=lambda pf: pf[0])
    if not mentioned:
        return Choice(content=w["chat_answer"] if w["chat"].lower() in low else w["none"])
    todo = [(p, fn) for p, fn in mentioned if fn["name"] not in done]
    if not todo:
        return Choice(content=f"{w['done']}: " + "; ".join(str(r) for r in results[-2:]))
    if w["then"].strip(", ").lower() in low:
        todo = todo[:1]
    calls = []
    ends = [p for p, _ in mentioned] + [len(low)]
    for p, fn in todo:
        segment = low[p: next(e for e in ends if e > p)]
        args: dict[str, Any] = {}
        props = fn["parameters"].get("properties", {})
        for pname, schema in props.items():
            m = re.search(re.escape(schema.get("description", pname).lower()) + r" — ([^,;\n]+)", segment)
            if m is None:
                continue
            raw = words[p + m.start(1): p + m.end(1)].strip()
            args[pname] = read_value(raw, schema)
        missing = [k for k in fn["parameters"].get("required", []) if k not in args]
        if missing:
            return Choice(content=w["ask"].format(props[missing[0]].get("description", missing[0])))
        calls.append({"name": fn["name"], "arguments": args})
    if rng.random() < float(request.meta.get("sim_error_rate", 0.0)):
        bad, mode = rng.choice(calls), rng.randrange(3)
        if mode == 0:
            bad["name"] = bad["name"] + "_v2"
        elif mode == 1 and bad["arguments"]:
            k = sorted(bad["arguments"])[0]
            bad["arguments"][k] = "???" if isinstance(bad["arguments"][k], str) else -1
        elif bad["arguments"]:
            bad["arguments"].pop(sorted(bad["arguments"])[0])
    return Choice(content=None, finish_reason="tool_calls", tool_calls=tuple(
        {"id": f"call_{rng.getrandbits(40):010x}", "name": c["name"],
         "arguments": json.dumps(c["arguments"], ensure_ascii=False)} for c in calls))


def irrelevance_responder(request: ChatRequest, rng: random.Random) -> str:
    """``fc.irrelevance.answer`` writes the refusal; ``fc.irrelevance.judge`` looks for a key phrase in the request."""
    lang = request_lang(request)
    if request.tag.endswith("judge"):
        task = json_blocks(request)[0]
        users = [m["content"] for m in task["conversation"] if m.get("role") == "user"]
        request_text = (users[-1] if users else "").lower()
        hits = [t["name"] for t in task["tools"] if _key(t) and _key(t).lower() in request_text]
        return json.dumps({"any_tool_fits": bool(hits), "fitting_tools": hits,
                           "issues": [WORDS[lang]["fits"].format(h) for h in hits]}, ensure_ascii=False)
    return WORDS[lang]["none"]


RESPONDERS = {
    "fc.tools": tools_responder, "fc.planner": planner_responder, "fc.judge": judge_responder,
    "fc.user": user_responder, "fc.tool": tool_responder, "fc.assistant": assistant_responder,
    "fc.irrelevance": irrelevance_responder, "fc.answer_judge": answer_judge_responder,
}


def register_fc_sim_responders() -> None:
    """Register every FC responder with the sim backend (idempotent)."""
    from fabrika.llm.sim import register_sim_responder

    for prefix, fn in RESPONDERS.items():
        register_sim_responder(prefix, fn)


register_fc_sim_responders()
