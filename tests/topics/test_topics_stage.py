"""fc.topics: BERTopic clustering, LLM labelling, expansion with near-duplicate removal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("bertopic")

from fabrika.errors import InputError
from fabrika.generators.fc.topics import CorpusFile, TopicsConfig, TopicsStage, read_corpus
from fabrika.generators.fc.topics_text import NearDuplicateIndex, keyword_tokens
from fabrika.llm.config import LLMConfig
from fabrika.llm.factory import build_engine
from fabrika.testing import ScriptedLLM, run_stage, stage_context


def _ctx(tmp: Path, llm: Any) -> Any:
    return stage_context(llm, seed=7, run_dir=tmp, stage="fc.topics")


def _sim() -> Any:
    """The offline sim model behind the real engine (no cache)."""
    return build_engine(LLMConfig(backend="sim"))


def _scripted(answers: list[str]) -> ScriptedLLM:
    """Answers label requests from ``answers``, in order; expansion requests get an empty list."""
    left = list(answers)
    return ScriptedLLM(lambda r: left.pop(0) if r.tag == "fc.topics.label" and left else '{"topics": []}')


def _config(**kw) -> TopicsConfig:
    base = dict(reduction="pca", clustering="kmeans", n_clusters=6, min_topic_size=3,
                target_size={"ru": 30, "en": 20}, expand_per_call=6)
    base.update(kw)
    return TopicsConfig(**base)


async def _run(stage: TopicsStage) -> list[dict]:
    return (await run_stage(stage)).rows


def test_pool_reaches_target_per_language_without_duplicates(tmp_path):
    stage = TopicsStage(_config(), _ctx(tmp_path, _sim()))
    rows = asyncio.run(_run(stage))
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "ids must be unique"
    good = [r for r in rows if r["status"] == "ok"]
    for lang, target in (("ru", 30), ("en", 20)):
        pool = [r for r in good if r["lang"] == lang]
        assert len(pool) == target
        seeds = [r for r in pool if r["source"] == "bertopic"]
        assert 2 <= len(seeds) <= 6 and all(json.loads(r["keywords"]) for r in seeds)
        assert all(r["parent_id"] in {s["id"] for s in seeds} | {p["id"] for p in pool} for r in pool if r["parent_id"])
    ru_labels = [r["topic"] for r in good if r["lang"] == "ru"]
    assert all(any("а" <= ch.lower() <= "я" for ch in t) for t in ru_labels), "Russian pool is written in Russian"
    for lang in ("ru", "en"):  # what the pool kept is free of near-duplicates by the stage's own index
        index = NearDuplicateIndex(lang, threshold=0.6)
        assert all(index.add_if_new(r["id"], r["topic"], r["description"]) is None for r in good if r["lang"] == lang)
    # embeddings were precomputed once and kept on disk
    assert list((tmp_path / "stages" / "fc.topics" / "embeddings").glob("emb-*.npy"))


def test_same_seed_same_pool(tmp_path):
    a = asyncio.run(_run(TopicsStage(_config(), _ctx(tmp_path / "a", _sim()))))
    b = asyncio.run(_run(TopicsStage(_config(), _ctx(tmp_path / "b", _sim()))))
    key = lambda rows: sorted((r["id"], r["status"], r["topic"]) for r in rows)  # noqa: E731
    assert key(a) == key(b)


def test_bad_label_answers_are_recorded_rejections(tmp_path):
    answers = [
        "не JSON вовсе",
        '```json\n{"label": "Weather forecast", "description": "Questions about weather"}\n```',  # English for ru
        '{"label": "Погода", "description": "Прогноз погоды"',  # truncated
        'Вот ответ: {"label": "Банковские переводы", "description": "Переводы и карты."} надеюсь, подходит',
    ]
    cfg = _config(languages=["ru"], n_clusters=4, target_size={"ru": 0})
    rows = asyncio.run(_run(TopicsStage(cfg, _ctx(tmp_path, _scripted(answers)))))
    by_status = sorted((r["status"], (r["reason"] or "").split(":")[0]) for r in rows)
    assert by_status == [("ok", ""), ("rejected", "invalid_json"), ("rejected", "invalid_json"),
                         ("rejected", "wrong_language")]
    assert [r["topic"] for r in rows if r["status"] == "ok"] == ["Банковские переводы"]


def test_repeated_expansions_are_recorded_as_near_duplicates(tmp_path):
    """An expander that keeps proposing the same topic: each repeat is a recorded rejection, not a silent drop."""
    same = '{"topics": [{"label": "Погода в Москве на выходные", "description": "Прогноз погоды в Москве."}]}'
    llm = ScriptedLLM(lambda r: '{"label": "Прогноз погоды", "description": "Погода в городах."}'
                      if r.tag == "fc.topics.label" else same)
    cfg = _config(languages=["ru"], n_clusters=3, target_size={"ru": 10}, max_expand_rounds=3)
    rows = asyncio.run(_run(TopicsStage(cfg, _ctx(tmp_path, llm))))
    expanded = [r for r in rows if r["source"] == "llm_expansion"]
    assert [r["status"] for r in expanded].count("ok") == 1
    dups = [r for r in expanded if r["status"] == "rejected"]
    assert dups and all(r["reason"].startswith("near_duplicate_of") for r in dups)


def test_corpus_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"text": "ok", "lang": "ru"}\n{broken\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"c\.jsonl:2"):
        list(read_corpus([CorpusFile(path=str(bad))], None))
    with pytest.raises(InputError, match="not found"):
        list(read_corpus([CorpusFile(path=str(tmp_path / "missing.jsonl"))], None))


def test_russian_keywords_are_lemmas_and_near_duplicates_are_caught():
    assert keyword_tokens("Прогнозы погоды на выходные в Москве", "ru") == ["прогноз", "погода", "выходной", "москва"]
    idx = NearDuplicateIndex("ru", threshold=0.5)
    assert idx.add_if_new("a", "Прогноз погоды в Москве", "") is None
    assert idx.add_if_new("b", "Прогнозы погоды в Москве", "") == "a"
    assert idx.add_if_new("c", "Бронирование отелей", "") is None
    assert idx.add_if_new("d", "бронирование  отелей!", "") == "c"  # exact after normalisation
