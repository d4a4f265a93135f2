"""Stage logic with an injected context: cross-validation, sandbox probing, query placement, combinations."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from fabrika.constraints import REGISTRY, check_combination, to_constraint_record
from fabrika.errors import InputError
from fabrika.generators.instruct.queries import QueriesConfig, QueriesStage, load_pool
from fabrika.generators.instruct.verifiers import (
    ConsistencyConfig,
    ConsistencyStage,
    cross_validate,
    normalise_code,
    surviving_functions,
)
from fabrika.sandbox import Verdict
from fabrika.testing import stage_context

T, F = Verdict("true"), Verdict("false")
ERR = Verdict("error", "exception", "ZeroDivisionError: division by zero")


def test_cross_validate_support_and_accuracy():
    cases = [("a", True), ("b", False), ("c", True), ("d", False)]
    verdicts = [
        [T, F, T, F],  # perfect
        [T, F, F, F],  # one miss
        [F, T, F, T],  # everything wrong
        [T, ERR, T, F],  # not runnable: excluded from support, accuracy 0
    ]
    cv = cross_validate(["f1", "f2", "f3", "f4"], cases, verdicts)
    assert cv["runnable"] == [True, True, True, False]
    assert cv["support"] == [2, 2, 1, 2]
    assert cv["accuracies"] == [1.0, 0.75, 0.0, 0.0] and cv["n_supported"] == 4


def test_unsupported_cases_do_not_count_against_functions():
    cases = [("a", True), ("b", True), ("c", False)]
    cv = cross_validate(["f"], cases, [[T, F, F]])  # nobody reproduces b's label
    assert cv["support"] == [1, 0, 1] and cv["accuracies"] == [1.0] and cv["n_supported"] == 2
    assert (cv["n_supported_true"], cv["n_supported_false"]) == (1, 1)


def test_normalise_code_ignores_comments_and_layout():
    a = "def evaluate(response):\n    # comment\n    return  response == response.lower()"
    b = "def evaluate(response):\n    return response == response.lower()  # same"
    assert normalise_code(a) == normalise_code(b) != normalise_code(b.replace("lower", "upper"))


class FakePool:
    """Runs nothing: returns scripted verdicts and records what was asked."""

    isolation = "fake"

    def __init__(self, by_code: dict[str, Any]) -> None:
        self.by_code = by_code
        self.calls: list[tuple[str, int]] = []

    async def run(self, code: str, responses: list[str]) -> list[Verdict]:
        self.calls.append((code, len(responses)))
        rule = self.by_code[code]
        return [rule(r) if callable(rule) else rule for r in responses]


def _verifiers(*codes_cases: tuple[str, list[tuple[str, bool]]]) -> str:
    return json.dumps([{"sample_index": i, "code": c, "cases": [{"response": r, "label": y} for r, y in cs]}
                       for i, (c, cs) in enumerate(codes_cases)], ensure_ascii=False)


async def test_consistency_probes_hanging_code_once_and_drops_conflicting_cases():
    good = "def evaluate(response):\n    return response.islower()"
    hang = "def evaluate(response):\n    while True:\n        pass"
    pool = FakePool({good: lambda r: T if r.islower() else F, hang: Verdict("timeout", None, "ran past 1s")})
    ctx = stage_context(resources={"sandbox": pool}, seed=1)
    stage = ConsistencyStage(ConsistencyConfig(input="v"), ctx)
    await stage.setup()
    row = {"id": "c1", "text": "строчные", "verifiers": _verifiers(
        (good, [("аб", True), ("Аб", False), ("вг", True)]),
        (hang, [("де", True), ("аб", False)]),  # "аб" labelled both ways → not a test case
        ("def evaluate(response):\n    # a comment\n    return response.islower()", [("жз", True)]),
    )}
    [out] = await stage.process(row)
    assert ctx.reports["sandbox_isolation"] == "fake"
    assert (out["n_functions"], out["n_unique_functions"], out["n_broken_functions"]) == (3, 1, 1)
    assert (out["n_unique_cases"], out["n_conflicting_cases"]) == (4, 1)
    assert [c for c in pool.calls if c[0] == hang] == [(hang, 1)]  # one probe, not one timeout per case
    funcs = json.loads(out["functions"])
    assert funcs[1]["error"] == "timeout" and funcs[0]["accuracy"] == 1.0
    assert surviving_functions(out["functions"], 0.8) == [funcs[0]]


def test_query_pool_errors(tmp_path: Path):
    bad = tmp_path / "pool.jsonl"
    bad.write_text('{"text": "Расскажи о Москве."}\n{"txt": "нет поля"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"pool\.jsonl:2"):
        load_pool(bad)
    shipped = load_pool(Path(__file__).resolve().parents[2] / "fabrika" / "data" / "instruct" / "queries_ru.jsonl")
    assert len(shipped) >= 100 and len({t for _, t in shipped}) == len(shipped)


def _constraint_row(cid: str, **extra: Any) -> dict[str, Any]:
    funcs = [{"sample_index": 0, "code": "def evaluate(response):\n    return True", "accuracy": 1.0, "runnable": True},
             {"sample_index": 1, "code": "x", "accuracy": 0.0, "runnable": False}]
    return {"id": cid, "text": "Весь ответ должен быть написан строчными буквами.", "source": "llm", "family": None,
            "params": "{}", "parent_id": "seed", "functions": json.dumps(funcs), "n_unique_functions": 3,
            "n_unique_cases": 12, "max_function_accuracy": 1.0, "function_accuracies": "[1.0]",
            "bt_min_similarity": 0.9, "bt_mean_similarity": 0.95, **extra}


async def test_queries_placements_and_carried_scores():
    stage = QueriesStage(QueriesConfig(input="v", queries_per_constraint=5, system_share=0.5), stage_context(seed=1))
    await stage.setup()
    rows = []
    for i in range(40):
        rows += await stage.process(_constraint_row(f"c{i}"))
    assert len(rows) == 200 and len({r["id"] for r in rows}) == 200
    shares = sum(r["placement"] == "system" for r in rows) / len(rows)
    assert 0.35 < shares < 0.65
    for r in rows:
        msgs = json.loads(r["messages"])
        text = "Весь ответ должен быть написан строчными буквами."
        if r["placement"] == "system":
            assert msgs[0]["role"] == "system" and text in msgs[0]["content"] and msgs[1]["content"] == r["query"]
        else:
            assert len(msgs) == 1 and msgs[0]["content"].startswith(r["query"]) and text in msgs[0]["content"]
        assert [v["sample_index"] for v in json.loads(r["verifiers"])] == [0]  # runnable functions only
        assert r["bt_min_similarity"] == 0.9 and r["n_unique_cases"] == 12
    sys_only = QueriesStage(QueriesConfig(input="v", system_share=1.0), stage_context(seed=1))
    await sys_only.setup()
    assert {r["placement"] for r in await sys_only.process(_constraint_row("x"))} == {"system"}


async def test_library_constraints_combine_only_without_conflicts():
    stage = QueriesStage(QueriesConfig(input="v", queries_per_constraint=3, max_extra_constraints=3), stage_context(seed=1))
    await stage.setup()
    combos = 0
    for cid in sorted(REGISTRY):
        rec = to_constraint_record(cid, REGISTRY[cid].sample_params(random.Random(cid)))
        row = _constraint_row(rec.id, text=rec.text, source="library", family=rec.family,
                              params=json.dumps(rec.params, ensure_ascii=False), parent_id=cid)
        for out in await stage.process(row):
            lib = [(c, p) for c, p in json.loads(out["library_constraints"])]
            assert lib[0][0] == cid and check_combination(lib) == []
            combos += len(lib) > 1
    assert combos > 0


def test_validate_requires_consistency_before_its_readers(tmp_path: Path):
    from fabrika.pipeline.config import validate_data

    stages = [{"kind": "if.expand", "target_count": 0},
              {"kind": "if.verifiers", "input": "if.expand"},
              {"kind": "if.backtranslation", "input": "if.verifiers"},
              {"kind": "if.consistency", "input": "if.verifiers"},
              {"kind": "if.queries", "input": "if.verifiers"}]
    config, issues = validate_data({"name": "x", "stages": stages}, "test", tmp_path)
    assert config is None
    errors = [(i.path, i.message) for i in issues if i.level == "error"]
    assert errors == [("stages[2].input", "if.backtranslation needs an if.consistency stage with input "
                                          "'if.verifiers' listed before it (it reads the per-function accuracies)")]
