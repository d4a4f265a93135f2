"""The shared JSON parser: reasoning removed first, whole top-level answers only, never a fragment."""

from __future__ import annotations

from fabrika.textutil.answers import extract_json, is_failure, parse_verifier_answer


def test_think_then_json_returns_the_answer_not_the_draft():
    text = '<think>Черновик: {"city": "Тверь"} — нет, лучше Казань.</think>\n{"city": "Казань"}'
    assert extract_json(text, expect=dict) == {"city": "Казань"}


def test_prefilled_think_only_the_closing_tag():
    assert extract_json('сначала подумаю…</think>{"ok": true}', expect=dict) == {"ok": True}


def test_json_inside_think_only_is_a_failure():
    out = extract_json('<think>{"approved": true}</think>\n', expect=dict)
    assert is_failure(out) and out.startswith("empty_answer")


def test_unclosed_think_is_a_failure_even_with_json_inside():
    out = extract_json('<think>План такой: {"steps": [{"kind": "text"}]} и ещё', expect=dict)
    assert is_failure(out) and out.startswith("unclosed_reasoning")


def test_reasoning_content_field_does_not_change_the_answer():
    assert extract_json('{"a": 1}', expect=dict, reasoning_content='{"a": 2}') == {"a": 1}


def test_truncated_object_is_a_failure_not_its_nested_fragment():
    for text in ('{"tool": {"a": 1}, "b": ', 'Вот ответ:\n```json\n{"steps": [{"kind": "text", "intent": "x"}, {"ki'):
        out = extract_json(text, expect=dict)
        assert is_failure(out) and "truncated" in out, (text, out)


def test_malformed_object_is_a_failure_not_its_nested_fragment():
    out = extract_json('{"tool": {"a": 1}, "b": oops}', expect=dict)
    assert is_failure(out) and "malformed" in out


def test_list_of_objects_is_not_searched_for_an_object():
    out = extract_json('[{"name": "a"}, {"name": "b"}]', expect=dict)
    assert is_failure(out) and "expected an object, got list" in out


def test_trailing_commas_keep_the_whole_object():
    text = '{"steps": [{"kind": "text", "rounds": [],}, ], "note": "a, }",}'
    assert extract_json(text, expect=dict) == {"steps": [{"kind": "text", "rounds": []}], "note": "a, }"}


def test_harmony_channels():
    text = ('<|channel|>analysis<|message|>Может {"approved": false}?<|end|>'
            '<|start|>assistant<|channel|>final<|message|>{"approved": true, "issues": []}<|return|>')
    assert extract_json(text, expect=dict) == {"approved": True, "issues": []}
    flat = 'analysisдумаю {"x": 0}assistantfinal{"x": 1}'
    assert extract_json(flat, expect=dict) == {"x": 1}
    assert is_failure(extract_json('<|channel|>analysis<|message|>{"x": 0}<|end|>', expect=dict))


def test_fenced_json_after_prose_with_braces():
    text = ('Конечно! Параметр {city} обязателен, см. пример [1].\n\n```json\n{"tools": [{"name": "a"}]}\n```\n'
            'Если нужно, поправлю.')
    assert extract_json(text, expect=dict) == {"tools": [{"name": "a"}]}


def test_prose_object_then_answer_object_first_top_level_wins_and_accept_selects():
    text = 'Пример: {"x": 1}. Ответ: {"func": "def evaluate(r): return True"}'
    assert extract_json(text, expect=dict) == {"x": 1}
    assert extract_json(text, expect=dict, accept=lambda v: "func" in v) == {"func": "def evaluate(r): return True"}


def test_raw_newlines_only_with_strict_false():
    text = '{"func": "def evaluate(r):\n    return True"}'
    assert is_failure(extract_json(text, expect=dict))
    assert extract_json(text, expect=dict, strict=False)["func"].startswith("def evaluate")


def test_if_verifier_parser_uses_the_same_rules():
    good = ('<think>{"func": "def evaluate(response): return False", "cases": []}</think>'
            '```json\n{"func": "def evaluate(response):\\n    return True", '
            '"cases": [{"input": "да", "output": true}]}\n```')
    parsed = parse_verifier_answer(good)
    assert not is_failure(parsed) and "return True" in parsed.code
    assert is_failure(parse_verifier_answer('<think>{"func": "def evaluate(response): return True", "cases": ['))


def test_if_text_parsers_grade_the_answer_not_the_reasoning():
    from fabrika.textutil.answers import parse_constraint_list, parse_instruction, parse_score

    assert parse_score("<think>может, 2? нет</think>Оценка: 8/10") == 8.0
    assert is_failure(parse_score("<think>Оценка 9"))
    assert parse_instruction("<think>черновик</think>Инструкция: Пиши кратко.") == "Пиши кратко."
    assert parse_constraint_list('<think>["черновик"]</think>["Ответ из трёх предложений"]') == ["Ответ из трёх предложений"]
