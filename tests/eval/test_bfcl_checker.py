"""`eval fc --checker bfcl`: BFCL's AST checker semantics on hand-made BFCL-format cases.

``data/bfcl/checker/`` holds questions and possible answers in BFCL's published format
(``BFCL_v4_<category>.json``, ``possible_answer/…``) for every single-turn category, and
``model_outputs.jsonl``: per case a decoded model answer (``[{name: {param: value}}]``; a
string is a text answer, ``null`` an undecodable one) and the verdict derived by hand from
BFCL's rules (``why`` says which rule decides it). The same cases were run through BFCL's own
checker (docs/EVAL.md, "Agreement with BFCL's checker").

Run ``python -m tests.eval.test_bfcl_checker`` to print the per-category agreement table of
both checkers with those verdicts.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.errors import InputError
from fabrika.eval import bfcl_types
from fabrika.eval.bfcl_checker import check, check_relevance, is_relevance, standardize
from fabrika.eval.bfcl_data import data_dir_pairs, read_items
from tests.eval.conftest import llm_flags

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "bfcl" / "checker"
CATEGORIES = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
              "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "irrelevance",
              "live_irrelevance", "live_relevance")


def _load() -> tuple[dict[str, tuple[str, dict[str, Any]]], dict[str, Any], list[dict[str, Any]]]:
    questions: dict[str, tuple[str, dict[str, Any]]] = {}
    answers: dict[str, Any] = {}
    for f in DATA.glob("BFCL_v4_*.json"):
        category = f.name[len("BFCL_v4_"):-len(".json")]
        for line in f.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            questions[row["id"]] = (category, row)
    for f in (DATA / "possible_answer").glob("BFCL_v4_*.json"):
        for line in f.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            answers[row["id"]] = row["ground_truth"]
    outputs = [json.loads(line) for line in (DATA / "model_outputs.jsonl").read_text(encoding="utf-8").splitlines()]
    return questions, answers, outputs


QUESTIONS, ANSWERS, OUTPUTS = _load()


def verdict(case: dict[str, Any]) -> bool:
    category, q = QUESTIONS[case["id"]]
    calls = case["result"] if isinstance(case["result"], list) else None
    if is_relevance(category):
        return check_relevance(calls, category).valid
    return calls is not None and check(q["function"], calls, ANSWERS[case["id"]], category).valid


def test_the_hand_made_set_covers_every_single_turn_category():
    per = collections.Counter(QUESTIONS[c["id"]][0] for c in OUTPUTS)
    assert set(per) == set(CATEGORIES)
    assert len(OUTPUTS) >= 150
    valid = sum(c["valid"] for c in OUTPUTS)
    assert 0.3 < valid / len(OUTPUTS) < 0.7  # both verdicts well represented
    assert len({c["case"] for c in OUTPUTS}) == len(OUTPUTS)


@pytest.mark.parametrize("case", OUTPUTS, ids=[c["case"] for c in OUTPUTS])
def test_bfcl_checker_gives_the_hand_derived_verdict(case):
    assert verdict(case) is case["valid"], case["why"]


def test_standardised_strings_drop_only_spaces_and_the_listed_punctuation():
    assert standardize("U.S. Dollar") == standardize("us_dollar") == "usdollar"
    assert standardize("Don't") == 'don"t'
    assert standardize("a\tb") == "a\tb" and standardize("a;b") == "a;b"  # tabs and ';' stay
    assert standardize("Привет, Мир") == "приветмир"


def test_java_and_javascript_source_typing():
    assert bfcl_types.java_value("42", "integer") == 42 and bfcl_types.java_value("4.2", "integer") == "4.2"
    assert bfcl_types.java_value("2.5f", "float") == 2.5 and bfcl_types.java_value("2.5", "float") == "2.5"
    assert bfcl_types.java_value("7L", "long") == 7 and bfcl_types.java_value("true", "boolean") is True
    assert bfcl_types.java_value('new ArrayList<>(Arrays.asList("a", "b"))', "ArrayList", "String") == ["a", "b"]
    assert bfcl_types.java_value('new String[]{"a", "b"}', "Array", "String") == ['"a"', '"b"']
    assert bfcl_types.java_value('new HashMap<String, Object>() {{ put("k", 1); put("s", "v"); }}',
                                 "HashMap") == {"k": 1, "s": "v"}
    with pytest.raises(bfcl_types.UnsupportedType):
        bfcl_types.java_value("x", "Set")
    assert bfcl_types.js_value("'a'", "String") == "a" and bfcl_types.js_value("12n", "Bigint") == 12
    assert bfcl_types.js_value("1e3", "float") == "1e3"  # no exponent form
    assert bfcl_types.js_value("[1, 'two', true]", "array") == [1, "two", True]
    assert bfcl_types.js_value("[[1, 2], [3, 4]]", "array", "array") == [[1, 2], [3, 4]]
    assert bfcl_types.js_value("{a: 1, b: 'x'}", "dict") == {"a": 1, "b": "x"}
    # an unknown declared type is reported as not checkable rather than guessed
    fn = {"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "Set"}}, "required": []}}
    v = check([fn], [{"f": {"x": "s"}}], [{"f": {"x": ["s"]}}], "simple_java")
    assert not v.valid and v.error_type == "unsupported_type"


def test_loader_keeps_bfcl_docs_and_sends_java_parameters_as_strings(tmp_path: Path):
    items = read_items(DATA / "BFCL_v4_simple_java.json", DATA / "possible_answer" / "BFCL_v4_simple_java.json")
    item = items[0]
    assert item["functions"][0]["parameters"]["properties"]["retries"]["type"] == "integer"  # BFCL's own doc kept
    sent = item["tools"][0]["function"]
    assert sent["name"] == "DataLoader_load" and item["names"]["DataLoader_load"] == "DataLoader.load"
    assert {s["type"] for s in sent["parameters"]["properties"].values()} == {"string"}
    assert "Java source text of type long" in sent["parameters"]["properties"]["size"]["description"]
    assert item["ground_truth"] and item["checker"] == "bfcl"
    multi = tmp_path / "BFCL_v4_multi_turn_base.json"
    multi.write_text(json.dumps({"id": "multi_turn_base_0", "question": [[{"role": "user", "content": "a"}],
                                                                         [{"role": "user", "content": "b"}]],
                                 "function": []}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="multi-turn"):
        read_items(multi, None)
    (tmp_path / "BFCL_v4_memory.json").write_text("", encoding="utf-8")
    pairs, skipped = data_dir_pairs(tmp_path)  # multi-turn runs on BFCL's simulators (tests/eval/test_bfcl_multi_sim.py)
    assert pairs == [(multi, None)] and skipped == ["memory"]


def _wire(case: dict[str, Any], names: dict[str, str]) -> Any:
    """The fake server's answer for a decoded result: tool calls, text, or an unreadable call."""
    result = case["result"]
    if isinstance(result, str):
        return result or "Не знаю."  # an empty answer is a server fault now (retried, never scored)
    if result is None:
        return {"tool_calls": [{"name": next(iter(names)), "arguments": '{"x": 1,'}]}
    sent = {v: k for k, v in names.items()}
    calls = [{"name": sent.get(n, n), "arguments": json.dumps(a, ensure_ascii=False)} for c in result for n, a in c.items()]
    return {"tool_calls": calls} if calls else "Не знаю."


