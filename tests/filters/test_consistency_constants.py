"""Consistency that a constant cannot pass: always-True (or always-False) verifiers are rejected by the gate."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest

from fabrika.generators.instruct.verifiers import ConsistencyConfig, ConsistencyStage, cross_validate
from fabrika.pipeline.gates import apply_gates
from fabrika.sandbox import Verdict
from fabrika.testing import stage_context

POSITIVE = ["всё строчными буквами", "тихий вечер", "кот спит", "дождь идёт", "мы дома"]
NEGATIVE = ["Всё С Заглавных", "Тихий Вечер", "КОТ СПИТ", "Дождь Идёт", "Мы Дома"]
CASES = [{"response": r, "label": True} for r in POSITIVE] + [{"response": r, "label": False} for r in NEGATIVE]


class InProcessPool:
    """Runs the (test-authored, trusted) verifier code in-process: the verdicts a sandbox would return."""

    isolation = "test"

    async def run(self, code: str, responses: list[str]) -> list[Verdict]:
        scope: dict[str, Any] = {}
        exec(code, scope)  # noqa: S102 - fixed test code, not LLM output
        return [Verdict("true" if scope["evaluate"](r) else "false") for r in responses]


def _row(codes: list[str]) -> dict[str, Any]:
    answers = [{"sample_index": i, "code": c, "cases": CASES} for i, c in enumerate(codes)]
    return {"id": "c1", "text": "Весь ответ строчными буквами.", "verifiers": json.dumps(answers, ensure_ascii=False)}


CONSTANT_TRUE = ["def evaluate(response):\n    return True",
                 "def evaluate(response):\n    return len(response) >= 0",
                 "def evaluate(response):\n    return isinstance(response, str)"]
CONSTANT_FALSE = ["def evaluate(response):\n    return False",
                  "def evaluate(response):\n    return response is None",
                  "def evaluate(response):\n    return len(response) < 0"]
REAL = ["def evaluate(response):\n    return response == response.lower()",
        "def evaluate(response):\n    return not any(ch.isupper() for ch in response)",
        "def evaluate(response):\n    return response.lower() == response and True"]


async def _scores(codes: list[str]) -> dict[str, Any]:
    stage = ConsistencyStage(ConsistencyConfig(input="v"), stage_context(resources={"sandbox": InProcessPool()}))
    await stage.setup()
    (out,) = await stage.process(_row(codes))
    return out


@pytest.mark.parametrize("codes", [CONSTANT_TRUE, CONSTANT_FALSE], ids=["always_true", "always_false"])
async def test_three_constant_verifiers_are_rejected(codes: list[str]) -> None:
    out = await _scores(codes)
    # the old rule: support [3,3,3,3,3,0,0,0,0,0] and accuracy 1.0 for each constant
    assert out["n_unique_functions"] == 3 and out["n_unique_cases"] == 10 and out["n_supported_cases"] == 5
    assert min(out["n_supported_true"], out["n_supported_false"]) == 0
    assert out["max_function_accuracy"] == 0.0
    kept, funnel = apply_gates(pl.LazyFrame([{**out, "status": "ok"}]), {})
    assert kept.collect().height == 0
    assert funnel["dropped_consistency_one_label_supported"] == 1


async def test_real_verifiers_survive_and_a_constant_among_them_scores_zero() -> None:
    out = await _scores(REAL + CONSTANT_TRUE[:1])
    assert (out["n_supported_true"], out["n_supported_false"]) == (5, 5)
    accuracies = {f["code"]: f["accuracy"] for f in json.loads(out["functions"])}
    assert [accuracies[c] for c in REAL] == [1.0, 1.0, 1.0] and accuracies[CONSTANT_TRUE[0]] == 0.0
    kept, _ = apply_gates(pl.LazyFrame([{**out, "status": "ok"}]), {})
    assert kept.collect().height == 1


def test_supported_cases_gate_is_configurable() -> None:
    row = {"id": "c", "status": "ok", "n_unique_functions": 3, "n_unique_cases": 10, "n_supported_cases": 3,
           "n_supported_true": 2, "n_supported_false": 1, "max_function_accuracy": 1.0}
    _, funnel = apply_gates(pl.LazyFrame([row]), {})
    assert funnel["dropped_consistency_few_supported_cases"] == 1
    kept, _ = apply_gates(pl.LazyFrame([row]), {"consistency": {"min_supported_cases": 3}})
    assert kept.collect().height == 1


def test_cross_validate_counts_supported_labels() -> None:
    t, f = Verdict("true"), Verdict("false")
    cv = cross_validate(["c"], [("a", True), ("b", False)], [[t, t]])  # constant: right on a, wrong on b
    assert cv["support"] == [1, 0] and cv["accuracies"] == [0.0]
    assert (cv["n_supported_true"], cv["n_supported_false"]) == (1, 0)
