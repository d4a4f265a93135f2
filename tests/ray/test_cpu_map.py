"""``ctx.map_cpu`` under ``executor: ray``: filter.dedup's MinHash signatures run on the run's worker actors
and the dup columns equal the local run's; a worker killed mid-map is restarted and its chunks re-run;
a function the workers cannot import fails with one line naming it."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.cpu_map import NotImportableError, cpu_function
from fabrika.pipeline.runner import run_pipeline
from fabrika.pipeline.sections import RaySettings
from fabrika.ray import connect
from fabrika.ray.cpu_map import RayCpuMapper
from fabrika.ray.items import WorkerPool
from fabrika.store.run import RunStore
from tests.filters.dedup_corpus import corpus
from tests.ray.cpu_fns import slow_square
from tests.ray.ifconfig import ROOT
from tests.ray.test_executor_ray import _wait_for_workers

PROMPTS = ROOT / "fabrika" / "data" / "smoke" / "prompts.jsonl"


def _dedup_run(tmp_path: Path, executor: str, texts: Path) -> tuple[list[dict], dict]:
    config, issues = validate_data({
        "name": "dedup", "seed": 0, "run_dir": str(tmp_path / executor), "executor": executor,
        "llm": {"backend": "sim", "model": "sim"},
        "ray": {"workers": 2, "batch_size": 64},
        "stages": [
            {"kind": "generic.prompts", "name": "texts", "path": str(texts), "text_field": "text", "id_field": "id"},
            {"kind": "filter.dedup", "name": "texts_dedup", "input": "texts", "text_field": "body", "unit": None,
             "threshold": 0.7},
        ],
        "dataset": {"stages": ["texts"]},
    }, "test", tmp_path)
    assert config is not None, [str(i) for i in issues]
    result = run_pipeline(config, resume=False, progress=False)
    assert result.complete, result.problems
    frame = RunStore(tmp_path / executor).scan_raw("texts_dedup").collect()
    cols = ["id", "dup_cluster", "dup_is_representative", "dup_cluster_size"]
    return frame.select(cols).sort("id").to_dicts(), result.manifest["stages"]["texts_dedup"]["report"]


def test_dedup_signatures_run_on_workers_with_the_local_clusters(ray_cluster, tmp_path):
    texts = tmp_path / "texts.jsonl"
    with texts.open("w", encoding="utf-8") as fh:
        for rid, text in corpus(2000, seed=11):
            if text:  # generic.prompts refuses empty prompts; it keeps other fields as columns (``body``)
                fh.write(json.dumps({"id": rid, "text": text, "body": text}, ensure_ascii=False) + "\n")
    local, local_report = _dedup_run(tmp_path, "local", texts)
    on_ray, report = _dedup_run(tmp_path, "ray", texts)
    assert on_ray == local
    assert sum(not r["dup_is_representative"] for r in local) > 200  # real near-duplicates were merged
    facts = report["cpu_map"]["minhash signatures"]
    assert local_report["cpu_map"]["minhash signatures"]["on"] == "driver"
    assert facts["on"] == "ray workers" and facts["items"] == len(local)
    assert facts["worker_processes"] == 2 and facts["chunks"] >= 4 and facts["worker_restarts"] == 0


def _pool(tmp_path: Path, **ray) -> tuple[WorkerPool, RaySettings]:
    config, issues = validate_data({"name": "map", "seed": 0, "run_dir": str(tmp_path / "run"), "executor": "ray",
                                    "llm": {"backend": "sim", "model": "sim"}, "ray": ray,
                                    "stages": [{"kind": "generic.prompts", "name": "p", "path": str(PROMPTS)}],
                                    "dataset": {"stages": ["p"]}},
                                   "test", tmp_path)
    assert config is not None, [str(i) for i in issues]
    settings = config.ray
    pool = WorkerPool(connect(settings), settings, config, str(tmp_path / "run"), "sim")
    pool.wait_ready()
    return pool, settings


async def test_a_worker_killed_during_the_map_is_restarted_and_its_chunks_rerun(ray_cluster, tmp_path):
    pool, settings = _pool(tmp_path, workers=2, batch_size=4, batch_seconds=None, batches_in_flight=2, max_retries=3)
    reported: dict = {}
    mapper = RayCpuMapper(lambda: (pool, False), settings, reported.__setitem__)
    killed: list[int] = []
    errors: list[BaseException] = []

    def killer() -> None:
        try:
            victim = _wait_for_workers(2)[0]
            time.sleep(1.0)  # a few chunks are done, the victim holds batches_in_flight more
            victim.send_signal(signal.SIGSTOP)
            time.sleep(0.5)
            victim.send_signal(signal.SIGKILL)
            killed.append(victim.pid)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        got = await mapper(cpu_function(partial(slow_square, delay=0.04)), list(range(240)), "squares")
    finally:
        thread.join()
        await pool.aclose()
    assert not errors, errors
    assert len(killed) == 1
    assert got == [x * x for x in range(240)]
    facts = reported["squares"]
    assert facts["worker_restarts"] == 1 and facts["chunks_after_restart"] >= 1
    assert facts["chunks"] == 60 and facts["items"] == 240


async def test_a_function_the_workers_cannot_import_fails_with_one_line(ray_cluster, tmp_path, monkeypatch):
    mod_dir = tmp_path / "driver_only"
    mod_dir.mkdir()
    (mod_dir / "driver_only_fns.py").write_text("def double(x):\n    return 2 * x\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(mod_dir))  # importable here, not on the worker actors
    from driver_only_fns import double  # type: ignore[import-not-found]

    pool, settings = _pool(tmp_path, workers=1)
    try:
        mapper = RayCpuMapper(lambda: (pool, False), settings, lambda *_: None)
        with pytest.raises(NotImportableError) as info:
            await mapper(cpu_function(double), [1, 2, 3], "double")
    finally:
        await pool.aclose()
        sys.modules.pop("driver_only_fns", None)
    message = str(info.value)
    assert "\n" not in message and "driver_only_fns:double cannot be imported" in message
    assert "ray worker on" in message and "top level of a module every worker can import" in message
