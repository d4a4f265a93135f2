"""Parsers of untrusted IF answers: every bad shape is a reason, never an exception."""

from __future__ import annotations

import json

import pytest

from fabrika.textutil.answers import is_failure, parse_constraint_list, parse_instruction, parse_score, parse_verifier_answer
from fabrika.textutil.lang import check_russian

CASES = [{"input": "привет", "output": True}, {"input": "Привет", "output": False}]


def test_plain_json_verifier():
    v = parse_verifier_answer(json.dumps({"func": "def evaluate(response):\n    return response.islower()",
                                          "cases": CASES}, ensure_ascii=False))
    assert not is_failure(v)
    assert v.code.startswith("def evaluate") and [c.label for c in v.test_cases] == [True, False]


def test_fenced_with_prose_and_escaped_newlines():
    raw = ('Конечно! Вот решение:\n```json\n{"func": "def evaluate(response):\\\\n    return len(response) > 3", '
           '"cases": [{"input": "длинно", "output": "true"}]}\n```\nЕсли нужно, уточню.')
    v = parse_verifier_answer(raw)
    assert not is_failure(v)
    assert v.code == "def evaluate(response):\n    return len(response) > 3"
    assert v.test_cases[0].label is True  # "true" string accepted


def test_raw_newlines_inside_json_string_and_alternative_keys():
    raw = '{"code": "def evaluate(response):\n    return True", "test_cases": [{"response": "а", "label": 1}]}'
    v = parse_verifier_answer(raw)
    assert not is_failure(v) and v.test_cases[0].response == "а"


def test_function_in_separate_python_fence():
    raw = ('```python\ndef evaluate(response):\n    return "," not in response\n```\n'
           '```json\n{"cases": [{"input": "без запятых", "output": true}]}\n```')
    v = parse_verifier_answer(raw)
    assert not is_failure(v) and '"," not in response' in v.code


@pytest.mark.parametrize("raw, reason", [
    ("Извините, не могу.", "invalid_json"),
    ('{"func": "def evaluate(response):\\n    return', "invalid_json"),
    ('{"cases": []}', "missing_function"),
    ('{"func": "def check(r):\\n    return True", "cases": [{"input": "a", "output": true}]}', "no_evaluate_function"),
    ('{"func": "def evaluate(response)\\n    return True", "cases": [{"input": "a", "output": true}]}', "syntax_error"),
    ('{"func": "def evaluate(response):\\n    return True", "cases": []}', "no_test_cases"),
    ('{"func": "def evaluate(response):\\n    return True", "cases": [{"input": "a", "output": "может быть"}]}',
     "bad_test_case"),
    ('{"func": "def evaluate(response):\\n    return True", "cases": ["a"]}', "bad_test_case"),
    ("", "empty_answer"),
    (None, "empty_answer"),
])
def test_bad_verifier_answers_become_reasons(raw, reason):
    v = parse_verifier_answer(raw)
    assert is_failure(v) and str(v).startswith(reason), v


def test_constraint_list_formats():
    assert parse_constraint_list("1. Первое\n2) Второе\n- «Третье»\n\n• Четвёртое") == ["Первое", "Второе", "Третье",
                                                                                    "Четвёртое"]
    assert parse_constraint_list('["Раз", "Два"]') == ["Раз", "Два"]
    assert is_failure(parse_constraint_list("   "))


def test_instruction_and_score():
    assert parse_instruction("Инструкция: «Пиши строчными буквами.»") == "Пиши строчными буквами."
    assert parse_score("Оценка: 7/10") == 7.0 and parse_score("8,5") == 8.5
    assert str(parse_score("отлично")).startswith("no_score")
    assert str(parse_score("15")).startswith("score_out_of_range")


@pytest.mark.parametrize("text, ok", [
    ("Ответ должен содержать ровно три абзаца.", True),
    ("Ответ должен быть корректным JSON-объектом.", True),
    ("The answer must contain exactly three paragraphs.", False),
    ("Відповідь має містити рівно три абзаци й закінчуватися питанням.", False),
    ("#@@ %% ~~ ^^ && ** ###", False),
    ("Ответ \ufffd\ufffd сломан", False),
])
def test_check_russian(text, ok):
    assert (check_russian(text) is None) is ok
