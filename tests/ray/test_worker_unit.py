"""The worker actor's class, run in-process (no cluster): it writes only while its driver owns the stage."""

from __future__ import annotations

import asyncio

import pytest

from fabrika.ray.items import OWNER_FILE, ItemWorker, StaleDriver
from fabrika.store.shards import shard_files
from tests.ray.ifconfig import small_if_config

ROW = {"id": "c1", "verifiers": "[]"}  # no verifier answers: scored without running code


def _worker(tmp_path, owner: str) -> tuple[ItemWorker, object]:
    config = small_if_config(tmp_path, "ray")
    stage = config.stage("if_consistency")
    run_dir = config.resolved_run_dir
    return ItemWorker(config, stage, str(run_dir), "sim", 4, owner), run_dir / "stages" / "if_consistency"


def test_worker_writes_its_batch_as_one_named_shard(tmp_path):
    worker, stage_dir = _worker(tmp_path, "me")
    stage_dir.mkdir(parents=True)
    (stage_dir / OWNER_FILE).write_text("me")

    async def go():
        try:
            first = await worker.process_batch(7, [("c1", ROW), ("c2", {**ROW, "id": "c2"})])
            again = await worker.process_batch(7, [("c1", ROW), ("c2", {**ROW, "id": "c2"})])  # a retried batch
            return first, again
        finally:
            await worker.close()

    first, again = asyncio.run(go())
    assert first["rows"] == 2 and [i[1] for i in first["items"]] == [1, 1]
    files = shard_files(stage_dir)
    assert len(files) == 1 and files[0].name.startswith("part-000007-")  # the retry rewrote the same file


def test_a_replaced_driver_s_worker_writes_nothing(tmp_path):
    worker, stage_dir = _worker(tmp_path, "old-driver")
    stage_dir.mkdir(parents=True)
    (stage_dir / OWNER_FILE).write_text("new-driver")

    async def go():
        try:
            await worker.process_batch(0, [("c1", ROW)])
        finally:
            await worker.close()

    with pytest.raises(StaleDriver):
        asyncio.run(go())
    assert shard_files(stage_dir) == []
