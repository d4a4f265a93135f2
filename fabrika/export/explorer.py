"""Every row of every stage of a run, paged from the parquet shards, labelled with what happened to it.

The run explorer's data access, shared by the offline page (:mod:`fabrika.export.browser`)
and ``fabrika browse`` (:mod:`fabrika.export.explorer_server`). Each row of a stage gets one
*group*:

* ``kept`` — a dataset stage's row that is in the materialised version (``versions/<v>/data``);
* ``ok`` — a row of a stage outside the dataset that passes the gates its consumers read;
* ``gate-dropped`` — the stage accepted the row, a gate dropped it; ``gate`` names the first
  failing gate (as ``dropped_by`` does) and ``threshold`` the threshold it failed;
* ``rejected`` / ``passed over`` — the stage itself rejected the row (a verdict with its reason
  and raw answer) or passed it over by design (``not_sampled``);
* ``not in version`` — a dataset row the version neither kept nor dropped (the stage was
  rewritten after the version was materialised).

Annotating stages (scorers) are not listed as rows of their own: their columns are joined onto
the rows they score (``scores``). Counts come from the same index the pages are cut from and
equal ``fabrika status`` (per stage ``rows``/``ok``/``rejected``; per dataset stage the
version's gate funnel).

Memory: per stage one narrow index (id, status, reason key, group, gate, shard and offset) is
built on first use and kept; a page reads only the shards its rows are in. A text search reads
the stage's string columns a shard at a time and matches *values*, never JSON keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import polars as pl

import fabrika.store.shards as shards
from fabrika import gates
from fabrika.errors import StoreError
from fabrika.pipeline.stage import is_rejection
from fabrika.store import RunStore
from fabrika.store.versions import UPSTREAM_GATE, list_versions, read_version, version_dir

KEPT, OK, DROPPED, REJECTED, PASSED, ORPHAN = "kept", "ok", "gate-dropped", "rejected", "passed over", "not in version"
GROUPS = (KEPT, OK, DROPPED, REJECTED, PASSED, ORPHAN)
#: Longest string cell handed to a page (a dialogue with its tools is usually a few KB).
MAX_CELL_CHARS = 60_000
#: Columns a page never needs.
SKIP_COLUMNS = ("input_id",)
VERDICT_COLUMNS = ("verifier_results", "library_results")
#: JSON object keys (``"key":``) — removed from a cell before a search, so a search matches values only.
_JSON_KEY = r'"(?:[^"\\]|\\.)*"\s*:'
#: Row columns that hold what the model answered or was asked, shown as the row's LLM requests/answers.
LLM_COLUMNS = ("raw_excerpt", "raw", "raw_answer", "requests", "llm_requests", "teacher_answers")


def reason_key(reason: str | None, status: str | None) -> str:
    """The counting key of a stage's reason, as :meth:`RunStore.counts` and ``fabrika status`` count it."""
    return (reason.split(":", 1)[0] if reason else None) or status or "unknown"


def cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
        return value[:MAX_CELL_CHARS] + f"… [cut: {len(value)} chars]"
    return value


@dataclass
class StageIndex:
    """One stage's narrow index: a row per stored row, in shard order."""

    name: str
    files: list[Path]
    frame: pl.DataFrame  # id, _s (status), _r (reason key), group, gate, _shard, _off
    dataset: bool
    annotators: list[str]
    searches: dict[str, pl.Series] = field(default_factory=dict)


