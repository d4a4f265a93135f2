"""Scorers as plain functions and as annotating stages (no runner needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from fabrika.errors import InputError
from fabrika.filters.decontam import BenchmarkSource, DecontamConfig, DecontamScorer, build_index, score_texts
from fabrika.filters.dedup import DedupConfig, DedupScorer, near_duplicate_clusters
from fabrika.filters.language import LanguageConfig, homoglyph_share, score_languages, score_rows
from fabrika.filters.length import score_lengths
from fabrika.filters.text import row_text
from fabrika.testing import stage_context


def _row(i: int, user: str, answer: str, lang: str = "ru") -> dict[str, Any]:
    return {"id": f"id{i:03d}", "lang": lang, "expert": "if",
            "prompt": json.dumps([{"role": "system", "content": "Система"}, {"role": "user", "content": user}],
                                 ensure_ascii=False),
            "completion": json.dumps([{"role": "assistant", "content": answer}], ensure_ascii=False)}


def test_language_labels_confidence_and_homoglyphs():
    texts = ["Сегодня в Москве тепло и солнечно, можно гулять.", "The weather in London is rainy today.",
             "Эта прoграмма рабoтает отлично", ""]
    got = score_languages(texts, ["ru", "en", "uk"])
    assert [g["lang_detected"] for g in got] == ["ru", "en", "ru", None]
    assert got[0]["lang_confidence"] > 0.8 and got[3]["lang_confidence"] is None  # no letters: no evidence
    assert got[0]["homoglyph_share"] == 0.0 and got[2]["homoglyph_share"] == pytest.approx(2 / 4)
    assert homoglyph_share("Latin only words") == 0.0
    assert homoglyph_share("Отправь SQL-запрос через Wi-Fi-сеть с iPhone-а") == 0.0  # real terms, not disguise
    assert homoglyph_share("Отправь запрос сейчaс") == pytest.approx(1 / 3)  # Latin 'a' in «сейчaс»


def test_language_rows_flag_mismatch_with_declared_lang():
    rows = [_row(1, "Вопрос", "Ответ полностью на русском языке, как и просили."),
            _row(2, "Вопрос", "This answer is in English although Russian was expected.")]
    got = score_rows(rows, "completion", ["ru", "en"])
    assert [g["lang_matches"] for g in got] == [True, False] and got[0]["id"] == "id001"
    with pytest.raises(ValueError, match="not supported"):
        LanguageConfig(languages=["ru", "xx"])


def test_dedup_clusters_are_order_independent_with_smallest_id_representative():
    base = "Напиши короткое стихотворение о зимнем лесе и снеге в пяти строках без рифмы"
    texts = {"c": base, "a": base + "!", "b": "Совсем другой запрос про расписание поездов до Казани завтра",
             "d": base.replace("пяти", "пяти"), "e": ""}
    ids = list(texts)
    one = near_duplicate_clusters(ids, [texts[i] for i in ids], threshold=0.7)
    two = near_duplicate_clusters(ids[::-1], [texts[i] for i in ids[::-1]], threshold=0.7)
    assert sorted(one, key=lambda r: r["id"]) == sorted(two, key=lambda r: r["id"])
    by = {r["id"]: r for r in one}
    assert by["a"]["dup_cluster"] == by["c"]["dup_cluster"] == by["d"]["dup_cluster"] == "a"
    assert by["a"]["dup_is_representative"] and not by["c"]["dup_is_representative"]
    assert by["a"]["dup_cluster_size"] == 3 and by["b"]["dup_is_representative"] and by["e"]["dup_cluster"] == "e"


async def test_dedup_stage_streams_annotations():
    rows = [_row(i, "Одинаковый длинный запрос пользователя про погоду в Москве завтра", "x") for i in range(5)]
    rows.append(_row(9, "Другой запрос про билеты на поезд до Санкт-Петербурга", "y"))
    stage = DedupScorer(DedupConfig(out_chunk=4), stage_context())
    chunks = [c async for c in stage.run_all(iter(rows))]
    assert [len(c) for c in chunks] == [4, 2]
    flat = [r for c in chunks for r in c]
    assert sum(r["dup_is_representative"] for r in flat) == 2 and all(r["status"] == "ok" for r in flat)


def test_decontam_overlap_against_jsonl_and_parquet(tmp_path: Path):
    q = "Сколько будет дважды два если умножить результат на три и вычесть один"
    (tmp_path / "mmlu.jsonl").write_text(json.dumps({"question": q}, ensure_ascii=False) + "\n", "utf-8")
    pl.DataFrame({"prompt": ["Short one", "What is the capital of France and why is it famous"]}).write_parquet(
        tmp_path / "geo.parquet")
    index = build_index([BenchmarkSource(path=tmp_path / "mmlu.jsonl", field="question"),
                         BenchmarkSource(path=tmp_path / "geo.parquet")], n=8)
    got = score_texts([f"Реши задачу: {q.upper()}. Покажи решение.", "Совершенно чистый запрос про котиков",
                       "short ONE", "what is the capital of france"], index)
    assert got[0] == {"decontam_max_overlap": 1.0, "decontam_benchmark": "mmlu"}
    assert got[1] == {"decontam_max_overlap": 0.0, "decontam_benchmark": None}
    assert got[2]["decontam_max_overlap"] == 1.0 and got[2]["decontam_benchmark"] == "geo"  # shorter than n
    assert got[3]["decontam_max_overlap"] == 0.0  # 6 shared tokens are no 8-gram: below the contamination unit
    with pytest.raises(InputError, match="no key 'prompt'"):
        build_index([BenchmarkSource(path=tmp_path / "mmlu.jsonl")])


async def test_decontam_stage_builds_index_once(tmp_path: Path):
    (tmp_path / "b.jsonl").write_text('{"prompt": "раз два три четыре пять шесть семь восемь"}\n', "utf-8")
    ctx = stage_context()
    stage = DecontamScorer(DecontamConfig(benchmarks=[{"path": tmp_path / "b.jsonl"}], text_field="user"), ctx)
    (out,) = await stage.process(_row(1, "Считаем: раз два три четыре пять шесть семь восемь!", "ok"))
    assert out["decontam_max_overlap"] == 1.0 and out["id"] == "id001"
    index = next(iter(ctx.resources.values()))
    (clean,) = await stage.process(_row(2, "Совсем другой запрос про погоду", "ok"))
    assert clean["decontam_max_overlap"] == 0.0
    assert len(ctx.resources) == 1 and next(iter(ctx.resources.values())) is index  # built once, then shared


def test_length_counts_the_rendered_template():
    from fabrika.export.validate import load_template

    row = _row(1, "Привет, мир!", "Да.")
    (got,) = score_lengths([row], counter=len)  # counter=len: tokens are characters, easy to check by hand
    qwen3 = load_template(None)
    prompt = json.loads(row["prompt"])
    want_prompt = qwen3.render(prompt, add_generation_prompt=True)
    want_total = qwen3.render(prompt + json.loads(row["completion"]))
    assert got["len_prompt_tokens"] == len(want_prompt) == got["len_prompt_chars"]
    assert got["len_total_tokens"] == len(want_total) and "<|im_start|>system" in want_total
    assert got["len_completion_tokens"] == len(want_total) - len(want_prompt) > len("Да.")  # the im_end etc. too
    assert got["len_tokenizer"] == "estimate:regex"


def test_row_text_views():
    row = _row(1, "вопрос", "ответ")
    row["completion"] = json.dumps([{"role": "assistant", "content": "",
                                     "tool_calls": [{"name": "f", "arguments": {"город": "Тверь"}}]}],
                                   ensure_ascii=False)
    assert row_text(row, "user") == "вопрос" and row_text(row, "prompt") == "Система\nвопрос"
    assert row_text(row, "completion") == 'f {"город": "Тверь"}' and row_text(row, "lang") == "ru"


def test_length_with_a_local_hf_tokenizer(tmp_path: Path):
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from fabrika.filters.length import LengthConfig, LengthScorer, token_counter

    vocab = {"[UNK]": 0, "привет": 1, "мир": 2, "да": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    cfg = LengthConfig(tokenizer="tok")
    ctx = stage_context(base_dir=tmp_path)
    count, _, name = LengthScorer(cfg, ctx)._tools()  # relative to the config file's directory
    assert count("привет мир") == 2 and count("привет, мир!") == 4  # WordLevel: ',' and '!' are [UNK] tokens
    assert name == "hf:tok"
    with pytest.raises(ValueError, match="not a local directory"):
        token_counter(tmp_path / "missing")


async def test_dedup_judges_episodes_as_units():
    def step(i: int, episode: str, user: str, answer: str) -> dict[str, Any]:
        row = _row(i, user, answer)
        row["meta"] = json.dumps({"episode_id": episode, "step": i % 2})
        return row

    ask = "Забронируй столик на двоих в ресторане у Красной площади на вечер пятницы"
    rows = [step(1, "ep-a", ask, "шаг один"), step(2, "ep-a", ask, "шаг два"),   # steps share the user turns
            step(3, "ep-b", ask + ".", "шаг один"), step(4, "ep-b", ask, "шаг два"),  # a duplicate episode
            step(5, "ep-c", "Какая погода завтра в Казани и нужен ли зонт утром", "ответ")]
    flat = [r for c in [c async for c in DedupScorer(DedupConfig(), stage_context()).run_all(iter(rows))] for r in c]
    by = {r["id"]: r for r in flat}
    assert [by[f"id00{i}"]["dup_is_representative"] for i in range(1, 6)] == [True, True, False, False, True]
    assert by["id003"]["dup_cluster"] == by["id004"]["dup_cluster"] == "id001" and by["id001"]["dup_cluster_size"] == 2
    per_row = DedupScorer(DedupConfig(unit=None), stage_context())
    flat = [r for c in [c async for c in per_row.run_all(iter(rows))] for r in c]
    assert sum(r["dup_is_representative"] for r in flat) == 2  # without units the steps collapse too


def test_row_text_reads_dialogue_columns():
    dialogue = {"id": "d", "messages": [{"role": "user", "content": "Привет"},
                                        {"role": "assistant", "content": None,
                                         "tool_calls": [{"name": "f", "arguments": {"a": 1}}]}]}
    assert row_text({"dialogue": json.dumps(dialogue, ensure_ascii=False)}, "dialogue") == 'Привет\nf {"a": 1}'
    assert row_text({"x": "[не json"}, "x") == "[не json" and row_text({"x": 5}, "x") == "5"
