"""Materialised versions: gated dataset snapshots, rebuilt from scores in seconds.

``materialise`` reads the dataset stages lazily (shards + annotation joins),
applies the gates, and writes ``versions/<name>/``::

    data/<stage>.parquet      kept rows (the samples), sorted by id
    dropped/<stage>.parquet   dropped rows with ``dropped_by`` (the first gate that dropped them)
    thresholds.json           the thresholds used (every registered gate group, defaults filled)
    funnel.json               ``stages``: rows/ok/rejected-by-reason of every stage; ``gates``: in/out/
                              dropped_<gate> of every dataset stage; ``upstream_gates``: the same for the
                              other stages (what their consumers read, under these thresholds)

The version is built in a hidden temporary directory and renamed into place, so
a crash leaves either the old version or the new one. It never builds an LLM
engine: refiltering is pure polars.

Refiltering re-gates the *dataset* stages. Gates also decide, at run time,
which upstream rows a stage consumes; a changed threshold there takes effect
on the next ``fabrika run`` (new passing items are processed, rows already
written stay). Stages that want their upstream scores re-gated at
materialisation copy those score columns into their output rows.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import polars as pl

from fabrika.errors import StoreError
from fabrika.pipeline import gates, registry
from fabrika.store.run import RunStore
from fabrika.store.shards import atomic_write_json, fsync_dir, scan_files

VERSION_NAME = re.compile(r"^[\w.-]+$")


@dataclass
class VersionInfo:
    """What a materialisation produced."""

    name: str
    path: Path
    thresholds: dict[str, Any]
    funnel: dict[str, Any]
    rows: int
    previous: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def load_run_modules(manifest: Mapping[str, Any]) -> None:
    """Import stage/gate modules (registry + the run's plugins) so gate groups are known."""
    mods = list(registry.STAGE_MODULES) + list(manifest.get("config", {}).get("plugins", []))
    failures = registry.load_modules(mods)
    if failures:
        mod, why = failures[0]
        raise StoreError(f"cannot import {mod!r} needed to apply gates: {why}")


def version_dir(run_dir: str | Path, name: str) -> Path:
    return Path(run_dir) / "versions" / name


def list_versions(run_dir: str | Path) -> list[str]:
    root = Path(run_dir) / "versions"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def next_version_name(run_dir: str | Path) -> str:
    taken = set(list_versions(run_dir))
    n = 1
    while f"v{n}" in taken:
        n += 1
    return f"v{n}"


def scan_version(run_dir: str | Path, name: str, dropped: bool = False) -> pl.LazyFrame | None:
    """A version's samples (or its dropped rows), lazily, all dataset stages together."""
    sub = "dropped" if dropped else "data"
    files = sorted((version_dir(run_dir, name) / sub).glob("*.parquet"))
    return scan_files(files)


def read_version(run_dir: str | Path, name: str) -> dict[str, Any]:
    import json

    vdir = version_dir(run_dir, name)
    if not vdir.is_dir():
        raise StoreError(f"{vdir}: no such version; versions: {', '.join(list_versions(run_dir)) or '(none)'}")
    return {
        "thresholds": json.loads((vdir / "thresholds.json").read_text(encoding="utf-8")),
        "funnel": json.loads((vdir / "funnel.json").read_text(encoding="utf-8")),
    }


def _build(
    store: RunStore, manifest: dict[str, Any], config: dict[str, Any], thresholds: dict[str, Any],
    params: Mapping[str, Any], tmp: Path,
) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """Write a version's files into ``tmp``; returns the funnel, the sample count and the thresholds."""
    (tmp / "data").mkdir(parents=True)
    (tmp / "dropped").mkdir()
    funnel: dict[str, Any] = {"stages": {}, "gates": {}, "upstream_gates": {}}
    dataset_stages = config.get("dataset", {}).get("stages", [])
    layout = manifest.get("layout", {})
    for stage in manifest.get("order", list(layout)):
        funnel["stages"][stage] = store.counts(stage)
        if stage not in dataset_stages and not layout.get(stage, {}).get("annotates"):
            # what these thresholds let through to the stages reading this one (they applied at run time)
            lf = store.scan(stage, store.annotators_of(stage, manifest))
            if lf is not None:
                funnel["upstream_gates"][stage] = gates.funnel_of(*gates.mark_dropped(lf, thresholds))
    total = 0
    for stage in dataset_stages:
        lf = store.scan(stage, store.annotators_of(stage, manifest))
        if lf is None:
            funnel["gates"][stage] = {"in": 0, "out": 0}
            continue
        marked, reasons = gates.mark_dropped(lf, thresholds)
        counts = gates.funnel_of(marked, reasons)
        funnel["gates"][stage] = counts
        total += counts["out"]
        # sorted by id: a version's files do not depend on the order items completed in
        kept = marked.filter(pl.col(gates.DROPPED_BY).is_null()).drop(gates.DROPPED_BY).sort("id")
        kept.sink_parquet(tmp / "data" / f"{stage}.parquet", sync_on_close="all")
        marked.filter(pl.col(gates.DROPPED_BY).is_not_null()).sort("id").sink_parquet(
            tmp / "dropped" / f"{stage}.parquet", sync_on_close="all"
        )
    dumped = gates.thresholds_dump(params)
    atomic_write_json(tmp / "thresholds.json", dumped)
    atomic_write_json(tmp / "funnel.json", funnel)
    fsync_dir(tmp)
    return funnel, total, dumped


def _clean_stale(root: Path) -> None:
    """Remove ``.tmp-*``/``.old-*`` directories left by materialisations whose process is gone."""
    for p in root.iterdir():
        m = re.match(r"^\.(?:tmp|old)-.+-(\d+)$", p.name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except PermissionError:
            pass


def materialise(
    run_dir: str | Path,
    thresholds: Mapping[str, Any] | None = None,
    name: str | None = None,
    previous: str | None = None,
) -> VersionInfo:
    """Gate the dataset stages of ``run_dir`` into ``versions/<name>``.

    Args:
        thresholds: gate thresholds by group; ``None`` uses the config's ``filters``.
        name: version name; default the next free ``vN``. An existing version of that name is replaced.
        previous: version this one derives from (recorded for ``status``/diffs).
    """
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    if not manifest:
        raise StoreError(f"{store.run_dir}: not a run directory (no manifest.json); run `fabrika run CONFIG` first")
    load_run_modules(manifest)
    config = manifest.get("config", {})
    thresholds = dict(config.get("filters", {}) if thresholds is None else thresholds)
    params = gates.validate_thresholds(thresholds)
    name = name or next_version_name(run_dir)
    if not VERSION_NAME.match(name):
        raise StoreError(f"version name {name!r}: use letters, digits, '.', '_' or '-'")

    root = store.run_dir / "versions"
    root.mkdir(parents=True, exist_ok=True)
    _clean_stale(root)
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        funnel, total, dumped = _build(store, manifest, config, thresholds, params, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed build never becomes (or hides) a version
        raise

    final = root / name
    old = root / f".old-{name}-{os.getpid()}"
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(root)
    shutil.rmtree(old, ignore_errors=True)

    manifest = store.read_manifest()
    manifest.setdefault("versions", {})[name] = {
        "rows": total,
        "previous": previous,
        "thresholds": dumped,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    manifest["latest_version"] = name
    store.write_manifest(manifest)
    return VersionInfo(name=name, path=final, thresholds=dumped, funnel=funnel, rows=total, previous=previous)


def funnel_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str, int, int]]:
    """``(stage, counter, old, new)`` for every gate counter that differs between two funnels."""
    out = []
    og, ng = old.get("gates", {}), new.get("gates", {})
    for stage in sorted(set(og) | set(ng)):
        keys = sorted(set(og.get(stage, {})) | set(ng.get(stage, {})))
        for key in keys:
            a, b = og.get(stage, {}).get(key, 0), ng.get(stage, {}).get(key, 0)
            if a != b:
                out.append((stage, key, a, b))
    return out


def refilter(
    run_dir: str | Path, assignments: list[str], name: str | None = None, base: str | None = None
) -> tuple[VersionInfo, list[tuple[str, str, int, int]]]:
    """New thresholds (``base`` version's, default the latest, with ``--set`` overrides) → a new version.

    Never builds an LLM engine. Returns the version and its funnel difference
    against ``base``. Raises :class:`~fabrika.errors.ConfigError` on an unknown
    gate group or parameter or a wrongly typed value.
    """
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    if not manifest:
        raise StoreError(f"{store.run_dir}: not a run directory (no manifest.json)")
    load_run_modules(manifest)
    base = base or manifest.get("latest_version")
    if base is not None and (version_dir(run_dir, base) / "thresholds.json").is_file():
        old = read_version(run_dir, base)
    else:
        base, old = None, {"thresholds": manifest.get("config", {}).get("filters", {}), "funnel": {}}
    thresholds = gates.parse_set(assignments, old["thresholds"])
    info = materialise(run_dir, thresholds=thresholds, name=name or next_version_name(run_dir), previous=base)
    return info, funnel_diff(old["funnel"], info.funnel)
