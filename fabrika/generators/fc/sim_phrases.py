"""The offline sim's grammar: how its user says a request and how its assistant reads one back.

Everything here is deterministic text work over :mod:`fabrika.generators.fc.sim_catalogue`:

* :func:`say_arg` renders one argument in the phrase its parameter takes, with
  pymorphy3 doing the agreement — cities after a preposition («из Москвы», «в
  Нижнем Новгороде»), names in the genitive («на имя Анны Петровой»), nouns
  after numerals («1 билет», «2 билета», «5 билетов»), dates with the month in
  words («на 14 марта», or all in words: «на четырнадцатое марта»), Russian
  phrases for English enum literals (``evening`` → «вечером»);
* :func:`request` builds a whole request from a tool's head and the phrases
  («Найдите, пожалуйста, поезда из Москвы в Казань на 14 марта.»), or the
  infinitive form that joins requests («…, а также узнать прогноз погоды в Самаре»);
* :func:`read_arg` is the inverse the sim assistant uses: it finds, in the
  user's words, the surface forms (every case form, the spoken forms of enum
  values, dates in digits or words) of the values the sim world knows;
* :func:`result_for` and :func:`closing` make a tool's result and the answer
  that reports it, with no number the result does not hold.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache
from typing import Any

from fabrika.generators.fc.sim_catalogue import DOMAINS, FILL, PARAMS
from fabrika.textutil.morph import agree, analyzer, lemmas

MONTHS = {"ru": ["января", "февраля", "марта", "апреля", "мая", "июня", "июля", "августа", "сентября", "октября",
                 "ноября", "декабря"],
          "en": ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
                 "November", "December"]}
_ORDINALS = ("первое второе третье четвёртое пятое шестое седьмое восьмое девятое десятое одиннадцатое двенадцатое "
             "тринадцатое четырнадцатое пятнадцатое шестнадцатое семнадцатое восемнадцатое девятнадцатое двадцатое").split()
_ORDINALS += [f"двадцать {o}" for o in _ORDINALS[:9]] + ["тридцатое", "тридцать первое"]
TOOLS = {t["name"]: t for d in DOMAINS.values() for t in d["tools"]}


# ---------------------------------------------------------------------------
# morphology

def _restore(form: str, like: str) -> str:
    if "ё" in form and "ё" not in like.lower():
        form = form.replace("ё", "е")
    if like[:1].isupper():
        return "-".join(p[:1].upper() + p[1:] for p in form.split("-"))
    return form


@lru_cache(maxsize=4096)
def inflect(phrase: str, case: str) -> str:
    """``phrase`` (nominative) in grammatical ``case``, word by word, agreeing in gender with its nouns.

    «Нижний Новгород» → «Нижнем Новгороде» (loct); «Анна Петрова» → «Анны Петровой» (gent);
    words pymorphy3 cannot inflect (foreign titles, «и») stay as they are.
    """
    if case == "nomn":
        return phrase
    words = phrase.split()
    gender: str | None = None
    for w in words:  # a person's first name fixes the gender of the surname after it
        named = [p for p in analyzer().parse(w) if {"Name", "nomn"} <= p.tag.grammemes]
        if named:
            gender = named[0].tag.gender
            break
    out = []
    for w in words:
        if not re.fullmatch(r"[А-Яа-яЁё-]+", w) or w.lower() in ("и", "или"):
            out.append(w)
            continue
        ps = [p for p in analyzer().parse(w) if "nomn" in p.tag.grammemes and "plur" not in p.tag.grammemes]
        if gender:
            ps = [p for p in ps if p.tag.gender in (gender, None) or "Ms-f" in p.tag.grammemes] or ps
        ps = ps or list(analyzer().parse(w))
        want = {case}
        if case == "accs" and ps and ps[0].tag.POS in ("ADJF", "PRTF") and ps[0].tag.gender == "masc" \
                and not any("anim" in p.tag.grammemes for x in words for p in analyzer().parse(x)[:1]
                            if p.tag.POS == "NOUN"):
            want = {"accs", "inan", "masc"}  # «в Нижний Новгород», not «в Нижнего Новгород»
        form = ps[0].inflect(want) if ps else None
        out.append(_restore(form.word, w) if form is not None else w)
    return " ".join(out)


def case_forms(phrase: str) -> list[str]:
    """Every case form of ``phrase`` (nominative first), for reading a value said in any case."""
    return list(dict.fromkeys([phrase] + [inflect(phrase, c) for c in ("gent", "datv", "accs", "ablt", "loct")]))


def count_phrase(n: int, noun: str | tuple[str, str], case: str, lang: str) -> str:
    """«1 билет», «2 билета», «5 билетов»; «на 1 персону» in the accusative; «1 ticket», «2 tickets»."""
    if lang != "ru":
        one, many = noun if isinstance(noun, tuple) else (noun, noun + "s")
        return f"{n} {one if n == 1 else many}"
    assert isinstance(noun, str)
    if case == "accs" and n % 10 == 1 and n % 100 != 11:
        return f"{n} {inflect(noun, 'accs')}"
    return f"{n} {agree(noun, n)}"


def say_date(iso: str, lang: str, in_words: bool = False) -> str:
    """``2025-03-14`` → «14 марта» / «четырнадцатое марта» / «March 14»."""
    _, month, day = (int(x) for x in iso.split("-"))
    if lang != "ru":
        return f"{MONTHS['en'][month - 1]} {day}"
    return f"{_ORDINALS[day - 1] if in_words else day} {MONTHS['ru'][month - 1]}"


# ---------------------------------------------------------------------------
# saying one argument

def _template(pname: str, tool: dict[str, Any] | None, lang: str) -> tuple[str, str]:
    """(template, case) of a parameter, the tool's override first."""
    p = PARAMS[pname]
    over = (tool or {}).get("say", {}).get(pname)
    if over:
        return over[0 if lang == "ru" else 1], (over[2] if len(over) > 2 else p.get("case", "nomn"))
    return p[f"say_{lang}"], p.get("case", "nomn")


