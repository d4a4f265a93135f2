"""Multi-constraint prompts over real HTTP: contradicting LLM-written pairs are never combined,
an answer failing one constraint is dropped with that constraint named, GRPO rows carry every verifier."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from fabrika.gates import mark_dropped
from fabrika.generators.instruct.multi import parse_conflict
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.rewards.instruct import IFRewardConfig, score_if
from fabrika.store.run import RunStore
from fabrika.testing import FakeOpenAIServer

LOWER = "Весь ответ должен быть написан строчными буквами."
UPPER = "Весь ответ должен быть написан заглавными буквами."
COMMA = "В ответе не должно быть ни одной запятой."
WORDS = "Ответ должен содержать не менее 5 слов."
SEEDS = {"c-lower": LOWER, "c-upper": UPPER, "c-comma": COMMA, "c-words": WORDS}


def answer(body: str, cases: list[tuple[str, bool]]) -> str:
    code = "def evaluate(response):\n    " + body.replace("\n", "\n    ")
    return json.dumps({"func": code, "cases": [{"input": r, "output": y} for r, y in cases]}, ensure_ascii=False)


VERIFIERS = {
    LOWER: [answer("return response == response.lower()", [("привет мир", True), ("Привет мир", False),
                                                             ("тихий вечер без забот", True)]),
            answer("return not any(c.isupper() for c in response)", [("строчные буквы, и всё", True),
                                                                      ("ЗАГЛАВНЫЕ", False), ("Ой", False)]),
            # "2024" is lowercase and uppercase at once: a vacuous case must not make the pair look compatible
            answer("return response.lower() == response", [("всё хорошо", True), ("Всё", False), ("2024", True)])],
    UPPER: [answer("return response == response.upper()", [("ПРИВЕТ МИР", True), ("Привет", False),
                                                             ("ГРОМКО И ЯСНО", True)]),
            answer("return not any(c.islower() for c in response)", [("ВСЁ ЗАГЛАВНОЕ, ДА", True), ("тихо", False),
                                                                      ("ТОЛЬКО ТАК", True)]),
            answer("return response.upper() == response", [("ДА", True), ("нет", False), ("42", True)])],
    COMMA: [answer("return ',' not in response", [("без запятых тут", True), ("с, запятой", False),
                                                   ("ДА", True)]),
            answer("return response.count(',') == 0", [("просто текст", True), ("а, б", False), ("ОК", True)]),
            answer("return not ',' in response", [("ещё текст", True), ("раз, два", False), ("НЕТ", True)])],
    WORDS: [answer("return len(response.split()) >= 5", [("раз два три четыре пять", True), ("мало", False),
                                                          ("ОДИН ДВА ТРИ ЧЕТЫРЕ ПЯТЬ ШЕСТЬ", True)]),
            answer("return len(response.split()) > 4", [("это шесть слов тут точно есть", True), ("два слова", False),
                                                         ("а б в г д е", True)]),
            # a slightly wrong verifier (>= 6) that still survives: 8 of the 9 supported cases
            answer("words = response.split()\nreturn len(words) >= 6", [("семь слов в этом ответе точно есть", True),
                                                                         ("нет", False), ("а б", False)])],
}


def listed(req: dict) -> list[str]:
    text = "\n".join(m["content"] for m in req["messages"])
    return [c for c in SEEDS.values() if c in text]


def conflict_judge(req: dict) -> str:
    """Says LOWER × UPPER is fine (so the verifier check must catch it) and flags COMMA × WORDS."""
    items = re.findall(r"^(\d+)\. (.*)$", req["messages"][-1]["content"], re.MULTILINE)
    by_text = {t.strip(): int(i) for i, t in items}
    if COMMA in by_text and WORDS in by_text:
        return ("<think>Запятые и длина… проверю.</think>"
                + json.dumps({"reason": "слишком строгое сочетание", "conflict": True,
                              "pairs": [[by_text[COMMA], by_text[WORDS]]]}, ensure_ascii=False))
    return json.dumps({"reason": "противоречий нет", "conflict": False, "pairs": []}, ensure_ascii=False)


def respond(req: dict) -> str:
    wanted = listed(req)
    text = "это простой и понятный ответ без лишнего"
    if "Казани" in json.dumps(req["messages"], ensure_ascii=False):
        text = "это простой, понятный ответ без лишнего"  # a comma: fails the no-comma constraint only
    if "Сочи" in json.dumps(req["messages"], ensure_ascii=False):
        text = "это короткий ответ про сочи"  # 5 words: fails only the >= 6 verifier of c-words
    return text.upper() if UPPER in wanted else text


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    return _run(tmp_path_factory.mktemp("multi"), conflict_judge, 16)


def _run(tmp: Path, judge, target: int, seeds: dict[str, str] = SEEDS,  # noqa: ANN001, ANN202
         verifiers: dict[str, list[str]] = VERIFIERS, multi: dict | None = None):
    seed_file = tmp / "seeds.jsonl"
    seed_file.write_text("\n".join(json.dumps({"id": k, "text": v}, ensure_ascii=False) for k, v in seeds.items()),
                         encoding="utf-8")
    pool = tmp / "queries.jsonl"
    pool.write_text("\n".join(json.dumps({"id": f"q{i}", "text": t}, ensure_ascii=False)
                              for i, t in enumerate(["Расскажи о Москве.", "Расскажи о Казани.", "Расскажи о Сочи."])), encoding="utf-8")
    with FakeOpenAIServer() as srv:
        for text, answers in verifiers.items():
            srv.script(tag="if.verifiers", match=f"Ограничение: «{text}»", responses=answers)
        srv.script(tag="if.multi.conflict", responder=judge)
        srv.script(tag="if.multi.respond", responder=respond)
        config, issues = validate_data({
            "name": "if_multi_fake", "seed": 5, "run_dir": str(tmp / "run"),
            "llm": {"backend": "openai", "model": "fake", "endpoints": [{"base_url": srv.base_url}],
                    "max_retries": 0, "cache": {"enabled": False}},
            "stages": [
                {"kind": "if.expand", "library_seeds": False, "seed_files": [str(seed_file)], "target_count": 0},
                {"kind": "if.dedup", "input": "if.expand"},
                {"kind": "if.verifiers", "input": "if.dedup", "k": 3},
                {"kind": "if.consistency", "input": "if.verifiers", "workers": 2},
                {"kind": "if.multi.prompts", "input": "if.verifiers", "target_count": target, "llm_share": 1.0,
                 "count_weights": {2: 1, 3: 1}, "query_pool": str(pool), **(multi or {})},
                {"kind": "if.multi.responses", "input": "if.multi.prompts", "k": 1},
                {"kind": "if.multi.samples", "input": "if.multi.responses"},
                {"kind": "if.multi.grpo", "input": "if.multi.prompts"},
            ],
            "filters": {"consistency": {"min_unique_functions": 3, "min_unique_cases": 5}},
            "dataset": {"stages": ["if.multi.samples", "if.multi.grpo"]},
        }, "test", tmp)
        assert config is not None, [str(i) for i in issues]
        result = run_pipeline(config, resume=False, progress=False)
        assert not srv.errors
    stages = json.loads((tmp / "run" / "manifest.json").read_text())["stages"]
    assert not any(s.get("duplicate_ids") for s in stages.values())
    return tmp / "run", result


def test_contradicting_llm_constraints_are_never_combined(run) -> None:
    run_dir, _ = run
    prompts = RunStore(run_dir).scan_raw("if.multi.prompts").collect()
    kept = prompts.filter(pl.col("status") == "ok")
    assert kept.height >= 8
    for row in kept.iter_rows(named=True):
        ids = {c["id"] for c in json.loads(row["constraints"])}
        assert 2 <= len(ids) == row["n_constraints"]
        assert not {"c-lower", "c-upper"} <= ids  # the verifiers contradict on the stored cases
        assert not {"c-comma", "c-words"} <= ids  # the conflict judge flagged the pair
    reasons = [r for r in prompts["reason"].drop_nulls()]
    contra = [r for r in reasons if r.startswith("verifier_contradiction:")]
    assert contra and all({"c-lower", "c-upper"} <= set(re.findall(r"c-\w+", r)) for r in contra)
    assert all(re.search(r": 0 of \d+ stored positive cases satisfy both$", r) for r in contra)
    judged = [r for r in reasons if r.startswith("conflict_judge:")]
    assert judged and all({"c-comma", "c-words"} <= set(re.findall(r"c-\w+", r)) for r in judged)
    assert not [r for r in reasons if r.startswith("conflict_judge_failed")]


def test_answer_failing_one_constraint_is_dropped_with_it_named(run) -> None:
    run_dir, result = run
    store = RunStore(run_dir)
    resp = store.scan_raw("if.multi.responses").collect().filter(pl.col("status") == "ok")
    marked, _ = mark_dropped(store.scan("if.multi.responses", []), {})
    dropped = dict(marked.select("id", "dropped_by").collect().iter_rows())
    kazan_comma = [r for r in resp.iter_rows(named=True)
                   if "Казани" in r["query"] and "c-comma" in {c["id"] for c in json.loads(r["constraints"])}]
    assert kazan_comma
    for r in kazan_comma:
        results = {c["id"]: c["strict"] for c in json.loads(r["constraint_results"])}
        assert results["c-comma"] is False and sum(not v for v in results.values()) == 1
        assert json.loads(r["failed_constraints"]) == ["c-comma"] and r["if_multi_all_pass"] is False
        assert dropped[r["id"]] == "if_multi_failed_constraint"
    passing = resp.filter(pl.col("if_multi_all_pass"))
    assert passing.height >= 4 and all(dropped[i] is None for i in passing["id"])
    samples = pl.read_parquet(result.version.path / "data" / "if.multi.samples.parquet")
    assert samples.height == passing.height
    assert set(samples["completion"].map_elements(lambda c: json.loads(c)[0]["content"], return_dtype=pl.String)) <= \
        set(passing["response"])
    # the dataset funnel counts the drop, and the dropped sample still names its constraint
    failing = resp.filter(~pl.col("if_multi_all_pass"))
    assert failing.height == len(kazan_comma) + resp.filter(pl.col("query").str.contains("Сочи")
                                                            & pl.col("constraints").str.contains('"c-words"')).height
    gates = result.version.funnel["gates"]["if.multi.samples"]
    assert gates["dropped_if_multi_failed_constraint"] == failing.height
    raw = store.scan_raw("if.multi.samples").collect().filter(~pl.col("if_multi_all_pass"))
    assert raw.height == failing.height and set(raw["failed_constraints"]) == {'["c-comma"]', '["c-words"]'}


def test_loose_mode_is_a_refilter_without_llm_calls(run) -> None:
    from fabrika.store.versions import materialise

    run_dir, result = run
    store = RunStore(run_dir)
    resp = store.scan_raw("if.multi.responses").collect().filter(pl.col("status") == "ok")
    sochi = resp.filter(pl.col("query").str.contains("Сочи") & pl.col("constraints").str.contains('"c-words"'))
    assert sochi.height >= 1
    for r in sochi.iter_rows(named=True):
        words = next(c for c in json.loads(r["constraint_results"]) if c["id"] == "c-words")
        assert (words["strict"], words["loose"], words["pass_share"]) == (False, True, 0.6667)
        assert json.loads(r["failed_constraints"]) == ["c-words"] and json.loads(r["failed_constraints_loose"]) == []
    strict = result.version.funnel["gates"]["if.multi.samples"]
    loose = materialise(run_dir, {"if_multi": {"mode": "loose"}}, name="loose").funnel["gates"]["if.multi.samples"]
    assert loose["out"] == strict["out"] + sochi.height
    assert loose["dropped_if_multi_failed_constraint"] == strict["dropped_if_multi_failed_constraint"] - sochi.height


def test_grpo_rows_carry_what_the_if_reward_needs(run) -> None:
    run_dir, result = run
    grpo = pl.read_parquet(result.version.path / "data" / "if.multi.grpo.parquet")
    assert grpo.height >= 8
    row = grpo.row(0, named=True)
    gt = json.loads(row["ground_truth"])
    assert all(c["verifier_code"] for c in gt["constraints"])  # every LLM-written constraint has its own verifiers
    prompt = json.loads(row["prompt"])
    upper = any(c["id"] == "c-upper" for c in gt["constraints"])
    good = "ЭТО ПРОСТОЙ ОТВЕТ ИЗ СЕМИ СЛОВ ТУТ" if upper else "это простой ответ из семи слов тут"
    bad = good.replace(" ", ", ", 1).swapcase()

    def run_code(code: str, texts: list[str]) -> list[bool]:  # trusted test code, not LLM output
        scope: dict = {}
        exec(code, scope)  # noqa: S102
        return [bool(scope["evaluate"](t)) for t in texts]

    scores = score_if([prompt, prompt], [good, bad], IFRewardConfig(rm_correction=False), sandbox_runner=run_code,
                      constraints=[gt["constraints"]] * 2, ground_truth=[gt] * 2)
    assert scores[0].v == 1.0 and scores[1].v < 1.0


@pytest.mark.parametrize("text, ok", [
    ('{"reason": "нет", "conflict": false, "pairs": []}', True),
    ('{"reason": "да", "conflict": true, "pairs": []}', False),
    ('{"reason": "да", "conflict": true, "pairs": [[1, 9]]}', False),
    ('{"reason": "да", "conflict": "yes", "pairs": [[1, 2]]}', False),
    ("<think>думаю…", False),
    ('{"reason": "да", "conflict": true, "pairs": [{"a": "1", "b": 3}]}', True),
    ('{"reason": "да", "conflict": true, "pairs": [[2, 2]]}', False),
])
def test_conflict_judge_answers_are_untrusted(text: str, ok: bool) -> None:
    parsed = parse_conflict(text, 3)
    assert isinstance(parsed, tuple) is ok


def test_an_unusable_conflict_judge_never_lets_a_combination_through(tmp_path: Path) -> None:
    answers = iter(["Сложно сказать, всё зависит от контекста.",
                    {"content": '{"reason": "проверяю", "conflict": fal', "finish_reason": "length"},
                    '{"reason": "есть", "conflict": true, "pairs": []}'])

    def judge(req: dict):  # noqa: ANN202
        return next(answers, "<think>думаю, думаю")

    run_dir, _ = _run(tmp_path, judge, 4)
    prompts = RunStore(run_dir).scan_raw("if.multi.prompts").collect()
    assert prompts.filter(pl.col("status") == "ok").height == 0
    failed = sorted(r for r in prompts["reason"].drop_nulls() if r.startswith("conflict_judge_failed"))
    assert len(failed) == 4
    assert any("truncated" in r for r in failed) and any("conflict flagged without pairs" in r for r in failed)
    assert any("invalid_json" in r or "empty_answer" in r for r in failed)


def test_library_only_prompts_respect_the_conflict_table(tmp_path: Path) -> None:
    from fabrika.constraints import check_combination

    config, issues = validate_data({
        "name": "if_multi_lib", "seed": 2, "run_dir": str(tmp_path / "run"), "llm": {"backend": "sim"},
        "stages": [{"kind": "if.multi.prompts", "target_count": 80, "count_weights": {5: 1, 6: 1}}],
        "dataset": {"stages": ["if.multi.prompts"]},
    }, "test", tmp_path)
    assert config is not None, [str(i) for i in issues]
    run_pipeline(config, resume=False, progress=False)
    prompts = RunStore(tmp_path / "run").scan_raw("if.multi.prompts").collect()
    kept = prompts.filter(pl.col("status") == "ok")
    assert kept.height >= 60
    for row in kept.iter_rows(named=True):
        combo = [(cid, params) for cid, params in json.loads(row["library_constraints"])]
        assert len(combo) == row["n_constraints"] >= 5 and check_combination(combo) == []
        assert not any(cid.startswith(("ru.language.", "ru.repeat.")) for cid, _ in combo)
    refused = [r for r in prompts["reason"].drop_nulls() if r.startswith("conflict_table:")]
    assert refused  # the table had something to refuse, and every refusal names both constraints
    assert all(len(re.findall(r"ru\.[a-z_]+\.[a-z_]+@", r)) == 2 for r in refused)


@pytest.mark.parametrize("stage, needle", [
    ({"kind": "if.multi.prompts", "count_weights": {0: 1}}, "count_weights"),
    ({"kind": "if.multi.prompts", "library_ids": ["ru.nope.missing"]}, "ru.nope.missing"),
    ({"kind": "if.multi.prompts", "input": "if.verifiers"}, "if.consistency"),
    ({"kind": "if.dialogues", "turns_min": 5, "turns_max": 2}, "turns_min"),
    ({"kind": "if.dialogues", "rules_en": ["ru.nope.missing"]}, "rules_en"),
    ({"kind": "if.dialogues", "tactics": ["flattery"]}, "tactics"),
    ({"kind": "if.dialogues", "rules_ru": ["ru.punct.no_commas"], "rules_min": 2}, "rules_min"),
])
def test_bad_configs_are_reported_before_any_llm_call(tmp_path: Path, stage: dict, needle: str) -> None:
    stages = [stage]
    if stage.get("input") == "if.verifiers":
        stages = [{"kind": "if.expand", "library_seeds": True, "target_count": 0},
                  {"kind": "if.verifiers", "input": "if.expand"}, stage]
    config, issues = validate_data({"name": "bad", "llm": {"backend": "sim"}, "stages": stages}, "test", tmp_path)
    assert config is None and any(needle in str(i) for i in issues), [str(i) for i in issues]


def test_two_phrasings_of_one_rule_are_never_combined(tmp_path: Path) -> None:
    no_commas = "Не используйте запятые."
    seeds = {"c-comma": COMMA, "c-comma2": no_commas, "c-words": WORDS}
    verifiers = {COMMA: VERIFIERS[COMMA], no_commas: VERIFIERS[COMMA], WORDS: VERIFIERS[WORDS]}
    run_dir, _ = _run(tmp_path, lambda req: '{"reason": "нет", "conflict": false, "pairs": []}', 8, seeds, verifiers)
    prompts = RunStore(run_dir).scan_raw("if.multi.prompts").collect()
    for row in prompts.filter(pl.col("status") == "ok").iter_rows(named=True):
        assert not {"c-comma", "c-comma2"} <= {c["id"] for c in json.loads(row["constraints"])}
    redundant = [r for r in prompts["reason"].drop_nulls() if r.startswith("redundant:")]
    assert redundant and all({"c-comma", "c-comma2"} <= set(re.findall(r"c-\w+", r)) for r in redundant)
    assert not [r for r in prompts["reason"].drop_nulls() if "c-words" in r]  # the compatible pairs pass
