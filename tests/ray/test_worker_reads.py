"""A stage whose ``setup`` reads a finished upstream table works on the worker actors as in the driver:
the same gated rows (the scorer's gate applied, its columns joined), so the same output."""

from __future__ import annotations

from pathlib import Path

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.run import RunStore
from tests.ray.ifconfig import ROOT

POOL = ROOT / "fabrika" / "data" / "general" / "prompts_demo.jsonl"


def _run(tmp_path: Path, executor: str) -> tuple[list[dict], dict]:
    config, issues = validate_data({
        "name": "reads", "seed": 0, "run_dir": str(tmp_path / executor), "executor": executor,
        "plugins": ["tests.ray.reading_stage"], "llm": {"backend": "sim", "model": "sim"},
        "ray": {"workers": 2, "batch_size": 4},
        "filters": {"length": {"max_tokens": 40, "min_completion_tokens": 0}},
        "stages": [
            {"kind": "general.prompts", "name": "pool", "path": str(POOL)},
            {"kind": "filter.length", "name": "pool_length", "input": "pool"},
            # reads the pool's rows under the length gate, with the scorer's columns, in setup
            {"kind": "test.upstream_reader", "name": "reader", "input": "pool", "reads": "pool"},
        ],
    }, "test", tmp_path)
    assert config is not None, [str(i) for i in issues]
    result = run_pipeline(config, resume=False, progress=False)
    assert result.complete, result.problems
    frame = RunStore(tmp_path / executor).scan_raw("reader").collect()
    return frame.drop("llm_backend").sort("id").to_dicts(), result.stats["reader"].report


def test_a_stage_reading_an_upstream_table_in_setup_runs_on_workers(ray_cluster, tmp_path):
    local, _ = _run(tmp_path, "local")
    ray_rows, report = _run(tmp_path, "ray")
    assert report["executor"] == "ray (2 worker(s))"
    assert ray_rows == local
    raw = RunStore(tmp_path / "ray").scan_raw("pool").collect().height
    assert {r["upstream_kept"] for r in ray_rows} == {len(ray_rows)} and len(ray_rows) < raw  # gated on read
    assert all(r["rank"] is not None and r["tokens"] is not None and r["tokens"] <= 40 for r in ray_rows)
