# ruff: noqa: E501 - the checks below are data: one verifier body per line
"""Builds verifier_corpus.jsonl: verifier answers shaped the way Qwen3 and GPT-4 write them.

Each check below is the core of a verifier as those models write it (helpers, docstrings,
typing imports, constants); each *style* wraps it the way one model family answers:
prose before and after, a ```python block, a ```json block with the code as an escaped
string, an ``if __name__ == "__main__":`` self-test, ``global`` counters. Regenerate with
``python tests/sandbox/data/make_verifier_corpus.py``; the JSONL is what the tests read.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

OUT = Path(__file__).with_name("verifier_corpus.jsonl")

# (name, imports, helpers, body of evaluate, a passing and a failing response)
CHECKS: list[tuple[str, str, str, str, str, str]] = [
    ("min_words", "import re", "", "words = re.findall(r\"\\w+\", response)\nreturn len(words) >= 5",
     "Один два три четыре пять шесть", "Мало слов"),
    ("max_words", "", "", "return len(response.split()) <= 4", "Коротко и ясно", "Это слишком длинный ответ для ограничения"),
    ("lowercase", "", "", "return response == response.lower()", "всё строчными", "Есть Заглавные"),
    ("uppercase", "", "", "letters = [c for c in response if c.isalpha()]\nreturn bool(letters) and all(c.isupper() for c in letters)",
     "ВСЁ ЗАГЛАВНЫМИ", "Не всё"),
    ("no_commas", "", "", "return ',' not in response", "Без запятых тут", "Здесь, есть запятая"),
    ("ends_with", "", "", "return response.rstrip().endswith(\"Спасибо за внимание.\")",
     "Текст. Спасибо за внимание.", "Текст без концовки."),
    ("starts_with", "", "", "return response.lstrip().lower().startswith(\"итак\")", "Итак, начнём", "Начнём"),
    ("paragraphs", "import re", "def _paragraphs(text: str) -> List[str]:\n    return [p for p in re.split(r\"\\n\\s*\\n\", text.strip()) if p.strip()]",
     "return len(_paragraphs(response)) == 3", "А.\n\nБ.\n\nВ.", "Один абзац."),
    ("keyword_count", "import re", "", "hits = re.findall(r\"\\bкошк\\w*\", response.lower())\nreturn len(hits) >= 2",
     "Кошка и ещё кошки", "Собака"),
    ("no_digits", "", "", "return not any(ch.isdigit() for ch in response)", "Без цифр", "Цифра 7"),
    ("quoted", "", "", "s = response.strip()\nreturn len(s) >= 2 and s[0] == '\"' and s[-1] == '\"'", "\"в кавычках\"", "без кавычек"),
    ("title_brackets", "import re", "", "return re.search(r\"<<[^<>]+>>\", response) is not None", "<<Заголовок>> текст", "Заголовок"),
    ("bullets", "import re", "", "items = re.findall(r\"^\\s*[-*•]\\s+\\S\", response, re.MULTILINE)\nreturn len(items) == 3",
     "- а\n- б\n- в", "- а\n- б"),
    ("json_format", "import json", "", "try:\n    data = json.loads(response)\nexcept (json.JSONDecodeError, TypeError):\n    return False\nreturn isinstance(data, dict)",
     "{\"a\": 1}", "не json"),
    ("sentences_razdel", "from razdel import sentenize", "", "sentences = [s.text for s in sentenize(response) if s.text.strip()]\nreturn len(sentences) <= 3",
     "Одно. Два.", "Раз. Два. Три. Четыре."),
    ("tokens_razdel", "import razdel", "", "tokens = [t.text for t in razdel.tokenize(response) if t.text.isalpha()]\nreturn 3 <= len(tokens) <= 50",
     "Вот нормальный ответ", "Да"),
    ("nouns_pymorphy", "import pymorphy3", "MORPH = pymorphy3.MorphAnalyzer()",
     "words = re.findall(r\"[а-яё]+\", response.lower())\nnouns = [w for w in words if MORPH.parse(w)[0].tag.POS == \"NOUN\"]\nreturn len(nouns) >= 2",
     "Кошка съела рыбу", "быстро и весело"),
    ("lemma_pymorphy", "import pymorphy3\nfrom functools import lru_cache", "_morph = pymorphy3.MorphAnalyzer()\n\n@lru_cache(maxsize=None)\ndef _lemma(word: str) -> str:\n    return _morph.parse(word)[0].normal_form",
     "lemmas = {_lemma(w) for w in re.findall(r\"[а-яё]+\", response.lower())}\nreturn \"дом\" in lemmas", "Мы говорили о домах", "Мы говорили о саде"),
    ("normal_forms", "from pymorphy3 import MorphAnalyzer", "",
     "morph = MorphAnalyzer()\nreturn any(\"город\" in morph.normal_forms(w) for w in response.lower().split())", "в городе", "в деревне"),
    ("counter_repeat", "from collections import Counter", "",
     "counts = Counter(w.strip('.,!?').lower() for w in response.split())\nreturn not counts or counts.most_common(1)[0][1] <= 2",
     "раз два три", "да да да да"),
    ("punct_end", "import string", "", "s = response.strip()\nreturn bool(s) and s[-1] in string.punctuation", "Конец.", "Конец"),
    ("unicode_cyrillic", "import unicodedata", "",
     "letters = [c for c in response if c.isalpha()]\nreturn bool(letters) and all('CYRILLIC' in unicodedata.name(c, '') for c in letters)",
     "только кириллица", "mixed текст"),
    ("char_length", "import math", "", "return math.isclose(len(response), 20, abs_tol=10)", "ровно двадцать симв", "коротко"),
    ("groupby_lines", "from itertools import groupby", "",
     "lines = response.splitlines()\nreturn all(len(list(g)) == 1 for _, g in groupby(lines))", "а\nб\nв", "а\nа\nб"),
    ("reduce_len", "from functools import reduce", "",
     "total = reduce(lambda acc, w: acc + len(w), response.split(), 0)\nreturn total >= 10", "достаточно длинный текст", "мал"),
    ("defaultdict_first_letters", "from collections import defaultdict", "",
     "first = defaultdict(int)\nfor word in response.split():\n    first[word[0].lower()] += 1\nreturn len(first) >= 3", "абв где ёжз", "ааа ааа"),
    ("numbered_list", "import re", "", "nums = [int(m.group(1)) for m in re.finditer(r\"^(\\d+)\\.\", response, re.M)]\nreturn nums == list(range(1, len(nums) + 1)) and len(nums) >= 2",
     "1. а\n2. б", "2. а"),
    ("question_end", "", "", "return response.strip().endswith('?')", "Как дела?", "Хорошо."),
    ("no_english", "import re", "", "return re.search(r\"[A-Za-z]\", response) is None", "по-русски", "english"),
    ("placeholders", "import re", "", "return len(set(re.findall(r\"\\[[^\\]]+\\]\", response))) >= 2", "[имя] и [адрес]", "[имя]"),
    ("markdown_headers", "import re", "", "headers = re.findall(r\"^#{1,6} \\S\", response, flags=re.MULTILINE)\nreturn len(headers) >= 2",
     "# А\nтекст\n## Б", "без заголовков"),
    ("postscript", "", "", "return 'P.S.' in response or 'P. S.' in response", "Текст\nP.S. Привет", "Текст"),
    ("highlighted", "import re", "", "return len(re.findall(r\"\\*[^*\\n]+\\*\", response)) >= 2", "*а* и *б*", "*а*"),
    ("sentence_len", "import re", "def split_sentences(text: str) -> List[str]:\n    return [s for s in re.split(r\"(?<=[.!?])\\s+\", text.strip()) if s]",
     "return all(len(s.split()) <= 12 for s in split_sentences(response))", "Короткое. Тоже.", "Это очень очень очень очень очень очень очень очень очень очень очень длинное предложение."),
    ("word_ratio", "", "", "words = response.split()\nif not words:\n    return False\nlong_words = [w for w in words if len(w) > 6]\nreturn len(long_words) / len(words) < 0.5",
     "мало длинных слов тут", "чрезвычайно продолжительные формулировки"),
]

HEADERS = {
    "typing": "from typing import List, Optional\n",
    "plain": "",
}


def _defensive(imports: str) -> str:
    """GPT-4's habit: optional libraries imported in a try/except ImportError with a None fallback."""
    out = []
    for line in imports.splitlines():
        if line in ("import pymorphy3", "import razdel"):
            mod = line.split()[1]
            out.append(f"try:\n    import {mod}\nexcept ImportError:  # pragma: no cover\n    {mod} = None")
        else:
            out.append(line)
    return "\n".join(out)


