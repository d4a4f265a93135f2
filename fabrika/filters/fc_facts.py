"""Closing answers: facts the dialogue does not support, and contradictions with the last tool result.

A closing answer (the assistant's text after tool results) may only state what
the dialogue gave it. :func:`unsupported_facts` lists every number, amount,
date and name of the answer that no tool result and no user turn supports —
numbers by value and in words («три билета» supports 3, «1 500» = 1500), dates
as (month, day) in any written form, names (capitalised words not opening a
sentence, Latin words in Russian text) by lemma or an alias
(:mod:`fabrika.filters.fc_given`). List markers («1. …») and times are not
claims of their own beyond their numbers.

:func:`contradiction` is the rule half of the contradiction check: "nothing was
found" after a non-empty result, success after an error or an empty result, and
a status word of the opposite polarity to the result's status. The LLM half
(with explicit polarity: ``{"contradicts": true}`` means wrong) is
:mod:`fabrika.generators.fc.target_judge`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from fabrika.filters.fc_given import dates_in, numbers_in, surface_forms
from fabrika.textutil.morph import lemmas, parses

__all__ = ["contradiction", "result_polarity", "unsupported_facts"]

_LIST_MARKER = re.compile(r"^\s*\d+[.)]\s", re.MULTILINE)
_NAME = re.compile(r"(?<![\w-])([A-ZА-ЯЁ][\w-]*(?:\s+[A-ZА-ЯЁ][\w-]*)*)")
_SENT_START = re.compile(r"(?:^|[.!?…:\n]\s*|[-—•*]\s+)$")
_LATIN_WORD = re.compile(r"(?<![\w@./-])[A-Za-z][A-Za-z-]{2,}(?![\w@./-])")
_COMMON = frozenset("""я вы ваш ваша ваше ваши мы это этот эта там тут вот да нет готово итак пожалуйста спасибо
также сейчас сегодня завтра вчера если когда i you your we it this that the there here yes no ok okay done sure
please thanks also now today tomorrow if when dear hi hello здравствуйте привет добрый ок увы к сожалению
итого всего отлично хорошо конечно нашёл нашла нашлось нашел found great unfortunately sorry
в на по для с у к о из за от до при про без над под через the a an and or of in on for to at by with from
id url api pdf sms email e-mail ok utc msk january february march april may june july august september
october november december monday tuesday wednesday thursday friday saturday sunday""".split())
_NAME_TAGS = ("Name", "Surn", "Patr", "Geox", "Orgn", "Trad")


def _lemma_set(text: str) -> set[str]:
    out: set[str] = set()
    for w in re.findall(r"[\w-]+", text.lower().replace("ё", "е")):
        out.add(w)
        if re.search(r"[а-я]", w):
            out |= {x.replace("ё", "е") for x in lemmas(w)}
        else:
            out.add(w.rstrip("s"))
    return out


def _is_name(word: str) -> bool:
    """pymorphy3's best parse marks ``word`` as a first name, surname, place or organisation."""
    found = parses(word)
    return bool(found) and any(g in found[0].tag for g in _NAME_TAGS)


def _names(answer: str) -> list[str]:
    """Candidate names: capitalised words not opening a sentence; Latin words inside Russian text."""
    out: list[str] = []
    for m in _NAME.finditer(answer):
        if _SENT_START.search(answer[:m.start()]):
            # the sentence's first word is capitalised anyway: a name only if the dictionary says so
            first, *rest = m.group(1).split()
            if re.search(r"[А-Яа-яЁё]", first) and _is_name(first):
                out.append(first)
            out += rest
            continue
        out += m.group(1).split()
    if re.search(r"[А-Яа-яЁё]", answer):
        out += [w for w in _LATIN_WORD.findall(answer) if w not in out]
    return [w for w in dict.fromkeys(out) if w.lower() not in _COMMON and len(w) >= 2]