class RunExplorer:
    """Read-only view of one run directory for the explorer (cheap to build; stages indexed on demand).

    Args:
        run_dir: the run directory.
        version: the version whose ``kept`` rows are shown (default the latest).
    """

    def __init__(self, run_dir: str | Path, version: str | None = None) -> None:
        from fabrika.pipeline.registry import load_run_modules

        self.run_dir = Path(run_dir)
        self.store = RunStore(self.run_dir)
        self.manifest = self.store.read_manifest()
        if not self.manifest:
            raise StoreError(f"{self.run_dir}: not a run directory (no manifest.json)")
        load_run_modules(self.manifest)
        self.versions = list_versions(self.run_dir)
        self.version = version or self.manifest.get("latest_version") or (self.versions[-1] if self.versions else None)
        if self.version is not None and self.version not in self.versions:
            raise StoreError(f"version {self.version!r}: no such version; versions: {', '.join(self.versions) or '(none)'}")
        info = read_version(self.run_dir, self.version) if self.version else {}
        self.thresholds: dict[str, Any] = info.get("thresholds") or gates.thresholds_dump(
            gates.validate_thresholds(self.manifest.get("config", {}).get("filters", {})))
        self.funnel: dict[str, Any] = info.get("funnel") or {}
        self.layout: dict[str, Any] = self.manifest.get("layout", {})
        self.order: list[str] = [s for s in (self.manifest.get("order") or list(self.layout))]
        self.dataset_stages: list[str] = list(self.manifest.get("config", {}).get("dataset", {}).get("stages", []))
        self._index: dict[str, StageIndex] = {}
        self._kept: dict[tuple[str, str], pl.Series] = {}

    # -- stages and counts --------------------------------------------------------
    def annotating(self, stage: str) -> bool:
        return bool(self.layout.get(stage, {}).get("annotates"))

    def stages(self) -> list[str]:
        """Stages whose rows are browsed (not scorers: their columns join the rows they score), pipeline order."""
        return [s for s in self.order if not self.annotating(s) and self.store.has_rows(s)]

    def threshold(self, gate: str | None) -> Any:
        """The threshold a gate reason (``group.param``) applies, or a sentence for the built-in gates."""
        if not gate:
            return None
        if gate == gates_rejected():
            return "status ok (the stage's or a scorer's)"
        if gate == UPSTREAM_GATE:
            return "the rows it was made from pass the gates"
        group, _, param = gate.partition(".")
        value = (self.thresholds.get(group) or {}).get(param, (self.thresholds.get(group) or {}).get(gate))
        return value

    def kept_ids(self, stage: str, version: str | None = None) -> pl.Series:
        """Ids of ``stage``'s rows in ``version``'s dataset (empty for a stage outside it)."""
        version = version or self.version
        key = (stage, str(version))
        if key not in self._kept:
            path = version_dir(self.run_dir, str(version)) / "data" / f"{stage}.parquet" if version else None
            ids = (pl.scan_parquet(path).select(pl.col("id").cast(pl.String)).collect()["id"]
                   if path is not None and path.is_file() else pl.Series("id", [], dtype=pl.String))
            self._kept[key] = ids
        return self._kept[key]

    def _dropped(self, stage: str) -> pl.DataFrame:
        """``id, gate`` of the stage's gate-dropped rows under this version's thresholds."""
        path = version_dir(self.run_dir, str(self.version)) / "dropped" / f"{stage}.parquet" if self.version else None
        if stage in self.dataset_stages:
            if path is not None and path.is_file():
                return pl.read_parquet(path).select(pl.col("id").cast(pl.String), pl.col(gates.DROPPED_BY).alias("gate"))
            return pl.DataFrame(schema={"id": pl.String, "gate": pl.String})
        lf = self.store.scan(stage, self.store.annotators_of(stage, self.manifest))
        assert lf is not None
        names = lf.collect_schema().names()
        params = gates.validate_thresholds(self.thresholds)
        wanted = {"id"} | {c for p in gates.active_predicates(names, params) for c in p.columns}
        marked, _ = gates.mark_dropped(lf.select([c for c in names if c in wanted]), self.thresholds, scoped=False)
        return (marked.filter(pl.col(gates.DROPPED_BY).is_not_null())
                .select(pl.col("id").cast(pl.String), pl.col(gates.DROPPED_BY).alias("gate")).collect())

    def _scoped(self, stage: str) -> pl.DataFrame:
        """``id, scoped``: kept rows an export kind leaves out (``sft: general.sft_top_k``), from ``versions/<v>/scoped``."""
        path = version_dir(self.run_dir, str(self.version)) / "scoped" / f"{stage}.parquet" if self.version else None
        if path is None or not path.is_file():
            return pl.DataFrame(schema={"id": pl.String, "scoped": pl.String})
        frame = pl.read_parquet(path)
        kinds = [c for c in frame.columns if c.startswith(gates.SCOPED)]
        parts = [pl.when(pl.col(c).is_not_null()).then(pl.lit(c[len(gates.SCOPED):] + ": ") + pl.col(c)) for c in kinds]
        return frame.select(pl.col("id").cast(pl.String), pl.concat_str(parts, separator="; ", ignore_nulls=True)
                            .alias("scoped"))

    def index(self, stage: str) -> StageIndex:
        """The stage's narrow index (built once per explorer)."""
        if stage in self._index:
            return self._index[stage]
        files = self.store.shards(stage)
        if not files:
            raise StoreError(f"stage {stage!r}: no rows in {self.run_dir}; stages: {', '.join(self.stages())}")
        parts = []
        for i, f in enumerate(files):
            names = {n for n, _ in shards.file_schema(f)}
            status = pl.col("status").cast(pl.String) if "status" in names else pl.lit("ok")
            reason = pl.col("reason").cast(pl.String) if "reason" in names else pl.lit(None, dtype=pl.String)
            parts.append(pl.scan_parquet(f).select(
                pl.col("id").cast(pl.String), status.alias("_s"), reason.alias("_reason"),
                pl.lit(i, dtype=pl.Int32).alias("_shard"), pl.int_range(pl.len(), dtype=pl.Int32).alias("_off")))
        frame = shards.collect_checked(files, pl.concat(parts).collect)
        key = pl.col("_reason").str.split(":").list.first()
        frame = frame.with_columns(pl.when(key.is_null() | (key == "")).then(pl.col("_s")).otherwise(key)
                                   .fill_null("unknown").alias("_r")).drop("_reason")
        dataset = stage in self.dataset_stages
        dropped = self._dropped(stage)
        frame = frame.join(dropped, on="id", how="left", maintain_order="left")
        own_ok = pl.col("_s") == "ok"
        passed_over = ~pl.col("_r").map_elements(is_rejection, return_dtype=pl.Boolean)
        if dataset:
            kept = pl.col("id").is_in(self.kept_ids(stage).implode())
            group = (pl.when(~own_ok & passed_over).then(pl.lit(PASSED)).when(~own_ok).then(pl.lit(REJECTED))
                     .when(kept).then(pl.lit(KEPT)).when(pl.col("gate").is_not_null()).then(pl.lit(DROPPED))
                     .otherwise(pl.lit(ORPHAN)))
        else:
            group = (pl.when(~own_ok & passed_over).then(pl.lit(PASSED)).when(~own_ok).then(pl.lit(REJECTED))
                     .when(pl.col("gate").is_not_null()).then(pl.lit(DROPPED)).otherwise(pl.lit(OK)))
        frame = frame.with_columns(group.alias("group")).with_columns(
            pl.when(pl.col("group") == DROPPED).then(pl.col("gate")).otherwise(pl.lit(None, dtype=pl.String))
            .alias("gate"))
        frame = frame.join(self._scoped(stage), on="id", how="left", maintain_order="left")
        idx = StageIndex(stage, files, frame, dataset, self.store.annotators_of(stage, self.manifest))
        self._index[stage] = idx
        return idx

    def stage_counts(self, stage: str) -> dict[str, Any]:
        """``rows``, ``ok``, ``rejected`` by reason key (what ``fabrika status`` shows) and rows per group/gate."""
        frame = self.index(stage).frame if not self.annotating(stage) else None
        if frame is None:  # a scorer: its own table's counts
            counts = self.store.counts(stage)
            return {"rows": counts["rows"], "ok": counts["ok"], "rejected": counts["rejected"]}
        rejected = {r: int(n) for r, n in frame.filter(pl.col("_s") != "ok").group_by("_r").len().sort("_r").iter_rows()}
        groups = {g: int(n) for g, n in frame.group_by("group").len().iter_rows()}
        by_gate = {g: int(n) for g, n in frame.filter(pl.col("gate").is_not_null()).group_by("gate").len().sort("gate")
                   .iter_rows()}
        return {"rows": frame.height, "ok": int((frame["_s"] == "ok").sum()), "rejected": rejected,
                "groups": {g: groups.get(g, 0) for g in GROUPS if groups.get(g)}, "gates": by_gate}

    def summary(self) -> dict[str, Any]:
        """Everything the page's header shows: counts per stage, the version's funnel, versions, thresholds."""
        stages = {}
        for name in self.order:
            if not self.store.has_rows(name):
                stages[name] = {"rows": 0, "ok": 0, "rejected": {}}
                continue
            stages[name] = self.stage_counts(name)
            stages[name]["annotates"] = self.annotating(name)
            stages[name]["dataset"] = name in self.dataset_stages
            if self.annotating(name):
                stages[name]["scores"] = list((self.layout.get(name) or {}).get("inputs") or [])
        versions = {name: {"rows": (self.manifest.get("versions") or {}).get(name, {}).get("rows")}
                    for name in self.versions}
        return {
            "run": self.manifest.get("name") or self.run_dir.name,
            "version": self.version,
            "stages": stages,
            "browsable": self.stages(),
            "dataset_stages": self.dataset_stages,
            "gates": self.funnel.get("gates") or {},
            "versions": versions,
            "thresholds": self.thresholds,
            "groups": list(GROUPS),
        }

    # -- search -------------------------------------------------------------------
    def _matches(self, idx: StageIndex, query: str) -> pl.Series:
        """A boolean per index row: some value of the row (not a key) contains ``query`` (case-insensitive)."""
        needle = query.lower()
        if needle in idx.searches:
            return idx.searches[needle]
        out = []
        for f in idx.files:
            cols = [n for n, _ in shards.file_schema(f) if n not in ("status", "llm_backend")]
            exprs = [pl.col(c).cast(pl.String).str.replace_all(_JSON_KEY, " ").str.to_lowercase()
                     .str.contains(needle, literal=True).fill_null(False) for c in cols]
            hit = pl.scan_parquet(f).select(pl.any_horizontal(exprs).alias("hit") if exprs else pl.lit(False))
            out.append(shards.collect_checked([f], hit.collect)["hit"])
        series = pl.concat(out) if out else pl.Series("hit", [], dtype=pl.Boolean)
        if len(idx.searches) > 16:
            idx.searches.clear()
        idx.searches[needle] = series
        return series

    # -- pages --------------------------------------------------------------------
    def select(self, stage: str, group: str | None = None, reason: str | None = None, query: str | None = None,
               vs: str | None = None) -> pl.DataFrame:
        """The index rows a filter selects (``reason`` matches a gate or a reason key; ``vs``: version diff,
        ``group`` then ``added``/``removed`` against version ``vs``)."""
        idx = self.index(stage)
        frame = idx.frame
        mask = pl.repeat(True, frame.height, eager=True)
        if vs:
            other = self.kept_ids(stage, vs).implode()
            mine = self.kept_ids(stage).implode()
            if group == "removed":
                mask = frame["id"].is_in(other) & ~frame["id"].is_in(mine)
            else:  # added
                mask = frame["id"].is_in(mine) & ~frame["id"].is_in(other)
        elif group:
            mask = frame["group"] == group
        if reason:
            mask = mask & ((frame["gate"] == reason).fill_null(False) | ((frame["_r"] == reason) & (frame["_s"] != "ok")))
        if query:
            mask = mask & self._matches(idx, query)
        return frame.filter(mask)

    def page(self, stage: str, group: str | None = None, reason: str | None = None, query: str | None = None,
             offset: int = 0, limit: int = 50, vs: str | None = None) -> dict[str, Any]:
        """One page of rows (full, with scores joined) and how many rows the filter selects."""
        chosen = self.select(stage, group, reason, query, vs)
        part = chosen.slice(max(0, offset), max(0, limit))
        rows = self.rows(stage, part)
        return {"stage": stage, "total": chosen.height, "offset": offset, "limit": limit, "rows": rows}

    def rows(self, stage: str, part: pl.DataFrame) -> list[dict[str, Any]]:
        """Full rows for index rows ``part`` (read from their shards), labelled and with scores joined."""
        idx = self.index(stage)
        found: dict[tuple[int, int], dict[str, Any]] = {}
        wanted: dict[int, list[int]] = {}
        for shard, off in part.select("_shard", "_off").iter_rows():
            wanted.setdefault(int(shard), []).append(int(off))
        for shard, offs in wanted.items():
            f = idx.files[shard]
            lf = pl.scan_parquet(f).with_row_index("_off").filter(pl.col("_off").is_in(offs))
            frame = shards.collect_checked([f], lf.collect)
            for row in frame.iter_rows(named=True):
                off = row.pop("_off")
                found[(shard, int(off))] = {k: cut(v) for k, v in row.items() if v is not None and k not in SKIP_COLUMNS}
        out = []
        for meta in part.iter_rows(named=True):
            row = found.get((int(meta["_shard"]), int(meta["_off"])))
            if row is None:
                continue
            gate = meta["gate"]
            out.append({"_stage": stage, "_group": meta["group"], "_reason": meta["_r"] if meta["_s"] != "ok" else "",
                        "_gate": gate, "_threshold": self.threshold(gate),
                        **({"_scoped": meta["scoped"]} if meta.get("scoped") else {}), **row})
        self._join_scores(idx, out)
        self._attach_verdicts(out)
        return out

    def _join_scores(self, idx: StageIndex, rows: list[dict[str, Any]]) -> None:
        """Each scorer's columns of a row as ``_scores[scorer]``; a scorer's rejection names the gate that used it."""
        ids = [r["id"] for r in rows]
        if not ids or not idx.annotators:
            return
        by_id = {r["id"]: r for r in rows}
        for scorer in idx.annotators:
            lf = self.store.scan_raw(scorer)
            if lf is None:
                continue
            names = [c for c in lf.collect_schema().names() if c not in ("input_id", "llm_backend")]
            found = shards.collect_checked(self.store.shards(scorer),
                                           lf.filter(pl.col("id").is_in(ids)).select(names).collect)
            for row in found.iter_rows(named=True):
                target = by_id.get(row.pop("id"))
                if target is None:
                    continue
                scores = {k: v for k, v in row.items() if v is not None}
                target.setdefault("_scores", {})[scorer] = scores
                if target.get("_gate") == gates_rejected() and scores.get("status", "ok") != "ok":
                    target["_threshold"] = f"{scorer}: {scores.get('reason') or scores.get('status')}"

    def _attach_verdicts(self, rows: list[dict[str, Any]]) -> None:
        """IF rows whose ``meta.response_id`` names a response get its per-verifier verdicts."""
        wanted = {rid: r for r in rows if "verifier_results" not in r and (rid := _response_id(r))}
        if not wanted:
            return
        for stage in self.order:
            lf = self.store.scan_raw(stage)
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

    def diff(self, stage: str, vs: str) -> dict[str, int]:
        """How many of ``stage``'s kept rows this version added and removed against version ``vs``."""
        return {"added": self.select(stage, "added", vs=vs).height, "removed": self.select(stage, "removed", vs=vs).height}


def gates_rejected() -> str:
    """The built-in status gate's reason (rows whose own or a scorer's status is not ok)."""
    return "rejected"


def _response_id(row: Mapping[str, Any]) -> str | None:
    meta = row.get("meta")
    if isinstance(meta, str) and meta.startswith("{"):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    return str(meta["response_id"]) if isinstance(meta, dict) and meta.get("response_id") else None
