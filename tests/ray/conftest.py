"""One local Ray cluster (2 CPUs, 127.0.0.1, no dashboard) for every test of this directory,
and one local-executor run of the small IF pipeline that the Ray runs are compared with."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from fabrika.pipeline.runner import run_pipeline
from fabrika.store.run import RunStore
from tests.ray.ifconfig import KEEP, small_if_config


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="the ray extra (pip install 'fabrika[ray]') is not installed")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="session")
def local_run(tmp_path_factory) -> Path:
    """The small IF pipeline with ``executor: local``: the reference dataset."""
    tmp = tmp_path_factory.mktemp("if_local")
    config = small_if_config(tmp, "local")
    result = run_pipeline(config, resume=False, progress=False)
    assert result.complete and result.version is not None
    return config.resolved_run_dir


def stage_rows(run_dir: Path, stage: str) -> list[dict]:
    frame = RunStore(run_dir).scan_raw(stage)
    assert frame is not None, f"{stage}: no rows"
    frame = frame.collect()
    return frame.select(sorted(frame.columns)).sort("id").to_dicts()


def dataset_rows(run_dir: Path) -> list[dict]:
    frame = pl.read_parquet(run_dir / "versions" / "v1" / "data" / "if_samples.parquet")
    return frame.select(sorted(frame.columns)).sort("id").to_dicts()


def assert_same_data(run_dir: Path, reference: Path) -> None:
    """Same ids and same content in every stage table and in the materialised dataset."""
    for stage in KEEP:
        got, want = stage_rows(run_dir, stage), stage_rows(reference, stage)
        assert [r["id"] for r in got] == [r["id"] for r in want], stage
        assert got == want, stage
    assert dataset_rows(run_dir) == dataset_rows(reference)


def resume_copy(reference: Path, dest: Path, redo: tuple[str, ...]) -> Path:
    """A copy of a finished run with the stages in ``redo`` (and the version) removed: the next run
    redoes exactly those, the LLM answers coming from the copied cache."""
    shutil.copytree(reference, dest)
    for stage in redo:
        shutil.rmtree(dest / "stages" / stage)
    shutil.rmtree(dest / "versions", ignore_errors=True)
    return dest