def test_eval_fc_checker_bfcl_end_to_end(server, tmp_path: Path):
    # one answer per question: its first case that an OpenAI-style server can send
    first: dict[str, dict[str, Any]] = {}
    for c in OUTPUTS:
        if c["id"] not in first and not (isinstance(c["result"], list) and c["result"] in ([], [{}])):
            first[c["id"]] = c
    by_text = {}
    for qid, (_category, q) in QUESTIONS.items():
        names = {fn["name"].replace(".", "_"): fn["name"] for fn in q["function"]}
        by_text[q["question"][0][0]["content"]] = _wire(first[qid], names)
    server.script(tag="eval.fc", responder=lambda req: by_text[req["messages"][-1]["content"]])
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(DATA), "--checker", "bfcl",
                              *llm_flags(server)])
    assert res.exit_code == 0, res.output
    assert not server.errors
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    want: dict[str, list[bool]] = collections.defaultdict(list)
    for qid, c in first.items():
        want[QUESTIONS[qid][0]].append(c["valid"])
    got = {cat: s["accuracy"] for cat, s in doc["per_category"].items()}
    assert got == {cat: pytest.approx(sum(v) / len(v)) for cat, v in want.items()}
    recs = {json.loads(x)["id"]: json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()}
    assert recs["simple_python_0"]["checker"] == "bfcl" and recs["simple_python_0"]["correct"] is True
    # the fabrika checker, on the same answers, is the default and scores differently (float for int accepted)
    out2 = tmp_path / "fc2"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out2), "--bfcl", str(DATA / "BFCL_v4_simple_python.json"),
                              "--answers", str(DATA / "possible_answer" / "BFCL_v4_simple_python.json"),
                              *llm_flags(server)])
    assert res.exit_code == 0, res.output
    rec2 = [json.loads(x) for x in (out2 / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all("checker" not in r for r in rec2)
    bad = runner.invoke(app, ["eval", "fc", "--out", str(out), "--checker", "bfc", "--bfcl", str(DATA),
                              *llm_flags(server)])
    assert bad.exit_code == 2 and "--checker" in bad.output


def _fabrika_verdict(case: dict[str, Any], strings: str) -> bool:
    from fabrika.eval.fc_cases import read_bfcl
    from fabrika.eval.fc_eval import score_case
    from fabrika.llm.types import ChatResponse, Choice

    category, _ = QUESTIONS[case["id"]]
    f = DATA / f"BFCL_v4_{category}.json"
    pa = DATA / "possible_answer" / f.name
    item = next(c for c in read_bfcl(f, pa if pa.exists() else None) if c.id == case["id"]).as_item()
    item["strings"] = strings
    result = case["result"]
    if isinstance(result, list):
        sent = {v: k for k, v in item["names"].items()}
        choice = Choice(content=None, tool_calls=tuple({"name": sent.get(n, n), "arguments": a}
                                                        for c in result for n, a in c.items()))
    else:
        choice = Choice(content=result if result is not None else "<tool_call>{")
    return bool(score_case(item, ChatResponse(choices=(choice,)))["correct"])


def agreement_table() -> str:
    """Per category: how often each checker gives the hand-derived (= BFCL's) verdict."""
    rows = collections.defaultdict(lambda: [0, 0, 0, 0])
    for c in OUTPUTS:
        r = rows[QUESTIONS[c["id"]][0]]
        r[0] += 1
        r[1] += verdict(c) is c["valid"]
        r[2] += _fabrika_verdict(c, "exact") is c["valid"]
        r[3] += _fabrika_verdict(c, "bfcl") is c["valid"]
    lines = ["| category | cases | --checker bfcl | fabrika, exact strings | fabrika, --strings bfcl |",
             "|---|---:|---:|---:|---:|"]
    total = [0, 0, 0, 0]
    for cat in CATEGORIES:
        r = rows[cat]
        total = [t + x for t, x in zip(total, r)]
        lines.append(f"| {cat} | {r[0]} | {r[1]}/{r[0]} | {r[2]}/{r[0]} | {r[3]}/{r[0]} |")
    lines.append(f"| all | {total[0]} | {total[1]}/{total[0]} | {total[2]}/{total[0]} | {total[3]}/{total[0]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(agreement_table())


def test_fabrika_checker_resolves_lists_of_dicts_and_rejects_a_literal_template():
    from fabrika.eval.fc_eval import resolve_expected
    from fabrika.rewards.fc import calls_match

    exp = [{"add_to_cart": {"items": [[{"name": ["apple"], "qty": [2]}, {"name": ["pear"], "qty": [1, ""]}]]}}]
    ok = [{"name": "add_to_cart", "arguments": {"items": [{"name": "apple", "qty": 2}, {"name": "pear"}]}}]
    assert calls_match(ok, resolve_expected(ok, exp))
    swapped = [{"name": "add_to_cart", "arguments": {"items": [{"name": "pear"}, {"name": "apple", "qty": 2}]}}]
    assert not calls_match(swapped, resolve_expected(swapped, exp))
    literal = [{"name": "add_to_cart", "arguments": {"items": exp[0]["add_to_cart"]["items"][0]}}]
    assert not calls_match(literal, resolve_expected(literal, exp))
    dict_exp = [{"create_user": {"profile": [{"name": ["Anna"], "age": [30]}]}}]
    dict_literal = [{"name": "create_user", "arguments": {"profile": {"name": ["Anna"], "age": [30]}}}]
    assert not calls_match(dict_literal, resolve_expected(dict_literal, dict_exp))
    assert resolve_expected([], dict_exp) == [{"name": "create_user", "arguments": {"profile": {"name": "Anna",
                                                                                                 "age": 30}}}]
