"""Session-wide runs of the shipped demo configs, made once and shared by every module that reads them.

Several modules need the same finished run (``configs/demo.yaml`` as shipped; ``configs/if_demo.yaml`` shrunk the
same way): each used to make its own, a minute of the suite per copy. A shared run is READ-ONLY: a test that
resumes, refilters or otherwise writes into a run works on a :func:`tests.demo_runs.copy_run` of it. The session
checks this at its end: a shared run whose files changed fails the session, naming the changed paths.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.demo_runs import ROOT, assert_unchanged, if_demo_shrunk_config, snapshot

if TYPE_CHECKING:
    from fabrika.pipeline.runner import RunResult


@pytest.fixture(scope="session")
def demo_run_result(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    """``configs/demo.yaml`` exactly as shipped (only ``run_dir`` set), run once: ``make demo``'s dataset."""
    from fabrika.pipeline.config import load_config
    from fabrika.pipeline.runner import run_pipeline

    config = load_config(ROOT / "configs" / "demo.yaml")
    result = run_pipeline(config.model_copy(update={"run_dir": tmp_path_factory.mktemp("demo") / "run"}),
                          progress=False)
    assert result.complete and result.version is not None, result.problems
    before = snapshot(result.run_dir)
    yield result
    assert_unchanged(result.run_dir, before)


@pytest.fixture(scope="session")
def if_demo_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """:func:`tests.demo_runs.if_demo_shrunk_config`, run once: every IF chain (single-constraint, multi-constraint,
    dialogues) with its α."""
    from fabrika.pipeline.runner import run_pipeline

    config = if_demo_shrunk_config(tmp_path_factory.mktemp("if_demo") / "run")
    result = run_pipeline(config, resume=False, progress=False)
    assert result.complete and result.version is not None, result.problems
    before = snapshot(result.run_dir)
    yield result.run_dir
    assert_unchanged(result.run_dir, before)
