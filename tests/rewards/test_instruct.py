"""IF reward: V, the RM correction branches (exact numbers), TRL call shape, sandbox injection."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fabrika.errors import ConfigError
from fabrika.rewards.instruct import (
    IFRewardConfig,
    completion_text,
    make_if_reward,
    rm_corrected,
    score_if,
    verifier_score,
)
from fabrika.sandbox import Verdict

MAX5 = {"id": "ru.length.words_max", "params": {"n": 5}}
NO_COMMAS = {"id": "ru.punct.no_commas", "params": {}}
HAS_CAT = {"id": "ru.keywords.include", "params": {"keywords": ["кот"]}}
OK3 = "Кот спит."  # passes all three
TWO_OF_3 = "Кот спит, мурлычет."  # fails no_commas
SPECS = [MAX5, NO_COMMAS, HAS_CAT]


def test_verifier_score_fraction_and_all() -> None:
    assert verifier_score([True, True, False, False]) == 0.5
    assert verifier_score([True, True, False, False], "all") == 0.0
    assert verifier_score([True, True], "all") == 1.0
    assert verifier_score([]) == 0.0
    with pytest.raises(ConfigError, match="aggregation"):
        verifier_score([True], "mean")


@pytest.mark.parametrize(
    ("v", "s", "alpha", "only_all", "expected"),
    [
        (0.5, 2.0, 1.0, False, 1.5),  # V>0, S>α: +1
        (1.0, 2.0, 1.0, False, 2.0),
        (0.5, 1.0, 1.0, False, 0.0),  # V>0, S≤α (equal): −0.5
        (1.0, 0.2, 1.0, False, 0.5),
        (0.0, 9.0, 1.0, False, 0.0),  # V≤0: V
        (-0.25, 9.0, 1.0, False, -0.25),
        (0.5, 2.0, 1.0, True, 0.5),  # bonus withheld below V=1
        (1.0, 2.0, 1.0, True, 2.0),
        (0.5, 0.0, 1.0, True, 0.0),  # the penalty still applies
    ],
)
def test_rm_correction_branches(v: float, s: float, alpha: float, only_all: bool, expected: float) -> None:
    assert rm_corrected(v, s, alpha, bonus_only_when_all_pass=only_all) == pytest.approx(expected)


def test_bonus_only_when_all_pass_stops_partial_answers_outscoring_compliant_ones() -> None:
    partial_high, full_low = rm_corrected(0.5, 3.0, 1.0), rm_corrected(1.0, 0.0, 1.0)
    assert partial_high > full_low  # the problem: 1.5 > 0.5
    assert rm_corrected(0.5, 3.0, 1.0, bonus_only_when_all_pass=True) <= full_low


def test_completion_text_string_and_conversational() -> None:
    assert completion_text("Привет") == "Привет"
    assert completion_text([{"role": "assistant", "content": "Кот спит."}]) == "Кот спит."
    assert completion_text({"role": "assistant", "content": "Да"}) == "Да"


def test_trl_call_with_library_constraints_and_rm_columns() -> None:
    metrics: list[tuple[str, float]] = []
    extra: list[tuple[str, list[float]]] = []
    reward = make_if_reward()
    completions = [
        [{"role": "assistant", "content": OK3}],  # V=1
        [{"role": "assistant", "content": TWO_OF_3}],  # V=2/3
        [{"role": "assistant", "content": "Собака спит, а кошка гуляет во дворе."}],  # fails all three: V=0
        [{"role": "assistant", "content": OK3}],  # V=1, S≤α
    ]
    out = reward(
        prompts=[[{"role": "user", "content": "Опишите кота."}]] * 4,
        completions=completions,
        completion_ids=[[1, 2]] * 4,
        constraints=[SPECS] * 4,
        rm_score=[2.0, 2.0, 2.0, 0.5],
        teacher_rm_mean=[1.0, 1.0, 1.0, 1.0],
        trainer_state=object(),
        log_metric=lambda name, value: metrics.append((name, value)),
        log_extra=lambda column, values: extra.append((column, values)),
    )
    assert out == pytest.approx([2.0, 2 / 3 + 1, 0.0, 0.5])
    assert reward.__name__ == "if_reward"
    assert metrics == [("if/verifier_score", pytest.approx((1 + 2 / 3 + 0 + 1) / 4)), ("if/all_pass", 0.5)]
    assert extra == [("if_verifier_score", pytest.approx([1.0, 2 / 3, 0.0, 1.0]))]


def test_all_or_nothing_and_no_rm() -> None:
    cfg = IFRewardConfig(aggregation="all", rm_correction=False)
    reward = make_if_reward(cfg)
    out = reward(prompts=["p", "p"], completions=[OK3, TWO_OF_3], constraints=[SPECS, SPECS])
    assert out == [1.0, 0.0]


def test_constraints_column_as_json_string_and_record_ids() -> None:
    spec = json.dumps([{"id": "ru.length.words_max@abc123", "params": {"n": 2}}], ensure_ascii=False)
    out = score_if(["p", "p"], ["Да.", "Нет, не так."], IFRewardConfig(rm_correction=False), constraints=[spec, spec])
    assert [s.reward for s in out] == [1.0, 0.0]
    assert out[0].verdicts == (True,) and out[0].s is None


def test_specs_as_the_if_pipeline_writes_them() -> None:
    spec = {"id": "ru.punct.no_commas@1a2b", "text": "Не используйте запятых.", "source": "library",
            "family": "punctuation", "params": {}, "library_id": "ru.punct.no_commas"}
    out = score_if(["p", "p"], ["Да.", "Да, да."], IFRewardConfig(rm_correction=False), constraints=[[spec], [spec]])
    assert [s.reward for s in out] == [1.0, 0.0]


def test_rm_scorer_callable_and_loose_mode() -> None:
    seen: list[int] = []

    def rm(prompts: list, completions: list) -> list[float]:
        seen.append(len(completions))
        return [3.0 for _ in completions]

    spec = [{"id": "ru.format.json", "params": {}}]
    text = 'Вот JSON:\n{"a": 1}'
    strict = make_if_reward(rm_scorer=rm)(prompts=["p"], completions=[text], constraints=[spec], teacher_rm_mean=[1.0])
    loose = make_if_reward(IFRewardConfig(loose=True), rm_scorer=rm)(
        prompts=["p"], completions=[text], constraints=[spec], teacher_rm_mean=[1.0]
    )
    assert strict == [0.0] and loose == [2.0] and seen == [1, 1]


def test_llm_verifiers_go_through_the_injected_runner_batched_per_code() -> None:
    calls: list[tuple[str, list[str]]] = []

    def runner(code: str, responses: list[str]) -> list[Verdict]:  # the sandbox's own verdict type
        calls.append((code, list(responses)))
        return [Verdict("true" if "кот" in r.lower() else "false") for r in responses]

    code = "def evaluate(response):\n    return 'кот' in response.lower()\n"
    specs = [{"verifier_code": code, "constraint_id": "c1"}, MAX5]
    out = score_if(
        ["p"] * 3,
        ["Кот спит.", "Пёс спит.", "Кот спит на тёплом диване весь день."],
        IFRewardConfig(rm_correction=False),
        sandbox_runner=runner,
        constraints=[specs] * 3,
    )
    assert [s.reward for s in out] == [1.0, 0.5, 0.5]
    assert len(calls) == 1 and calls[0][0] == code and len(calls[0][1]) == 3  # one sandbox call for the group


def _code(word: str) -> str:
    return f"def evaluate(response):\n    return {word!r} in response.lower()\n"


@pytest.mark.parametrize(("vote", "expected"), [("majority", [1.0, 0.0, 0.0]), ("any", [1.0, 1.0, 0.0]), ("all", [0.0, 0.0, 0.0])])
def test_llm_constraint_verified_by_ground_truth_verifiers(vote: str, expected: list[float]) -> None:
    """The if.grpo layout: the LLM-written constraint has no code in its spec; its verifiers sit in ground_truth."""
    calls: list[str] = []

    def runner(code: str, responses: list[str]) -> list[bool]:
        calls.append(code)
        word = code.split("'")[1]
        return [word in r.lower() for r in responses]

    spec = [{"id": "c-1234", "text": "Упомяните кота и мышь.", "library_id": None, "params": {}}]
    gt = {"constraints": spec, "verifiers": [{"code": _code("кот"), "accuracy": 1.0}, {"code": _code("мыш"), "accuracy": 0.9},
                                             {"code": _code("сыр"), "accuracy": 0.8}]}
    out = score_if(
        ["p"] * 3,
        ["Кот поймал мышь.", "Кот спит.", "Пёс спит."],
        IFRewardConfig(rm_correction=False, llm_vote=vote),
        sandbox_runner=runner,
        constraints=[spec] * 3,
        ground_truth=[json.dumps(gt, ensure_ascii=False)] * 3,
    )
    assert [s.reward for s in out] == expected
    assert sorted(calls) == sorted(_code(w) for w in ("кот", "мыш", "сыр"))  # one batched call per verifier


def test_errors_name_the_column_and_fix() -> None:
    reward = make_if_reward()
    with pytest.raises(ConfigError, match="teacher_rm_mean"):
        reward(prompts=["p"], completions=["Кот."], constraints=[[MAX5]], rm_score=[1.0])
    with pytest.raises(ConfigError, match="'constraints'"):
        reward(prompts=["p"], completions=["Кот."])
    with pytest.raises(ConfigError, match="neither"):
        reward(prompts=["p"], completions=["Кот."], constraints=[[{"params": {}}]])
    with pytest.raises(ConfigError, match="'ru.nope' is neither a library constraint nor has verifier code"):
        reward(prompts=["p"], completions=["Кот."], constraints=[[{"id": "ru.nope"}]])
    with pytest.raises(ConfigError, match="unknown library constraint id 'ru.nope'"):
        reward(prompts=["p"], completions=["Кот."], constraints=[[{"library_id": "ru.nope"}]])
    with pytest.raises(ConfigError, match="sandbox runner"):
        score_if(["p"], ["x"], constraints=[[{"verifier_code": "def evaluate(r): return True"}]])


def test_module_imports_no_torch() -> None:
    code = "import sys, fabrika.rewards.instruct; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_default_runner_uses_the_real_sandbox() -> None:
    pytest.importorskip("fabrika.sandbox")
    reward = make_if_reward(IFRewardConfig(rm_correction=False))
    code = "def evaluate(response):\n    return 'кот' in response.lower()\n"
    hostile = "import os\ndef evaluate(response):\n    os.system('true')\n    return True\n"
    try:
        out = reward(
            prompts=["p"] * 3,
            completions=["Кот спит.", "Пёс спит.", "Кот"],
            constraints=[[{"verifier_code": code}], [{"verifier_code": code}], [{"verifier_code": hostile}]],
        )
    finally:
        reward.close()
    assert out == [1.0, 0.0, 0.0]  # the hostile verifier is an error verdict, which never passes
