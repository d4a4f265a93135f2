"""``sim`` stand-ins for every FC role — deterministic, small and honestly fake, but written in real Russian.

They exist so the whole FC pipeline runs offline (tests, demo, benches); the
data they make is marked ``llm_backend="sim"`` by the runner and must never be
trained on as if a model wrote it. Each responder reads only its request, the
way a model would: the structured part of every FC prompt is a fenced ``json``
block, and the assistant reads the request's ``tools``. Every answer is a pure
function of the request and the rng the sim backend seeds from its content hash.

The sim world is :mod:`fabrika.generators.fc.sim_catalogue`: tools named as
real APIs name them (``search_trains``, ``book_table``, ``transfer_money``),
each with a request phrasing; the grammar is
:mod:`fabrika.generators.fc.sim_phrases` (pymorphy3 agreement: «из Москвы в
Казань на 14 марта, 2 билета»). The planner writes requests a person would
write; the sim assistant finds each tool's head in the user's words, reads the
arguments back from their surface forms (every case, dates in digits or words,
Russian words for English enum literals), asks the parameter's own question
when a required one is missing, reports results in a sentence, and errs on
purpose with probability ``request.meta["sim_error_rate"]`` (wrong value,
unknown tool or a missing required argument) so the retry and injection paths run.

Tools that are not the sim's own (``fc.tools_import``) fall back to the legacy
convention of :mod:`fabrika.generators.fc.sim_legacy` (``<parameter description> — <value>``).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from fabrika.generators.fc import sim_phrases as ph
from fabrika.generators.fc.answer_judge import answer_judge_responder
from fabrika.generators.fc.sim_catalogue import DOMAINS, WORDS
from fabrika.generators.fc.sim_catalogue import PARAMS as WORLD
from fabrika.generators.fc.sim_legacy import (
    _key,
    _legacy_clarify,
    _legacy_correction,
    _legacy_long_turns,
    _legacy_step,
    read_value,
)
from fabrika.generators.fc.sim_variants import (
    cue_sentence,
    cues_needed,
    passed_over,
    said_topics,
    tool_spec,
    variant_tools,
    variant_topic,
)
from fabrika.generators.fc.topics_sim import read_topic
from fabrika.llm.sim import SimResponder
from fabrika.llm.types import ChatRequest, Choice

_BLOCK = re.compile(r"```json\s*\n(.*?)```", re.DOTALL)
def json_blocks(request: ChatRequest, which: int = 0) -> list[Any]:
    """JSON blocks of message ``which`` (user messages only; negative indexes count from the end)."""
    users = [m.get("content") or "" for m in request.messages if m.get("role") == "user"]
    return [json.loads(b) for b in _BLOCK.findall(users[which])] if users else []


def request_lang(request: ChatRequest) -> str:
    text = " ".join(str(m.get("content") or "") for m in request.messages[:2])
    return "ru" if re.search(r"[А-Яа-яЁё]", text) else "en"


def _spec(fn: dict[str, Any]) -> dict[str, Any] | None:
    """The catalogue entry of a tool the sim wrote (its name, its description and its parameters are the catalogue's);
    ``None`` for anyone else's tool, even one that happens to share a name."""
    spec = tool_spec(str(fn.get("name")))
    if spec is None:
        return None
    props = (fn.get("parameters") or {}).get("properties") or {}
    text = str((fn.get("tiers") or [fn.get("description") or ""])[0])
    return spec if set(props) <= set(spec["params"]) and text.startswith((spec["ru"], spec["en"])) else None


# ---------------------------------------------------------------------------
# fc.tools

def _schema(pname: str, lang: str, optional: bool) -> dict[str, Any]:
    p = WORLD[pname]
    desc = p[lang]
    kind = p["kind"]
    if kind == "count":
        return {"type": "integer", "minimum": 1, "maximum": p.get("maximum", 10), "description": desc}
    if kind == "date":
        return {"type": "string", "format": "date", "description": desc}
    if kind == "enum":
        out: dict[str, Any] = {"type": "string", "enum": list(p["enum"][lang]), "description": desc}
        if optional and p.get("default") in p["enum"][lang]:
            out["default"] = p["default"]
        return out
    if kind == "address":
        sub = p[f"sub_{lang}"]
        return {"type": "object", "description": desc, "required": ["city", "street", "house"],
                "properties": {k: {"type": "string", "description": sub[k]} for k in ("city", "street", "house")}}
    if kind == "items":
        sub = p[f"sub_{lang}"]
        return {"type": "array", "description": desc, "minItems": 1,
                "items": {"type": "object", "required": ["title", "qty"],
                          "properties": {"title": {"type": "string", "description": sub["title"]},
                                         "qty": {"type": "integer", "minimum": 1, "description": sub["qty"]}}}}
    out = {"type": "string", "description": desc}
    for key in ("format", "pattern"):
        if key in p:
            out[key] = p[key]
    return out


def _domain(topic: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The catalogue domain a topic is about (by its words), else one drawn for it."""
    text = " ".join(str(topic.get(k) or "") for k in ("topic", "description")).lower() + " " + \
        " ".join(str(k) for k in topic.get("keywords") or []).lower()
    scores = {name: sum(text.count(key) for key in d["keys"]) for name, d in DOMAINS.items()}
    best = max(scores.values())
    if best == 0:
        return DOMAINS[sorted(DOMAINS)[rng.randrange(len(DOMAINS))]]
    return DOMAINS[min(name for name, v in scores.items() if v == best)]


def tools_responder(request: ChatRequest, rng: random.Random) -> str:
    """``fc.tools``: the topic's domain tools, tier 0 = the one-sentence description, more detail per tier."""
    topic = json_blocks(request)[0]
    lang = topic.get("lang") or request_lang(request)
    count = re.search(r"(\d+)", request.messages[0]["content"])
    n = int(count.group(1)) if count else 3  # the prompt states how many tools it wants
    label = re.sub(r"[.?!]", "", str(topic.get("topic") or ("тема" if lang == "ru" else "topic"))).strip()
    words = WORDS[lang]
    tools = []
    composed = read_topic(label, lang)  # a topic the sim's expander composed: tools named after its service
    if composed is not None:
        chosen = [(name, spec, params, f"{spec[lang]} {composed.cue()}.")
                  for name, spec, params in variant_tools(composed, DOMAINS[composed.domain]["tools"][:n])]
    else:
        chosen = [(spec["name"], spec, spec["params"], spec[lang]) for spec in _domain(topic, rng)["tools"][:n]]
    for name, spec, params, t0 in chosen:
        props = {k: _schema(k, lang, k not in spec["required"]) for k in params}
        t1 = f"{t0} {words['works'].format(label)}"
        t2 = f"{t1} {words['params'].format(', '.join(p['description'] for p in props.values()))}"
        t3 = f"{t2} {topic.get('description') or ''} {words['returns']}".replace("  ", " ")
        tools.append({"name": name, "parameters": {"type": "object", "properties": props,
                                                           "required": list(spec["required"])},
                      "tiers": [t0, t1, t2, t3]})
    return json.dumps({"tools": tools}, ensure_ascii=False)


# ---------------------------------------------------------------------------
# fc.planner

def _pick(pname: str, schema: dict[str, Any], lang: str, rng: random.Random, avoid: tuple[Any, ...] = ()) -> Any:
    pool = [v for v in (schema.get("enum") or WORLD[pname].get("values", {}).get(lang) or []) if v not in avoid]
    return rng.choice(pool)


def _world_call(fn: dict[str, Any], spec: dict[str, Any], lang: str, rng: random.Random,
                world: dict[str, Any] | None = None) -> dict[str, Any]:
    """A call of a catalogue tool: required arguments and about half the optional ones, values of the sim world."""
    props = fn["parameters"].get("properties", {})
    required = fn["parameters"].get("required", [])
    args: dict[str, Any] = {}
    for pname in spec["params"]:
        if pname not in props or (pname not in required and rng.random() < 0.5):
            continue
        avoid = tuple(args[o] for o in ("from_city", "to_city") if o in args and pname in ("from_city", "to_city"))
        if world is not None and pname in world and world[pname] not in avoid:
            args[pname] = world[pname]
        else:
            args[pname] = _pick(pname, props[pname], lang, rng, avoid)
            if world is not None:
                world.setdefault(pname, args[pname])
    return {"name": fn["name"], "arguments": args, "result": ph.result_for(spec, args, rng, lang)}


def _slots(spec: dict[str, Any], args: dict[str, Any], lang: str, skip: str | None = None,
           words: dict[str, bool] | None = None) -> dict[str, dict[str, Any]]:
    return {k: {"value": v, "say": ph.say_arg(k, v, lang, spec, (words or {}).get(k, False))}
            for k, v in args.items() if k != skip}


def _in_words(args: dict[str, Any], rng: random.Random) -> dict[str, bool]:
    """Which dates the user says all in words («четырнадцатое марта»): about one in four."""
    return {k: rng.random() < 0.25 for k in args if k in WORLD and WORLD[k]["kind"] == "date"}


def _closings(pairs: list[tuple[dict[str, Any], Any]], lang: str) -> str:
    texts = [ph.closing(spec, result, lang) for spec, result in pairs]
    return " ".join(t for t in texts if t) or f"{WORDS[lang]['done']}."


def _parts(pairs: list[tuple[dict[str, Any], dict[str, Any]]], lang: str,
           words: list[dict[str, bool]] | None = None) -> list[str]:
    """The infinitive requests of one turn; a value already said in it is referred back to («той же карты»)."""
    said: dict[str, Any] = {}
    parts = []
    for i, (spec, call) in enumerate(pairs):
        args = call["arguments"]
        again = frozenset(k for k, v in args.items() if k in said and said[k] == v)
        parts.append(ph.request(spec, args, lang, infinitive=True, polite=False,
                                words=(words or [{}] * len(pairs))[i], again=again))
        said.update(args)
    return parts


class _Planner:
    """One plan of the sim world: each method returns plan steps as the planner prompt asks for them."""

    def __init__(self, task: dict[str, Any], lang: str, rng: random.Random, polite: str) -> None:
        self.lang, self.rng, self.polite, self.w = lang, rng, polite, WORDS[lang]
        self.tools = task["tools"]
        self.names = [str(t.get("name")) for t in self.tools]

    def cued(self, say: str, fns: list[dict[str, Any]]) -> str:
        """``say`` with the service named for each tool of ``fns`` that another service's tool could be taken for."""
        cues = cues_needed([str(fn.get("name")) for fn in fns], self.names)
        return " ".join([say, *cues])

    def request_step(self, fns: list[dict[str, Any]], joiner: str | None, rounds_split: bool) -> dict[str, Any]:
        """One user turn asking for ``fns`` (one call each): alone, in parallel («а также») or chained («а затем»)."""
        specs = [_spec(fn) for fn in fns]
        if any(s is None for s in specs):
            return _legacy_step(fns, self.lang, self.rng, self.polite, joiner or "", rounds_split)
        world: dict[str, Any] = {}  # one value per argument name in a turn (the step's slots are keyed by it)
        calls = [_world_call(fn, s, self.lang, self.rng, world) for fn, s in zip(fns, specs) if s is not None]
        words = [_in_words(c["arguments"], self.rng) for c in calls]
        pairs = list(zip([s for s in specs if s is not None], calls))
        if len(pairs) == 1:
            say = ph.framed(pairs[0][0], calls[0]["arguments"], self.lang, self.rng, words=words[0])
        else:
            parts = _parts(pairs, self.lang, words)
            say = ph.sentence(self.w["need"] + (joiner or self.w["also"]).join(parts))
        say = self.cued(self.polite + say, fns)
        slots = {k: v for (s, c), wd in zip(pairs, words) for k, v in _slots(s, c["arguments"], self.lang, None, wd).items()}
        rounds = [[c] for c in calls] if rounds_split else [calls]
        return {"kind": "tool_call", "intent": say, "user_message": say, "slots": slots, "rounds": rounds,
                "final_answer": _closings([(s, c["result"]) for s, c in pairs], self.lang)}

    def clarify(self, fn: dict[str, Any]) -> list[dict[str, Any]]:
        """A request missing one required argument, the assistant's question, then the user's short answer."""
        spec = _spec(fn)
        if spec is None:
            return _legacy_clarify(fn, self.lang, self.rng, self.polite)
        call = _world_call(fn, spec, self.lang, self.rng)
        required = [k for k in fn["parameters"].get("required", []) if k in call["arguments"]]
        hidden = self.rng.choice(required)
        words = _in_words(call["arguments"], self.rng)
        first = self.cued(self.polite + ph.framed(spec, call["arguments"], self.lang, self.rng, skip=hidden, words=words),
                          [fn])
        value = call["arguments"][hidden]
        second = ph.say_answer(hidden, value, self.lang)
        return [{"kind": "clarification", "intent": first, "user_message": first, "withheld": [hidden],
                 "slots": _slots(spec, call["arguments"], self.lang, hidden, words),
                 "final_answer": WORLD[hidden][f"ask_{self.lang}"]},
                {"kind": "tool_call", "intent": second, "user_message": second,
                 "slots": {hidden: {"value": value, "say": ph.say_arg(hidden, value, self.lang, spec)}},
                 "rounds": [[call]], "final_answer": _closings([(spec, call["result"])], self.lang)}]

    def correction(self, first: dict[str, Any], fn: dict[str, Any]) -> dict[str, Any] | None:
        """The user changes one value after the first answer and says the request again: the call is made again."""
        spec = _spec(fn)
        call = first["rounds"][0][0]
        if spec is None:
            return _legacy_correction(call, fn, self.lang, self.rng)
        props = fn["parameters"].get("properties", {})
        for arg in sorted(call["arguments"]):
            if WORLD[arg]["kind"] in ("address", "items"):
                continue
            avoid = (call["arguments"][arg], *(call["arguments"][o] for o in ("from_city", "to_city")
                                               if o in call["arguments"] and arg in ("from_city", "to_city")))
            pool = [v for v in (props[arg].get("enum") or WORLD[arg].get("values", {}).get(self.lang) or [])
                    if v not in avoid]
            if pool:
                args = {**call["arguments"], arg: self.rng.choice(pool)}
                result = ph.result_for(spec, args, self.rng, self.lang)
                say = self.cued(f"{self.rng.choice(self.w['correction'])} {ph.sentence(ph.request(spec, args, self.lang))}",
                                [fn])
                return {"kind": "tool_call", "intent": say, "user_message": say, "slots": _slots(spec, args, self.lang),
                        "rounds": [[{**call, "arguments": args, "result": result}]],
                        "final_answer": _closings([(spec, result)], self.lang)}
        return None

    def irrelevance(self, unavailable: list[str]) -> list[dict[str, Any]]:
        """A request for something only a tool the assistant does not have could do."""
        found = next(((text, t) for text in unavailable for t in ph.TOOLS.values() if text.startswith(t[self.lang])), None)
        if found is None:
            say = self.polite + (unavailable or [self.w["chat"][0]])[0]
        else:
            text, want = found
            props = {k: _schema(k, self.lang, k not in want["required"]) for k in want["params"]}
            fn = {"name": want["name"], "parameters": {"properties": props, "required": want["required"]}}
            call = _world_call(fn, want, self.lang, self.rng)
            say = self.polite + ph.framed(want, call["arguments"], self.lang, self.rng)
            own = read_topic(text, self.lang)  # the service asked for is named when a visible tool is another's of its domain
            if own is not None and any(o is not None and o != own and o.domain == own.domain
                                       for o in map(variant_topic, self.names)):
                say = f"{say} {cue_sentence(own)}"
        return [{"kind": "irrelevance", "intent": say, "user_message": say, "final_answer": self.w["none"]}]

    def long_turns(self, turns: int) -> list[dict[str, Any]]:
        """``turns`` user turns, each a chain of two calls in two rounds («…, а затем …»), over one consistent
        world: an argument keeps its value for the whole episode (the user's city, card and order number stay the
        same), and the cities are never ones an address names — so the plan passes the rule checks as a real
        planner's good plan would."""
        world: dict[str, Any] = {}
        steps = []
        for t in range(turns):
            fns = self.rng.sample(self.tools, 2)
            specs = [_spec(fn) for fn in fns]
            if any(s is None for s in specs):
                return _legacy_long_turns(self.tools, turns, self.lang, self.rng, self.polite)
            calls = [_world_call(fn, s, self.lang, self.rng, world) for fn, s in zip(fns, specs) if s is not None]
            pairs = list(zip([s for s in specs if s is not None], calls))
            parts = _parts(pairs, self.lang)
            say = self.cued((self.polite if t == 0 else "") + ph.sentence(self.w["need"] + self.w["then"].join(parts)),
                            fns)
            slots = {k: v for s, c in pairs for k, v in _slots(s, c["arguments"], self.lang).items()}
            steps.append({"kind": "tool_call", "intent": say, "user_message": say, "slots": slots,
                          "rounds": [[c] for c in calls],
                          "final_answer": _closings([(s, c["result"]) for s, c in pairs], self.lang)})
        return steps


def planner_responder(request: ChatRequest, rng: random.Random) -> str:
    """``fc.planner``: a plan of the requested type built from the task's tools.

    ``request.meta["sim_turns"]`` (a workload knob for benches; off by default) makes every
    ``multi_turn`` plan that many user turns, each a chain of two calls in two rounds
    («…, а затем …»), as long real episodes with several tool-call rounds per user turn are.
    """
    task = json_blocks(request, 0)[-1]  # the task is the prompt's last JSON block
    lang, kind, tools = task["lang"], task["sample_type"], task["tools"]
    w = WORDS[lang]
    polite = w["polite"][min(3, sum(1 for m in request.messages if m.get("role") == "assistant"))]
    plan = _Planner(task, lang, rng, polite)
    picks = rng.sample(tools, min(2, len(tools)))
    turns = int(request.meta.get("sim_turns") or 0)
    if kind == "multi_turn" and turns >= 2 and len(tools) >= 2:
        steps = plan.long_turns(turns)
    elif kind in ("single", "multi_turn"):
        steps = [plan.request_step(picks[:1], None, False)]
        plan.polite = ""  # a greeting opens the conversation, not every turn
        if kind == "multi_turn":
            variant = rng.randrange(3)
            later = next((t for t in tools if t is not picks[0] and t["parameters"].get("required")), None)
            fixed = plan.correction(steps[0], picks[0]) if variant == 1 else None
            if fixed is not None:
                steps.append(fixed)
            elif variant == 2 and later is not None:  # a required value missing later, not only at step 0
                steps += plan.clarify(later)
            else:
                steps.append(plan.request_step(picks[-1:], None, False))
    elif kind in ("parallel", "multi_step"):
        steps = [plan.request_step(picks, w["also"] if kind == "parallel" else w["then"], kind == "multi_step")]
    elif kind == "error_recovery":
        first = plan.request_step(picks[:1], None, False)
        call = first["rounds"][0][0]
        first["rounds"] = [[{**call, "result": {"error": w["unavailable"]}}], [dict(call)]]
        steps = [first]
    elif kind == "clarification":
        steps = plan.clarify(next((t for t in tools if t["parameters"].get("required")), tools[0]))
    elif kind == "irrelevance":
        steps = plan.irrelevance(list(task.get("unavailable") or []))
    else:
        say = polite + rng.choice(w["chat"])
        steps = [{"kind": "text", "intent": say, "user_message": say, "final_answer": w["chat_answer"]}]
    return json.dumps({"steps": steps}, ensure_ascii=False)


# ---------------------------------------------------------------------------
# the other roles

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
    call = blocks[1] if len(blocks) > 1 else {}
    spec = tool_spec(str(call.get("name")))
    if spec is not None:
        return json.dumps(ph.result_for(spec, call.get("arguments") or {}, rng, request_lang(request)), ensure_ascii=False)
    return json.dumps({"status": WORDS[request_lang(request)]["ok"], "id": rng.randint(100, 999)}, ensure_ascii=False)


def _context(messages: tuple[dict[str, Any], ...]) -> tuple[str, set[str], list[tuple[str, Any]]]:
    """(user words of this request, tools already answered since the last user turn, (tool, result) of each)."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    prev_tool = max((i for i, m in enumerate(messages[:last_user]) if m.get("role") == "tool"), default=-1)
    words = "\n".join(m.get("content") or "" for m in messages[prev_tool + 1:last_user + 1] if m.get("role") == "user")
    done: set[str] = set()
    results: list[tuple[str, Any]] = []
    for m in messages[last_user + 1:]:
        if m.get("role") == "tool" and "error" not in (m.get("content") or ""):
            done.add(m.get("name") or "")
            results.append((m.get("name") or "", m.get("content")))
    return words, done, results


def mentioned(fns: list[dict[str, Any]], text: str, lang: str) -> list[tuple[int, dict[str, Any]]]:
    """(position, tool) of every tool the user's words ask for, in order.

    Two tools whose heads match at the same place («Забронируйте …») are told apart by
    how many of their required arguments the words hold, as a reader would.
    """
    low = text.lower()
    said = said_topics(text, lang)  # a service the user named: other services of its domain are not meant
    found: dict[int, list[dict[str, Any]]] = {}
    for fn in fns:
        spec = _spec(fn)
        if spec is not None and passed_over(str(fn.get("name")), said):
            continue
        if spec is not None:
            for pos in ph.head_positions(spec, text, lang):
                found.setdefault(pos, []).append(fn)
        elif _key(fn) and _key(fn).lower() in low:
            found.setdefault(low.find(_key(fn).lower()), []).append(fn)
    out = []
    for pos in sorted(found):
        cands = found[pos]
        if len(cands) > 1:
            cands.sort(key=lambda fn: (-_coverage(fn, text[pos:], lang), fn["name"]))
        out.append((pos, cands[0]))
    return out


def _coverage(fn: dict[str, Any], text: str, lang: str) -> int:
    args, missing = _read_args(fn, text, lang)
    return len(args) - 10 * len(missing)


def _read_args(fn: dict[str, Any], segment: str, lang: str) -> tuple[dict[str, Any], list[str]]:
    """(arguments read from the user's words for ``fn``, required ones not found)."""
    spec = _spec(fn)
    props = fn["parameters"].get("properties", {})
    args: dict[str, Any] = {}
    if spec is None:
        low = segment.lower()
        for pname, schema in props.items():
            m = re.search(re.escape(str(schema.get("description", pname)).lower()) + r" — ([^,;\n]+)", low)
            if m is not None:
                args[pname] = read_value(segment[m.start(1): m.end(1)].strip(), schema)
    else:
        taken: list[str] = []
        for pname in spec["params"]:
            if pname not in props:
                continue
            found, value = ph.read_arg(pname, props[pname], segment, lang, spec, tuple(taken))
            if found:
                args[pname] = value
                span = ph.arg_span(pname, value, segment, lang, spec)
                if span:
                    taken.append(span)
    missing = [k for k in fn["parameters"].get("required", []) if k not in args]
    return args, missing


def _ask(fn: dict[str, Any], pname: str, lang: str) -> str:
    if _spec(fn) is not None:
        return str(WORLD[pname][f"ask_{lang}"])
    props = fn["parameters"].get("properties", {})
    return WORDS[lang]["ask"].format(props.get(pname, {}).get("description", pname))


def _report(results: list[tuple[str, Any]], lang: str) -> str:
    """The closing answer: one sentence per result of this turn (the last two)."""
    texts = []
    for name, content in results[-2:]:
        spec = tool_spec(name)
        try:
            value = json.loads(content) if isinstance(content, str) else content
        except json.JSONDecodeError:
            value = None
        text = ph.closing(spec, value, lang) if spec is not None else None
        texts.append(text or f"{WORDS[lang]['done']}: {content}")
    return " ".join(texts)


def assistant_responder(request: ChatRequest, rng: random.Random) -> Choice:
    """``fc.assistant``: call the tools the user asked for, with the values said; ask, report or refuse."""
    lang = request_lang(request)
    w = WORDS[lang]
    words, done, results = _context(request.messages)
    fns = [t.get("function", t) for t in request.tools or ()]
    hits = mentioned(fns, words, lang)
    if not hits:
        chat = any(c.lower().rstrip("!.") in words.lower() for c in w["chat"])
        return Choice(content=w["chat_answer"] if chat else w["none"])
    todo = [(p, fn) for p, fn in hits if fn["name"] not in done]
    if not todo:
        return Choice(content=_report(results, lang))
    if w["then"].strip(", ").lower() in words.lower():
        todo = todo[:1]
    calls = []
    ends = [p for p, _ in hits] + [len(words)]
    carried: dict[str, Any] = {}  # values said earlier in the turn, for «той же карты», «там же»
    wanted = {id(fn) for _, fn in todo}
    for p, fn in hits:
        segment = words[p: next(e for e in ends if e > p)]
        args, missing = _read_args(fn, segment, lang)
        spec = _spec(fn)
        for k in fn["parameters"].get("properties", {}):  # «той же карты» is the card said before
            phrase = ph.anaphora(k, spec, lang) if spec is not None and k in carried and k not in args else None
            if phrase and re.search(rf"(?<!\w){re.escape(phrase.lower())}(?!\w)", segment.lower()):
                args[k] = carried[k]
        missing = [k for k in missing if k not in args]
        for k, v in args.items():
            carried.setdefault(k, v)
        if id(fn) not in wanted:
            continue
        if missing:
            return Choice(content=_ask(fn, missing[0], lang))
        calls.append({"name": fn["name"], "arguments": args})
        if len(calls) == len(todo):
            break
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
    """``fc.irrelevance.answer`` writes the refusal; ``fc.irrelevance.judge`` looks for a tool's head in the request."""
    lang = request_lang(request)
    if request.tag.endswith("judge"):
        task = json_blocks(request)[0]
        users = [m["content"] for m in task["conversation"] if m.get("role") == "user"]
        hits = [fn["name"] for _, fn in mentioned(list(task["tools"]), users[-1] if users else "", lang)]
        return json.dumps({"any_tool_fits": bool(hits), "fitting_tools": hits,
                           "issues": [WORDS[lang]["fits"].format(h) for h in hits]}, ensure_ascii=False)
    return WORDS[lang]["none"]


RESPONDERS: dict[str, SimResponder] = {
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