def module(check: tuple[str, str, str, str, str, str], *, typed: bool, docstring: bool, guard: bool,
           use_global: bool, future: bool = False) -> str:
    name, imports, helpers, body, good, bad = check
    parts = []
    head = "from typing import List, Optional\n" if typed or "List[" in helpers else ""
    if future:
        head = "from __future__ import annotations\n\n" + head
        imports = _defensive(imports)
    imports_all = imports
    if "re." in body + helpers and "import re" not in imports:
        imports_all = "import re\n" + imports
    parts.append((head + imports_all).strip())
    if helpers:
        parts.append(helpers)
    if use_global:
        parts.append("CALLS = 0")
    sig = "def evaluate(response: str) -> bool:" if typed else "def evaluate(response):"
    lines = [sig]
    if docstring:
        lines.append(f'    """Return True if the response satisfies the "{name}" constraint.\n\n'
                     '    Args:\n        response: the model output to check.\n    """')
    if use_global:
        lines.append("    global CALLS\n    CALLS += 1")
    if typed:
        lines.append("    if not isinstance(response, str):\n        return False")
    lines.append(textwrap.indent(body, "    "))
    parts.append("\n".join(lines))
    if guard:
        parts.append(f"if __name__ == \"__main__\":\n    print(evaluate({good!r}))  # True\n"
                     f"    print(evaluate({bad!r}))  # False\n    assert evaluate({good!r}) is True")
    return "\n\n\n".join(p for p in parts if p) + "\n"