def _flat(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def unsupported_facts(answer: str, context: Iterable[str]) -> list[str]:
    """Numbers, amounts, dates and names of ``answer`` that no text of ``context`` supports."""
    ctx = [_flat(c) for c in context]
    joined = "\n".join(ctx)
    known_numbers = set(numbers_in(joined))
    known_dates = dates_in(joined)
    known_words = _lemma_set(joined)
    body = _LIST_MARKER.sub(" ", answer)
    out: list[str] = []
    answer_dates = dates_in(body)
    for d in sorted(answer_dates - known_dates):
        out.append(f"date {d[1]:02d}.{d[0]:02d}")
    date_numbers = {float(n) for m, d in answer_dates for n in (m, d)}
    for n in numbers_in(body, words=False):
        if n in known_numbers or (n in date_numbers and answer_dates <= known_dates):
            continue
        if n.is_integer() and 1900 <= n <= 2100 and any(int(n) == int(y) for y in re.findall(r"\b\d{4}\b", joined)):
            continue
        out.append(f"number {n:g}")
    for name in _names(body):
        low = name.lower().replace("ё", "е")
        if low in known_words or any(f.lower() in joined.lower() for f in surface_forms(name)):
            continue
        if re.search(r"[а-я]", low) and {x.replace("ё", "е") for x in lemmas(low)} & known_words:
            continue
        out.append(f"name {name}")
    return list(dict.fromkeys(out))


# --- contradictions -------------------------------------------------------------------------------

_NOTHING = re.compile(
    r"(ничего\s+(?:не\s+)?(?:подходящ\w*\s+)?(?:не\s+)?(?:найден\w*|нашл\w*|нашёл|нашел|обнаружен\w*)|"
    r"не\s+(?:удалось|получилось|смог\w*)\s+(?:ничего\s+)?найти|"
    r"(?:нет|не\s+нашлось)\s+(?:ни\s+одного\s+)?(?:подходящ\w*|свободн\w*|доступн\w*|результат\w*|вариант\w*)|"
    r"ничего\s+нет|список\s+пуст|пусто|"
    r"(?:подходящ\w*|таких|такого|свободн\w*|доступн\w*)\s+(?:[а-яё]+\s+)?(?:нет|не\s+нашлось)\b|"
    r"nothing\s+(?:suitable\s+|matching\s+)?(?:was\s+)?found|no\s+(?:results|matches|options|suitable|available)|"
    r"(?:could\s*n[o']t|did\s*n[o']t|cannot|can't|was\s+unable\s+to|were\s+unable\s+to)\s+find|"
    r"(?:у\s+(?:вас|тебя)\s+)?нет\s+(?:ни\s+одно\w*\s+|никаких\s+)?(?:активн|действующ|открыт|новых|текущ|"
    r"предстоящ|доступн|свободн|подходящ)\w*\s+[а-яё]+|"
    r"(?:you\s+)?(?:have|has)\s+no\b|\bno\s+(?:active|open|upcoming|available|matching|new|current)\b|"
    r"found\s+nothing|there\s+(?:is|are)\s+no(?:thing)?\b)", re.IGNORECASE)
_SUCCESS = re.compile(
    r"(готово|успешно|оформил\w*|оформлен\w*|забронировал\w*|забронирован\w*|подтвержд\w*|отправил\w*|"
    r"отправлен\w*|создал\w*|создан\w*|записал\w*|нашёл|нашел|нашл[аи]|вот\s+(?:что|результат|ваш\w*|список)|"
    r"прош(?:ёл|ел|ла|ло)\s+успешно|"
    r"done|success\w*|booked|confirmed|i(?:'ve|\s+have)?\s+(?:booked|sent|created|found|placed|scheduled)|"
    r"has\s+been\s+(?:booked|sent|created|placed|scheduled)|here\s+(?:is|are)|went\s+through|all\s+set)",
    re.IGNORECASE)
_FAILURE = re.compile(
    r"(ошибк\w*|не\s+удалось|не\s+получилось|не\s+вышло|к\s+сожалению|увы|невозможно|"
    r"error|failed|unable|could\s*n[o']t|did\s*n[o']t\s+work|unfortunately|sorry)", re.IGNORECASE)
_POS_STATUS = ("подтвержд", "успеш", "оформлен", "забронирован", "доступ", "в наличии", "свобод", "оплачен",
               "активн", "открыт", "доставлен", "выполнен", "одобрен",
               "confirm", "success", "avail", "booked", "paid", "active", "open", "in stock", "delivered",
               "complete", "approved", "ok")
_NEG_STATUS = ("отмен", "ошибк", "недоступ", "нет в наличии", "занят", "отклон", "не оплачен", "неактив",
               "закрыт", "просроч", "заблокир", "не доставлен", "не выполнен",
               "cancel", "fail", "unavail", "declin", "closed", "sold out", "reject", "expired", "blocked",
               "unpaid", "inactive", "out of stock", "error")
_STATUS_KEYS = ("status", "state", "available", "success", "ok", "confirmed", "in_stock", "paid", "active",
                "is_open", "open", "approved", "valid", "enabled", "exists", "booked", "sent", "completed",
                "delivered", "result", "статус", "состояние")


def _word_polarity(text: str) -> str | None:
    low = text.lower().replace("ё", "е")
    neg = any(n in low for n in _NEG_STATUS) or re.search(r"\bне\s+(?:" + "|".join(_POS_STATUS[:13]) + ")", low) \
        or re.search(r"\bnot\s+(?:" + "|".join(_POS_STATUS[13:]) + ")", low)
    pos = any(re.search(rf"(?<![\w]){re.escape(p)}", low) for p in _POS_STATUS)
    if neg:
        return "negative"
    return "positive" if pos else None


def result_polarity(result: Any) -> str | None:
    """``"empty"``, ``"error"``, ``"positive"``/``"negative"`` (by a status field) or ``"found"``; ``None`` if unsure."""
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except ValueError:
            return None
    if result in ([], {}, None, ""):
        return "empty"
    if isinstance(result, dict):
        if "error" in result and result["error"]:
            return "error"
        for key in _STATUS_KEYS:
            if key in result:
                v = result[key]
                if isinstance(v, bool):
                    return "positive" if v else "negative"
                if isinstance(v, str):
                    pol = _word_polarity(v)
                    if pol:
                        return pol
        lists = [v for v in result.values() if isinstance(v, list)]
        counts = [v for k, v in result.items() if k in ("count", "total", "found", "n", "количество")
                  and isinstance(v, (int, float)) and not isinstance(v, bool)]
        if (lists and all(not v for v in lists)) or (counts and all(c == 0 for c in counts)):
            return "empty"
        return "found"
    return "found" if isinstance(result, list) else None


def contradiction(answer: str, last_result: Any) -> str | None:
    """Why ``answer`` contradicts the last tool result (a rule), or ``None``."""
    pol = result_polarity(last_result)
    if pol is None:
        return None
    nothing = _NOTHING.search(answer)
    if nothing and pol in ("found", "positive"):
        return f"says {nothing.group(0)!r} after a non-empty result"
    failure = _FAILURE.search(answer)
    success = _SUCCESS.search(answer)
    if pol in ("error", "empty") and success and not failure and not nothing:
        return f"claims {success.group(0)!r} after an {'error' if pol == 'error' else 'empty result'}"
    said = _word_polarity(_NOTHING.sub(" ", answer))
    if pol == "positive" and said == "negative" and not success:
        return "states a negative status the result does not have"
    if pol == "negative" and said == "positive" and not failure:
        return "states a positive status the result does not have"
    return None
