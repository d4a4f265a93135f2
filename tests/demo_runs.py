"""The shared demo runs' helpers (fixtures in tests/conftest.py): the shrunk IF demo config, private copies of a
shared run, and the check that nobody wrote into one."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fabrika.pipeline.config import PipelineConfig

ROOT = Path(__file__).resolve().parents[1]


def copy_run(src: Path, dest: Path) -> Path:
    """A private copy of a finished run (stages, cache, manifest, versions) that a test may write into."""
    shutil.copytree(src, dest)
    return dest


def snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Size and mtime of every file of a run, but its ``.lock``: readers such as ``fabrika export`` take that lock
    (so that no run rewrites the versions under them), which is coordination, not a write to the run."""
    from fabrika.store.lock import LOCK_NAME

    return {str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != LOCK_NAME}


def assert_unchanged(run_dir: Path, before: dict[str, tuple[int, int]]) -> None:
    after = snapshot(run_dir)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a test wrote into the shared run {run_dir} (copy it with copy_run first): {changed[:10]}"


def if_demo_shrunk_config(run_dir: Path) -> PipelineConfig:
    """The shipped IF demo, shrunk (60 candidates, 6 verifiers per constraint, tf-idf back-translation)."""
    from fabrika.pipeline.config import load_config

    config = load_config(ROOT / "configs" / "if_demo.yaml")
    stages = []
    for s in config.stages:
        upd: dict = {}
        if s.kind == "if.expand":
            upd = {"target_count": 60}
        if s.kind == "if.backtranslation":
            upd = {"similarity": s.similarity.model_copy(update={"backend": "tfidf"})}
        if s.kind == "if.verifiers":
            upd = {"k": 6}
        stages.append(s.model_copy(update=upd))
    return config.model_copy(update={"stages": stages, "run_dir": run_dir})
