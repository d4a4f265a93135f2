"""Rule checks for the FC expert's text-like targets: clarifications and irrelevance refusals.

A text target is only worth reward when it does the job the user needs:

* **clarification** — the answer *asks* (a question mark, or a request such as
  «уточните» / "could you tell me") and *names the missing information*: a
  withheld argument from ``ground_truth["asks"]`` (or ``["withheld"]``) when the sample records it,
  otherwise any required argument of the offered tools, matched by its name
  (``client_name`` ≈ "client name") or by a word of its description, in any
  inflection (pymorphy3 lemmas: «города» matches «город»);
* **irrelevance** — the answer *declines* («не могу», "cannot", «ни один … не
  умеет») and *says why*: it mentions the missing capability (tools, functions,
  access, «возможность») or gives a reason («потому что», "because").

«Готово!» as a clarification, or «Нет.» as a refusal, score 0. These are rules,
so they can be fooled by an answer built to pass them; a judge can be layered on
top by the caller. Pure Python; pymorphy3 loads on the first Russian word.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["asks_question", "is_clarification", "is_refusal_with_reason", "missing_info_terms"]

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_ASK = re.compile(
    r"\b(уточн\w*|подскаж\w*|скаж\w*|назов\w*|укаж\w*|сообщ\w*|напиш\w*|какой|какая|какое|какие|каком|какую|"
    r"could you|can you|would you|please (?:tell|provide|specify|share|let)|tell me|let me know|which|what)\b",
    re.IGNORECASE,
)
_DECLINE = re.compile(
    r"(не\s+могу|не\s+смогу|не\s+умею|не\s+умеет|не\s+получится|не\s+удастся|невозможно|не\s+поддерж\w*|"
    r"недоступ\w*|нет\s+(?:подходящ\w*|нужн\w*|такой|такого|такие|доступа|возможности|инструмент\w*|функци\w*)|"
    r"к\s+сожалению|увы|вне\s+(?:моих|моей)|"
    r"can(?:no|')t|cannot|unable|not able|don'?t have|do not have|doesn'?t|does not|isn'?t available|"
    r"not available|not supported|no (?:tool|function)|none of|sorry)",
    re.IGNORECASE,
)
_REASON = re.compile(
    r"(инструмент\w*|функци\w*|доступ\w*|возможност\w*|умеет|умею|поддерж\w*|предназнач\w*|"
    r"потому|поскольку|так как|из-за|"
    r"tool\w*|function\w*|access|capabilit\w*|support\w*|because|since|designed|able)",
    re.IGNORECASE,
)
_STOP = frozenset({"и", "или", "в", "на", "для", "по", "с", "из", "к", "о", "the", "a", "an", "of", "for", "to", "in",
                   "and", "or", "id", "номер", "number"})


def asks_question(text: str) -> bool:
    """True when ``text`` asks the user something (a question mark or a request to tell/specify)."""
    return "?" in text or "？" in text or bool(_ASK.search(text))


def _lemmas(word: str) -> frozenset[str]:
    word = word.lower().replace("ё", "е")
    if re.search(r"[а-я]", word):
        from fabrika.textutil.morph import lemmas

        return lemmas(word) | {word}
    return frozenset({word, word.rstrip("s")})


def _text_lemmas(text: str) -> set[str]:
    out: set[str] = set()
    for w in _WORD.findall(text):
        out |= _lemmas(w)
    return out


def _tool_params(tools: Any) -> dict[str, dict[str, Any]]:
    """``{param: schema}`` of every required argument of every tool (OpenAI dicts or their JSON)."""
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError:
            return {}
    out: dict[str, dict[str, Any]] = {}
    for t in tools or []:
        if hasattr(t, "model_dump"):
            t = t.model_dump(mode="json")
        if not isinstance(t, Mapping):
            continue
        fn = t.get("function", t)
        params = (fn.get("parameters") or {}) if isinstance(fn, Mapping) else {}
        props = params.get("properties") or {}
        for name in params.get("required") or list(props):
            prop = props.get(name)
            out.setdefault(str(name), dict(prop) if isinstance(prop, Mapping) else {})
    return out


def missing_info_terms(ground_truth: Any, tools: Any) -> list[set[str]]:
    """Alternatives for "the missing information": one lemma set per argument (name words + description words).

    ``ground_truth["asks"]`` (what ``fc.samples`` stores: the withheld slots) or its older name
    ``ground_truth["withheld"]`` (argument names, or ``{"name", "description"}`` dicts) wins, so a
    question about another slot names nothing missing; without it, every required argument of
    the offered tools is a candidate.
    """
    gt = ground_truth
    if isinstance(gt, str):
        try:
            gt = json.loads(gt) if gt else {}
        except ValueError:
            gt = {}
    params = _tool_params(tools)
    withheld = (gt.get("asks") or gt.get("withheld")) if isinstance(gt, Mapping) else None
    chosen: list[tuple[str, Mapping[str, Any]]] = []
    for w in withheld or []:
        if isinstance(w, Mapping):
            chosen.append((str(w.get("name") or ""), w))
        else:
            chosen.append((str(w), params.get(str(w), {})))
    if not chosen:
        chosen = list(params.items())
    out: list[set[str]] = []
    for name, schema in chosen:
        words = re.split(r"[_\W]+", name) + _WORD.findall(str(schema.get("description") or ""))
        terms: set[str] = set()
        for w in words:
            if len(w) >= 3 and w.lower() not in _STOP:
                terms |= _lemmas(w)
        if terms:
            out.append(terms)
    return out


def is_clarification(answer: str, ground_truth: Any = None, tools: Any = None) -> bool:
    """The answer asks and names a piece of missing information (see module doc)."""
    if not answer.strip() or not asks_question(answer):
        return False
    alternatives = missing_info_terms(ground_truth, tools)
    if not alternatives:  # nothing known to be missing: a question is the best a rule can ask for
        return True
    seen = _text_lemmas(answer)
    return any(terms & seen for terms in alternatives)


def is_refusal_with_reason(answer: str) -> bool:
    """The answer declines and says why (the missing tool/capability or an explicit reason)."""
    return bool(answer.strip()) and bool(_DECLINE.search(answer)) and bool(_REASON.search(answer))

