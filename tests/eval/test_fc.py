"""`fabrika eval fc`: BFCL-format files parsed, a scripted model with a known share of right answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.errors import InputError
from fabrika.eval.fc_cases import read_bfcl, read_samples, to_json_schema
from fabrika.eval.fc_eval import resolve_expected
from fabrika.rewards.fc import calls_match
from tests.eval.conftest import llm_flags

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "bfcl"
CATS = ("simple", "multiple", "parallel", "irrelevance")


def call(name: str, **args) -> dict:
    return {"name": name, "arguments": args}


# question substring -> the scripted model's answer, and whether that answer is right
ANSWERS = {
    "triangle with base 10": ({"tool_calls": [call("calculate_triangle_area", base=10, height=5)]}, True),
    # Hermes-style call in the text, after a reasoning block, with the sanitized name
    "факториал": ('<think>нужен факториал</think>\n<tool_call>{"name": "math_factorial", "arguments": {"number": 5}}'
                  '</tool_call>', True),
    "погода в Казани": ({"tool_calls": [call("get_weather", city="Kazan", unit="celsius")]}, True),
    "100 US dollars": ({"tool_calls": [call("convert_currency", amount="100", from_currency="USD",
                                            to_currency="EUR")]}, False),  # a string where a number is due
    "столик на 4": ({"tool_calls": [call("book_table", restaurant="Пушкин", guests=4)]}, False),  # time missing
    "Italian restaurant": ({"tool_calls": [call("book_table", restaurant="Italian", guests=2, time="19:00")]}, False),
    "в Москве и в Сочи": ({"tool_calls": [call("get_weather", city="Сочи"), call("get_weather", city="Москва")]}, True),
    "Paris and in Rome": ({"tool_calls": [call("get_weather", city="Paris")]}, False),
    "анекдот": ("Встречаются два программиста… (анекдот без вызова функций)", True),
    "War and Peace": ({"tool_calls": [call("calculate_triangle_area", base=1, height=1)]}, False),
}


def model(req: dict):
    text = req["messages"][-1]["content"]
    for key, (answer, _) in ANSWERS.items():
        if key in text:
            return answer
    raise AssertionError(f"unscripted question: {text!r}")


def bfcl_args() -> list[str]:
    args = []
    for c in CATS:
        args += ["--bfcl", str(DATA / f"BFCL_v3_{c}.json")]
        ans = DATA / "possible_answer" / f"BFCL_v3_{c}.json"
        args += ["--answers", str(ans) if ans.exists() else "-"]
    return args


def test_bfcl_files_parse_into_cases():
    cases = read_bfcl(DATA / "BFCL_v3_simple.json", DATA / "possible_answer" / "BFCL_v3_simple.json")
    assert [c.category for c in cases] == ["simple"] * 4
    fact = cases[1]
    assert fact.tools[0]["function"]["name"] == "math_factorial" and fact.names["math_factorial"] == "math.factorial"
    assert fact.tools[0]["function"]["parameters"]["type"] == "object"  # BFCL "dict" → JSON Schema
    assert cases[3].tools[0]["function"]["parameters"]["properties"]["amount"]["type"] == "number"  # "float"
    assert cases[0].expected == [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]
    irr = read_bfcl(DATA / "BFCL_v3_irrelevance.json", None)
    assert all(c.expected is None for c in irr)
    with pytest.raises(InputError, match="possible answer"):
        read_bfcl(DATA / "BFCL_v3_simple.json", None)
    assert to_json_schema({"type": "tuple", "items": {"type": "any"}}) == {"type": "array", "items": {}}


def test_possible_answers_resolve_toward_the_prediction():
    exp = [{"get_weather": {"city": ["Казань", "Kazan"], "unit": ["celsius", ""]}}]
    assert calls_match([call("get_weather", city="Kazan")], resolve_expected([call("get_weather", city="Kazan")], exp))
    pred = [call("get_weather", city="Kazan", unit="kelvin")]
    assert not calls_match(pred, resolve_expected(pred, exp))
    assert not calls_match([], resolve_expected([], exp))


def test_eval_fc_accuracy_equals_the_scripted_share(server, tmp_path: Path):
    server.script(tag="eval.fc", responder=model)
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), *bfcl_args(), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    assert not server.errors
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    right = sum(ok for _, ok in ANSWERS.values())
    assert doc["overall"]["accuracy"] == pytest.approx(right / len(ANSWERS))  # 5 / 10
    per = doc["per_category"]
    assert {c: per[c]["accuracy"] for c in CATS} == {"simple": 0.75, "multiple": 0.0, "parallel": 0.5,
                                                      "irrelevance": 0.5}
    o = doc["overall"]
    assert o["decision"] == pytest.approx(9 / 10)       # only irrelevance_1 called when it should not
    assert o["tool_choice"] == pytest.approx(6 / 8)     # multiple_1 (wrong tool), parallel_1 (one call short)
    assert o["required_args"] == pytest.approx(7 / 8)   # multiple_0 left out 'time'
    assert o["schema_valid"] == pytest.approx(6 / 8)    # simple_3 (string amount), multiple_0 (missing required)
    # the tools went out with JSON Schema types and sanitized names
    sent = next(r for r in server.requests if "факториал" in r["messages"][-1]["content"])
    assert sent["tools"][0]["function"]["name"] == "math_factorial"
    assert "math_factorial" not in json.dumps(doc)  # reported under the original BFCL name (math.factorial)
    rec = [json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert next(r for r in rec if r["id"] == "simple_1")["calls"][0]["name"] == "math.factorial"

    served = server.served
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), *bfcl_args(), *llm_flags(server)])
    assert res.exit_code == 0 and server.served == served  # resumed: nothing asked again


def test_eval_fc_malformed_and_truncated_answers_are_scored_wrong(server, tmp_path: Path):
    server.script(tag="eval.fc", match="triangle", responses=[{"tool_calls": [
        {"name": "calculate_triangle_area", "arguments": '{"base": 10, "height"'}], "finish_reason": "length"}])
    server.script(tag="eval.fc", responder=lambda req: "<tool_call>{\"name\": \"math_factorial\"")
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(DATA / "BFCL_v3_simple.json"),
                              "--answers", str(DATA / "possible_answer" / "BFCL_v3_simple.json"), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["overall"]["accuracy"] == 0.0
    assert doc["overall"]["malformed"] == 4 and doc["overall"]["truncated"] == 1


def test_eval_fc_on_fabrika_samples(server, tmp_path: Path):
    tool = {"type": "function", "function": {"name": "find_train", "description": "Поиск поездов.", "parameters": {
        "type": "object", "properties": {"from_city": {"type": "string"}, "to_city": {"type": "string"},
                                         "date": {"type": "string"}, "seats": {"type": "integer", "default": 1}},
        "required": ["from_city", "to_city", "date"]}}}
    gt_call = {"name": "find_train", "arguments": {"from_city": "Москва", "to_city": "Казань", "date": "2025-03-01"}}

    def sample(i: int, text: str, target: str, calls: list) -> dict:
        return {"id": f"s{i}", "expert": "fc", "lang": "ru", "tools": json.dumps([tool], ensure_ascii=False),
                "prompt": json.dumps([{"role": "user", "content": text}], ensure_ascii=False),
                "completion": "[]", "target_type": target, "ground_truth": json.dumps({"calls": calls}),
                "meta": json.dumps({"sample_type": "single" if target == "tool_call" else target})}

    rows = [sample(0, "Найди поезд из Москвы в Казань на 1 марта 2025", "tool_call", [gt_call]),
            sample(1, "Нужен поезд Москва — Казань, 1 марта 2025, одно место", "tool_call", [gt_call]),
            sample(2, "Спасибо, больше ничего не нужно", "text", []),
            sample(3, "Какой курс биткоина?", "irrelevance", [])]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    right = {"tool_calls": [gt_call]}
    default_seat = {"tool_calls": [{**gt_call, "arguments": {**gt_call["arguments"], "seats": 1}}]}
    server.script(tag="eval.fc", match="Найди поезд", responses=[right])
    server.script(tag="eval.fc", match="одно место", responses=[default_seat])  # default value = omitted
    server.script(tag="eval.fc", match="Спасибо", responses=["Рад был помочь!"])
    server.script(tag="eval.fc", match="биткоина", responses=[right])  # calls a tool that cannot answer
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--samples", str(path), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["overall"]["accuracy"] == pytest.approx(0.75)
    assert doc["per_category"]["irrelevance"]["accuracy"] == 0.0
    assert doc["per_category"]["single"]["accuracy"] == 1.0


def test_eval_fc_input_errors(tmp_path: Path, server):
    res = runner.invoke(app, ["eval", "fc", "--out", str(tmp_path / "o"), *llm_flags(server)])
    assert res.exit_code == 2 and "--bfcl" in res.output
    multi = tmp_path / "BFCL_v3_multi_turn_base.json"
    multi.write_text(json.dumps({"id": "multi_turn_base_0", "question": [[{"role": "user", "content": "a"}],
                                                                         [{"role": "user", "content": "b"}]],
                                 "function": []}) + "\n", encoding="utf-8")
    res = runner.invoke(app, ["eval", "fc", "--out", str(tmp_path / "o"), "--bfcl", str(multi), "--answers", "-",
                              *llm_flags(server)])
    assert res.exit_code == 2 and "multi-turn" in res.output


@pytest.mark.parametrize("text,want", [
    ('[calculate_triangle_area(base=10, height=5)]', [call("calculate_triangle_area", base=10, height=5)]),
    ('```python\nmath.factorial(number=5)\n```', [call("math.factorial", number=5)]),
    ('[get_weather(city="Москва"), get_weather(city="Сочи")]',
     [call("get_weather", city="Москва"), call("get_weather", city="Сочи")]),
    ('{"name": "get_weather", "arguments": {"city": "Paris"}}', [call("get_weather", city="Paris")]),
    ('Вызову get_weather(city="Paris"), подождите.', None),          # prose, not a call
    ('[get_weather(city=__import__("os").getcwd())]', None),          # not a literal: never evaluated
    ('[print(city="Paris")]', None),                                  # not an offered function
])
def test_text_calls_bfcl_prompting_format(text, want):
    from fabrika.eval.fc_eval import text_calls

    known = {"calculate_triangle_area", "math.factorial", "math_factorial", "get_weather"}
    assert text_calls(text, known) == want


def test_eval_fc_reads_python_call_syntax_answers(server, tmp_path: Path):
    server.script(tag="eval.fc", match="triangle", responses=["<think>просто</think>[calculate_triangle_area(base=10, height=5)]"])
    server.script(tag="eval.fc", match="факториал", responses=["```python\nmath.factorial(number=5)\n```"])
    server.script(tag="eval.fc", responder=lambda req: "Не знаю.")
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(DATA / "BFCL_v3_simple.json"),
                              "--answers", str(DATA / "possible_answer" / "BFCL_v3_simple.json"), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["overall"]["accuracy"] == pytest.approx(0.5)


def test_read_samples_accepts_sft_export_records(tmp_path: Path):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    rec = {"id": "e1", "expert": "fc", "lang": "ru", "target_type": "tool_call", "tools": [tool],
           "prompt": [{"role": "user", "content": "Погода в Сочи?"}],
           "completion": [{"role": "assistant", "content": "", "tool_calls": [
               {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Сочи"}}}]}]}
    path = tmp_path / "sft.jsonl"
    path.write_text(json.dumps(rec, ensure_ascii=False) + "\n", encoding="utf-8")
    [case] = read_samples(path)
    assert case.expected == [{"get_weather": {"city": ["Сочи"]}}] and case.category == "tool_call"


def test_relevance_category_accepts_any_valid_call_and_foreign_types_become_strings(server, tmp_path: Path):
    fn = {"name": "search_flights", "description": "Поиск рейсов.", "parameters": {"type": "dict", "properties": {
        "route": {"type": "String", "description": "Маршрут"}, "passengers": {"type": "integer"}},
        "required": ["route"]}}
    q = tmp_path / "BFCL_v3_live_relevance.json"
    q.write_text("".join(json.dumps({"id": f"live_relevance_{i}-0-0", "question": [[{"role": "user", "content": t}]],
                                     "function": [fn]}, ensure_ascii=False) + "\n"
                         for i, t in enumerate(["Найди рейсы Москва–Сочи", "Find flights to Rome", "Какие рейсы?"])),
                 encoding="utf-8")
    [case, *_] = read_bfcl(q, None)
    assert case.expected == "any" and case.category == "live_relevance"
    assert case.tools[0]["function"]["parameters"]["properties"]["route"]["type"] == "string"
    server.script(tag="eval.fc", match="Москва", responses=[{"tool_calls": [call("search_flights", route="MOW-AER")]}])
    server.script(tag="eval.fc", match="Rome", responses=[{"tool_calls": [call("search_flights", passengers=1)]}])
    server.script(tag="eval.fc", responder=lambda req: "Уточните, пожалуйста, маршрут.")
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(q), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    s = doc["per_category"]["live_relevance"]
    assert s["accuracy"] == pytest.approx(1 / 3)  # a call missing its required 'route' is not schema-valid
    assert s["decision"] == pytest.approx(2 / 3) and s["arg_values"] is None


def test_eval_fc_on_a_bfcl_data_directory(server, tmp_path: Path):
    server.script(tag="eval.fc", responder=model)
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(DATA), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["total"] == 10 and doc["overall"]["accuracy"] == pytest.approx(0.5)


def test_dict_answers_are_templates_and_parallel_pairs_by_value():
    exp = [{"book": {"guest": [{"name": ["Анна", "Anna"], "age": [30, ""]}], "nights": [2]}}]
    assert calls_match([call("book", guest={"name": "Anna"}, nights=2)],
                       resolve_expected([call("book", guest={"name": "Anna"}, nights=2)], exp))
    assert not calls_match([call("book", guest={"name": "Anna", "age": 31}, nights=2)],
                           resolve_expected([call("book", guest={"name": "Anna", "age": 31}, nights=2)], exp))
    # parallel calls in the other order, each using the second allowed alternative
    exp2 = [{"get_weather": {"city": ["Москва", "Moscow"]}}, {"get_weather": {"city": ["Сочи", "Sochi"]}}]
    pred = [call("get_weather", city="Sochi"), call("get_weather", city="Moscow")]
    assert calls_match(pred, resolve_expected(pred, exp2))


def test_bfcl_lenient_strings_only_when_asked():
    exp = [{"get_weather": {"city": ["San Francisco, CA"], "unit": ["celsius"]}}]
    pred = [call("get_weather", city="san francisco CA", unit="Celsius")]
    assert not calls_match(pred, resolve_expected(pred, exp))
    from fabrika.eval.fc_eval import bfcl_string

    want = resolve_expected(pred, exp, strings="bfcl")
    assert calls_match([{**c, "arguments": bfcl_string(c["arguments"])} for c in pred],
                       [{**c, "arguments": bfcl_string(c["arguments"])} for c in want])


@pytest.mark.parametrize("strings,accuracy", [("exact", 0.0), ("bfcl", 1.0)])
def test_eval_fc_strings_flag(server, tmp_path: Path, strings, accuracy):
    q = tmp_path / "BFCL_v3_simple.json"
    q.write_text((DATA / "BFCL_v3_simple.json").read_text(encoding="utf-8").splitlines()[2] + "\n", encoding="utf-8")
    server.script(tag="eval.fc", responder=lambda req: {"tool_calls": [call("get_weather", city="kazan",
                                                                             unit="Celsius")]})
    out = tmp_path / strings
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(q), "--answers",
                              str(DATA / "possible_answer" / "BFCL_v3_simple.json"), "--strings", strings,
                              *llm_flags(server)])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["overall"]["accuracy"] == accuracy


def test_eval_fc_prompt_mode_for_servers_without_a_tool_parser(server, tmp_path: Path):
    def prompted(req: dict) -> str:
        assert "tools" not in req  # nothing a server without --enable-auto-tool-choice would refuse
        system, user = req["messages"][0]["content"], req["messages"][-1]["content"]
        assert "math.factorial" in system or "triangle" in system or "weather" in system or "currency" in system
        return {"triangle": "[calculate_triangle_area(base=10, height=5)]", "факториал": "[math.factorial(number=5)]",
                "Казани": '<think>думаю</think>[get_weather(city="Казань", unit="celsius")]',
                "dollars": "Я не могу конвертировать валюту."}[next(k for k in ("triangle", "факториал", "Казани",
                                                                               "dollars") if k in user)]

    server.script(tag="eval.fc", responder=prompted)
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--mode", "prompt", "--bfcl",
                              str(DATA / "BFCL_v3_simple.json"), "--answers",
                              str(DATA / "possible_answer" / "BFCL_v3_simple.json"), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    assert not server.errors
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["overall"]["accuracy"] == pytest.approx(0.75) and doc["overall"]["decision"] == pytest.approx(0.75)
