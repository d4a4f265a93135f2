"""Automatic conflict-table check: every pair of library constraints that the table lets
combine must be satisfiable together, shown by a witness text that passes both verifiers.

Witnesses are searched among the hand-written positive cases of either constraint and
their simple compositions (one after the other, in either order, on one line, on the
next line or in the next paragraph), plus :data:`WITNESSES` written for pairs the search
cannot compose. A pair with no witness is either a missing conflict (add it to
``fabrika/constraints/table.py``) or a missing witness (add one here) — see
``tests/constraints/test_conflict_pairs.py``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from functools import cache

from fabrika.constraints import REGISTRY, params_conflict
from fabrika.constraints.pools import COPY_PHRASES, END_PHRASES, POSTSCRIPT_MARKERS, REQUESTS, START_PHRASES

from . import cases_format, cases_keywords, cases_length, cases_russian, cases_textual

Entry = tuple[str, dict, list[str]]
_JOINS = (" ", "\n", "\n\n")

# Every sampler value of the phrase-like constraints, so that «Давайте разберёмся.» meets
# «no first person» even though the hand-written cases use «Итак,».
POOL_ENTRIES: list[Entry] = (
    [("ru.startend.start_phrase", {"phrase": ph}, [ph]) for ph in START_PHRASES]
    + [("ru.startend.end_phrase", {"phrase": ph}, [ph]) for ph in END_PHRASES]
    + [("ru.repeat.request_first", {"request": r}, [f"{r} Ответ ниже."]) for r in REQUESTS]
    + [("ru.repeat.phrase_n", {"phrase": ph, "n": 2}, [f"{ph}. {ph}."]) for ph in COPY_PHRASES]
    + [("ru.format.postscript", {"marker": m}, [f"Ответ готов.\n{m} Спасибо."]) for m in POSTSCRIPT_MARKERS]
)


def entries() -> list[Entry]:
    """Case entries (constraint, params, positives) from every case file, plus :data:`POOL_ENTRIES`."""
    out: list[Entry] = []
    for mod in (cases_length, cases_keywords, cases_format, cases_textual, cases_russian):
        out.extend((cid, params, list(pos)) for cid, params, pos, _neg in mod.CASES)
    return out + POOL_ENTRIES


_FILLER = "Всё просто."


def _compositions(pos_a: list[str], pos_b: list[str]) -> Iterator[str]:
    yield from pos_a
    yield from pos_b
    for x in pos_a:
        for y in pos_b:
            for j in _JOINS:
                yield x.rstrip() + j + y.lstrip()
                yield y.rstrip() + j + x.lstrip()
    for x in (*pos_a, *pos_b):  # one more neutral sentence, before or after
        yield f"{x.rstrip()} {_FILLER}"
        yield f"{_FILLER} {x.lstrip()}"


# Whole-text forms that one constraint of a pair may demand of the other's text.
_FORMS = (
    str.lower,
    str.upper,
    lambda t: "«" + t.strip() + "»",
    lambda t: json.dumps({"ответ": t}, ensure_ascii=False),
    lambda t: "\n".join(t.split()),  # one word per line
)


def candidates(pos_a: list[str], pos_b: list[str]) -> Iterator[str]:
    """Positives of either side, their compositions, then those in whole-text forms
    (lower case, upper case, in «ёлочках», as a JSON string, one word per line)."""
    yield from _compositions(pos_a, pos_b)
    for form in _FORMS:
        for t in _compositions(pos_a, pos_b):
            yield form(t)


def combinable(a: Entry, b: Entry) -> bool:
    """The table lets ``a`` and ``b`` (with their params) appear in one prompt."""
    (ca, pa, _), (cb, pb, _) = a, b
    return ca != cb and cb not in REGISTRY[ca].conflicts and not params_conflict(ca, pa, cb, pb)


@cache
def _verdict(cid: str, params_key: str, text: str) -> bool:
    return REGISTRY[cid].verify(text, json.loads(params_key))


def _passes(cid: str, params: dict, text: str) -> bool:
    return _verdict(cid, json.dumps(params, sort_keys=True, ensure_ascii=False), text)


def witness(a: Entry, b: Entry, extra: Sequence[str] = ()) -> str | None:
    """A text that passes both verifiers, or None."""
    (ca, pa, pos_a), (cb, pb, pos_b) = a, b
    first, second = ((ca, pa), (cb, pb)) if REGISTRY[ca].family != "language" else ((cb, pb), (ca, pa))
    for text in itertools.chain(extra, candidates(pos_a, pos_b)):
        if _passes(*first, text) and _passes(*second, text):  # lingua (language family) last: slowest
            return text
    return None


def unsatisfied(
    witnesses: dict[frozenset[str], list[str]] | None = None, ids: set[str] | None = None
) -> list[tuple[Entry, Entry]]:
    """Every combinable pair of entries (both among ``ids`` when given) without a witness."""
    witnesses = WITNESSES if witnesses is None else witnesses
    es = [e for e in entries() if ids is None or e[0] in ids]
    out = []
    for i, a in enumerate(es):
        for b in es[i + 1 :]:
            if combinable(a, b) and witness(a, b, witnesses.get(frozenset((a[0], b[0])), [])) is None:
                out.append((a, b))
    return out


def _pair(a: str, b: str) -> frozenset[str]:
    return frozenset((f"ru.{a}", f"ru.{b}"))


_HAIKU = "Старый пруд молчит.\nЛягушка прыгнула в пруд.\n"
_LONG_DOM = (
    "Дождь идёт с самого утра, и по стеклу бегут длинные холодные капли, похожие на слёзы. "
    "Окна нашей старой квартиры давно пора помыть, но в такую погоду об этом не хочется и думать. "
    "Мы сидим дома, пьём горячий чай с малиной и слушаем, как шумит вода на улице."
)
# Hand-written texts for pairs the composition search cannot build (each passes both verifiers).
WITNESSES: dict[frozenset[str], list[str]] = {
    _pair("format.bullets_exact", "russian.acrostic_sentences"): ["- Дождь идёт.\n- Окна мокрые.\n- Мы дома."],
    _pair("format.headers", "russian.acrostic_sentences"): ["# Дождь\nОкна мокрые.\n# Мы дома"],
    _pair("format.highlights", "russian.acrostic_sentences"): ["*Дождь* идёт. *Окна* мокрые. Мы дома."],
    _pair("format.highlights", "russian.haiku"): ["*Старый* пруд молчит.\n*Лягушка* прыгнула в пруд.\nЗвонкий всплеск воды."],
    _pair("format.markdown_table", "russian.acrostic_sentences"): [
        "| Дождь | идёт |\n|---|---|\n| Окна | мокрые |\n| Мы | дома |"
    ],
    _pair("format.markdown_table", "russian.numbers_in_words"): [
        "| Город | Река |\n|---|---|\n| Казань | Волга |\n| Москва | Москва-река |"
    ],
    _pair("format.numbered_list", "russian.acrostic_sentences"): ["1. Дождь идёт.\n2. Окна мокрые.\n3. Мы дома."],
    _pair("format.placeholders", "russian.acrostic_sentences"): ["Дождь идёт в [город]. Окна мокрые у [адрес]. Мы дома."],
    _pair("format.placeholders", "russian.haiku"): ["[Старый] пруд молчит.\n[Лягушка] прыгнула в пруд.\nЗвонкий всплеск воды."],
    _pair("format.title", "russian.acrostic_sentences"): ["<<Дождь>>\nОкна мокрые.\nМы дома."],
    _pair("keywords.frequency", "russian.acrostic_sentences"): [
        "Дождь над морем. Обычное море. Мы дома.",
        "Друг пришёл. Он мой друг. Мы дома.",
    ],
    _pair("keywords.frequency", "russian.haiku"): [
        "Море спит в ночи.\nВолны гладят край моря.\nТихо спит луна.",
        "Друг мой у окна.\nДругу я пишу письмо.\nТихо спит луна.",
    ],
    _pair("keywords.include", "russian.acrostic_sentences"): ["Дом у реки. Он большой. Мы и кот дома."],
    _pair("keywords.include", "russian.haiku"): ["Кот сидит у рек.\nТихо спит зимний город.\nСнег на ветвях лёг."],
    _pair("language.response_lang", "length.words_min"): [
        "The sky looks blue because sunlight is scattered by the molecules of the air, and blue light, which has "
        "a shorter wavelength, is scattered much more strongly than red light. That is why we see a blue sky during "
        "the day and a red one at sunset."
    ],
    _pair("length.paragraphs_exact", "russian.acrostic_sentences"): ["Дождь идёт.\n\nОкна мокрые. Мы дома."],
    _pair("length.paragraphs_min", "russian.acrostic_sentences"): ["Дождь идёт.\n\nОкна мокрые.\n\nМы дома."],
    _pair("length.words_min", "russian.acrostic_sentences"): [_LONG_DOM],
    _pair("russian.acrostic_sentences", "russian.address_ty"): ["Давай поиграем. Открой окно. Может, ты устал?"],
    _pair("russian.acrostic_sentences", "russian.address_vy"): [
        "Добро пожаловать, рады видеть Вас. Оставьте Ваш отзыв. Мы ждём Вас снова."
    ],
    _pair("russian.acrostic_sentences", "russian.haiku"): ["Дождь стучит в окно.\nОсень тихо шепчет нам.\nМокрый лист упал."],
    _pair("russian.acrostic_sentences", "russian.syllables_line_max"): ["Дождь идёт.\nОкна мокрые.\nМы дома."],
    # the end phrase can close the last sentence instead of being one
    _pair("russian.acrostic_sentences", "startend.end_phrase"): [
        f"Дождь идёт. Окна мокрые. Мы дома, {ph[0].lower()}{ph[1:]}" for ph in END_PHRASES
    ],
    _pair("russian.acrostic_sentences", "startend.ends_with_question"): ["Дождь идёт. Окна мокрые. Может, чаю?"],
    _pair("russian.acrostic_sentences", "startend.last_word"): ["Дождь идёт. Окна мокрые. Мы дома, и есть надежда."],
    _pair("russian.address_ty", "russian.haiku"): ["Ты видишь луну?\nТихо спит зимний город.\nСнег на ветвях лёг."],
    _pair("russian.address_vy", "russian.haiku"): ["Вас ждёт тишина.\nТихо спит зимний город.\nСнег на ветвях лёг."],
    _pair("russian.address_vy", "russian.past_tense"): ["Вы заходили вчера, и мы Вас ждали."],
    _pair("russian.future_tense", "russian.haiku"): ["Завтра снег пойдёт.\nТихо город мой уснёт.\nНочь придёт к нам вновь."],
    _pair("russian.haiku", "russian.present_tense"): ["Старый пруд молчит.\nЛягушка прыгает в пруд.\nЗвонкий всплеск звучит."],
    _pair("russian.haiku", "startend.ends_with_question"): [_HAIKU + "Слышишь ли ты всплеск?"],
    _pair("russian.haiku", "startend.last_word"): [_HAIKU + "В сердце надежда."],
}
