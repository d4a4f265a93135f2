"""The worker actor's class, in-process: an item that hits a bug or a configuration problem makes the
batch write nothing and report the failure, which the driver raises as the local run's StageFailure."""

from __future__ import annotations

import asyncio

from fabrika.ray.items import OWNER_FILE, ItemWorker, StageJob, readable_stages
from fabrika.store.shards import shard_files
from tests.ray.ifconfig import small_if_config


def test_a_failing_item_makes_the_batch_write_nothing_and_names_the_item(tmp_path):
    config = small_if_config(tmp_path, "ray")
    stage_dir = config.resolved_run_dir / "stages" / "if_consistency"
    stage_dir.mkdir(parents=True)
    (stage_dir / OWNER_FILE).write_text("me")
    job = StageJob(config.stage("if_consistency"), "me", 4, readable=readable_stages(config, "if_consistency"))
    worker = ItemWorker(config, str(config.resolved_run_dir), "sim")

    async def go():
        try:  # c2's verifier answer lacks every field: off-contract upstream data (a bug, not a verdict)
            return await worker.process_batch(job, 0, [("c1", {"id": "c1", "verifiers": "[]"}),
                                                       ("c2", {"id": "c2", "verifiers": "[{}]"})])
        finally:
            await worker.close()

    result = asyncio.run(go())
    item_id, kind, error, fix = result["failure"]
    # the typed row view (IFVerifierAnswersRow) refuses the off-contract answer before any dict lookup: still a bug
    assert (item_id, kind) == ("c2", "bug") and error.startswith("ValidationError") and "IFVerifierAnswersRow" in error
    assert "if.consistency" in fix
    assert result["rows"] == 0 and not result["shard"] and shard_files(stage_dir) == []
