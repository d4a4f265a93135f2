"""FC exact-match reward: multiset, int-for-number, defaults, string args, malformed → 0."""

from __future__ import annotations

import json
import sys

import pytest

from fabrika.rewards.fc import calls_match, completion_text, fc_reward, parse_completion_calls

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Погода",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "Город"},
                    "days": {"type": "integer", "default": 1},
                    "temp": {"type": "number"},
                    "units": {"type": "string", "enum": ["c", "f"], "default": "c"},
                },
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "book_taxi", "parameters": {"type": "object", "properties": {
        "to": {"type": "string"}, "urgent": {"type": "boolean"}}, "required": ["to"]}}},
]


def call(name, **args):
    return {"name": name, "arguments": args}


def test_multiset_order_free_but_counts_matter():
    a, b = call("get_weather", city="Москва"), call("book_taxi", to="вокзал")
    assert calls_match([a, b], [b, a])
    assert not calls_match([a, a], [a, b])
    assert not calls_match([a], [a, a])
    assert calls_match([a, a, b], [a, b, a])
    assert not calls_match([a], [call("get_weather", city="Казань")])
    assert calls_match([], [])


def test_int_accepted_for_number_but_bool_and_string_are_not():
    assert calls_match([call("get_weather", city="X", temp=20)], [call("get_weather", city="X", temp=20.0)], TOOLS)
    assert not calls_match([call("book_taxi", to="X", urgent=1)], [call("book_taxi", to="X", urgent=True)], TOOLS)
    assert not calls_match([call("get_weather", city="X", temp="20")], [call("get_weather", city="X", temp=20)])
    assert not calls_match([call("get_weather", city="X", days=2.5)], [call("get_weather", city="X", days=2)], TOOLS)


def test_default_equals_omitted_only_with_tools():
    with_default = call("get_weather", city="Москва", units="c", days=1)
    plain = call("get_weather", city="Москва")
    assert calls_match([with_default], [plain], TOOLS)
    assert not calls_match([with_default], [plain])  # without schemas a default is just an argument
    assert not calls_match([call("get_weather", city="Москва", units="f")], [plain], TOOLS)


def test_string_and_openai_shaped_arguments():
    as_str = {"name": "get_weather", "arguments": json.dumps({"city": "Москва"}, ensure_ascii=False)}
    openai = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Москва"}'}}
    assert calls_match([as_str], [call("get_weather", city="Москва")])
    assert calls_match([openai], [call("get_weather", city="Москва")])
    assert not calls_match([{"name": "get_weather", "arguments": "{broken"}], [call("get_weather", city="Москва")])


def test_parse_hermes_blocks_and_openai_tool_calls():
    text = ('Сейчас.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Тула"}}</tool_call>\n'
            '<tool_call>{"name": "book_taxi", "arguments": {"to": "дом"}}</tool_call>')
    assert parse_completion_calls(text) == [call("get_weather", city="Тула"), call("book_taxi", to="дом")]
    assert completion_text(text) == "Сейчас."
    msg = [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "book_taxi", "arguments": '{"to": "дом"}'}}]}]
    assert parse_completion_calls(msg) == [call("book_taxi", to="дом")]
    for bad in ['<tool_call>{"name": "x", "arguments": {}', "<tool_call>not json</tool_call>",
                '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"name": "x", "arguments": [1]}</tool_call>']:
        with pytest.raises(ValueError):
            parse_completion_calls(bad)


def test_fc_reward_by_target_type():
    gt = {"calls": [call("get_weather", city="Москва")]}
    good = '<tool_call>{"name": "get_weather", "arguments": {"city": "Москва", "units": "c"}}</tool_call>'
    wrong = '<tool_call>{"name": "get_weather", "arguments": {"city": "Омск"}}</tool_call>'
    malformed = '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>'
    rewards = fc_reward(
        prompts=[None] * 7,
        completions=[good, wrong, malformed, "Уточните, пожалуйста, город.", good, "",
                     [{"role": "assistant", "content": "К сожалению, такого инструмента у меня нет."}]],
        ground_truth=[gt, json.dumps(gt), gt, None, None, None, None],
        target_type=["tool_call", "tool_call", "tool_call", "clarification", "irrelevance", "text", "irrelevance"],
        tools=[TOOLS] * 7,
    )
    assert rewards == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    # datasets store tools and ground truth as JSON strings
    with_default = '<tool_call>{"name": "get_weather", "arguments": {"city": "Москва", "days": 1}}</tool_call>'
    assert fc_reward([None], [with_default], [json.dumps(gt)], ["tool_call"], tools=[json.dumps(TOOLS)]) == [1.0]
    assert fc_reward([None], [with_default], [json.dumps(gt)], ["tool_call"]) == [0.0]


def test_no_torch_import():
    import subprocess
    code = "import sys, fabrika.rewards.fc; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
