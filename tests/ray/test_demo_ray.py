"""The shipped ``configs/demo.yaml`` (all of it: FC, IF, general chat, shared filters) under
``executor: ray`` on the local 2-CPU cluster materialises the same dataset as under ``executor: local``.

Both runs read the real demo document; only ``executor``, ``ray`` and ``run_dir`` are set, and its
relative paths resolve against ``configs/`` as they do for ``fabrika run configs/demo.yaml``. The Ray run
starts in an empty run directory (only the local run's LLM cache is copied in, both being ``sim``), so
every stage is recomputed; the per-item stages that never call the LLM must run on the worker actors,
which the manifest records per stage.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from fabrika.pipeline.config import PipelineConfig, load_config, validate_data
from fabrika.pipeline.runner import RunResult, run_pipeline
from fabrika.pipeline.stage import STAGES
from fabrika.store.run import RunStore
from fabrika.store.shards import shard_files
from tests.ray.ifconfig import ROOT

pytestmark = pytest.mark.slow  # the whole demo twice: about 2 min on 2 cores

DEMO = ROOT / "configs" / "demo.yaml"


def demo_config(run_dir: Path, executor: str, **ray: Any) -> PipelineConfig:
    """``configs/demo.yaml`` as shipped, with ``executor``/``ray``/``run_dir`` set, validated like the file itself."""
    doc = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    doc.update(executor=executor, run_dir=str(run_dir))
    if ray:
        doc["ray"] = ray
    config, issues = validate_data(doc, str(DEMO), DEMO.parent)
    assert config is not None, [str(i) for i in issues if i.level == "error"]
    return config


def worker_stages(config: PipelineConfig) -> set[str]:
    """The stages ``executor: ray`` must send to worker actors: per-item and ``calls_llm = False``."""
    return {s.stage_name for s in config.stages
            if not STAGES[s.kind].global_stage and not STAGES[s.kind].calls_llm}


def _table(path: Path) -> list[dict]:
    frame = pl.read_parquet(path)
    return frame.select(sorted(frame.columns)).sort("id").to_dicts()


def version_tables(run_dir: Path) -> dict[str, list[dict]]:
    """Every parquet table of the materialised version (kept, dropped, export-scoped), rows sorted by id."""
    root = run_dir / "versions" / "v1"
    return {str(p.relative_to(root)): _table(p) for p in sorted(root.rglob("*.parquet"))}


def _funnel(run_dir: Path) -> dict:
    return json.loads((run_dir / "versions" / "v1" / "funnel.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def local_demo(demo_run_result: RunResult) -> RunResult:
    """The demo under ``executor: local`` (the default): the session's shared run of configs/demo.yaml
    (tests/conftest.py, read-only; only its cache is copied out)."""
    shared = load_config(DEMO).model_copy(update={"run_dir": demo_run_result.run_dir})
    # the shared run is exactly the local run this test used to make: the same validated config
    assert shared.model_dump() == demo_config(demo_run_result.run_dir, "local").model_dump()
    return demo_run_result


def test_demo_under_ray_materialises_the_local_dataset(ray_cluster, local_demo, tmp_path):
    """Every LLM-free per-item stage of the demo (FC samples, IF queries/samples/GRPO rows, the sandbox,
    language, length and decontamination scorers, the general-chat RM and rows…) runs on the workers
    and the dataset is the local one."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(local_demo.run_dir / "cache.sqlite", run_dir / "cache.sqlite")  # sim answers: saves time only
    batch = 16
    config = demo_config(run_dir, "ray", workers=2, batch_size=batch)
    on_workers = worker_stages(config)
    kinds = {STAGES[s.kind].kind for s in config.stages if s.stage_name in on_workers}
    assert {"if.consistency", "filter.language", "filter.length", "fc.samples", "general.rm", "general.samples",
            "if.samples", "if.queries", "if.multi.samples", "if.dialogue.samples", "generic.prompts"} <= kinds

    result = run_pipeline(config, resume=True, progress=False)
    assert result.complete and result.version is not None, result.problems

    stages = result.manifest["stages"]
    ran_on_ray = {name for name, entry in stages.items()
                  if str(entry.get("report", {}).get("executor", "")).startswith("ray")}
    assert ran_on_ray == on_workers  # exactly the LLM-free per-item stages, the rest in the driver
    for s in config.stages:
        report = stages[s.stage_name].get("report", {})
        if not STAGES[s.kind].global_stage and s.stage_name not in on_workers:
            assert report["executor"].startswith("driver (calls the LLM"), s.stage_name
    pool_starts = 0
    for name in on_workers:
        entry = stages[name]
        sizes = entry["report"]["ray_batch_rows"]  # batches grow from batch_size while they are quick
        batches = sizes["batches"]
        assert sizes["first"] == min(batch, entry["processed"]) and batches <= -(-entry["processed"] // batch), name
        assert entry["report"]["executor"] == "ray (2 worker(s))", name
        # one pool for every stage: a small stage's batches may all go to the actor the others leave idle
        assert 1 <= entry["report"]["ray_worker_processes"] <= min(2, batches), name
        assert entry["skipped"] == 0 and entry["processed"] == local_demo.manifest["stages"][name]["processed"]
        assert entry["duplicate_ids"] == 0 and entry["complete"], name
        assert len(shard_files(run_dir / "stages" / name)) == batches, name  # one worker-written shard per batch
        pool_starts += "ray_pool_start_s" in entry["report"]
    dedups = [s.stage_name for s in config.stages if s.kind == "filter.dedup"]
    assert dedups
    for name in dedups:  # global, in the driver; its MinHash signatures on the run's worker actors
        mapped = stages[name]["report"]["cpu_map"]["minhash signatures"]
        assert mapped["on"] == "ray workers" and mapped["items"] >= 1 and mapped["worker_processes"] >= 1, name
        pool_starts += "ray_pool_start_s" in mapped  # the map may be the first user of the pool
    assert pool_starts == 1  # one pool of actors for the whole run
    assert stages["if_consistency"]["report"]["ray_worker_processes"] == 2  # the sandbox stage used both
    assert not local_demo.manifest["stages"]["if_consistency"]["report"].get("executor")

    want = version_tables(local_demo.run_dir)
    got = version_tables(run_dir)
    assert sorted(got) == sorted(want) and "data/if_samples.parquet" in got
    for table, rows in want.items():
        assert [r["id"] for r in got[table]] == [r["id"] for r in rows], table
        assert got[table] == rows, table
    assert _funnel(run_dir) == _funnel(local_demo.run_dir)
    for name in on_workers:  # every worker-written table, not only what the version keeps
        assert _stage_rows(run_dir, name) == _stage_rows(local_demo.run_dir, name), name


def _stage_rows(run_dir: Path, stage: str) -> list[dict]:
    frame = RunStore(run_dir).scan_raw(stage).collect()
    return frame.select(sorted(frame.columns)).sort("id").to_dicts()