def _value_text(pname: str, value: Any, lang: str, case: str, in_words: bool = False) -> str:
    p = PARAMS[pname]
    kind = p["kind"]
    if kind == "date":
        return say_date(str(value), lang, in_words)
    if kind in ("place", "person") or (kind == "enum" and lang == "ru" and not p.get("spoken_ru")
                                       and re.search(r"[а-я]", str(value))):
        return inflect(str(value), case) if lang == "ru" else str(value)
    if kind == "enum":
        spoken = p.get(f"spoken_{lang}", {}).get(value)
        return spoken[0] if spoken else str(value)
    if kind == "address":
        return ", ".join(str(value[k]) if k != "house" or lang != "ru" else f"дом {value[k]}"
                         for k in ("city", "street", "house") if k in value) if lang == "ru" else \
            f"{value.get('house', '')} {value.get('street', '')}, {value.get('city', '')}".strip()
    if kind == "items":
        return _say_items(value, lang)
    return str(value)


def _say_items(items: list[dict[str, Any]], lang: str) -> str:
    units = PARAMS["items"][f"units_{lang}"]
    parts = []
    for it in items:
        title, qty = str(it.get("title")), int(it.get("qty", 1))
        unit = units.get(title)
        if lang == "ru":
            parts.append(f"{count_phrase(qty, unit, 'nomn', 'ru')} {_genitive(title)}" if unit else f"{title} — {qty}")
        else:
            parts.append(f"{count_phrase(qty, unit, 'nomn', 'en')} of {title}" if unit else f"{qty} {title}")
    joiner = " и " if lang == "ru" else " and "
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + joiner + parts[-1]


def _genitive(word: str) -> str:
    """«хлеб» → «хлеба», «яблоки» → «яблок» (plural nouns stay plural)."""
    ps = [p for p in analyzer().parse(word) if "nomn" in p.tag.grammemes]
    if not ps:
        return word
    form = ps[0].inflect({"gent", ps[0].tag.number or "sing"})
    return form.word if form is not None else word


def say_arg(pname: str, value: Any, lang: str, tool: dict[str, Any] | None = None, in_words: bool = False) -> str:
    """How the sim user says one argument in a request («из Москвы», «на 14 марта», «2 билета»)."""
    template, case = _template(pname, tool, lang)
    p = PARAMS[pname]
    if p["kind"] == "count":
        return template.format(n=value, noun=count_phrase(int(value), p[f"noun_{lang}"], case, lang).split(" ", 1)[1])
    return template.format(v=_value_text(pname, value, lang, case, in_words))


