"""``if.expand`` + ``if.dedup``: seeds, bad answers as rejections, exact and near duplicates."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from fabrika.errors import InputError
from fabrika.generators.instruct.expand import load_seed_file, normalise
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.run import RunStore
from fabrika.testing import FakeOpenAIServer

SEEDS = [{"id": "s-lower", "text": "Весь ответ должен быть написан строчными буквами."},
         {"text": "В ответе не должно быть ни одной запятой."}]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_seed_file_errors_name_path_and_line(tmp_path: Path):
    good = _write(tmp_path / "good.jsonl", [json.dumps(s, ensure_ascii=False) for s in SEEDS])
    seeds = load_seed_file(good)
    assert [s.source for s in seeds] == ["user", "user"] and seeds[0].id == "s-lower"
    assert seeds[1].id.startswith("seed-")  # id derived from the text when absent
    bad = _write(tmp_path / "bad.jsonl", [json.dumps(SEEDS[0], ensure_ascii=False), "{not json"])
    with pytest.raises(InputError, match=r"bad\.jsonl:2"):
        load_seed_file(bad)
    no_text = _write(tmp_path / "notext.jsonl", ['{"id": "x"}'])
    with pytest.raises(InputError, match=r"notext\.jsonl:1: missing or empty 'text'"):
        load_seed_file(no_text)
    dup = _write(tmp_path / "dup.jsonl", ['{"id": "a", "text": "Первое ограничение."}', '{"id": "a", "text": "Второе."}'])
    with pytest.raises(InputError, match=r"dup\.jsonl:2: seed id 'a' repeats line 1"):
        load_seed_file(dup)
    with pytest.raises(InputError, match="seed file not found"):
        load_seed_file(tmp_path / "missing.jsonl")
    config, issues = validate_data({"name": "x",
                                    "stages": [{"kind": "if.expand", "library_seeds": False, "seed_files": [str(bad)]}]},
                                   "test", tmp_path)
    assert config is None
    assert any(i.path == "stages[0].seed_files[0]" and "bad.jsonl:2" in i.message for i in issues)


def test_normalise_ignores_case_and_punctuation():
    assert normalise("Ответ — строчными БУКВАМИ!") == normalise("ответ строчными буквами")


EXPAND_ANSWERS = [
    "\n".join(["1. Ответ должен содержать не менее 50 слов.", "2. The answer must be short and precise.",
               "3. #@@ %% ~~ ^^ &&", "4. Ок", "5. Весь ответ должен быть написан строчными буквами!",
               "6. Твой ответ должен содержать не менее 50 слов."]),
    {"fault": "bad_request"},  # terminal: a recorded llm_error (a 5xx would leave the item pending)
    {"content": "1. Ответ должен содержать ровно 3 абзаца.\n2. Ответ должен заканчиваться вопро", "finish_reason": "length"},
    "<think>нужно подумать</think>",  # reasoning and no answer: empty_answer (content null is a lost answer: pending)
]


def test_expand_and_dedup_record_every_rejection(tmp_path: Path):
    seeds = _write(tmp_path / "seeds.jsonl", [json.dumps(s, ensure_ascii=False) for s in SEEDS])
    with FakeOpenAIServer() as srv:
        srv.script(tag="if.expand", responses=EXPAND_ANSWERS)
        config, issues = validate_data({
            "name": "if_expand", "run_dir": str(tmp_path / "run"),
            "llm": {"backend": "openai", "model": "fake", "endpoints": [{"base_url": srv.base_url}],
                    "max_retries": 0, "cache": {"enabled": False},
                    "group_samples": False},  # one HTTP request per sample: counts and faults are per request
            "stages": [{"kind": "if.expand", "library_seeds": False, "seed_files": [str(seeds)],
                        "target_count": 40, "candidates_per_request": 10},
                       {"kind": "if.dedup", "input": "if.expand"}],
            "dataset": {"stages": ["if.dedup"]},
        }, "test", tmp_path)
        assert config is not None, [str(i) for i in issues]
        run_pipeline(config, resume=False, progress=False)
        assert srv.served == 4  # ceil(40 / 10) calls spread over 2 seeds

    store = RunStore(tmp_path / "run")
    expand = store.scan_raw("if.expand").collect()
    reasons = Counter(r.split(":")[0] for r in expand["reason"] if r is not None)
    assert reasons == Counter({"not_russian": 1, "garbled": 1, "too_short": 1, "llm_error": 1, "truncated": 1,
                               "empty_answer": 1})
    oks = expand.filter(pl.col("status") == "ok")
    assert set(oks.filter(pl.col("source") == "llm")["parent_id"]) <= {"s-lower", load_seed_file(seeds)[1].id}
    assert oks.filter(pl.col("source") == "user").height == 2

    dedup = {r["text"]: r for r in store.scan_raw("if.dedup").collect().iter_rows(named=True)}
    assert dedup["Весь ответ должен быть написан строчными буквами."]["status"] == "ok"  # the seed wins
    assert dedup["Весь ответ должен быть написан строчными буквами!"]["reason"] == "duplicate_of: s-lower"
    pair = [dedup["Ответ должен содержать не менее 50 слов."], dedup["Твой ответ должен содержать не менее 50 слов."]]
    kept, near = sorted(pair, key=lambda r: r["id"])  # among LLM candidates the smaller id wins
    assert kept["status"] == "ok" and near["reason"] == f"near_duplicate_of: {kept['id']}"
    assert dedup["Ответ должен содержать ровно 3 абзаца."]["status"] == "ok"
