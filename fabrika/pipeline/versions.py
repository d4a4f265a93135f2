"""Materialise and refilter a run from any process: load its gate groups, then let the store gate.

:mod:`fabrika.store.versions` applies the gates but sits below the stage modules that
register gate groups, so it cannot import them; these entry points load them first
(the registry's modules and the run's ``plugins``), as ``fabrika refilter`` does.
``fabrika.materialise`` and ``fabrika.refilter`` are these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from fabrika.pipeline.registry import load_run_modules
from fabrika.store import versions
from fabrika.store.run import RunStore


def _load(run_dir: str | Path) -> None:
    manifest = RunStore(run_dir).read_manifest()
    if manifest:
        load_run_modules(manifest)


def materialise(run_dir: str | Path, thresholds: Mapping[str, Any] | None = None, name: str | None = None,
                previous: str | None = None, overwrite: bool = True) -> versions.VersionInfo:
    """:func:`fabrika.store.versions.materialise` with the run's gate groups loaded."""
    _load(run_dir)
    return versions.materialise(run_dir, thresholds=thresholds, name=name, previous=previous, overwrite=overwrite)


def refilter(run_dir: str | Path, assignments: list[str], name: str | None = None, base: str | None = None,
             overwrite: bool = False) -> tuple[versions.VersionInfo, list[tuple[str, str, int, int]]]:
    """:func:`fabrika.store.versions.refilter` with the run's gate groups loaded."""
    _load(run_dir)
    return versions.refilter(run_dir, assignments, name=name, base=base, overwrite=overwrite)


__all__ = ["materialise", "refilter"]
