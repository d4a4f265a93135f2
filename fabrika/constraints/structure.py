"""A free phrasing as structured library constraints (kind + parameters), or ``None`` when it cannot be mapped.

The multi-constraint compatibility decision (:mod:`fabrika.constraints.compose`) works on structured
constraints only — a library id with its parameters, checked by the library's trusted verifier and
conflict rules — so a phrasing must be *mapped* before it can take part. The mapping is deliberately
conservative, because a wrong map turns into a wrong acceptance:

* it knows a few families of phrasings: word-count bounds written with digits (at least, at most,
  a range, exactly; «не менее 30 слов», «уложитесь в 60 слов», «от 20 до 40 слов»), a required
  opening and a required ending in quotes («начните со слов «…»», «последняя фраза ответа — «…»»,
  «завершите словом «…»»), in Russian and English;
* **every word** of the text outside the recognised spans must be neutral (:data:`NEUTRAL`: «ответ»,
  «должен», «пишите» …). Anything else — a negation («не должен быть длиннее» is not «длиннее»), a
  number word («двадцати»), an unrecognised bound («Минимальный объём — 40 слов»), a content
  requirement («приведите три аргумента») or a quote no pattern consumed — makes the whole text
  unmapped, and the caller refuses the set as «cannot verify compatibility» instead of guessing;
* the map is never weaker than the text: «примерно 100–150 слов» maps to the range itself (stricter),
  so an answer that passes the mapped constraint passes the text.

Nothing here is a parser of meaning: it recognises a closed set of forms and says "unknown" for the rest.

:func:`mentions` is the other half of "unknown": which facets (opening, ending, word count) an unmapped text
*speaks of*, by vocabulary alone. It yields no values, so it can only refuse (``cannot_verify`` next to a member
that fixes the same facet), never shape a witness or accept.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["NEUTRAL", "Structured", "mentions", "structure"]

Structured = tuple[tuple[str, dict[str, Any]], ...]

_QUOTE = re.compile(r"«([^«»]+)»|\"([^\"]+)\"|“([^“”]+)”|„([^„“”]+)[“”]")
_N = r"(\d+)"
_W = r"(?:слов[а-я]*|words?)"
_SEP = r"\s*(?:—|–|-|:)?\s*"
_OBJ = r"(?:\s+(?:ответ|ответа|текст|текста|свой\s+ответ|ваш\s+ответ|your\s+answer|the\s+answer|your\s+response))?"
_PH = r"(?:\s+(?:с|со|with))?(?:\s+(?:фразы|фразой|фраза|слов|словами|слова|предложения|предложением|строки|"
_PH += r"строкой|the\s+phrase|the\s+words))?"
_AT = r"\s*(?::|—|–|-)?\s*"

#: (pattern over the text with quotes replaced by ``Q<i>``, kind of the result)
_PATTERNS: list[tuple[str, str]] = [
    # word-count ranges and exact counts
    (rf"(?:от|from|between)\s+{_N}\s+(?:до|and|to)\s+{_N}\s+{_W}", "range"),
    (rf"(?:не\s+менее|не\s+меньше|минимум|at\s+least)\s+{_N}\s+(?:и|and)\s+(?:не\s+более|не\s+больше|максимум|"
     rf"at\s+most|no\s+more\s+than)\s+{_N}\s+{_W}", "range"),
    (rf"{_N}\s*[-–—]\s*{_N}\s+{_W}", "range"),
    (rf"(?:ровно|exactly)\s+{_N}\s+{_W}", "exact"),
    # lower bounds
    (rf"(?:не\s+менее(?:\s+чем)?(?:\s+в)?|не\s+меньше(?:\s+чем)?|минимум|как\s+минимум|хотя\s+бы|по\s+меньшей\s+мере|"
     rf"не\s+короче|at\s+least|no\s+fewer\s+than|no\s+less\s+than|a\s+minimum\s+of)\s+{_N}\s+{_W}", "lo"),
    (rf"{_N}\s+(?:или|и)\s+(?:более|больше)\s+{_W}", "lo"),
    (rf"{_N}\s+{_W}\s+(?:или|и)\s+(?:более|больше)", "lo"),
    (rf"{_N}\s+(?:or\s+more)\s+{_W}", "lo"),
    (rf"(?:объ[её]мом|длиной)\s+от\s+{_N}\s+{_W}", "lo"),
    (rf"минимальн[а-я]*\s+(?:объ[её]м|длина|размер){_SEP}{_N}\s+{_W}", "lo"),
    (rf"максимальн[а-я]*\s+(?:объ[её]м|длина|размер){_SEP}{_N}\s+{_W}", "hi"),
    # upper bounds
    (rf"(?:не\s+более(?:\s+чем)?(?:\s+в)?|не\s+больше(?:\s+чем)?|максимум|не\s+длиннее|в\s+пределах|не\s+превыша[а-я]*|"
     rf"(?:не\s+должен|не\s+должна|не\s+должно)\s+превышать|уложи[а-я]*\s+в|at\s+most|no\s+more\s+than|"
     rf"a\s+maximum\s+of|up\s+to|within|to\s+at\s+most)\s+{_N}\s+{_W}", "hi"),
    (rf"(?:не\s+пишите|не\s+пиши|не\s+используйте|не\s+используй)\s+(?:больше|более)\s+{_N}\s+{_W}", "hi"),
    (rf"не\s+(?:должен|должна|должно)\s+быть\s+(?:длиннее|больше)\s+{_N}\s+{_W}", "hi"),
    (rf"(?:строго\s+)?до\s+{_N}\s+{_W}", "hi"),
    (rf"{_N}\s+{_W}\s*,?\s*(?:не\s+больше|не\s+более|максимум)", "hi"),
    # strict bounds («менее 10 слов»: at most 9), after every «не менее»/«не более» form has taken its span
    (rf"(?<!не )(?:менее|меньше|короче|fewer\s+than|less\s+than|under)\s+{_N}\s+{_W}", "lt"),
    (rf"(?<!не )(?:более|больше|длиннее|more\s+than|over)\s+{_N}\s+{_W}", "gt"),
    # openings
    (rf"(?:начните|начни|начинайте|начинай|начина[а-я]*|начат[ьсяь]*|откройте|открой|begin|start|open)"
     rf"{_OBJ}{_PH}{_AT}q(\d+)", "start"),
    (rf"сначала\s+(?:напишите|напиши|поставьте|поставь){_AT}q(\d+)", "start"),
    (rf"(?:перв[а-я]+\s+(?:слова|словами|фраза|фразой|фразы|предложение|предложением|строка|строкой)"
     rf"(?:\s+(?:ответа|текста|вашего\s+ответа))?(?:\s+(?:должн[а-я]*\s+быть|будут|будет))?(?:\s+(?:такими|таким|"
     rf"такой|такая))?){_AT}q(\d+)", "start"),
    # endings
    (rf"(?:законч[а-я]*|заверш[а-я]*|заканчива[а-я]*|оконч[а-я]*|end|finish|close|conclude)"
     rf"{_OBJ}(?:\s+(?:с|with))?\s+(?:словом|one\s+word|the\s+word){_AT}q(\d+)", "last_word"),
    (rf"(?:последн[а-я]+\s+(?:словом|слово))(?:\s+(?:ответа|текста))?(?:\s+(?:должно\s+быть|будет))?"
     rf"(?:\s+слово)?{_AT}q(\d+)", "last_word"),
    (rf"(?:законч[а-я]*|заверш[а-я]*|заканчива[а-я]*|оконч[а-я]*|end|finish|close|conclude)"
     rf"{_OBJ}(?:\s+(?:с|with))?\s+(?:вопросом|a\s+question){_AT}q(\d+)", "end_question"),
    (rf"(?:законч[а-я]*|заверш[а-я]*|заканчива[а-я]*|оконч[а-я]*|end|finish|close|conclude)"
     rf"{_OBJ}{_PH}{_AT}q(\d+)", "end"),
    (rf"(?:последн[а-я]+\s+(?:слова|словами|фраза|фразой|фразы|предложение|предложением|строка|строкой)"
     rf"(?:\s+(?:ответа|текста|вашего\s+ответа))?(?:\s+(?:должн[а-я]*\s+быть|будут|будет))?(?:\s+(?:такими|таким|"
     rf"такой|такая|в\s+точности\s+такими))?){_AT}q(\d+)", "end"),
    (rf"в\s+(?:самом\s+)?конце(?:\s+(?:ответа|текста))?\s+(?:напишите|напиши|поставьте|поставь|добавьте|добавь)"
     rf"(?:\s+(?:фразу|слова|подпись))?{_AT}q(\d+)", "end"),
]

#: Words that add no requirement of their own (the subject, modal and imperative frame of an instruction).
NEUTRAL = frozenset("""
ответ ответа ответе ответу ответом ответы текст текста тексте тексту текстом весь всего ваш ваше вашего твой
свой своего должен должна должно должны быть будет будут пусть напишите напиши пишите пиши сделайте сделай
используйте используй дайте дай сформулируйте сформулируй ответьте ответь составьте составь содержать содержит
содержал занимать займет займёт занимает состоять объем объём длина длиной длину размер размером в с со и на
по строго примерно около приблизительно ровно точно пожалуйста обязательно нужно надо следует необходимо
требуется именно уложитесь постарайтесь постарайся
your the answer response reply in use write with a an please keep text of
""".split())


def _quotes(text: str) -> tuple[str, list[str]]:
    """``text`` with each quoted span replaced by `` Q<i> `` and the spans (quote marks removed)."""
    spans: list[str] = []

    def repl(m: re.Match[str]) -> str:
        spans.append(next(g for g in m.groups() if g is not None))
        return f" Q{len(spans) - 1} "

    return _QUOTE.sub(repl, text), spans


def _norm(text: str) -> str:
    return text.replace("ё", "е").replace("Ё", "Е").lower()


def structure(text: str) -> Structured | None:
    """The structured constraints ``text`` states, or ``None`` when any part of it cannot be mapped.

    Several forms in one text combine («начните со слов «Итак,» и уложитесь в 40 слов» → an opening
    and a bound); two word-count forms intersect into one bound.
    """
    masked, quotes = _quotes(text)
    low = _norm(masked)
    lo, hi, bounded = 0, None, False
    starts: list[str] = []
    ends: list[str] = []
    last_words: list[str] = []
    taken = [False] * len(low)
    for pattern, kind in _PATTERNS:
        for m in re.finditer(pattern, low):
            if any(taken[m.start():m.end()]):
                continue
            for i in range(m.start(), m.end()):
                taken[i] = True
            nums = [int(g) for g in m.groups()]
            if kind in ("range", "exact", "lo", "hi", "lt", "gt"):
                bounded = True
                a, b = {"range": (min(nums), max(nums)), "exact": (nums[0], nums[0]), "lo": (nums[0], None),
                        "hi": (0, nums[0]), "lt": (0, max(nums[0] - 1, 0)), "gt": (nums[0] + 1, None)}[kind]
                lo, hi = max(lo, a), b if hi is None else (hi if b is None else min(hi, b))
            else:
                q = quotes[nums[-1]].strip()
                if kind == "end_question":  # «закончите вопросом «…»»: the phrase itself must be the question
                    if not q.endswith("?"):
                        return None
                    kind = "end"
                {"start": starts, "end": ends, "last_word": last_words}[kind].append(q)
    rest = "".join(" " if t else ch for ch, t in zip(low, taken, strict=True))
    leftover = [w for w in re.findall(r"[\wа-я]+", rest) if w not in NEUTRAL]
    if leftover:
        return None
    out: list[tuple[str, dict[str, Any]]] = []
    if bounded:
        if hi is not None and lo > hi:  # the text contradicts itself: both bounds, so the conflict is named
            out += [("ru.length.words_min", {"n": lo}), ("ru.length.words_max", {"n": hi})]
        elif hi is None:
            out.append(("ru.length.words_min", {"n": lo}))
        elif lo == 0:
            out.append(("ru.length.words_max", {"n": hi}))
        else:
            out.append(("ru.length.words_range", {"lo": lo, "hi": hi}))
    out += [("ru.startend.start_phrase", {"phrase": s}) for s in starts]
    out += [("ru.startend.end_phrase", {"phrase": e}) for e in ends]
    for w in last_words:
        if len(w.split()) == 1:
            out.append(("ru.startend.last_word", {"word": w.strip(".,!?;:")}))
        else:
            out.append(("ru.startend.end_phrase", {"phrase": w}))
    return tuple(out) or None


#: Vocabulary of each facet (over the lowercased text with quotes masked as ``q<i>``): an unmapped text using it
#: may state that facet in a form :func:`structure` does not know. Broad on purpose — it only refuses.
_MENTIONS: dict[str, str] = {
    "start": r"\bнач(?:ин|н|ал|ат|ни)[а-я]*|\bперв(?:ое|ая|ые|ой|ым|ыми|ую|ого)\s+(?:слов|фраз|предлож|строк|абзац)"
             r"|\bоткр(?:ой|ыв)[а-я]*|\bсначала\b|\bвступлен|\bbegin|\bstart|\bopen|\bfirst\s+(?:word|sentence|line)",
    "end": r"\bзаверш|\bзаканч|\bзакончи|\bоконч|\bв\s+(?:самом\s+)?конце\b|\bпоследн|\bконец\b|\bконцовк"
           r"|\bend\b|\bending|\bfinish|\bconclu|\bclose|\blast\s+(?:word|sentence|line)|\bp\.?\s*s\b|постскриптум",
    "words": r"\bслов[а-я]*\b(?!\s*q\d)|\bwords?\b(?!\s*q\d)|\bдлин|\bобъ[её]м|\bкратк|\bкоротк|\bлаконич"
             r"|\bразв[её]рнут|\bподробн|\blength|\blong\b|\bshort|\bbrief|\bconcise|\bdetailed",
}


def mentions(text: str) -> frozenset[str]:
    """The facets (``start``, ``end``, ``words``) whose vocabulary ``text`` uses; a quoted word is not vocabulary.

    «Слово «модель» должно встретиться дважды» speaks of no word count; «Ответ не длиннее двадцати слов» does.
    """
    low = _norm(_quotes(text)[0])
    return frozenset(k for k, pattern in _MENTIONS.items() if re.search(pattern, low))
