"""General reward: R · (1 − sgn(R) · clip(L/L0, 0.1, 0.3)), branch by branch, with exact numbers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fabrika.rewards.general import (
    SequenceClassifierRM,
    completion_length,
    length_alpha,
    length_penalized,
    make_general_reward,
)


@pytest.mark.parametrize(
    ("r", "length", "ref", "expected"),
    [
        (1.0, 5, 100, 0.9),      # short answer: ratio 0.05 clipped up to 0.1
        (1.0, 20, 100, 0.8),     # inside the band: α = 0.2
        (2.0, 50, 100, 1.4),     # long answer: ratio 0.5 clipped down to 0.3
        (-1.0, 20, 100, -1.2),   # negative score: α = −0.2 makes it more negative
        (-0.5, 1000, 10, -0.65), # negative and long: α = −0.3
        (-0.5, 1, 100, -0.55),   # negative and short: α = −0.1
        (0.0, 50, 100, 0.0),     # sgn(0) = 0
    ],
)
def test_length_penalized_branches(r: float, length: int, ref: float, expected: float) -> None:
    assert length_penalized(r, length, ref) == pytest.approx(expected, abs=1e-12)


def test_alpha_sign_and_bad_reference() -> None:
    assert length_alpha(3.0, 25, 100) == pytest.approx(0.25)
    assert length_alpha(-3.0, 25, 100) == pytest.approx(-0.25)
    with pytest.raises(ValueError, match="ref_length must be a positive number, got 0"):
        length_alpha(1.0, 5, 0)


def test_length_units() -> None:
    comp = [{"role": "assistant", "content": "Привет, мир! Как дела?"}]
    assert completion_length(comp, "chars") == 22
    assert completion_length(comp, "words") == 4
    assert completion_length(comp, "tokens", [5, 6, 7]) == 3
    with pytest.raises(ValueError, match="needs completion_ids"):
        completion_length(comp, "tokens")


def test_reward_from_score_column_trl_signature() -> None:
    reward = make_general_reward(length_unit="chars")
    prompts = [[{"role": "user", "content": "q"}]] * 3
    completions = [[{"role": "assistant", "content": "x" * n}] for n in (10, 25, 90)]
    out = reward(prompts=prompts, completions=completions, completion_ids=[[1]] * 3,
                 ref_length=[100, 100, 100], rm_score=[1.0, -2.0, 0.5], trainer_state=None)
    assert out == pytest.approx([0.9, -2.5, 0.35], abs=1e-12)


def test_module_level_default_reads_columns() -> None:
    from fabrika.rewards.general import general_reward

    assert general_reward.__name__ == "general_reward"
    out = general_reward(prompts=["p"], completions=["x" * 50], ref_length=[100], rm_score=[-1.0])
    assert out == pytest.approx([-1.3], abs=1e-12)


def test_reward_with_callable_rm_and_token_lengths() -> None:
    seen = {}

    def rm(prompts, completions):
        seen["n"] = len(completions)
        return [1.0 if "да" in c[0]["content"] else -1.0 for c in completions]

    reward = make_general_reward(rm, length_unit="tokens")
    out = reward(prompts=[[{"role": "user", "content": "?"}]] * 2,
                 completions=[[{"role": "assistant", "content": "да"}], [{"role": "assistant", "content": "нет"}]],
                 completion_ids=[[1] * 3, [1] * 40], ref_length=[10, 100])
    assert seen["n"] == 2
    assert out == pytest.approx([1.0 * (1 - 0.3), -1.0 * (1 + 0.3)], abs=1e-12)


def test_missing_columns_are_named() -> None:
    reward = make_general_reward()
    with pytest.raises(ValueError, match="column 'ref_length'"):
        reward(prompts=["p"], completions=["c"], completion_ids=[[1]], rm_score=[1.0])
    with pytest.raises(ValueError, match="column 'rm_score'"):
        reward(prompts=["p"], completions=["c"], completion_ids=[[1]], ref_length=[5])
    with pytest.raises(ValueError, match="not a local directory"):
        make_general_reward("/nonexistent/rm")


def test_module_does_not_import_torch() -> None:
    code = "import sys, fabrika.rewards.general as g; g.make_general_reward(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.train
def test_local_sequence_classifier_rm(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from fabrika.train.tiny import save_tiny

    path = save_tiny(tmp_path / "rm", seed=3, num_labels=1)
    rm = SequenceClassifierRM(path, batch_size=2)
    prompts = [[{"role": "user", "content": "Привет"}]] * 3
    completions = [[{"role": "assistant", "content": t}] for t in ("Здравствуйте!", "Hi", "Погода хорошая.")]
    scores = rm(prompts, completions)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    for p, c, s in zip(prompts, completions, scores):
        ids = tok(tok.apply_chat_template(p + c, tokenize=False), return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            assert model(**ids).logits[0, 0].item() == pytest.approx(s, abs=1e-5)
    reward = make_general_reward(path, length_unit="chars")
    out = reward(prompts=prompts, completions=completions, ref_length=[100] * 3)
    assert out == pytest.approx([length_penalized(s, len(c[0]["content"]), 100) for s, c in zip(scores, completions)])