def say_answer(pname: str, value: Any, lang: str) -> str:
    """A short answer to the assistant's question about ``pname`` («На 14 марта.», «В Казани.»)."""
    own = PARAMS[pname].get(f"answer_{lang}")
    if own:
        text = str(own).format(v=_value_text(pname, value, lang, "nomn"))
        return text[:1].upper() + text[1:]
    text = say_arg(pname, value, lang)
    if lang == "ru" and not re.search(r"[А-Яа-яЁё]", text):  # a bare code is no Russian sentence: name it
        text = f"{re.sub(r' [(].*[)]', '', PARAMS[pname]['ru'])} — {text}"
    return text[:1].upper() + text[1:] + "."


# ---------------------------------------------------------------------------
# whole requests

_POLITE = {"ru": ", пожалуйста,", "en": ""}


#: What a person says instead of repeating a value named earlier in the same turn («…, а также посмотреть баланс
#: той же карты»), by the phrase the value would take. The sim assistant resolves it to the earlier value.
ANAPHORA = {
    ("ru", "с карты, которая заканчивается на {v},"): "с той же карты",
    ("ru", "карты, которая заканчивается на {v},"): "той же карты",
    ("ru", "по карте, которая заканчивается на {v},"): "по той же карте",
    ("ru", "фильма «{v}»"): "этого же фильма", ("ru", "на фильм «{v}»"): "на этот же фильм",
    ("ru", "в {v}@loct"): "там же", ("ru", "в {v}@accs"): "туда же", ("ru", "на {v}@nomn"): "на тот же день",
    ("en", "from the card ending in {v}"): "from the same card", ("en", "of the card ending in {v}"): "of the same card",
    ("en", "on the card ending in {v}"): "on the same card", ("en", "for “{v}”"): "for the same film",
    ("en", "in {v}"): "there", ("en", "on {v}"): "on the same day",
}


def anaphora(pname: str, tool: dict[str, Any] | None, lang: str) -> str | None:
    """The phrase that refers back to ``pname``'s value said earlier in the turn, if the sim has one for its phrase."""
    template, case = _template(pname, tool, lang)
    if PARAMS[pname]["kind"] == "date" and lang == "ru":
        case = "nomn"
    return ANAPHORA.get((lang, template)) or ANAPHORA.get((lang, f"{template}@{case}"))


def request(tool: dict[str, Any], args: dict[str, Any], lang: str, *, infinitive: bool = False,
            skip: str | None = None, polite: bool = True, words: dict[str, bool] | None = None,
            again: frozenset[str] = frozenset()) -> str:
    """A request for ``tool`` with ``args`` said as phrases; ``skip`` is left unsaid (withheld); ``again``: arguments
    said earlier in the turn, referred back to («той же карты») where the sim has a phrase for it."""
    head = tool[f"{'inf' if infinitive else 'imp'}_{lang}"]
    if polite and not infinitive and lang == "ru":  # «Запишите меня, пожалуйста, на приём»: after the marked words
        first, mark, rest = head.partition("|") if "|" in head else head.partition(" ")
        rest = rest.lstrip(",").strip()
        head = f"{first}{_POLITE['ru']} {rest}".strip()
    elif polite and not infinitive:
        head = f"Please {head[:1].lower()}{head[1:]}"
    head = head.replace("|", "")
    phrases = [(k in again and anaphora(k, tool, lang)) or say_arg(k, args[k], lang, tool, (words or {}).get(k, False))
               for k in tool["params"] if k in args and k != skip]
    return tidy(" ".join([head, *phrases]))


#: How a single request opens: the polite imperative most of the time, else a want, a need or a question.
FRAMES = {"ru": [("imp", "{}", 0.55), ("inf", "Мне нужно {}", 0.15), ("inf", "Хочу {}", 0.15), ("inf", "Можно {}?", 0.15)],
          "en": [("imp", "{}", 0.55), ("inf", "I need to {}", 0.15), ("inf", "I'd like to {}", 0.15),
                 ("imp", "Could you {}?", 0.15)]}


def framed(tool: dict[str, Any], args: dict[str, Any], lang: str, rng: random.Random, *, skip: str | None = None,
           words: dict[str, bool] | None = None) -> str:
    """One request as a sentence, in a frame drawn from :data:`FRAMES` («Можно записаться на приём к окулисту…?»)."""
    roll, acc = rng.random(), 0.0
    form, frame = FRAMES[lang][0][:2]
    for f, template, weight in FRAMES[lang]:
        acc += weight
        if roll < acc:
            form, frame = f, template
            break
    if frame == "{}":
        return sentence(request(tool, args, lang, skip=skip, words=words))
    body = request(tool, args, lang, infinitive=form == "inf", polite=False, skip=skip, words=words)
    if form == "imp":
        body = body[:1].lower() + body[1:]
    return sentence(frame.format(body))


