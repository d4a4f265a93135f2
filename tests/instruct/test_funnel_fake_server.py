"""The IF funnel over real HTTP: scripted verifiers, item-by-item drops with reasons, LLM-free refiltering.

Five user seed constraints; the fake server answers the verifier writer with a
mix per constraint (good, non-compiling, wrong on its own cases, hostile,
mutually inconsistent, unparseable) and back-translates one constraint's code
into something else. The funnel must drop exactly the bad items, record why,
and refilter with other thresholds without a single LLM request.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.run import RunStore
from fabrika.store.versions import materialise
from fabrika.testing import FakeOpenAIServer

LOWER = "Весь ответ должен быть написан строчными буквами."
WORDS = "Ответ должен содержать не менее 5 слов."
COMMA = "В ответе не должно быть ни одной запятой."
ENDS = "Ответ должен заканчиваться фразой «Удачи!»."
START = "Ответ должен начинаться со слова «Итак»."
SEEDS = {"c-lower": LOWER, "c-words": WORDS, "c-comma": COMMA, "c-ends": ENDS, "c-start": START}


def answer(body: str, cases: list[tuple[str, bool]]) -> str:
    code = "def evaluate(response):\n    " + body.replace("\n", "\n    ")
    return json.dumps({"func": code, "cases": [{"input": r, "output": y} for r, y in cases]}, ensure_ascii=False)


# c-lower: 3 good functions (one fenced in prose, with escaped newlines), one wrong on its own
# cases, one hostile, one non-compiling, two unparseable → survives with 3 functions at 1.0.
ESCAPED = ('Вот функция:\n```json\n{"func": "def evaluate(response):\\\\n    return response.lower() == response", '
           '"cases": [{"input": "ещё пример", "output": true}, {"input": "Ещё Пример", "output": false}, '
           '{"input": "текст без заглавных", "output": true}]}\n```\nГотово.')
LOWER_ANSWERS = [
    answer("return response == response.lower()", [("привет мир", True), ("Привет мир", False), ("всё хорошо.", True)]),
    answer("return not any(c.isupper() for c in response)",
           [("строчные буквы", True), ("ЗАГЛАВНЫЕ", False), ("смешанный Текст", False)]),
    ESCAPED,
    answer("return response == response.upper()",
           [("маленькие буквы", True), ("Большая Буква", False), ("тоже маленькие", True)]),
    answer("import os\nos.system('touch /tmp/fabrika_pwned')\nreturn True",
           [("ещё одна строка", True), ("Ещё", False), ("ок", True)]),
    answer("return True", [("а", True)]).replace("def evaluate(response):", "def evaluate(response)"),
    "Извините, я не могу написать такую функцию.",
    '{"func": "def evaluate(response):\\n    return',
]
# c-words: four functions that disagree with each other (and label cases their own way).
WORDS_ANSWERS = [
    answer("return len(response.split()) >= 5",
           [("раз два три четыре пять", True), ("раз два", False), ("один два три четыре пять шесть", True)]),
    answer("return len(response) >= 40",
           [("короткий", False), ("это довольно длинная строка для проверки", True), ("а б в г д", False)]),
    answer("return len(response.split()) > 5",
           [("слово слово слово слово слово", False), ("семь слов тут есть и даже больше", True), ("мало", False)]),
    answer("return len(response.split()) <= 5",
           [("мало слов", True), ("и ещё несколько слов здесь и там", False), ("пять слов ровно тут есть", True)]),
] * 2
COMMA_ANSWERS = [answer("return ',' not in response", [("без запятых", True), ("с, запятой", False), ("да", True)])] * 8
ENDS_ANSWERS = [
    answer("return response.strip().endswith('Удачи!')", [("Всё просто. Удачи!", True), ("Удачи! Всё", False), ("Пока. Удачи!", True)]),
    answer("return response.rstrip().endswith('Удачи!')", [("Хорошо. Удачи!", True), ("Нет", False), ("Да. Удачи!", True)]),
    answer("s = response.strip()\nreturn s[-6:] == 'Удачи!'", [("Итог. Удачи!", True), ("Удачи, друг", False), ("Ну, Удачи!", True)]),
    answer("result = response.strip().endswith('Удачи!')\nreturn result",
           [("И всё. Удачи!", True), ("Привет", False), ("Ок. Удачи!", True)]),
] * 2
START_ANSWERS = ["не JSON вовсе"] * 8


def backtranslate(req: dict) -> str:
    code = req["messages"][-1]["content"]
    if "Удачи" in code:
        return "Используй деловой стиль изложения."  # the function is read as something else
    return "Используй только строчные буквы."  # a paraphrase: tf-idf similarity 0.87


def respond(req: dict) -> str:
    text = json.dumps(req["messages"], ensure_ascii=False)
    if "Москве" in text:
        return "москва — столица россии и очень большой город."
    if "Казани" in text:
        return "Казань — Столица Татарстана."  # breaks the constraint
    return "Sorry, I only answer in English."  # wrong language


def test_funnel_drops_exactly_the_bad_items_and_refilters_offline(tmp_path: Path):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("\n".join(json.dumps({"id": k, "text": v}, ensure_ascii=False) for k, v in SEEDS.items()),
                     encoding="utf-8")
    pool = tmp_path / "queries.jsonl"
    pool.write_text("\n".join(json.dumps({"id": f"q{i}", "text": t}, ensure_ascii=False) for i, t in
                              enumerate(["Расскажи о Москве.", "Расскажи о Казани.", "Расскажи о Сочи."])),
                    encoding="utf-8")
    with FakeOpenAIServer() as srv:
        for text, answers in ((LOWER, LOWER_ANSWERS), (WORDS, WORDS_ANSWERS), (COMMA, COMMA_ANSWERS),
                              (ENDS, ENDS_ANSWERS), (START, START_ANSWERS)):
            srv.script(tag="if.verifiers", match=f"Ограничение: «{text}»", responses=answers)
        srv.script(tag="if.backtranslate", responder=backtranslate)
        srv.script(tag="if.respond", responder=respond)
        config, issues = validate_data({
            "name": "if_fake", "seed": 3, "run_dir": str(tmp_path / "run"),
            "llm": {"backend": "openai", "model": "fake", "endpoints": [{"base_url": srv.base_url}],
                    "max_retries": 0, "cache": {"enabled": False},
                    "group_samples": False},  # one HTTP request per sample: counts and faults are per request
            "stages": [
                {"kind": "if.expand", "library_seeds": False, "seed_files": [str(seeds)], "target_count": 0},
                {"kind": "if.dedup", "input": "if.expand"},
                {"kind": "if.verifiers", "input": "if.dedup", "k": 8},
                {"kind": "if.consistency", "input": "if.verifiers", "workers": 2},
                {"kind": "if.backtranslation", "input": "if.verifiers", "similarity": {"backend": "tfidf"}},
                {"kind": "if.queries", "input": "if.verifiers", "query_pool": str(pool), "queries_per_constraint": 3},
                {"kind": "if.responses", "input": "if.queries", "k": 1},
                {"kind": "if.samples", "input": "if.responses"},
            ],
            "dataset": {"stages": ["if.samples"]},
        }, "test", tmp_path)
        assert config is not None, [str(i) for i in issues]
        result = run_pipeline(config, resume=False, progress=False)
        served = srv.served
        assert served == 5 * 8 + 3 + 3 + 3  # verifiers, back-translations (top 3 of c-lower, c-ends), responses

        store = RunStore(tmp_path / "run")
        ver = store.scan_raw("if.verifiers").collect()
        rejected = ver.filter(pl.col("status") == "rejected")
        by_cid = {cid: sorted(r.split(":")[0] for r in g["reason"]) for (cid,), g in rejected.group_by("constraint_id")}
        assert by_cid == {"c-lower": ["invalid_json", "invalid_json", "syntax_error"],
                          "c-start": ["invalid_json"] * 8 + ["no_valid_verifiers"]}

        cons = {r["id"]: r for r in store.scan_raw("if.consistency").collect().iter_rows(named=True)}
        assert set(cons) == {"c-lower", "c-words", "c-comma", "c-ends"}
        lower = cons["c-lower"]
        funcs = json.loads(lower["functions"])
        assert (lower["n_unique_functions"], lower["n_broken_functions"], lower["n_unique_cases"]) == (4, 1, 15)
        # the wrong function (== upper) never reproduces a true case: a constant on these cases, accuracy 0
        assert sorted(f["accuracy"] for f in funcs if f["runnable"]) == [0.0, 1.0, 1.0, 1.0]
        hostile = next(f for f in funcs if not f["runnable"])
        assert hostile["error"].startswith("precheck") and not Path("/tmp/fabrika_pwned").exists()
        assert json.loads(lower["function_accuracies"]) == [1.0, 1.0, 1.0, 0.0]
        assert cons["c-words"]["max_function_accuracy"] < 0.8 and cons["c-comma"]["n_unique_functions"] == 1

        # gate reasons, item by item, on the verifier table (scores joined lazily)
        marked = materialise(tmp_path / "run", name="probe")
        assert marked.rows == 1
        v_marked = _dropped_by(store, ["if.consistency", "if.backtranslation"])
        assert v_marked == {"c-lower": None, "c-words": "consistency_no_accurate_function",
                            "c-comma": "consistency_few_functions", "c-ends": "backtranslation_dissimilar",
                            "c-start": "rejected"}
        bt = {r["id"]: r for r in store.scan_raw("if.backtranslation").collect().iter_rows(named=True)}
        assert 0.9 > bt["c-lower"]["bt_min_similarity"] >= 0.6 > bt["c-ends"]["bt_min_similarity"]

        resp = store.scan_raw("if.responses").collect()
        reasons = dict(zip(resp["query"], resp["reason"]))
        assert reasons["Расскажи о Сочи."].startswith("not_russian") and reasons["Расскажи о Москве."] is None
        kazan = resp.filter(pl.col("query") == "Расскажи о Казани.").row(0, named=True)
        assert kazan["max_failed_verifier_accuracy"] == 1.0  # good verifiers fail it → gated out
        moscow = resp.filter(pl.col("query") == "Расскажи о Москве.").row(0, named=True)
        assert moscow["max_failed_verifier_accuracy"] == 0.0  # only the wrong function fails it

        samples = pl.read_parquet(result.version.path / "data" / "if.samples.parquet")
        assert samples.height == 1 and "москва" in samples["completion"][0]

        # refilter: thresholds change the output, and not one request reaches the server
        strict = materialise(tmp_path / "run", {"consistency": {"min_function_accuracy": 0.0}}, name="acc03")
        fewer = materialise(tmp_path / "run", {"consistency": {"min_unique_functions": 5}}, name="fn5")
        sim99 = materialise(tmp_path / "run", {"backtranslation": {"min_similarity": 0.9}}, name="bt")
        assert (strict.rows, fewer.rows) == (0, 0)
        assert strict.funnel["gates"]["if.samples"]["dropped_if_response_failed_verifier"] == 1
        assert fewer.funnel["gates"]["if.samples"]["dropped_consistency_few_functions"] == 1
        assert sim99.rows == 0 and sim99.funnel["gates"]["if.samples"]["dropped_backtranslation_dissimilar"] == 1
        assert srv.served == served


def _dropped_by(store: RunStore, annotators: list[str]) -> dict[str, str | None]:
    from fabrika.gates import mark_dropped

    lf = store.scan("if.verifiers", annotators).filter(pl.col("sample_index").is_null())
    marked, _ = mark_dropped(lf, {})
    return dict(marked.select("id", "dropped_by").collect().iter_rows())
