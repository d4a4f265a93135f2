"""Format constraints: JSON, lists, sections, title, placeholders, highlights, tables (IFEval/IFBench)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from typing import Any

from fabrika.constraints.base import const, constraint
from fabrika.constraints.markdown import atx_headings, emphasis_fragments, tables
from fabrika.constraints.pools import POSTSCRIPT_MARKERS, SECTION_MARKERS
from fabrika.textutil.normalize import normalize

F = "format"

_FENCE = re.compile(r"^```(?:json|JSON)?\s*\n(.*)\n```$", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-•–+]|\*(?!\*))\s+\S")  # «–»: what «- » becomes after autocorrect
_NUMBERED = re.compile(r"^\s*(\d+)[.)]\s+\S")
_TITLE = re.compile(r"<<[^\n<>]*\S[^\n<>]*>>")
# [адрес]; not a markdown link «[текст](url)» nor a task-list box «- [x]»
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]*\S[^\[\]\n]*\](?!\()")
_TASK_BOX = re.compile(r"^(\s*[-*+]\s+)\[[ xX]\]", re.MULTILINE)
_MD_LINK = re.compile(r"\[[^\]\n]+\]\([^)\n]*\)")
_BLOCKQUOTE = re.compile(r"^\s{0,3}>\s", re.MULTILINE)
_JSON_WS = " \t\n\r"  # RFC 8259 whitespace; a no-break or zero-width space is not
_SIX_STARS = re.compile(r"\n[ \t]*\*{6}[ \t]*\n|(?<![*])\*{6}(?![*])")
_HEADER = re.compile(r"^\s{0,3}#{1,6}\s+\S", re.MULTILINE)


def _n(choices: tuple[int, ...]):  # noqa: ANN202 - sampler factory
    return lambda rng: {"n": rng.choice(choices)}


@constraint(
    "ru.format.json",
    F,
    [
        "Весь ответ оформите как корректный JSON; можно обернуть его в блок ```json.",
        "Ответьте только в формате JSON, без пояснений до или после.",
    ],
    const(),
    raw_input=True,
)
def json_format(text: str, p: Mapping[str, Any]) -> bool:
    """The whole response is JSON per RFC 8259 (optionally inside one ```json fence).

    Strict: ``NaN``/``Infinity`` (which Python's ``json`` accepts) are rejected, and only
    JSON whitespace may surround the value; a leading byte order mark is ignored (RFC 8259 §8.1).
    """
    body = text.lstrip("\ufeff").strip(_JSON_WS)
    m = _FENCE.match(body)
    if m:
        body = m.group(1).strip(_JSON_WS)
    try:
        json.loads(body, parse_constant=_not_json)
    except ValueError:
        return False
    return True


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (RFC 8259)")


@constraint(
    "ru.format.bullets_exact",
    F,
    [
        "Ответ должен содержать ровно {n:пункт} маркированного списка (строки, начинающиеся с «- » или «* »).",
        "Оформите ответ в виде маркированного списка ровно из {n:пункт:gent}. Используйте маркеры «- ».",
    ],
    _n((2, 3, 4, 5, 6)),
)
def bullets_exact(text: str, p: Mapping[str, Any]) -> bool:
    """Exactly ``n`` markdown bullet lines («- », «* » or «• »)."""
    return sum(1 for ln in text.splitlines() if _BULLET.match(ln)) == p["n"]


@constraint(
    "ru.format.numbered_list",
    F,
    ["Оформите ответ в виде нумерованного списка ровно из {n:пункт:gent} (1., 2., …)."],
    _n((2, 3, 4, 5, 7)),
)
def numbered_list(text: str, p: Mapping[str, Any]) -> bool:
    """Exactly ``n`` numbered items, numbered 1..n in order."""
    nums = [int(m.group(1)) for ln in text.splitlines() if (m := _NUMBERED.match(ln))]
    return nums == list(range(1, p["n"] + 1))


def _sections(rng: random.Random) -> dict[str, Any]:
    return {"n": rng.randint(2, 5), "marker": rng.choice(SECTION_MARKERS)}


@constraint(
    "ru.format.sections",
    F,
    [
        "Разделите ответ на {n:раздел}. Каждый раздел начинайте с новой строки вида «{marker} X», "
        "где X — номер раздела, например «{marker} 1».",
    ],
    _sections,
)
def sections(text: str, p: Mapping[str, Any]) -> bool:
    """Exactly ``n`` sections headed «<marker> 1» … «<marker> n» (in order), each with content."""
    # case-insensitive: «РАЗДЕЛ 1» is the heading when the answer must be in capitals
    head = re.compile(rf"^\s*(?:#+\s*)?\**{re.escape(p['marker'])}\s+(\d+)\b", re.MULTILINE | re.IGNORECASE)
    nums = [int(m.group(1)) for m in head.finditer(text)]
    if nums != list(range(1, p["n"] + 1)):
        return False
    parts = head.split(text)[2::2]  # the text after each heading
    return all(part.strip(" \n:.*") for part in parts)


@constraint(
    "ru.format.title",
    F,
    ["Дайте ответу заголовок в двойных угловых скобках, например <<Заголовок>>."],
    const(),
)
def title(text: str, p: Mapping[str, Any]) -> bool:
    """A non-empty title in double angle brackets: <<…>>."""
    return bool(_TITLE.search(text))


@constraint(
    "ru.format.placeholders",
    F,
    ["Добавьте в ответ не менее {n:заполнитель:gent} в квадратных скобках, например [адрес] или [имя]."],
    _n((1, 2, 3, 4)),
)
def placeholders(text: str, p: Mapping[str, Any]) -> bool:
    """At least ``n`` non-empty [placeholders]; a markdown link «[текст](url)» or a task-list
    box «- [x]» is not one."""
    return len(_PLACEHOLDER.findall(_TASK_BOX.sub(r"\1", text))) >= p["n"]


@constraint(
    "ru.format.highlights",
    F,
    ["Выделите в ответе не менее {n:фрагмент:gent} с помощью markdown, например *важная мысль*."],
    _n((1, 2, 3, 4)),
)
def highlights(text: str, p: Mapping[str, Any]) -> bool:
    """At least ``n`` *highlighted* or **bold** non-empty fragments (CommonMark emphasis).

    «2 * 3 * 4» and «2*3*4» are arithmetic, not emphasis; ``***x***`` is one fragment.
    """
    return len(emphasis_fragments(text)) >= p["n"]


@constraint(
    "ru.format.postscript",
    F,
    ["В конце ответа добавьте постскриптум — отдельную строку, которая начинается с «{marker}»",
     "Завершите ответ припиской «{marker} …» на отдельной строке."],
    lambda rng: {"marker": rng.choice(POSTSCRIPT_MARKERS)},
)
def postscript(text: str, p: Mapping[str, Any]) -> bool:
    """After the main text, a line starting with the marker, followed by some text.

    Any case («p.s.») and any spacing after its dots («P. S.», «П.С.») is the marker.
    """
    marker = r"\.\s*".join(re.escape(part.strip()) for part in normalize(p["marker"]).split("."))
    m = re.search(rf"(?:^|\n)\s*{marker}\s*(\S.*)$", text.strip(), re.DOTALL | re.IGNORECASE)
    return m is not None and bool(text.strip()[: m.start()].strip())


@constraint(
    "ru.format.two_responses",
    F,
    ["Дайте два разных варианта ответа, разделив их строкой из шести звёздочек: ******"],
    const(),
)
def two_responses(text: str, p: Mapping[str, Any]) -> bool:
    """Two different non-empty answers separated by exactly six stars (seven are not the separator).

    Answers that differ only in case or spacing are the same answer.
    """
    parts = [" ".join(x.split()).casefold() for x in _SIX_STARS.split(text)]
    return len(parts) == 2 and all(parts) and parts[0] != parts[1]


@constraint(
    "ru.format.no_markdown",
    F,
    ["Не используйте markdown-разметку: никаких звёздочек, решёток, обратных кавычек и таблиц."],
    const(),
)
def no_markdown(text: str, p: Mapping[str, Any]) -> bool:
    """No emphasis (*, _ pairs), headings (#), code (`), table pipes, links or block quotes."""
    if any(ch in text for ch in "*`|"):
        return False
    if _MD_LINK.search(text) or _BLOCKQUOTE.search(text):
        return False
    return not _HEADER.search(text) and not re.search(r"(?<!\w)_[^_\n]+_(?!\w)", text)


@constraint(
    "ru.format.markdown_table",
    F,
    ["Представьте ответ в виде markdown-таблицы со строкой заголовка. Строк с данными (без заголовка) — ровно {n}."],
    _n((2, 3, 4, 5)),
)
def markdown_table(text: str, p: Mapping[str, Any]) -> bool:
    """One markdown (GFM) table: header row, separator row, exactly ``n`` data rows, every row
    with the header's number of cells; outer pipes optional, as GFM allows."""
    found = tables(text)
    if len(found) != 1:
        return False
    rows, cells = found[0]
    return rows == p["n"] and len(set(cells)) == 1


@constraint(
    "ru.format.headers",
    F,
    ["Используйте в ответе ровно {n:заголовок} markdown (строки, начинающиеся с #)."],
    _n((2, 3, 4)),
)
def headers(text: str, p: Mapping[str, Any]) -> bool:
    """Exactly ``n`` markdown «#» headings (not counting «# …» lines inside code blocks)."""
    return atx_headings(text) == p["n"]


@constraint(
    "ru.format.wrapped_guillemets",
    F,
    ["Заключите весь ответ в кавычки-ёлочки: «…»."],
    const(),
)
def wrapped_guillemets(text: str, p: Mapping[str, Any]) -> bool:
    """The whole response is one «…»: the first « closes at the very end (trailing spaces ignored).

    «Да» и «нет» starts with « and ends with » but is two quotes, not a wrapped answer.
    """
    t = text.strip()
    if len(t) <= 2 or not (t.startswith("«") and t.endswith("»")):
        return False
    depth = 0
    for i, ch in enumerate(t):
        depth += (ch == "«") - (ch == "»")
        if depth <= 0:
            return i == len(t) - 1 and bool(t[1:-1].strip())
    return False
