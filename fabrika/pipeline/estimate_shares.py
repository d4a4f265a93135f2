"""The shares a pilot measures, and how sure it is of them: gates between stages, the dataset's gates.

A stage below a gate reads a share of its input's ok rows; the dataset keeps a share of each
dataset stage's ok rows. The pilot measures each share on few items, so the estimate carries
its error (:func:`fabrika.pipeline.estimate_model.times_share`). Rows of one item pass or fail
together more often than not (a constraint's three queries, a topic's plans), so the error is
taken over the stage's *items* as clusters (:func:`~fabrika.pipeline.estimate_model.ratio_var`),
and never below the binomial error of the rows (:func:`~fabrika.pipeline.estimate_model.share_var`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fabrika.gates import gate_lazy
from fabrika.pipeline.estimate_model import floor_var, ratio_var, share_var
from fabrika.store import RunStore

#: item (``input_id``) -> (ok rows, of them kept)
PerItem = dict[str, tuple[float, float]]


def _ok_by_item(store: RunStore, name: str) -> dict[str, str] | None:
    """Row id -> item (``input_id``) of the stage's ok rows; ``None`` when its rows name no item."""
    import polars as pl

    lf = store.scan_raw(name)
    if lf is None:
        return {}
    cols = lf.collect_schema().names()
    if "input_id" not in cols or "id" not in cols:
        return None
    if "status" in cols:
        lf = lf.filter(pl.col("status") == "ok")
    df = lf.select(pl.col("id").cast(pl.Utf8), pl.col("input_id").cast(pl.Utf8)).collect()
    return {str(i): str(k) for i, k in df.iter_rows() if i is not None and k is not None}


def _per_item(by_item: dict[str, str], kept_ids: set[str]) -> PerItem:
    out: dict[str, list[float]] = {}
    for row_id, item in by_item.items():
        cell = out.setdefault(item, [0.0, 0.0])
        cell[0] += 1
        cell[1] += row_id in kept_ids
    return {k: (v[0], v[1]) for k, v in out.items()}


def gated_per_item(store: RunStore, name: str, filters: Any) -> tuple[PerItem | None, int, int]:
    """Per item of ``name``: its ok rows and how many of them pass the gates (what a consumer reads);
    then the stage's ok rows and gated rows in all. ``None`` per item when its rows name no item."""
    kept_ids: set[str] = set()
    for frame in store.iter_frames(name, store.annotators_of(name), where=lambda lf: gate_lazy(lf, filters),
                                   columns=["id"]):
        kept_ids.update(str(v) for v in frame["id"].to_list())
    by_item = _ok_by_item(store, name)
    if by_item is None:
        return None, store.count_rows(name, where=_ok_only), len(kept_ids)
    per = _per_item(by_item, kept_ids)
    return per, len(by_item), sum(int(v[1]) for v in per.values())


def version_per_item(store: RunStore, version_path: Path, name: str) -> PerItem | None:
    """Per item of dataset stage ``name``: its ok rows and how many of them the version keeps."""
    import polars as pl

    by_item = _ok_by_item(store, name)
    path = version_path / "data" / f"{name}.parquet"
    if by_item is None or not path.is_file():
        return None
    kept = pl.scan_parquet(path)
    if "id" not in kept.collect_schema().names():
        return None
    return _per_item(by_item, {str(v) for v in kept.select(pl.col("id").cast(pl.Utf8)).collect()["id"].to_list()})


def _ok_only(lf: Any) -> Any:
    import polars as pl

    return lf.filter(pl.col("status") == "ok") if "status" in lf.collect_schema().names() else lf


def share_variance(per_item: PerItem | None, kept: float, seen: float, share: float, f: float) -> float:
    """Variance of ``share`` (what a stage takes of ``seen`` upstream rows, measured as ``kept / seen``):
    the larger of the item-clustered ratio error and the rows' binomial error, scaled from ``kept / seen``
    to ``share``. ``f``: the share of the upstream's items the pilot saw (finite-population correction)."""
    if seen <= 0:
        return 0.0
    var = share_var(kept, seen, f)
    if per_item:  # items, not rows, are the units sampled
        var = max(var, ratio_var(list(per_item.values()), f), floor_var(len(per_item), f))
    r = kept / seen
    return var * (share / r) ** 2 if r > 0 else var
