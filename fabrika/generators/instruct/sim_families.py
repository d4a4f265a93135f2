"""The small world the ``sim`` IF responders understand — honestly a stand-in for a model.

A *family* is a Russian format constraint the sim can write (expansion), recognise
(verifier writing, answering) and read back from code (back-translation). Nothing
outside the sim responders and their tests uses this module.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass
from typing import Any, Callable

BASE_SENTENCES = (
    "Этот вопрос часто возникает у тех кто только начинает разбираться в теме",
    "Главное здесь понять основную идею и не торопиться",
    "Полезно начать с простого примера и постепенно усложнять задачу",
    "Многие специалисты советуют вести заметки и возвращаться к ним",
    "Важно помнить о практике ведь без неё знания быстро забываются",
    "Хорошим решением будет обсудить вопрос с коллегами",
    "Стоит заранее составить план и распределить время",
    "Результат обычно заметен уже через несколько недель",
)


def sentences(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(BASE_SENTENCES) + "." for _ in range(n)]


@dataclass(frozen=True)
class Family:
    """A constraint the sim knows: text, code variants (all correct), and text transforms."""

    name: str
    text_re: str
    render: Callable[[dict[str, Any]], str]
    sample: Callable[[random.Random], dict[str, Any]]
    parse: Callable[[re.Match[str]], dict[str, Any]]
    codes: tuple[str, ...]  # bodies with {…} slots filled from params (repr)
    wrong: str
    comply: Callable[[str, dict[str, Any]], str]
    violate: Callable[[str, dict[str, Any]], str]


def _fill(body: str, params: dict[str, Any]) -> str:
    for k, v in params.items():
        body = body.replace("{" + k + "}", repr(v))
    return "def evaluate(response):\n    " + body.replace("\n", "\n    ")


def _words(text: str, n: int) -> str:
    words = (text + " ") * (n // max(1, len(text.split())) + 1)
    return " ".join(words.split()[:n]) + "."


def _paragraphs(text: str, n: int) -> str:
    sents = [s.strip() for s in text.split(".") if s.strip()] or ["Текст"]
    return "\n\n".join(sents[i % len(sents)] + "." for i in range(n))


FAMILIES: tuple[Family, ...] = (
    Family("min_words", r"(?:не менее|от|минимум) (\d+) слов(?!\w* и)", lambda p: f"Ответ должен содержать не менее {p['n']} слов.",
           lambda r: {"n": r.choice(range(20, 85, 5))}, lambda m: {"n": int(m.group(1))},
           ("return len(response.split()) >= {n}", "import re\nreturn len(re.findall(r'\\S+', response)) >= {n}"),
           "return len(response.split()) < {n}",
           lambda t, p: _words(t, p["n"] + 3), lambda t, p: _words(t, max(1, p["n"] // 3))),
    Family("max_words", r"(?:не более|не длиннее|Уложитесь в) (\d+) слов", lambda p: f"Ответ должен содержать не более {p['n']} слов.",
           lambda r: {"n": r.choice(range(10, 65, 5))}, lambda m: {"n": int(m.group(1))},
           ("return len(response.split()) <= {n}", "return not len(response.split()) > {n}"),
           "return len(response.split()) > {n}",
           lambda t, p: _words(t, p["n"] - 2), lambda t, p: _words(t, p["n"] * 2)),
    Family("lowercase", r"(?i)строчными буквами", lambda p: "Весь ответ должен быть написан строчными буквами.",
           lambda r: {}, lambda m: {},
           ("return response == response.lower()", "return not any(c.isupper() for c in response)"),
           "return response != response.lower()",
           lambda t, p: t.lower(), lambda t, p: t.upper()),
    Family("uppercase", r"(?i)весь ответ.*заглавными буквами", lambda p: "Весь ответ должен быть написан заглавными буквами.",
           lambda r: {}, lambda m: {},
           ("return response == response.upper()", "return not any(c.islower() for c in response)"),
           "return response == response.lower()",
           lambda t, p: t.upper(), lambda t, p: t.lower()),
    Family("ends_with", r"(?:заканчиваться|Закончите ответ ровно) фразой «(.+?)»", lambda p: f"Ответ должен заканчиваться фразой «{p['phrase']}».",
           lambda r: {"phrase": r.choice(["Есть ещё вопросы?", "Спасибо за внимание.", "На этом всё.", "Удачи!", "Надеюсь, это поможет."])},
           lambda m: {"phrase": m.group(1)},
           ("return response.strip().endswith({phrase})", "return response.rstrip().endswith({phrase})"),
           "return response.strip().startswith({phrase})",
           lambda t, p: f"{t} {p['phrase']}", lambda t, p: f"{p['phrase']} {t}"),
    Family("starts_with", r"(?:начинаться со слова|Начните ответ ровно с фразы) «(.+?)»", lambda p: f"Ответ должен начинаться со слова «{p['word']}».",
           lambda r: {"word": r.choice(["Итак", "Конечно", "Кратко", "Смотрите", "Отвечаю"])}, lambda m: {"word": m.group(1)},
           ("return response.lstrip().startswith({word})", "return response.strip()[:len({word})] == {word}"),
           "return response.strip().endswith({word})",
           lambda t, p: f"{p['word']} {t[:1].lower()}{t[1:]}", lambda t, p: f"{t} {p['word']}"),
    Family("no_commas", r"ни одной запятой|без запятых", lambda p: "В ответе не должно быть ни одной запятой.",
           lambda r: {}, lambda m: {},
           ("return ',' not in response", "return response.count(',') == 0"),
           "return ',' in response",
           lambda t, p: t.replace(",", ""), lambda t, p: t.replace(" ", ", ", 2)),
    Family("paragraphs", r"ровно из (\d+) абзац", lambda p: f"Ответ должен состоять ровно из {p['n']} абзацев, разделённых пустой строкой.",
           lambda r: {"n": r.choice([2, 3, 4, 5])}, lambda m: {"n": int(m.group(1))},
           ("return len([p for p in response.split('\\n\\n') if p.strip()]) == {n}",
            "import re\nreturn len([p for p in re.split(r'\\n\\s*\\n', response) if p.strip()]) == {n}"),
           "return len(response.split('\\n\\n')) != {n}",
           lambda t, p: _paragraphs(t, p["n"]), lambda t, p: _paragraphs(t, p["n"] + 1)),
    Family("keyword", r"(?:Слово «(.+?)» должно встретиться в ответе|Используйте слово «(.+?)») не менее (\d+) раз",
           lambda p: f"Слово «{p['word']}» должно встретиться в ответе не менее {p['n']} раз.",
           lambda r: {"word": r.choice(["данные", "модель", "пример", "решение", "вопрос"]), "n": r.choice([2, 3, 4])},
           lambda m: {"word": m.group(1) or m.group(2), "n": int(m.group(3))},
           ("return response.lower().count({word}) >= {n}", "import re\nreturn len(re.findall({word}, response.lower())) >= {n}"),
           "return response.count({word}) < {n}",
           lambda t, p: t + (" " + p["word"]) * p["n"] + ".", lambda t, p: t),
    Family("quotes", r"в двойные кавычки", lambda p: "Весь ответ должен быть заключён в двойные кавычки.",
           lambda r: {}, lambda m: {},
           ("s = response.strip()\nreturn len(s) >= 2 and s[0] == '\"' and s[-1] == '\"'",
            "return response.strip().startswith('\"') and response.strip().endswith('\"')"),
           "return '\"' not in response",
           lambda t, p: f'"{t}"', lambda t, p: t),
    Family("title", r"угловых скобках|в << и >>", lambda p: "Ответ должен содержать заголовок в двойных угловых скобках, например <<заголовок>>.",
           lambda r: {}, lambda m: {},
           ("import re\nreturn re.search(r'<<[^<>]+>>', response) is not None", "return '<<' in response and '>>' in response"),
           "return '<<' not in response",
           lambda t, p: f"<<Ответ>>\n{t}", lambda t, p: t),
    Family("no_digits", r"не должно быть цифр|Не используйте цифры", lambda p: "В ответе не должно быть цифр.",
           lambda r: {}, lambda m: {},
           ("return not any(c.isdigit() for c in response)", "import re\nreturn re.search(r'\\d', response) is None"),
           "return any(c.isdigit() for c in response)",
           lambda t, p: "".join(c for c in t if not c.isdigit()), lambda t, p: t + " 42"),
)

UNRELATED_TEXTS = (
    "Ответ должен быть вежливым и дружелюбным.",
    "Используй деловой стиль изложения.",
    "Ответ должен звучать уверенно.",
)


def recognise(text: str) -> tuple[Family, dict[str, Any]] | None:
    """The first family whose text pattern matches ``text``, with its params."""
    for fam in FAMILIES:
        m = re.search(fam.text_re, text)
        if m:
            return fam, fam.parse(m)
    return None


def recognise_all(text: str) -> list[tuple[Family, dict[str, Any]]]:
    """Every family mentioned in ``text`` (a prompt may carry several constraints)."""
    out = []
    for fam in FAMILIES:
        m = re.search(fam.text_re, text)
        if m:
            out.append((fam, fam.parse(m)))
    return out


def recognise_code(code: str) -> tuple[Family, dict[str, Any]] | None:
    """Read a sim-written function (any variant, or the wrong one) back into its family and params."""
    for fam in FAMILIES:
        for body in (*fam.codes, *(_as_result(b) for b in fam.codes), fam.wrong):
            template = _fill(body, {})
            slots = re.findall(r"\{(\w+)\}", template)
            pattern = re.escape(template)
            for slot in dict.fromkeys(slots):
                pattern = pattern.replace(re.escape("{" + slot + "}"), f"(?P<{slot}>.+?)", 1)
                pattern = pattern.replace(re.escape("{" + slot + "}"), f"(?P={slot})")
            m = re.fullmatch(pattern, code.strip(), re.DOTALL)
            if m:
                try:
                    return fam, {k: ast.literal_eval(v) for k, v in m.groupdict().items()}
                except (ValueError, SyntaxError):
                    continue
    return None


def _as_result(body: str) -> str:
    """Same semantics, different source: ``return X`` → ``result = X`` + ``return bool(result)``."""
    head, _, expr = body.rpartition("return ")
    return f"{head}result = {expr}\nreturn bool(result)"


def code_for(fam: Family, params: dict[str, Any], variant: int) -> str:
    """Variant ``i``: the family's codes, then the same codes rewritten (equivalent, distinct source)."""
    bodies = [*fam.codes, *(_as_result(b) for b in fam.codes)]
    return _fill(bodies[variant % len(bodies)], params)


def wrong_code_for(fam: Family, params: dict[str, Any]) -> str:
    return _fill(fam.wrong, params)
