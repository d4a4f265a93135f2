"""The worker actor's class, run in-process (no cluster): it writes only while its driver owns the stage,
and its stages read the finished upstream tables of the shared run directory as the driver would."""

from __future__ import annotations

import asyncio

import pytest

from fabrika.pipeline.context import RunContext
from fabrika.pipeline.sections import RaySettings
from fabrika.ray.items import OWNER_FILE, BatchSizer, ItemWorker, StageJob, StaleDriver, WorkerContext, readable_stages
from fabrika.store.run import RunStore
from fabrika.store.shards import shard_files, write_shard
from tests.ray.ifconfig import small_if_config

ROW = {"id": "c1", "verifiers": "[]"}  # no verifier answers: scored without running code


def _worker(tmp_path, owner: str) -> tuple[ItemWorker, StageJob, object]:
    config = small_if_config(tmp_path, "ray")
    stage = config.stage("if_consistency")
    run_dir = config.resolved_run_dir
    job = StageJob(stage, owner, 4, readable=readable_stages(config, "if_consistency"))
    return ItemWorker(config, str(run_dir), "sim"), job, run_dir / "stages" / "if_consistency"


def test_worker_writes_its_batch_as_one_named_shard(tmp_path):
    worker, job, stage_dir = _worker(tmp_path, "me")
    stage_dir.mkdir(parents=True)
    (stage_dir / OWNER_FILE).write_text("me")

    async def go():
        try:
            first = await worker.process_batch(job, 7, [("c1", ROW), ("c2", {**ROW, "id": "c2"})])
            again = await worker.process_batch(job, 7, [("c1", ROW), ("c2", {**ROW, "id": "c2"})])  # a retried batch
            return first, again
        finally:
            await worker.close()

    first, again = asyncio.run(go())
    assert first["rows"] == 2 and [i[1] for i in first["items"]] == [1, 1]
    files = shard_files(stage_dir)
    assert len(files) == 1 and files[0].name.startswith("part-000007-")  # the retry rewrote the same file


def test_a_replaced_driver_s_worker_writes_nothing(tmp_path):
    worker, job, stage_dir = _worker(tmp_path, "old-driver")
    stage_dir.mkdir(parents=True)
    (stage_dir / OWNER_FILE).write_text("new-driver")

    async def go():
        try:
            await worker.process_batch(job, 0, [("c1", ROW)])
        finally:
            await worker.close()

    with pytest.raises(StaleDriver, match="taken over by another driver"):
        asyncio.run(go())
    assert shard_files(stage_dir) == []


def test_a_batch_whose_owner_file_is_gone_writes_nothing_and_says_so(tmp_path):
    """A removed or reset run directory is not a second driver: the StaleDriver line says which it is."""
    worker, job, stage_dir = _worker(tmp_path, "me")

    async def go():
        try:
            await worker.process_batch(job, 0, [("c1", ROW)])
        finally:
            await worker.close()

    with pytest.raises(StaleDriver, match="owner file .* is gone"):
        asyncio.run(go())
    assert shard_files(stage_dir) == []


def test_the_worker_reads_finished_upstream_tables_like_the_driver(tmp_path):
    """Gated reads with the annotators' scores joined, the same rows as the driver's RunContext; a table
    the stage does not depend on is refused with a line naming the fix."""
    config = small_if_config(tmp_path, "ray")
    run_dir = config.resolved_run_dir
    rows = [{"id": f"v{i}", "status": "ok" if i % 3 else "rejected", "reason": None if i % 3 else "bad",
             "text": f"t{i}"} for i in range(9)]
    write_shard(RunStore(run_dir).stage_dir("if_verifiers"), rows)
    write_shard(RunStore(run_dir).stage_dir("if_consistency"),  # annotator: a score joined onto if_verifiers
                [{"id": f"v{i}", "status": "ok", "reason": None, "max_function_accuracy": i / 10} for i in range(9)])
    annotators = {"if_verifiers": ["if_consistency"]}
    readable = readable_stages(config, "if_backtranslation")
    assert {"if_verifiers", "if_consistency", "if_expand"} <= readable and "if_queries" not in readable
    job = StageJob(config.stage("if_backtranslation"), "me", 4, annotators=annotators, readable=readable)
    worker_ctx = WorkerContext(config, job, run_dir, "sim", {})
    driver_ctx = RunContext("if_backtranslation", store=RunStore(run_dir), pipeline=config, llm=None,
                            backend_name="sim", report={}, resources={}, annotators=annotators)
    got = sorted(worker_ctx.iter_rows("if_verifiers"), key=lambda r: r["id"])
    want = sorted(driver_ctx.iter_rows("if_verifiers"), key=lambda r: r["id"])
    assert got == want and got and all(r["status"] == "ok" and "max_function_accuracy" in r for r in got)
    assert len(got) < len(rows)  # gated: the rejected rows (and those under the accuracy gate) are not read
    assert worker_ctx.count_rows("if_verifiers") == len(got)
    with pytest.raises(RuntimeError, match="not one of the finished stages it depends on"):
        list(worker_ctx.iter_rows("if_queries"))
    with pytest.raises(RuntimeError, match="declares calls_llm = False"):
        asyncio.run(worker_ctx.llm.complete([]))


def test_batches_grow_until_one_takes_batch_seconds():
    settings = RaySettings(batch_size=32, batch_seconds=2.0, max_batch_size=4096, batches_in_flight=2)
    cheap = BatchSizer(settings, workers=2, total=None)
    assert cheap.size == 32  # nothing measured yet
    cheap.record(32, 0.032)  # 1 ms a row
    assert cheap.size == 2000
    cheap.record(2000, 20.0)  # slower rows later: the mean over everything returned decides
    assert cheap.size == int(2.0 * 2032 / 20.032)
    sandbox = BatchSizer(settings, workers=2, total=None)
    sandbox.record(32, 160.0)  # seconds a row: never below batch_size
    assert sandbox.size == 32
    flat = BatchSizer(settings, workers=2, total=100_000)
    flat.record(32, 0.0001)
    assert flat.size == 4096  # max_batch_size
    few = BatchSizer(settings, workers=2, total=1000)
    few.record(32, 0.0001)
    assert few.size == 250  # every worker keeps batches_in_flight batches of the stage's 1,000 rows
    fixed = BatchSizer(RaySettings(batch_size=8, batch_seconds=None), workers=2, total=None)
    fixed.record(8, 0.001)
    assert fixed.size == 8


def test_a_driver_stage_s_verifier_runs_in_the_worker_s_sandbox(tmp_path):
    """``sandbox_run``: what a RemoteSandboxPool sends to an actor for a stage that stays in the driver."""
    from fabrika.sandbox.policy import SandboxSettings

    worker, _, _ = _worker(tmp_path, "me")
    config = SandboxSettings(workers=1, isolation="rlimits").pool_config("sim")

    async def go():
        try:
            ok = await worker.sandbox_run(config, "def evaluate(response):\n    return len(response) > 3", ["abcd", "ab"])
            bad = await worker.sandbox_run(config, "def evaluate(response):\n    return 1 / 0", ["x"])
            return ok, bad, worker.sandbox_isolation(config)
        finally:
            await worker.close()

    ok, bad, isolation = asyncio.run(go())
    assert [v.status for v in ok] == ["true", "false"] and bad[0].status == "error"
    assert isolation == "rlimits"
