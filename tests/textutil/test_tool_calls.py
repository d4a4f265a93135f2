"""The one tool-call reader: every common format, written as the models' own templates and docs print it,
reads to the same calls; malformed variants are rejections with a reason; reasoning never leaks."""

from __future__ import annotations

import json

import pytest

from fabrika.textutil.answers import is_failure
from fabrika.textutil.tool_calls import call_id, read_calls
from tests.textutil.call_examples import ARGS, EXAMPLES, TEMPLATES, TOOLS, TWO


@pytest.mark.parametrize("fmt", sorted(EXAMPLES))
def test_every_format_reads_to_the_same_calls(fmt):
    completion, want = EXAMPLES[fmt]
    read = read_calls(completion, tools=TOOLS)
    assert not is_failure(read), read
    assert [dict(c) for c in read.calls] == want
    assert read.text == "" and read.complete


def test_qwen3_template_rendering_round_trips():
    """The real Qwen3 template renders an assistant call; the reader reads the rendered turn back."""
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
    template = env.from_string((TEMPLATES / "qwen3.jinja").read_text(encoding="utf-8"))
    messages = [{"role": "user", "content": "Погода в Париже?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in TWO]}]
    rendered = template.render(messages=messages, tools=TOOLS, add_generation_prompt=False)
    turn = rendered.rsplit("<|im_start|>assistant\n", 1)[1].split("<|im_end|>")[0]
    assert "<tool_call>" in turn
    read = read_calls(turn, tools=TOOLS)
    assert not is_failure(read) and [dict(c) for c in read.calls] == TWO and read.text == ""


def test_text_around_calls_is_kept_and_reasoning_is_not():
    read = read_calls('<think>Позову get_weather. <tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
                      '</think>Сейчас посмотрю.\n<tool_call>{"name": "get_weather", "arguments": ' + ARGS + '}</tool_call>')
    assert [c["name"] for c in read.calls] == ["get_weather"]  # the draft inside <think> is a thought
    assert read.text == "Сейчас посмотрю." and "get_weather" not in read.text
    harmony = read_calls('<|channel|>analysis<|message|>Думаю: вызвать get_time?<|end|>'
                         '<|start|>assistant<|channel|>final<|message|>В Париже сейчас 15 °C.<|return|>')
    assert harmony.calls == () and harmony.text == "В Париже сейчас 15 °C."
    mistral = read_calls(f"Проверю погоду.[TOOL_CALLS]get_weather[ARGS]{ARGS}")
    assert mistral.text == "Проверю погоду." and mistral.formats == ("mistral",)
    separate = read_calls({"content": "Готово.", "reasoning_content": '<tool_call>{"name": "x"}</tool_call>'})
    assert separate.calls == () and separate.text == "Готово."


def test_a_call_shaped_answer_to_an_unknown_tool_is_a_wrong_call_not_text():
    read = read_calls('{"name": "delete_all", "arguments": {}}', tools=TOOLS)
    assert [c["name"] for c in read.calls] == ["delete_all"] and read.text == ""


def test_cut_off_while_thinking_is_no_answer():
    assert read_calls("<think>Надо вызвать get_weather").complete is False
    harmony = read_calls("<|channel|>analysis<|message|>Надо вызвать get_weather")
    assert harmony.complete is False and harmony.calls == ()


def test_prose_and_foreign_json_are_text_not_calls():
    for text in ('Вызову get_weather(location="Paris"), подождите.',
                 '{"name": "Анна", "age": 30}',                         # JSON without the call shape
                 '[print(location="Paris")]',                            # pythonic, not an offered tool
                 '[get_weather(location=__import__("os").getcwd())]'):   # not a literal: never evaluated
        read = read_calls(text, tools=TOOLS)
        assert not is_failure(read) and read.calls == () and read.text == text


@pytest.mark.parametrize("bad,reason", [
    ('<tool_call>{"name": "get_weather", "arguments": {}', "unbalanced"),
    ('<tool_call>not json</tool_call>', "not JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', "no 'name'"),
    ('<tool_call>{"name": "get_weather", "arguments": [1]}</tool_call>', "not an object"),
    ('<tool_call>{"name": "get_weather", "arguments": "{broken"}</tool_call>', "not JSON"),
    ('<|python_tag|>{"name": "get_weather", "parameters": {"location": ', "truncated"),
    ('<|python_tag|>get the weather', "neither JSON"),
    ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Par', "truncated"),
    ('[TOOL_CALLS]get_weather[ARGS]{"location": }', "not JSON"),
    ('[TOOL_CALLS]get_weather[ARGS]"Paris"', "not followed by a JSON"),
    ('[TOOL_CALLS][{"arguments": {}}]', "no 'name'"),
    ('<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location": "Pa',
     "truncated"),
    ('<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{location}<|call|>',
     "not JSON"),
    ({"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}, "no 'name'"),
])
def test_malformed_calls_are_rejections_with_reasons(bad, reason):
    read = read_calls(bad, tools=TOOLS)
    assert is_failure(read), read
    assert read.startswith("malformed_call:") and reason in read


def test_call_ids_look_real_and_are_stable():
    a = call_id("plan-1", "3_0_ref", 0)
    assert a == call_id("plan-1", "3_0_ref", 0) and a != call_id("plan-1", "3_0_ref", 1)
    assert a.startswith("call_") and len(a) == 5 + 24 and a[5:].isalnum() and a[5:].isascii()
    assert "ref" not in a and "_" not in a[5:]
