"""A ``sim`` profile for the FC roles that fails the way real instruct models do — still not a model.

The basic responders (:mod:`fabrika.generators.fc.sim_responders`) answer exactly
what the code expects: bare JSON, the planned phrase word for word. Real models
(Qwen3, gpt-oss) do not, and every check built against the basic sim passed for
that reason. This profile wraps the basic responders and adds, deterministically
per request:

* **reasoning and prose around JSON** — ``<think>…</think>`` before the answer
  (sometimes holding a draft JSON that is *not* the answer), prose before and
  after a fenced block, the odd trailing comma;
* **truncation** — a share of JSON answers is cut mid-object with
  ``finish_reason="length"``; a share of user turns is cut inside ``<think>``;
* **a user who talks like a person** — free-text facts (``verbatim: false``) are
  inflected with a preposition («в Казани», «для Петровой», pymorphy3), the frame
  is paraphrased (greeting, filler, closing, order of the details, dash style),
  and a small share of verbatim values slips (``2025-03-14`` → ``14.03.2025``,
  ``A1024`` → ``a1024``);
* **an assistant that must canonicalise** — it reads inflected values back to
  the nominative (pymorphy3, so ambiguous surnames like «Иванова» sometimes come
  out wrong), converts ``dd.mm.yyyy`` dates to ISO as models usually do, keeps
  other slips as they are, and answers some turns in Hermes ``<tool_call>`` text
  or with a ``<think>`` block in the content.

What it does not model: real paraphrase (the user keeps each tool's key phrase
and each parameter's name word so this stand-in assistant can find them),
semantic errors, long-range inconsistency. Data made with it is still
``llm_backend="sim"``.

Use: list ``fabrika.generators.fc.sim_realistic`` after ``fabrika.generators.fc.stages``
in a pipeline's ``plugins`` (importing it registers the profile), or call
:func:`use_realistic_profile` / :func:`fabrika.generators.fc.sim_responders.register_fc_sim_responders`.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from fabrika.generators.fc import sim_responders as basic
from fabrika.llm.types import ChatRequest, Choice

__all__ = ["PROFILE", "RealisticProfile", "canonical_words", "inflect_phrase", "use_realistic_profile"]


@dataclass(frozen=True)
class RealisticProfile:
    """Rates of each behaviour (per answer; documented in the module docstring)."""

    think: float = 0.5
    draft_in_think: float = 0.3
    prose: float = 0.5
    trailing_comma: float = 0.05
    truncate_json: float = 0.04
    truncate_user: float = 0.02
    inflect: float = 0.9
    verbatim_slip: float = 0.04
    hermes: float = 0.2


PROFILE = RealisticProfile()
_PREPOSITIONS = {"gent": ("из", "для", "у"), "datv": ("к", "по"), "loct": ("в", "о")}
_ALL_PREPOSITIONS = {p for ps in _PREPOSITIONS.values() for p in ps} | {"во", "на", "с", "со", "об", "до"}
_PROSE = {
    "ru": (("Вот ответ:", "Готово."), ("Конечно! Ниже JSON.", "Если нужно, поправлю."), ("Результат:", "")),
    "en": (("Here is the answer:", "Done."), ("Sure! The JSON is below.", "Let me know if you need changes."),
           ("Result:", "")),
}
_THINK = {"ru": "Разберу задачу по шагам. Сначала посмотрю на входные данные, потом соберу ответ.",
          "en": "Let me work through this step by step. First the inputs, then the answer."}
_GREETINGS = {"ru": ("", "Здравствуйте! ", "Добрый день. ", "Слушайте, ", "Подскажите, пожалуйста: "),
              "en": ("", "Hi! ", "Hello, ", "Quick question: ")}
_CLOSINGS = {"ru": ("", ", заранее спасибо!", "\nОчень жду.", "\nСпасибо."), "en": ("", ", thanks!", "\nCheers.")}


@lru_cache(maxsize=1)
def _morph() -> Any:
    import pymorphy3

    return pymorphy3.MorphAnalyzer()


def _restore_case(word: str, like: str) -> str:
    if like[:1].isupper():
        return "-".join(p[:1].upper() + p[1:] for p in word.split("-"))
    return word


def inflect_phrase(value: str, case: str) -> str:
    """``value`` (nominative) in grammatical ``case`` ('gent', 'datv', 'loct'), word by word."""
    out = []
    for word in value.split():
        parses = [p for p in _morph().parse(word) if p.tag.case == "nomn"] or _morph().parse(word)
        form = parses[0].inflect({case}) if parses else None
        out.append(_restore_case(form.word, word) if form is not None else word)
    return " ".join(out)


def canonical_words(text: str, keep: frozenset[str] = frozenset()) -> str:
    """What a model writes into an argument for the user's inflected words: prepositions off, nominative.

    Words in ``keep`` (the enum literals of the visible tools) stay as they are.
    """
    if text.strip() in keep:
        return text.strip()
    words = text.split()
    while len(words) > 1 and words[0].lower() in _ALL_PREPOSITIONS:
        words = words[1:]
    out = []
    for word in words:
        if not re.fullmatch(r"[А-Яа-яЁё-]+", word) or word in keep:
            out.append(word)
            continue
        parse = _morph().parse(word)[0]
        form = parse.inflect({"nomn"}) if parse.tag.case not in (None, "nomn") else None
        out.append(_restore_case(form.word, word) if form is not None else word)
    return " ".join(out)


def _slip(value: str, rng: random.Random) -> str:
    iso = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", value)
    if iso:
        return f"{iso[3]}.{iso[2]}.{iso[1]}"
    return value.lower() if value != value.lower() else value


def _lang(request: ChatRequest) -> str:
    return basic.request_lang(request)


def _dress_json(text: str, request: ChatRequest, rng: random.Random, p: RealisticProfile) -> Choice:
    """Wrap a bare JSON answer the way a real model does; sometimes cut it off."""
    lang = _lang(request)
    body = text
    if rng.random() < p.trailing_comma and body.endswith("}"):
        body = body[:-1].rstrip() + ",}"
    if rng.random() < p.prose:
        before, after = rng.choice(_PROSE[lang])
        pretty = body if "\n" in body else body
        body = f"{before}\n```json\n{pretty}\n```\n{after}".strip()
    if rng.random() < p.think:
        draft = ""
        if rng.random() < p.draft_in_think:
            draft = ' Черновик: {"draft": true, "steps": []} — нет, не то.' if lang == "ru" else \
                ' Draft: {"draft": true} — no, not that.'
        body = f"<think>\n{_THINK[lang]}{draft}\n</think>\n\n{body}"
    if rng.random() < p.truncate_json:
        start = body.find("{")
        cut = rng.randint(start + 1, max(start + 2, len(body) - 2)) if start >= 0 else len(body) // 2
        return Choice(content=body[:cut], finish_reason="length")
    return Choice(content=body)


def _json_role(fn: Callable[[ChatRequest, random.Random], Any]) -> Callable[[ChatRequest, random.Random], Choice]:
    def responder(request: ChatRequest, rng: random.Random) -> Choice:
        out = fn(request, rng)
        text = out.content if isinstance(out, Choice) else out
        return _dress_json(text or "", request, rng, PROFILE)

    responder.__name__ = f"realistic_{fn.__name__}"
    return responder


def _render_fact(say: str, fact: dict[str, Any], rng: random.Random, lang: str) -> str:
    value = str(fact.get("value", ""))
    if not value or value not in say:
        return say
    if fact.get("verbatim"):
        return say.replace(value, _slip(value, rng)) if rng.random() < PROFILE.verbatim_slip else say
    if lang != "ru" or rng.random() >= PROFILE.inflect or not re.fullmatch(r"[А-Яа-яЁё -]+", value):
        return say
    # only a bare value is the user's to inflect (the legacy «Город — Казань» frame): a whole word, not a
    # prefix of an inflected one («Екатеринбург» in «в Екатеринбурге»), not already governed by a preposition
    # («в Нижний Новгород») and not a title in quotes («Холоп»): the sim's phrases are grammatical already
    at = re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", say)
    if at is None:
        return say
    before = say[:at.start()]
    prev = re.search(r"([\w-]+)\s*$", before)
    if before.endswith("«") or (prev is not None and prev.group(1).lower() in _ALL_PREPOSITIONS | {"в", "на"}):
        return say
    case = rng.choice(sorted(_PREPOSITIONS))
    return f"{before}{rng.choice(_PREPOSITIONS[case])} {inflect_phrase(value, case)}{say[at.end():]}"


def user_responder(request: ChatRequest, rng: random.Random) -> Choice:
    """``fc.user``: the planned words, said like a person (see module docstring)."""
    lang = _lang(request)
    goal = basic.json_blocks(request, -1)[-1]
    say = goal.get("say") or goal.get("intent") or ""
    for fact in goal.get("facts") or []:
        say = _render_fact(say, fact, rng, lang)
    head, sep, tail = say.partition(": ")
    if sep and ", " in tail and ": " not in tail:  # one request: reorder its details, as people do
        parts = tail.split(", ")
        rng.shuffle(parts)
        tail = ", ".join(parts)
    dash = rng.choice((" — ", " - "))
    text = (head + sep + tail).replace(" — ", dash)
    greeting, closing = rng.choice(_GREETINGS[lang]), rng.choice(_CLOSINGS[lang])
    if re.match(r"(?:Здравствуйте|Добрый|Привет|Скажите|Подскажите|Hi|Hello|Good)\b", text):
        greeting = ""  # the planned words greet already: no «Здравствуйте! Здравствуйте!»
    elif greeting.endswith(": ") or greeting.endswith(", "):
        text = text[:1].lower() + text[1:]  # «Слушайте, хочу узнать …»
    if closing.startswith(",") and text.rstrip()[-1:] in ".!?":
        closing = " " + closing[2:3].upper() + closing[3:]  # «… на 2 апреля. Заранее спасибо!»
    text = greeting + text + closing
    if rng.random() < PROFILE.truncate_user:
        return Choice(content=f"<think>\n{_THINK[lang]}", finish_reason="length")
    if rng.random() < PROFILE.think / 2:
        text = f"<think>\n{_THINK[lang]}\n</think>\n{text}"
    return Choice(content=text)


_DASHED = re.compile(r" - ")
_DOTTED_DATE = re.compile(r"\b(\d{2})\.(\d{2})\.(\d{4})\b")
_VALUE = re.compile(r"( — )([^,;\n:()]+)(?=[,;\n]|$)")  # a value, not a tool's key phrase (followed by ':')


def _enum_literals(request: ChatRequest) -> frozenset[str]:
    found: set[str] = set()

    def walk(schema: Any) -> None:
        if isinstance(schema, dict):
            found.update(str(v) for v in schema.get("enum") or [])
            for v in schema.values():
                walk(v)
        elif isinstance(schema, list):
            for v in schema:
                walk(v)

    walk([t.get("function", t).get("parameters") for t in request.tools or ()])
    return frozenset(found)


def _canonical_request(request: ChatRequest) -> ChatRequest:
    """The request as the basic assistant can read it: dashes unified, dates ISO, inflected values nominative."""
    keep = _enum_literals(request)
    messages = []
    for m in request.messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            text = _DASHED.sub(" — ", m["content"])
            text = _DOTTED_DATE.sub(lambda d: f"{d[3]}-{d[2]}-{d[1]}", text)
            text = _VALUE.sub(lambda v: v[1] + canonical_words(v[2].strip(), keep), text)
            m = {**m, "content": text}
        messages.append(m)
    return ChatRequest(messages=tuple(messages), tools=request.tools, tag=request.tag, meta=request.meta)


def assistant_responder(request: ChatRequest, rng: random.Random) -> Choice:
    """``fc.assistant``: canonicalises what the user said, then answers like the basic assistant, dressed."""
    choice = basic.assistant_responder(_canonical_request(request), rng)
    lang = _lang(request)
    if choice.tool_calls and rng.random() < PROFILE.hermes:
        blocks = "".join(f'<tool_call>{{"name": "{c["name"]}", "arguments": {c["arguments"]}}}</tool_call>'
                         for c in choice.tool_calls)
        return Choice(content=f"<think>{_THINK[lang]}</think>\n{blocks}")
    if choice.tool_calls:
        return Choice(content=None, tool_calls=choice.tool_calls, finish_reason="tool_calls",
                      reasoning=_THINK[lang] if rng.random() < PROFILE.think else None)
    if rng.random() < PROFILE.think:
        return Choice(content=f"<think>\n{_THINK[lang]}\n</think>\n\n{choice.content}")
    return choice


def tool_responder(request: ChatRequest, rng: random.Random) -> Choice:
    """``fc.tool``: like a real service, a call with a value no record has («из Тверь», ``???``) gets an error."""
    from fabrika.generators.fc.plan_checks import canonical_problem

    blocks = basic.json_blocks(request, -1)
    call = blocks[1] if len(blocks) > 1 else {}
    expected = blocks[2] if len(blocks) > 2 else None
    bad = [f"{k}={v!r}" for k, v in (call.get("arguments") or {}).items()
           if isinstance(v, str) and (v == "???" or canonical_problem(v, {}))]
    if expected is None and bad:
        word = "не найдено" if _lang(request) == "ru" else "not found"
        return _dress_json(json.dumps({"error": f"{word}: {', '.join(bad)}"}, ensure_ascii=False), request, rng,
                           PROFILE)
    return _json_role(basic.tool_responder)(request, rng)


def irrelevance_responder(request: ChatRequest, rng: random.Random) -> Choice:
    out = basic.irrelevance_responder(request, rng)
    if request.tag.endswith("judge"):
        return _dress_json(out, request, rng, PROFILE)
    return Choice(content=f"<think>{_THINK[_lang(request)]}</think>\n{out}" if rng.random() < PROFILE.think else out)


RESPONDERS: dict[str, Callable[[ChatRequest, random.Random], Any]] = {
    "fc.tools": _json_role(basic.tools_responder), "fc.planner": _json_role(basic.planner_responder),
    "fc.judge": _json_role(basic.judge_responder), "fc.tool": tool_responder,
    "fc.answer_judge": _json_role(basic.answer_judge_responder),
    "fc.user": user_responder, "fc.assistant": assistant_responder, "fc.irrelevance": irrelevance_responder,
}


def use_realistic_profile() -> None:
    """Answer every FC sim request with this profile (until ``register_fc_sim_responders()`` restores the basic one)."""
    from fabrika.llm.sim import register_sim_responder

    for prefix, fn in RESPONDERS.items():
        register_sim_responder(prefix, fn)


use_realistic_profile()
