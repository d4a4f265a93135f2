"""Bounded samples of a run's rows for the report's sample browser.

Per stage the browser shows a few kept rows and, per rejection reason, a few
rejected rows next to the raw model answer that caused them (``raw_excerpt``).
Reading stays bounded on a run of millions of rows: ids are picked from narrow
columns (``id``, ``status``, ``reason``) first, then only those rows are read in
full, and every string cell is cut at :data:`MAX_CELL_CHARS`.

IF rows that point at their response (``meta.response_id``) get that response's
per-verifier verdicts (``verifier_results``, ``library_results``) looked up, so
a sample is shown with each verifier's verdict even though the sample table
only carries the aggregates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from fabrika.pipeline.stage import is_rejection
from fabrika.store import RunStore

#: Longest string cell kept in the page (a dialogue with its tools is usually a few KB).
MAX_CELL_CHARS = 60_000
#: Columns the browser never needs (ids it already has, bulky internals).
SKIP_COLUMNS = ("input_id",)
VERDICT_COLUMNS = ("verifier_results", "library_results")


@dataclass(frozen=True)
class BrowserLimits:
    """How much of each stage goes into the page."""

    kept_per_stage: int = 30
    per_reason: int = 4
    reasons_per_stage: int = 20


def _reason_key(reason: str | None, status: str | None) -> str:
    return (reason or status or "unknown").split(":", 1)[0].strip() or "unknown"


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
        return value[:MAX_CELL_CHARS] + f"… [cut: {len(value)} chars]"
    return value


def _pick_ids(lf: pl.LazyFrame, names: list[str], limits: BrowserLimits) -> tuple[list[str], list[str]]:
    """Ids of the kept rows to show, and of the rejected/passed-over rows (a few per reason)."""
    status = pl.col("status") if "status" in names else pl.lit("ok")
    reason = pl.col("reason").cast(pl.String) if "reason" in names else pl.lit(None, dtype=pl.String)
    narrow = lf.select(pl.col("id").cast(pl.String), status.alias("_s"), reason.alias("_r"))
    kept = narrow.filter(pl.col("_s") == "ok").select("id").head(limits.kept_per_stage).collect()
    keyed = (narrow.filter(pl.col("_s") != "ok")
             .with_columns(pl.col("_r").fill_null(pl.col("_s")).str.split(":").list.first().alias("_k")))
    top = (keyed.group_by("_k").len().sort(["len", "_k"], descending=[True, False])
           .head(limits.reasons_per_stage).collect().get_column("_k").to_list())
    other = (keyed.filter(pl.col("_k").is_in(top)).sort("id").group_by("_k", maintain_order=True)
             .head(limits.per_reason).select("id").collect())
    return kept.get_column("id").to_list(), other.get_column("id").to_list()


def _rows(lf: pl.LazyFrame, ids: list[str]) -> list[dict[str, Any]]:
    if not ids:
        return []
    names = lf.collect_schema().names()
    keep = [c for c in names if c not in SKIP_COLUMNS]
    frame = lf.filter(pl.col("id").cast(pl.String).is_in(ids)).select(keep).collect()
    return [{k: _cut(v) for k, v in row.items() if v is not None} for row in frame.iter_rows(named=True)]


def _response_id(row: dict[str, Any]) -> str | None:
    meta = row.get("meta")
    if isinstance(meta, str) and meta.startswith("{"):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    return str(meta["response_id"]) if isinstance(meta, dict) and meta.get("response_id") else None


def _attach_verdicts(store: RunStore, stages: list[str], rows: list[dict[str, Any]]) -> None:
    """Give rows whose ``meta.response_id`` names a response that response's per-verifier verdicts."""
    wanted = {rid: r for r in rows if "verifier_results" not in r and (rid := _response_id(r))}
    if not wanted:
        return
    for stage in stages:
        lf = store.scan_raw(stage)
        if lf is None:
            continue
        names = lf.collect_schema().names()
        cols = [c for c in VERDICT_COLUMNS if c in names]
        if not cols:
            continue
        found = lf.filter(pl.col("id").is_in(list(wanted))).select("id", *cols).collect()
        for row in found.iter_rows(named=True):
            target = wanted.get(row["id"])
            if target is not None:
                target.update({c: row[c] for c in cols if row[c] is not None})


def collect_samples(run_dir: str | Path, manifest: dict[str, Any], limits: BrowserLimits = BrowserLimits()
                    ) -> list[dict[str, Any]]:
    """Per stage (pipeline order), the sampled rows as plain dicts with ``_stage``, ``_group`` and ``_reason``.

    ``_group`` is ``"kept"``, ``"rejected"`` or ``"passed over"`` (sampling/eligibility
    reasons such as ``not_sampled`` that are by design, not a quality verdict).
    """
    store = RunStore(run_dir)
    stages = [s for s in (manifest.get("order") or sorted(manifest.get("stages") or {})) if store.has_rows(s)]
    out: list[dict[str, Any]] = []
    for stage in stages:
        lf = store.scan_raw(stage)
        if lf is None:
            continue
        names = lf.collect_schema().names()
        if "id" not in names:
            continue
        kept_ids, other_ids = _pick_ids(lf, names, limits)
        by_id = {str(r.get("id")): r for r in _rows(lf, kept_ids + other_ids)}
        kept = set(kept_ids)
        for rid in kept_ids + other_ids:  # kept rows, then rejections grouped by reason (most frequent first)
            row = by_id.get(rid)
            if row is None:
                continue
            key = _reason_key(row.get("reason"), row.get("status"))
            if rid in kept:
                group, key = "kept", ""
            else:
                group = "rejected" if is_rejection(row.get("reason")) else "passed over"
            out.append({"_stage": stage, "_group": group, "_reason": key, **row})
    _attach_verdicts(store, stages, out)
    return out
