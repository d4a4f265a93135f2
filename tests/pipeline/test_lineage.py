"""Lineage: an edited prompt, stage code or sim responder redoes exactly that stage and what reads it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from fabrika.llm.sim import register_sim_responder
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.config import PipelineConfig, validate_data
from fabrika.pipeline.fingerprint import stage_fingerprints, stale_stages
from fabrika.pipeline.runner import run_pipeline
from fabrika.store import RunStore
from tests.pipeline import lineage_stages as ls


def make_config(tmp_path: Path) -> PipelineConfig:
    doc = {
        "name": "lin",
        "run_dir": str(tmp_path / "run"),
        "llm": {"backend": "sim"},
        "stages": [
            {"kind": "lin.source", "name": "source"},
            {"kind": "lin.ask", "name": "ask", "input": "source"},
            {"kind": "lin.tail", "name": "tail", "input": "ask"},
        ],
        "dataset": {"stages": ["tail"]},
    }
    cfg, issues = validate_data(doc, "lin.yaml", tmp_path)
    assert cfg is not None, issues
    return cfg


def llm(result: Any, stage: str) -> dict[str, int]:
    return result.manifest["stages"][stage].get("llm", {})


def rows(run_dir: Path, stage: str, column: str) -> list[Any]:
    lf = RunStore(run_dir).scan_raw(stage)
    assert lf is not None
    return lf.sort("i").collect()[column].to_list()


def test_unchanged_rerun_is_not_stale(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    first = run_pipeline(cfg, progress=False)
    assert stale_stages(cfg, first.manifest) == {}
    again = run_pipeline(cfg, progress=False)
    assert all(not s.reprocessed for s in again.stats.values())
    assert llm(again, "ask").get("requests", 0) == 0


def test_edited_prompt_redoes_the_stage_and_its_downstream_not_its_upstream(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_config(tmp_path)
    first = run_pipeline(cfg, progress=False)
    old_answers = rows(first.run_dir, "ask", "answer")
    monkeypatch.setitem(ls.CATALOGUE.data["ask"], "ru", "Ответь коротко на вопрос {{ i }}.")

    stale = stale_stages(cfg, RunStore(first.run_dir).read_manifest())
    assert set(stale) == {"ask", "tail"}  # what `fabrika status` shows
    assert stale["ask"] == {"prompt changed": ["lin/ask"]}
    assert stale["tail"] == {"upstream changed": ["ask"]}

    again = run_pipeline(cfg, progress=False)
    assert again.stats["ask"].reprocessed == ["prompt lin/ask"]
    assert again.stats["tail"].reprocessed == ["input ask"]
    assert not again.stats["source"].reprocessed and again.stats["source"].processed == 0
    new_answers = rows(first.run_dir, "ask", "answer")
    assert all("коротко" in a for a in new_answers) and new_answers != old_answers
    assert all("коротко" in r for r in rows(first.run_dir, "tail", "retold"))
    assert llm(again, "ask")["requests"] == 6
    assert stale_stages(cfg, again.manifest) == {}

    # the old prompt back: its answers come from the cache (the cache is keyed by request)
    monkeypatch.undo()
    back = run_pipeline(cfg, progress=False)
    assert back.stats["ask"].reprocessed == ["prompt lin/ask"]
    assert llm(back, "ask")["cached"] == 6
    assert rows(first.run_dir, "ask", "answer") == old_answers


def test_changed_stage_code_version_redoes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_config(tmp_path)
    run_pipeline(cfg, progress=False)
    monkeypatch.setattr(ls.TailStage, "code_version", "2", raising=False)
    again = run_pipeline(cfg, progress=False)
    assert again.stats["tail"].reprocessed == ["code code_version"]
    assert not again.stats["ask"].reprocessed
    assert llm(again, "tail")["cached"] == 6  # same requests: nothing asked again


def test_fingerprint_hashes_the_stage_module_source(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    fields = stage_fingerprints(cfg)["ask"][1]
    assert "tests.pipeline.lineage_stages" in fields["code"]
    assert fields["prompts"] == {"lin/ask": ls.CATALOGUE.digest("ask")}  # declared: only its own template
    assert set(fields["sim"]) == {"lin"}


def answer_v2(request: ChatRequest, rng: random.Random) -> str:
    return f"v2: {request.messages[-1]['content']}"


def test_changed_sim_responder_redoes_its_stages_with_fresh_answers(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    first = run_pipeline(cfg, progress=False)
    assert all(a.startswith("v1: ") for a in rows(first.run_dir, "ask", "answer"))
    register_sim_responder("lin", answer_v2)
    try:
        stale = stale_stages(cfg, RunStore(first.run_dir).read_manifest())
        assert stale["ask"]["sim responder changed"] == ["lin"] and "source" not in stale
        again = run_pipeline(cfg, progress=False)
        assert "sim responder lin" in again.stats["ask"].reprocessed
        assert llm(again, "ask")["requests"] == 6 and llm(again, "ask").get("cached", 0) == 0
        assert all(a.startswith("v2: ") for a in rows(first.run_dir, "ask", "answer"))
    finally:
        register_sim_responder("lin", ls.answer_v1)


def test_sim_responders_of_a_stage_are_its_family_and_the_tags_its_code_writes() -> None:
    from fabrika.pipeline.lineage import sim_digests

    assert "lin" in sim_digests("lin.other")  # the kind's family
    assert "lin" in sim_digests("filter.x", {"lin.ask"})  # a tag constant in its code
    assert "lin" in sim_digests("filter.x", {"lin."})  # the constant part of f"lin.{key}"
    assert "lin" not in sim_digests("filter.x", {"linear", "fc.planner"})