def tidy(text: str) -> str:
    """Spaces and commas of a joined sentence: «врача -терапевта» → «врача-терапевта», no doubled or dangling comma."""
    text = re.sub(r"\s+", " ", text).replace(" -", "-").replace(" ,", ",")
    text = re.sub(r",(\s*,)+", ",", text)
    return re.sub(r",\s*([.?!]|$)", r"\1", text.strip()).strip()


def sentence(text: str) -> str:
    text = tidy(text.replace(" ?", "?"))
    return text[:1].upper() + text[1:] + ("" if text.endswith(("?", "!", ".")) else ".")


# ---------------------------------------------------------------------------
# reading a request back (the sim assistant)

def _forms(pname: str, value: Any, lang: str, tool: dict[str, Any] | None) -> list[str]:
    """Lower-cased surface forms ``value`` may take in the user's words, longest first."""
    p = PARAMS[pname]
    kind = p["kind"]
    forms = [say_arg(pname, value, lang, tool)]
    if kind == "date":
        forms += [say_date(str(value), lang, True), say_date(str(value), lang), str(value)]
        if lang != "ru":
            _, m, d = str(value).split("-")
            forms.append(f"{int(d)} {MONTHS['en'][int(m) - 1]}")
    elif kind == "place":  # a city is said with its preposition: «из Казани» is the departure, «в Казань» the arrival
        template, _ = _template(pname, tool, lang)
        prep = template.split("{v}")[0]
        forms += [prep + f for f in (case_forms(str(value)) if lang == "ru" else [str(value)])]
    elif kind in ("person", "title") or (kind == "enum" and re.search(r"[а-я]", str(value))):
        forms += case_forms(str(value)) if lang == "ru" else [str(value)]
    elif kind == "enum":
        forms += [*p.get(f"spoken_{lang}", {}).get(value, []), str(value)]
    elif kind in ("address", "items"):
        forms.append(_value_text(pname, value, lang, "nomn"))
    else:
        forms.append(str(value))
    return sorted({f.lower() for f in forms if f}, key=len, reverse=True)


def _pool(pname: str, schema: dict[str, Any], lang: str) -> list[Any]:
    p = PARAMS[pname]
    if schema.get("enum"):
        return list(schema["enum"])
    values = p.get("values", {})
    return list(values.get(lang, [])) + [v for other in values for v in values[other] if other != lang]


def read_arg(pname: str, schema: dict[str, Any], text: str, lang: str, tool: dict[str, Any] | None = None,
             taken: tuple[str, ...] = ()) -> tuple[bool, Any]:
    """(found, value) of one argument in ``text`` (the user's words for this tool).

    A count is a number followed by its noun in any form; every other value is
    one the sim world knows, found by its surface forms, the tool's own phrase
    first (so «из Казани» goes to the departure city and «в Самару» to the
    destination). ``taken``: spans already read for another argument.
    """
    p = PARAMS[pname]
    low = text.lower()
    if p["kind"] == "count":
        noun = p[f"noun_{lang}"]
        want = lemmas(noun) if lang == "ru" and isinstance(noun, str) else set(noun if isinstance(noun, tuple) else [noun])
        for m in re.finditer(r"(?<![\w:.-])(\d+)(?=\s+([\w-]+)(?:\s+([\w-]+))?)", low):
            for word in (m.group(2), m.group(3)):  # «2 билета», «2 train tickets»
                if word and ((lemmas(word) & want) if lang == "ru" else word in want):
                    return True, int(m.group(1))
        return False, None
    best: tuple[int, int, Any] | None = None  # (phrase rank, -len, value)
    for value in _pool(pname, schema, lang):
        forms = _forms(pname, value, lang, tool)
        exact = say_arg(pname, value, lang, tool).lower()
        for f in forms:
            for m in re.finditer(rf"(?<!\w){re.escape(f)}(?![\w-])", low):
                if any(m.start() < e and s < m.end() for s, e in _spans(taken)):
                    continue
                rank = 0 if f == exact or f.startswith(exact) else 1
                key = (rank, -len(f), value)
                if best is None or key[:2] < best[:2]:
                    best = key
    if best is None:
        return False, None
    value = best[2]
    if p["kind"] == "code" and isinstance(value, str):  # as said, slips included (a model copies what it reads)
        said = re.search(re.escape(value), text, re.IGNORECASE)
        return True, said.group(0) if said else value
    return True, value


