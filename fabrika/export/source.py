"""Where an export reads from: a materialised version of a run (or any parquet files).

A version (``fabrika.store.versions.materialise``) holds the gated samples in
``versions/<name>/data/*.parquet`` plus ``thresholds.json`` and ``funnel.json``.
Exports never apply thresholds themselves; they read what materialisation kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from fabrika.errors import StoreError


@dataclass
class ExportSource:
    """A lazily scanned dataset plus what its card needs to say about it."""

    frame: pl.LazyFrame
    run_dir: Path | None = None
    version: str | None = None
    thresholds: dict[str, Any] = field(default_factory=dict)
    funnel: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    #: ``versions/<name>/scoped/*.parquet``: ``id`` + ``dropped_by__<kind>`` of rows that gates scoped to an
    #: export kind (difficulty: GRPO only) leave out of that kind's export.
    scoped: list[Path] = field(default_factory=list)

    def for_kind(self, kind: str) -> tuple[pl.LazyFrame, dict[str, int]]:
        """The rows an export of ``kind`` gets, and ``{reason: rows left out}`` by kind-scoped gates."""
        col = f"dropped_by__{kind}"
        parts = [pl.scan_parquet(f) for f in self.scoped if col in pl.read_parquet_schema(f)]
        if not parts:
            return self.frame, {}
        out = pl.concat([p.select("id", col) for p in parts]).filter(pl.col(col).is_not_null()).collect()
        ids = out["id"].implode()
        frame = self.frame.filter(~pl.col("id").is_in(ids))
        counts = dict(out.group_by(col).len().iter_rows())
        return frame, {str(k): int(v) for k, v in counts.items()}


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path}: invalid JSON ({exc.msg}); re-materialise the version") from exc


def latest_version(run_dir: Path, manifest: dict[str, Any]) -> str:
    """The manifest's ``latest_version``, else the newest ``versions/*`` directory."""
    name = manifest.get("latest_version")
    if name and (run_dir / "versions" / name).is_dir():
        return str(name)
    root = run_dir / "versions"
    dirs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] if root.is_dir() else []
    if not dirs:
        raise StoreError(f"{run_dir}: no materialised version; run `fabrika refilter {run_dir}` first")
    return max(dirs, key=lambda p: (p.stat().st_mtime, p.name)).name


def kept_rows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Rows a version keeps: ``status == "ok"`` and no ``dropped_by`` (defensive; versions hold only these)."""
    names = lf.collect_schema().names()
    if "status" in names:
        lf = lf.filter(pl.col("status") == "ok")
    if "dropped_by" in names:
        lf = lf.filter(pl.col("dropped_by").is_null())
    return lf


def open_version(run_dir: str | Path, version: str | None = None, stages: list[str] | None = None) -> ExportSource:
    """Scan a run's version (default the latest) for export; ``stages`` picks dataset stages (default all)."""
    run_dir = Path(run_dir)
    manifest = _read_json(run_dir / "manifest.json")
    if not manifest and not (run_dir / "versions").is_dir():
        raise StoreError(f"{run_dir}: not a run directory (no manifest.json, no versions/)")
    name = version or latest_version(run_dir, manifest)
    vdir = run_dir / "versions" / name
    if not vdir.is_dir():
        raise StoreError(f"{vdir}: no such version; materialise it with `fabrika refilter {run_dir} --name {name}`")
    files = sorted((vdir / "data").glob("*.parquet")) or sorted(vdir.glob("*.parquet"))
    if not files:
        raise StoreError(f"{vdir}: version holds no data shards")
    if stages:
        available = {f.stem: f for f in files}
        unknown = [s for s in stages if s not in available]
        if unknown:
            raise StoreError(f"{vdir}: no dataset stage {', '.join(map(repr, unknown))}; "
                             f"available: {', '.join(sorted(available))}")
        files = [available[s] for s in stages]
    lf = pl.concat([pl.scan_parquet(f) for f in files], how="diagonal_relaxed")
    scoped = [vdir / "scoped" / f.name for f in files if (vdir / "scoped" / f.name).is_file()]
    return ExportSource(frame=kept_rows(lf), run_dir=run_dir, version=name,
                        thresholds=_read_json(vdir / "thresholds.json"), funnel=_read_json(vdir / "funnel.json"),
                        manifest=manifest, scoped=scoped)


def open_files(paths: list[Path]) -> ExportSource:
    """Scan plain parquet files of sample rows (no run around them)."""
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise StoreError(f"export input files do not exist: {missing}")
    lf = pl.concat([pl.scan_parquet(p) for p in paths], how="diagonal_relaxed")
    return ExportSource(frame=kept_rows(lf))


def iter_batches(lf: pl.LazyFrame, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
    """Stream row dicts in batches (contract 6: memory bounded by ``batch_rows``)."""
    for frame in lf.collect_batches(chunk_size=batch_rows):
        if frame.height:
            yield frame.to_dicts()