def cases(check: tuple[str, str, str, str, str, str]) -> list[dict[str, object]]:
    return [{"input": check[4], "output": True}, {"input": check[5], "output": False},
            {"input": check[4] + " ", "output": True}]


def answer(style: str, code: str, check: tuple[str, str, str, str, str, str]) -> str:
    payload = {"func": code, "cases": cases(check)}
    if style == "qwen_think_json":  # Qwen3: reasoning, then the JSON in a fence
        return ("<think>\nНужно проверить ограничение. Напишу функцию evaluate и три теста.\n</think>\n\n"
                "```json\n" + json.dumps(payload, ensure_ascii=False, indent=2) + "\n```")
    if style == "qwen_code_then_json":  # code block first, then a JSON that repeats it
        return ("Вот функция, которая проверяет ограничение:\n\n```python\n" + code + "```\n\n"
                "И ответ в требуемом формате:\n\n" + json.dumps(payload, ensure_ascii=False))
    if style in ("gpt4_json_prose", "gpt4_future_defensive"):  # GPT-4: a sentence, the JSON fenced, a closing sentence
        return ("Here is the verifier and three test cases.\n\n```json\n" + json.dumps(payload, ensure_ascii=False)
                + "\n```\n\nThe function returns a bool as required.")
    return json.dumps(payload, ensure_ascii=False)  # bare JSON


STYLES = [
    ("qwen_think_json", dict(typed=True, docstring=True, guard=True, use_global=False)),
    ("qwen_code_then_json", dict(typed=True, docstring=False, guard=True, use_global=False)),
    ("gpt4_json_prose", dict(typed=False, docstring=True, guard=False, use_global=False)),
    ("bare_json", dict(typed=False, docstring=False, guard=False, use_global=True)),
    ("gpt4_future_defensive", dict(typed=True, docstring=True, guard=False, use_global=False, future=True)),
]


def main() -> None:
    rows = []
    for check in CHECKS:
        for style, flags in STYLES:
            code = module(check, **flags)
            rows.append({"id": f"{check[0]}:{style}", "style": style, "answer": answer(style, code, check),
                         "good": check[4], "bad": check[5]})
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} verifiers -> {OUT}")


if __name__ == "__main__":
    main()