def _spans(taken: tuple[str, ...]) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in (t.split(":") for t in taken)]


def arg_span(pname: str, value: Any, text: str, lang: str, tool: dict[str, Any] | None) -> str | None:
    """``"start:end"`` of the phrase that said ``value`` (so a second argument of the same kind skips it)."""
    low = text.lower()
    for f in _forms(pname, value, lang, tool):
        m = re.search(rf"(?<!\w){re.escape(f)}(?![\w-])", low)
        if m:
            return f"{m.start()}:{m.end()}"
    return None


def head_positions(tool: dict[str, Any], text: str, lang: str) -> list[int]:
    """Where the user's words name ``tool`` (its imperative or infinitive head, any case of the first letter)."""
    low = text.lower()
    out = []
    for key in ("imp", "inf"):
        head = tool[f"{key}_{lang}"].lower()
        first, _, rest = head.partition("|") if "|" in head else head.partition(" ")
        rest = rest.lstrip(",").strip()
        pattern = re.escape(first) + (r",?(?:\s*пожалуйста,?)?\s+" + re.escape(rest) if rest else "")
        if lang != "ru":
            pattern = r"(?:please\s+)?" + pattern
        out += [m.start() for m in re.finditer(rf"(?<![\w-]){pattern}(?!\w)", low)]
    return sorted(set(out))


# ---------------------------------------------------------------------------
# results and closing answers

def result_for(tool: dict[str, Any], args: dict[str, Any], rng: random.Random, lang: str) -> dict[str, Any]:
    """The tool's result for ``args``: its template with ids, prices and times drawn from ``rng``."""
    en = "_en" if lang != "ru" else ""
    fill = {"id": str(rng.randint(1000, 9999)), "price": rng.choice([890, 1450, 2300, 3450, 5120]),
            "time": rng.choice(["08:40", "11:15", "14:30", "18:05"]), "room": str(rng.randint(2, 31)),
            "digit": str(rng.randint(2, 9)), "cold": rng.randint(-8, 4), "warm": rng.randint(5, 19),
            "wind": rng.randint(1, 9), "due": rng.choice(DUE[lang]),
            **{k: rng.choice(FILL.get(k + en) or FILL[k]) for k in ("train", "flight", "pnr", "doctor", "place", "shop",
                                                                     "shelf", "trainer")}}
    fill["currency"] = "RUB" if lang == "ru" else "GBP"
    fill.update({k: v for k, v in args.items() if isinstance(v, (str, int, float))})
    if "delivery_slot" in args:  # the courier comes when asked
        fill["time"] = SLOT_TIMES.get(str(args["delivery_slot"]), fill["time"])

    def render(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: render(v) for k, v in node.items()}
        if isinstance(node, list):
            return [render(v) for v in node]
        if isinstance(node, str):
            whole = re.fullmatch(r"\{(\w+)\}", node)
            if whole and not isinstance(fill.get(whole.group(1)), str):
                return fill[whole.group(1)]
            return node.format(**{k: v for k, v in fill.items()}) if "{" in node else node
        return node

    out = render(tool["result"])
    return out if isinstance(out, dict) else {"result": out}


DUE = {"ru": ["2025-04-11", "2025-06-30"], "en": ["2025-04-11", "2025-06-30"]}
SLOT_TIMES = {"morning": "10:30", "afternoon": "15:00", "evening": "20:30"}
SIGNS = {"RUB": "₽", "USD": "$", "EUR": "€", "GBP": "£"}


def closing(tool: dict[str, Any], result: Any, lang: str) -> str | None:
    """The sentence reporting ``result`` (``None`` when it does not fit the template, e.g. an error)."""
    if not isinstance(result, dict) or "error" in result:
        return None
    template = re.sub(r"\{(\w+)@(\w+)\}", lambda m: inflect(str(result.get(m.group(1), "")), m.group(2))
                      if lang == "ru" else str(result.get(m.group(1), "")), tool[f"done_{lang}"])
    try:
        text = template.format(**result, sign=SIGNS.get(str(result.get("currency")), "₽" if lang == "ru" else ""))
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return re.sub(r"(\d{4})-(\d{2})-(\d{2})", lambda m: say_date(m.group(0), lang), text)
