"""A model double for the FC pipeline: every role, in real-model shapes, with tagged faults.

:class:`FcModelDouble` installs one responder per FC role on a
:class:`~fabrika.testing.FakeOpenAIServer`. Each answers the way a real
instruction model does rather than the way the ``sim`` backend does:

* **shapes** (not faults; the pipeline must read them): ``<think>`` blocks before
  the answer, prose and a fenced block around JSON, tool calls written as Hermes
  ``<tool_call>`` tags in the content instead of the API's ``tool_calls``;
* **tagged faults** (the pipeline must never train on them), each logged as a
  :class:`FaultRecord` with the request it answered and the visible text it
  produced, so a test can trace which rows carry one:

  - ``invented_number`` / ``invented_name`` — a closing answer states an amount or a
    name no tool result has;
  - ``contradiction`` — «ничего не нашлось» after a non-empty result, «готово» after an
    error;
  - ``asks_given`` — a clarification asks for a slot the user already gave instead of
    the missing one;
  - ``role_label``, ``meta_remark``, ``wrapping_quotes``, ``pasted_json``,
    ``wrong_script`` — user-agent artefacts;
  - ``leak_case_form`` / ``synonym_given`` — the user agent says a withheld value in
    another case or date form («в Казани», «14 марта») or by a short form («МСК» for
    Москва). A real user agent leaks what its prompt hints at; the double knows the
    withheld values because it wrote the plans (it serves ``fc.planner`` too) and finds
    the step by the goal card's intent;
  - ``wrong_format`` — a call written as Python syntax in the text;
  - ``truncation`` — a cut-off answer (``finish_reason="length"``) of any role.

The honest answer under the shapes and faults is the registered ``sim`` responder of
the role (:func:`fabrika.llm.sim.find_sim_responder`), so the double follows the
plans' expected results and differs from the sim only by what it adds. Faults are
drawn from a seeded generator per request body and the number of times that body
was asked (a re-ask of the same request is a new sample, as with a real model).

    with FakeOpenAIServer() as srv:
        double = FcModelDouble(seed=3, rate=0.3).install(srv)
        run_pipeline(config_pointing_at(srv.base_url))
        bad_texts = double.fault_texts()        # visible texts that carry a fault
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from fabrika.agents.surface import surface_forms
from fabrika.llm.sim import find_sim_responder
from fabrika.llm.types import ChatRequest, Choice
from fabrika.textutil.morph import parses
from fabrika.textutil.reasoning import split_reasoning

__all__ = ["FC_DOUBLE_FAULTS", "FC_ROLES", "FaultRecord", "FcModelDouble"]

#: Roles in registration order: a longer tag before a prefix of it ("fc.tools" before "fc.tool").
FC_ROLES: tuple[str, ...] = (
    "fc.tools", "fc.topics", "fc.planner", "fc.judge", "fc.user", "fc.tool", "fc.assistant",
    "fc.irrelevance.judge", "fc.irrelevance", "fc.answer_judge", "fc.target_judge",
)
FC_DOUBLE_FAULTS: tuple[str, ...] = (
    "invented_number", "invented_name", "contradiction", "asks_given", "role_label", "meta_remark",
    "wrapping_quotes", "pasted_json", "wrong_script", "leak_case_form", "synonym_given", "wrong_format",
    "truncation",
)
_USER_FAULTS = ("role_label", "meta_remark", "wrapping_quotes", "pasted_json", "wrong_script")
_CLOSING_FAULTS = ("invented_number", "invented_name", "contradiction")

_MONTHS_GEN = ("января", "февраля", "марта", "апреля", "мая", "июня", "июля", "августа", "сентября", "октября",
               "ноября", "декабря")
_MONTHS_EN = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
              "November", "December")
_THINK = {"ru": "Пользователь хочет, чтобы я ответил. Сначала разберу, что уже известно.",
          "en": "The user wants an answer. Let me work out what is known first."}
_PROSE = {"ru": ("Вот результат:", "Готово, вот JSON:", "Конечно! Ниже ответ."),
          "en": ("Here is the result:", "Sure, here is the JSON:", "Done! The answer is below.")}


@dataclass(frozen=True)
class FaultRecord:
    """One injected fault: which, for which role, the visible text it produced and the request it answered."""

    kind: str
    role: str
    text: str
    request_digest: str
    last_user: str = ""


def _genitive(value: str) -> str:
    """``value`` (nominative) in the genitive, word by word («Казань» → «Казани»), by pymorphy3."""
    out = []
    for word in value.split():
        found = [p for p in parses(word) if p.tag.case == "nomn"] or list(parses(word))
        form = found[0].inflect({"gent"}) if found else None
        out.append(form.word.capitalize() if form is not None and word[:1].isupper() else (form.word if form else word))
    return " ".join(out)


def _lang(req: dict[str, Any]) -> str:
    text = " ".join(str(m.get("content") or "") for m in req.get("messages") or ())
    cyr = len(re.findall(r"[А-Яа-яЁё]", text))
    return "ru" if cyr > len(re.findall(r"[A-Za-z]", text)) * 0.3 else "en"


def _visible(text: str) -> str:
    return split_reasoning(text).answer.strip()


def _json_blocks(text: str) -> list[Any]:
    out = []
    for block in re.findall(r"```json\s*\n(.*?)```", text, re.DOTALL):
        try:
            out.append(json.loads(block))
        except ValueError:
            continue
    return out


class FcModelDouble:
    """OpenAI-compatible double of a real model for every FC role (see module doc)."""

    def __init__(self, *, seed: int = 0, rate: float = 0.25, kinds: Iterable[str] = FC_DOUBLE_FAULTS,
                 think: float = 0.3, hermes: float = 0.5) -> None:
        unknown = set(kinds) - set(FC_DOUBLE_FAULTS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; use some of {FC_DOUBLE_FAULTS}")
        self.seed, self.rate, self.kinds = seed, rate, frozenset(kinds)
        self.think, self.hermes = think, hermes
        self.faults: list[FaultRecord] = []
        self.shapes: Counter[str] = Counter()
        self._asked: Counter[str] = Counter()
        self._withheld: dict[str, list[Any]] = {}  # clarification intent → withheld values (from its plans)
        self._lock = threading.Lock()

    # --- wiring -----------------------------------------------------------------------------

    def install(self, server: Any) -> "FcModelDouble":
        """Script ``server`` (a FakeOpenAIServer) with one responder per FC role; returns ``self``."""
        for role in FC_ROLES:
            server.script(tag=role, responder=self.responder(role), name=f"double:{role}")
        return self

    def responder(self, role: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def answer(req: dict[str, Any]) -> dict[str, Any]:
            return self.answer(role, req)

        return answer

    def fault_texts(self, roles: Iterable[str] | None = None) -> set[str]:
        """The visible texts that carry a fault (optionally of some roles only)."""
        want = set(roles) if roles is not None else None
        return {f.text for f in self.faults if f.text and (want is None or f.role in want)}

    def counts(self) -> dict[str, int]:
        return dict(Counter(f.kind for f in self.faults))

    # --- answering --------------------------------------------------------------------------

    def _rng(self, req: dict[str, Any]) -> tuple[random.Random, str]:
        body = json.dumps({k: v for k, v in req.items() if k != "stream"}, sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha1(body.encode()).hexdigest()[:16]
        with self._lock:
            self._asked[digest] += 1
            n = self._asked[digest]
        return random.Random(f"{self.seed}:{digest}:{n}"), digest

    def _log(self, kind: str, role: str, text: str, digest: str, req: dict[str, Any]) -> None:
        users = [str(m.get("content") or "") for m in req.get("messages") or () if m.get("role") == "user"]
        with self._lock:
            self.faults.append(FaultRecord(kind, role, _visible(text), digest, users[-1][:200] if users else ""))

    def _fault(self, rng: random.Random, options: Iterable[str]) -> str | None:
        opts = [k for k in options if k in self.kinds]
        if not opts or rng.random() >= self.rate:
            return None
        return rng.choice(opts)

    def _honest(self, role: str, req: dict[str, Any], rng: random.Random) -> Choice:
        tools = req.get("tools")
        creq = ChatRequest(messages=tuple(req.get("messages") or ()), tools=tuple(tools) if tools else None,
                           tool_choice=req.get("tool_choice"), response_format=req.get("response_format"),
                           tag=role if role != "fc.target_judge" else _target_judge_tag(req))
        fn = _base_responder(creq.tag)
        if fn is None:
            raise LookupError(f"no sim responder for {creq.tag!r}: import fabrika.generators.fc.stages first")
        out = fn(creq, rng)
        return out if isinstance(out, Choice) else Choice(content=out)

    def answer(self, role: str, req: dict[str, Any]) -> dict[str, Any]:
        rng, digest = self._rng(req)
        lang = _lang(req)
        honest = self._honest(role, req, rng)
        if self._fault(rng, ("truncation",)) and rng.random() < 0.15:
            text = honest.content or json.dumps([dict(c) for c in honest.tool_calls], ensure_ascii=False)
            cut = text[: max(1, len(text) // 2)]
            self._log("truncation", role, cut, digest, req)
            return {"content": cut, "finish_reason": "length"}
        if role == "fc.planner":
            self._remember_withheld(honest.content or "")
        if role == "fc.user":
            return self._user(honest.content or "", req, rng, digest, lang)
        if role == "fc.assistant":
            return self._assistant(honest, req, rng, digest, lang)
        return {"content": self._dress_json(honest.content or "", rng, lang)}

    def _dress_json(self, text: str, rng: random.Random, lang: str) -> str:
        """A JSON answer as a chatty model writes it: prose, a fenced block, maybe a think block first."""
        out = text
        if rng.random() < 0.5:
            out = f"{rng.choice(_PROSE[lang])}\n```json\n{text}\n```"
            self.shapes["prose_json"] += 1
        if rng.random() < self.think:
            out = f"<think>\n{_THINK[lang]}\n</think>\n\n{out}"
            self.shapes["think"] += 1
        return out

    def _remember_withheld(self, plan_json: str) -> None:
        try:
            steps = json.loads(plan_json).get("steps") or []
        except (ValueError, AttributeError):
            return
        for i, st in enumerate(steps):
            if not isinstance(st, dict) or not st.get("withheld"):
                continue
            values = []
            for later in steps[i + 1:]:
                for w in st["withheld"]:
                    slot = (later.get("slots") or {}).get(w)
                    if isinstance(slot, dict) and isinstance(slot.get("value"), str):
                        values.append(slot["value"])
                    for rnd in later.get("rounds") or []:
                        for c in rnd if isinstance(rnd, list) else []:
                            v = (c.get("arguments") or {}).get(w) if isinstance(c, dict) else None
                            if isinstance(v, str):
                                values.append(v)
            values = list(dict.fromkeys(values))
            with self._lock:
                self._withheld[str(st.get("intent") or "").strip()] = values

    def _leak(self, goal: Any, lang: str, rng: random.Random) -> tuple[str, str] | None:
        """(fault kind, words) saying a withheld value of this turn in another form, when there is one."""
        intent = str(goal.get("intent") or "").strip() if isinstance(goal, dict) else ""
        options: list[tuple[str, str]] = []
        for value in self._withheld.get(intent, []):
            forms = surface_forms(value)
            if len(forms) > 1:
                alias = rng.choice([f for f in forms[1:] if f != value])
                options.append(("synonym_given", f" Я про {alias}." if lang == "ru" else f" I mean {alias}."))
            when = re.fullmatch(r"\d{4}-(\d{2})-(\d{2})", value)
            if when:
                day, month = int(when.group(2)), int(when.group(1))
                options.append(("leak_case_form", f" Это на {day} {_MONTHS_GEN[month - 1]}." if lang == "ru"
                                else f" It's for {_MONTHS_EN[month - 1]} {day}."))
            elif lang == "ru" and re.fullmatch(r"[А-ЯЁ][а-яё]+(?: [А-ЯЁа-яё]+)*", value):
                options.append(("leak_case_form", f" Это для {_genitive(value)}."))
            elif re.fullmatch(r"[A-Z]+\d+", value):  # a code in lower case: «номер b77»
                options.append(("leak_case_form", f" Номер {value.lower()}." if lang == "ru" else
                                f" Number {value.lower()}."))
        options = [o for o in options if o[0] in self.kinds]
        return rng.choice(options) if options else None

    def _user(self, raw: str, req: dict[str, Any], rng: random.Random, digest: str, lang: str) -> dict[str, Any]:
        split = split_reasoning(raw)
        thought = raw.split("</think>", 1)[0] + "</think>\n" if "</think>" in raw else ""
        text = split.answer.strip() if split.complete else raw  # faults go into what the user visibly says
        goal = (_json_blocks(str((req.get("messages") or [{}])[-1].get("content") or "")) or [{}])[-1]
        kind = self._fault(rng, _USER_FAULTS + ("leak_case_form", "synonym_given"))
        # a turn that withholds something leaks it in most of its faults (where a leak can be made)
        leak = self._leak(goal, lang, rng) if kind and (kind in ("leak_case_form", "synonym_given")
                                                        or rng.random() < 0.8) else None
        if kind in ("leak_case_form", "synonym_given") and leak is None:
            kind = None  # nothing withheld in this turn: no leak to make
        if leak is not None:
            kind, words = leak
            text = text.rstrip() + words
        elif kind == "role_label":
            text = f"{'Пользователь' if lang == 'ru' else 'User'}: {text}"
        elif kind == "meta_remark":
            text += (" (В реплике переданы все сведения из facts.)" if lang == "ru"
                     else " (All facts conveyed as instructed.)")
        elif kind == "wrapping_quotes":
            text = f"«{text}»" if lang == "ru" else f'"{text}"'
        elif kind == "pasted_json":
            facts = [f.get("value") for f in goal.get("facts") or []] if isinstance(goal, dict) else []
            text += " " + json.dumps({"details": facts or ["—"]}, ensure_ascii=False)
        elif kind == "wrong_script":
            text += " Please answer as soon as you can." if lang == "ru" else " Ответьте, пожалуйста, поскорее."
        if kind:
            self._log(kind, "fc.user", text, digest, req)
        if thought:
            text = thought + text
        elif rng.random() < self.think:
            self.shapes["think"] += 1
            text = f"<think>\n{_THINK[lang]}\n</think>\n{text}"
        return {"content": text}

    def _assistant(self, honest: Choice, req: dict[str, Any], rng: random.Random, digest: str,
                   lang: str) -> dict[str, Any]:
        msgs = list(req.get("messages") or ())
        calls = [dict(c) for c in honest.tool_calls]
        if calls:
            if self._fault(rng, ("wrong_format",)):
                text = ", ".join(f"{c['name']}(" + ", ".join(f"{k}={v!r}" for k, v in _args(c).items()) + ")"
                                 for c in calls)
                self._log("wrong_format", "fc.assistant", text, digest, req)
                return {"content": text}
            if rng.random() < self.hermes:  # Hermes tags in the content, as a server without a tool parser returns
                self.shapes["hermes"] += 1
                body = "\n".join("<tool_call>\n" + json.dumps({"name": c["name"], "arguments": _args(c)},
                                                             ensure_ascii=False) + "\n</tool_call>" for c in calls)
                return {"content": self._think(body, rng, lang)}
            return {"content": None, "tool_calls": [{"name": c["name"], "arguments": _args(c)} for c in calls]}
        text = honest.content or ""
        closing = bool(msgs) and msgs[-1].get("role") == "tool"
        if closing:
            last = str(msgs[-1].get("content") or "")
            kind = self._fault(rng, _CLOSING_FAULTS)
            if kind == "invented_number":
                text = text.rstrip() + (" Итого к оплате 4 870 ₽." if lang == "ru" else " The total is $4,870.")
            elif kind == "invented_name":
                text = text.rstrip() + (" Менеджер Ольга Седова свяжется с вами." if lang == "ru"
                                        else " Your manager Olivia Stone will call you.")
            elif kind == "contradiction":
                empty = last.strip() in ("[]", "{}") or '"error"' in last
                if lang == "ru":
                    text = "Готово, всё успешно оформлено." if empty else "К сожалению, ничего подходящего не нашлось."
                else:
                    text = "Done, everything went through successfully." if empty else \
                        "Sorry, nothing suitable was found."
            if kind:
                self._log(kind, "fc.assistant", text, digest, req)
        elif "?" in text:
            asked = self._ask_given(req, text, lang)
            if asked and self._fault(rng, ("asks_given",)):
                text = asked
                self._log("asks_given", "fc.assistant", text, digest, req)
        return {"content": self._think(text, rng, lang)}

    def _think(self, text: str, rng: random.Random, lang: str) -> str:
        if rng.random() < self.think:
            self.shapes["think"] += 1
            return f"<think>\n{_THINK[lang]}\n</think>\n\n{text}"
        return text

    def _ask_given(self, req: dict[str, Any], honest: str, lang: str) -> str | None:
        """A question about a parameter the user's last turn already named (not the one the honest answer asks)."""
        users = [str(m.get("content") or "") for m in req.get("messages") or () if m.get("role") == "user"]
        said = users[-1].lower() if users else ""
        for t in req.get("tools") or ():
            fn = t.get("function", t)
            for prop in ((fn.get("parameters") or {}).get("properties") or {}).values():
                d = str((prop or {}).get("description") or "").lower()
                if len(d) >= 3 and d in said and d not in honest.lower():
                    return f"Уточните, пожалуйста: {d}?" if lang == "ru" else f"Could you tell me the {d}?"
        return None


def _base_responder(tag: str) -> Any:
    """The basic sim's responder for ``tag``, whatever plugin (``sim_realistic``) replaced it in the registry since:
    the double's honest answers must not depend on which modules a process imported before."""
    from fabrika.generators.fc import sim_responders, target_judge

    table = {**getattr(sim_responders, "RESPONDERS", {}), "fc.target_judge": target_judge.target_judge_responder}
    best = max((p for p in table if tag.startswith(p)), key=len, default=None)
    return table[best] if best is not None else find_sim_responder(tag)


def _args(call: dict[str, Any]) -> dict[str, Any]:
    args = call.get("arguments") or {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return {}
    return args if isinstance(args, dict) else {}


def _target_judge_tag(req: dict[str, Any]) -> str:
    fmt = json.dumps(req.get("response_format") or {})
    return "fc.target_judge.given" if "already_given" in fmt else "fc.target_judge.contradiction"
