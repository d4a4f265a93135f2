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
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import polars as pl

import fabrika.store.shards as shards
from fabrika import gates
from fabrika.errors import StoreError
from fabrika.export.explorer_requests import MAX_DEPTH, RequestView, locate, named_ids, sidecar_steps
from fabrika.pipeline.reasons import PASSED_OVER_REASONS, is_rejection
from fabrika.store import RunStore
from fabrika.store.manifest import effective_status
from fabrika.store.shards import SHARED_ITEM
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
#: Scorer shards read for a page's scores before the scorer is located whole (a first page of a big run).
PROBE_SHARDS = 4
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
        self.run_dir = Path(run_dir)
        self.store = RunStore(self.run_dir)
        self.manifest = self.store.read_manifest()
        if not self.manifest:
            raise StoreError(f"{self.run_dir}: not a run directory (no manifest.json)")
        self._gates_loaded = False
        self.versions = list_versions(self.run_dir)
        self.version = version or self.manifest.get("latest_version") or (self.versions[-1] if self.versions else None)
        if self.version is not None and self.version not in self.versions:
            raise StoreError(f"version {self.version!r}: no such version; versions: {', '.join(self.versions) or '(none)'}")
        info = read_version(self.run_dir, self.version) if self.version else {}
        self.thresholds: dict[str, Any] = info.get("thresholds") or {}
        if not self.thresholds:
            self.load_gates()
            self.thresholds = gates.thresholds_dump(
                gates.validate_thresholds(self.manifest.get("config", {}).get("filters", {})))
        self.funnel: dict[str, Any] = info.get("funnel") or {}
        self.layout: dict[str, Any] = self.manifest.get("layout", {})
        self.order: list[str] = [s for s in (self.manifest.get("order") or list(self.layout))]
        self.dataset_stages: list[str] = list(self.manifest.get("config", {}).get("dataset", {}).get("stages", []))
        self._index: dict[str, StageIndex] = {}
        self._kept: dict[tuple[str, str], pl.Series] = {}
        self._located: dict[str, pl.DataFrame] = {}
        self._shared: dict[str, list[dict[str, Any]]] = {}
        self._files: dict[str, list[Path]] = {}
        self._building: dict[str, threading.Lock] = {}
        self.requests = RequestView(self.run_dir, self.manifest)

    def load_gates(self, columns: Iterable[str] | None = None) -> None:
        """Register the gate groups that can act on a table with ``columns`` (``None``: every group of the run).

        With the run's ``gate_modules``/``gate_columns`` (recorded at run time) only the modules defining
        groups whose gates read one of ``columns`` are imported, plus the run's plugins; without them (an older
        run), every module the registry names. Only stages outside the dataset need gates here: a dataset
        stage's drops are in its version."""
        from fabrika.pipeline.registry import load_modules, load_run_modules

        if self._gates_loaded:
            return
        modules, wanted = self.manifest.get("gate_modules"), self.manifest.get("gate_columns")
        if columns is None or not isinstance(modules, dict) or not isinstance(wanted, dict):
            load_run_modules(self.manifest)
            self._gates_loaded = True
            return
        have = set(columns)
        groups = sorted(g for g, cols in wanted.items() if set(cols) & have and g not in gates.GATE_GROUPS)
        plugins = list(self.manifest.get("config", {}).get("plugins", []))
        failures = load_modules(sorted({str(modules[g]) for g in groups if modules.get(g)}) + plugins)
        if failures or not set(groups) <= set(gates.GATE_GROUPS):
            load_run_modules(self.manifest)
            self._gates_loaded = True

    def _known_thresholds(self) -> dict[str, Any]:
        """This version's thresholds of the gate groups registered in this process."""
        return {g: v for g, v in self.thresholds.items() if g in gates.GATE_GROUPS}

    # -- stages and counts --------------------------------------------------------
    def _shards(self, stage: str) -> list[Path]:
        """The stage's shards, listed once per explorer (shards are immutable; a finished run adds none)."""
        if stage not in self._files:
            self._files[stage] = self.store.shards(stage)
        return self._files[stage]

    def annotating(self, stage: str) -> bool:
        return bool(self.layout.get(stage, {}).get("annotates"))

    def stages(self) -> list[str]:
        """Stages whose rows are browsed (not scorers: their columns join the rows they score), pipeline order."""
        return [s for s in self.order if not self.annotating(s) and bool(self._shards(s))]

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

    def _dropped(self, stage: str, ids: pl.Series | None = None, shards_of_ids: Iterable[int] = ()) -> pl.DataFrame:
        """``id, gate`` of the stage's gate-dropped rows under this version's thresholds (with ``ids``: of those
        rows only, which lie in the stage's shards numbered ``shards_of_ids``)."""
        path = version_dir(self.run_dir, str(self.version)) / "dropped" / f"{stage}.parquet" if self.version else None
        if stage in self.dataset_stages:
            if path is not None and path.is_file():
                got = pl.scan_parquet(path).select(pl.col("id").cast(pl.String), pl.col(gates.DROPPED_BY).alias("gate"))
                if ids is not None:
                    got = got.filter(pl.col("id").is_in(ids.implode()))
                return shards.collect_checked([path], got.collect)
            return pl.DataFrame(schema={"id": pl.String, "gate": pl.String})
        annotators = self.store.annotators_of(stage, self.manifest)
        whole = self.store.scan(stage, annotators)  # the whole table's columns (footers only, nothing read yet)
        assert whole is not None
        lf = whole
        names = lf.collect_schema().names()
        if ids is not None:  # only these rows (a first page before the index is built)
            part = self._scan_part(stage, annotators, ids, sorted(set(shards_of_ids)))
            if part is not None:
                have = part.collect_schema()
                full = lf.collect_schema()
                # a column absent from the shards read is null there, as in the whole table's scan
                lf = part.with_columns([pl.lit(None, dtype=full[c]).alias(c) for c in names if c not in have])
            lf = lf.filter(pl.col("id").cast(pl.String).is_in(ids.implode()))
        self.load_gates(names)
        thresholds = self._known_thresholds()
        params = gates.validate_thresholds(thresholds)
        wanted = {"id"} | {c for p in gates.active_predicates(names, params) for c in p.columns}
        marked, _ = gates.mark_dropped(lf.select([c for c in names if c in wanted]), thresholds, scoped=False)
        return (marked.filter(pl.col(gates.DROPPED_BY).is_not_null())
                .select(pl.col("id").cast(pl.String), pl.col(gates.DROPPED_BY).alias("gate")).collect())

    def _scan_part(self, stage: str, annotators: list[str], ids: pl.Series, numbers: list[int]) -> pl.LazyFrame | None:
        """The stage's shards ``numbers`` joined with its scorers' first shards, when those hold every row of
        ``ids`` the scorer scored (scorers write in their input's order); ``None`` when a scorer's first shards
        miss one of the ids the stage accepted (then the whole table is scanned)."""
        own = self._shards(stage)
        if not numbers or max(numbers) >= len(own):
            return None
        files: dict[str, list[Path]] = {stage: [own[i] for i in numbers]}
        wanted = None
        for scorer in annotators:
            every = self._shards(scorer)
            if len(every) <= PROBE_SHARDS:
                continue
            if wanted is None:  # the ids a scorer must have scored: the rows the stage itself accepted
                got = shards.scan_files(files[stage])
                assert got is not None
                accepted = (pl.col("status").fill_null("ok") == "ok" if "status" in got.collect_schema().names()
                            else pl.lit(True))
                wanted = set(shards.collect_checked(files[stage], got.filter(
                    pl.col("id").cast(pl.String).is_in(ids.implode()) & accepted)
                    .select(pl.col("id").cast(pl.String)).collect)["id"].to_list())
            probe = shards.scan_files(every[:PROBE_SHARDS])
            assert probe is not None
            found = shards.collect_checked(every[:PROBE_SHARDS], probe.select(pl.col("id").cast(pl.String))
                                           .filter(pl.col("id").is_in(list(wanted))).collect)
            if set(found["id"].to_list()) != wanted:
                return None
            files[scorer] = every[:PROBE_SHARDS]
        return self.store.scan(stage, annotators, files)

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
        files = self._shards(stage)
        if not files:
            raise StoreError(f"stage {stage!r}: no rows in {self.run_dir}; stages: {', '.join(self.stages())}")
        with self._building.setdefault(stage, threading.Lock()):  # one build per stage, whoever asks first
            if stage in self._index:
                return self._index[stage]
            frame = _scan_positions(files, {"id": pl.String, "status": pl.String, "reason": pl.String})
            idx = StageIndex(stage, files, self._label(stage, frame), stage in self.dataset_stages,
                             self.store.annotators_of(stage, self.manifest))
            self._index[stage] = idx
            return idx

    def prepare(self, stage: str) -> None:
        """Build what later pages of ``stage`` need: its index and where each of its scorers' ids is."""
        self.index(stage)
        for scorer in self.store.annotators_of(stage, self.manifest):
            files = self._shards(scorer)
            if files and scorer not in self._located:
                self._located[scorer] = _scan_positions(files, {"id": pl.String})

    def _label(self, stage: str, frame: pl.DataFrame, whole: bool = True) -> pl.DataFrame:
        """``id, status, reason, _shard, _off`` rows → the index's columns (``_s``, ``_r``, ``group``, ``gate``,
        ``scoped``); ``whole``: ``frame`` is the whole stage (else only its ids are gated)."""
        frame = frame.select("id", pl.col("status").fill_null("ok").alias("_s"), pl.col("reason").alias("_reason"),
                             "_shard", "_off")
        key = pl.col("_reason").str.split(":").list.first()
        frame = frame.with_columns(pl.when(key.is_null() | (key == "")).then(pl.col("_s")).otherwise(key)
                                   .fill_null("unknown").alias("_r")).drop("_reason")
        dataset = stage in self.dataset_stages
        dropped = self._dropped(stage, None if whole else frame["id"], () if whole else frame["_shard"].unique().to_list())
        frame = frame.join(dropped, on="id", how="left", maintain_order="left")
        own_ok = pl.col("_s") == "ok"
        passed_over = pl.col("_r").str.strip_chars().is_in(sorted(PASSED_OVER_REASONS))  # as is_rejection decides
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
        return frame.join(self._scoped(stage), on="id", how="left", maintain_order="left")

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

    def status_counts(self, stage: str) -> dict[str, Any]:
        """``rows``, ``ok``, ``rejected`` of a stage as ``fabrika status`` takes them: the manifest's for a finished
        run, counted from the shards otherwise (the manifest of a live or killed run is a snapshot)."""
        entry = (self.manifest.get("stages") or {}).get(stage) or {}
        if effective_status(dict(self.manifest)) == "done" and "rows" in entry:
            return {"rows": int(entry.get("rows") or 0), "ok": int(entry.get("ok") or 0),
                    "rejected": dict(entry.get("rejected") or {})}
        counts = self.store.counts(stage)
        return {"rows": counts["rows"] + self.store.journal_rows(stage), "ok": counts["ok"],
                "rejected": counts["rejected"]}

    def _groups(self, stage: str, counts: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]] | None:
        """Rows per group and per gate from the version's funnel (no row read); ``None`` without one."""
        funnel = (self.funnel.get("gates") or {}).get(stage) if stage in self.dataset_stages else \
            (self.funnel.get("upstream_gates") or {}).get(stage)
        if not funnel:
            return None
        rejected = sum(n for r, n in counts["rejected"].items() if is_rejection(r))
        passed = sum(counts["rejected"].values()) - rejected
        by_gate = {k[len("dropped_"):]: int(n) for k, n in funnel.items() if k.startswith("dropped_") and n}
        own = counts["rows"] - counts["ok"]  # the status gate counts the stage's own rejections too
        if by_gate.get(gates_rejected(), 0) > own:
            by_gate[gates_rejected()] -= own
        else:
            by_gate.pop(gates_rejected(), None)
        groups = {KEPT if stage in self.dataset_stages else OK: int(funnel.get("out", 0)),
                  DROPPED: sum(by_gate.values()), REJECTED: rejected, PASSED: passed}
        groups[ORPHAN] = counts["rows"] - sum(groups.values())
        return {g: groups[g] for g in GROUPS if groups.get(g)}, dict(sorted(by_gate.items()))

    def summary(self) -> dict[str, Any]:
        """Everything the page's header shows: counts per stage (``fabrika status``'s), rows per group and gate,
        the version's funnel, versions and thresholds. Reads no rows when the version's funnel has the stage."""
        stages: dict[str, Any] = {}
        for name in self.order:
            counts = self.status_counts(name)
            entry: dict[str, Any] = {**counts, "annotates": self.annotating(name), "dataset": name in self.dataset_stages}
            if self.annotating(name):
                entry["scores"] = list((self.layout.get(name) or {}).get("inputs") or [])
            elif counts["rows"]:
                got = self._groups(name, counts)
                if got is None:
                    full = self.stage_counts(name)
                    got = (full["groups"], full["gates"])
                entry["groups"], entry["gates"] = got
            stages[name] = entry
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
        import numpy as np

        needle = query.lower()
        if needle in idx.searches:
            return idx.searches[needle]
        contains = "(?i)" + re.escape(needle)
        groups, parts = [], []
        for key, group in _by_schema(idx.files).items():
            cols = [c for c, _ in key if c not in ("status", "llm_backend")] or ["id"]
            text = [pl.col(c).cast(pl.String) for c in cols]
            raw = pl.any_horizontal([t.str.contains(contains).fill_null(False) for t in text])
            values = pl.any_horizontal([t.str.replace_all(_JSON_KEY, " ").str.contains(contains).fill_null(False)
                                        for t in text])
            # cheap pass first (the text as stored), keys stripped only where the text contains the needle at all
            groups.append(group)
            parts.append(pl.scan_parquet(group).with_row_index("__i").filter(raw).select("__i", values.alias("hit")))
        found = shards.collect_checked(idx.files, lambda: pl.collect_all(parts)) if parts else []
        frames = []
        for group, got in zip(groups, found):
            hit = np.zeros(sum(shards.shard_size(f)[0] for f in group), dtype=bool)
            hit[got.filter(pl.col("hit"))["__i"].to_numpy()] = True
            frames.append(pl.DataFrame({"hit": hit}))
        hits = _place(idx.files, groups, frames)
        series = hits["hit"]
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
        """One page of rows (full, with scores joined) and how many rows the filter selects.

        Unfiltered pages within the first shards are read straight from them while the stage is not
        indexed yet (the first screen of a big run does not wait for the index)."""
        if stage not in self._index and not (group or reason or query or vs):
            head = self._head(stage, max(0, offset) + max(0, limit))
            if head is not None:
                part = head.slice(max(0, offset), max(0, limit))
                return {"stage": stage, "total": self.status_counts(stage)["rows"], "offset": offset, "limit": limit,
                        "rows": self.rows(stage, part)}
        chosen = self.select(stage, group, reason, query, vs)
        part = chosen.slice(max(0, offset), max(0, limit))
        rows = self.rows(stage, part)
        return {"stage": stage, "total": chosen.height, "offset": offset, "limit": limit, "rows": rows}

    def _head(self, stage: str, n: int, max_shards: int = 16) -> pl.DataFrame | None:
        """The first ``n`` rows' index entries, read from the first shards only; ``None`` if they span more than
        ``max_shards`` or the stage holds fewer rows than its counts say (then the index decides)."""
        files = self._shards(stage)
        take = 1
        while True:  # 1, 2, 4… shards until they hold n rows (no footer read first: one scan each try)
            frame = _scan_positions(files[:take], {"id": pl.String, "status": pl.String, "reason": pl.String})
            if frame.height >= n or take >= len(files):
                break
            if take >= max_shards:
                return None
            take = min(2 * take, max_shards, len(files))
        return self._label(stage, frame, whole=False).head(n)

    def rows(self, stage: str, part: pl.DataFrame, upstream: bool = False) -> list[dict[str, Any]]:
        """Full rows for index rows ``part`` (read from their shards), labelled, with scores joined and their
        LLM requests (``_requests``: the row's own item's; with ``upstream`` also those of the rows it was
        made from, else ``_lineage`` says there are rows to follow)."""
        files = self._shards(stage)
        found = _read_at(files, part)
        out = []
        places: list[tuple[int, str]] = []
        for meta in part.iter_rows(named=True):
            place = (int(meta["_shard"]), int(meta["_off"]))
            row = found.get(place)
            if row is None:
                continue
            places.append((place[0], str(row.get("input_id") or row["id"])))
            row = {k: cut(v) for k, v in row.items() if v is not None and k not in SKIP_COLUMNS}
            gate = meta["gate"]
            out.append({"_stage": stage, "_group": meta["group"], "_reason": meta["_r"] if meta["_s"] != "ok" else "",
                        "_gate": gate, "_threshold": self.threshold(gate),
                        **({"_scoped": meta["scoped"]} if meta.get("scoped") else {}), **row})
        self._join_scores(self.store.annotators_of(stage, self.manifest), out)
        self._attach_verdicts(out)
        chains = self._chains(stage, [(r["id"], shard, item) for r, (shard, item) in zip(out, places)], upstream)
        inputs = [u for u in (self.layout.get(stage) or {}).get("inputs") or [] if not self.annotating(u)]
        for row, steps in zip(out, chains):
            if steps:
                row["_requests"] = steps
            if inputs and not upstream:
                row["_lineage"] = True
        return out

    # -- LLM requests -------------------------------------------------------------
    def _chains(self, stage: str, start: list[tuple[str, int, str]], upstream: bool) -> list[list[dict[str, Any]]]:
        """Per ``(row id, shard, item)`` of ``stage``, the steps ``{stage, row, item, requests}`` of its own item
        and (``upstream``) of the rows it was made from, batched per stage and shard. A global stage's row
        also gets the stage's shared requests (``shared: true``, item ``""``): those it made for no one row.
        Each step appears once per row (rows of one item share it)."""
        steps: list[list[dict[str, Any]]] = [[] for _ in start]
        frontier = [(i, stage, rid, shard, item) for i, (rid, shard, item) in enumerate(start)]
        seen: set[tuple[int, str, str]] = set()
        shown: set[tuple[int, str, int, str]] = set()
        for _ in range(MAX_DEPTH):
            if not frontier:
                break
            nxt: list[tuple[int, str, str, int, str]] = []
            for st in dict.fromkeys(f[1] for f in frontier):
                group = [f for f in frontier if f[1] == st and (f[0], st, f[2]) not in seen]
                seen.update((f[0], st, f[2]) for f in group)
                found = sidecar_steps(self._shards(st), [(f[3], f[4]) for f in group])
                shared = self._shared_requests(st)
                for i, _, rid, shard, item in group:
                    if found.get((shard, item)) and (i, st, shard, item) not in shown:
                        shown.add((i, st, shard, item))
                        steps[i].append({"stage": st, "row": rid, "item": item, "requests": found[(shard, item)]})
                    if shared and (i, st, -1, SHARED_ITEM) not in shown:
                        shown.add((i, st, -1, SHARED_ITEM))
                        steps[i].append({"stage": st, "row": rid, "item": SHARED_ITEM, "shared": True,
                                         "requests": shared})
                if upstream:
                    nxt.extend(self._parents(st, group))
            frontier = nxt
        entries = [e for row in steps for step in row for e in step["requests"]]
        if entries:
            excerpts = iter(self.requests.excerpts(entries, keep_order=True))
            for row in steps:
                for step in row:
                    step["requests"] = self.requests.in_call_order([next(excerpts) for _ in step["requests"]])
        return steps

    def _shared_requests(self, stage: str) -> list[dict[str, Any]]:
        """A global stage's shared requests (the sidecar item ``""`` of each of its shards), read once."""
        if not (self.layout.get(stage) or {}).get("global"):
            return []
        if stage not in self._shared:
            files = self._shards(stage)
            found = sidecar_steps(files, [(n, SHARED_ITEM) for n in range(len(files))])
            self._shared[stage] = [e for n in range(len(files)) for e in found.get((n, SHARED_ITEM), ())]
        return self._shared[stage]

    def _parents(self, stage: str, group: list[tuple[int, str, str, int, str]]) -> list[tuple[int, str, str, int, str]]:
        """The upstream rows ``group``'s items were made from: the row whose id is the item, in each input; a
        row whose item is none (an ``fc.plans`` item is a plan slot) is followed through the ids it names
        (:func:`named_ids`: its ``*_id`` columns and the ``id``s in its JSON) that are rows of an input."""
        out: list[tuple[int, str, str, int, str]] = []
        inputs = [up for up in (self.layout.get(stage) or {}).get("inputs") or []
                  if not self.annotating(up) and self._shards(up)]
        reached: set[int] = set()
        for up in inputs:
            for (i, rid), (shard, parent) in self._upstream_rows(up, [(f[0], f[4]) for f in group]).items():
                out.append((i, up, rid, shard, parent))
                reached.add(i)
        rest = [f for f in group if f[0] not in reached]
        if rest and inputs:
            where = locate(self.index(stage).frame, sorted({f[2] for f in rest}))
            pos = pl.DataFrame({"_shard": [s for s, _ in where.values()], "_off": [o for _, o in where.values()]},
                               schema={"_shard": pl.Int32, "_off": pl.Int32})
            names = {str(r["id"]): named_ids(r) for r in _read_at(self._shards(stage), pos).values()}
            wanted = [(f[0], ref) for f in rest for ref in names.get(f[2], ())]
            for up in inputs:
                for (i, rid), (shard, parent) in self._upstream_rows(up, wanted).items():
                    out.append((i, up, rid, shard, parent))
        return out

    def _upstream_rows(self, up: str, wanted: list[tuple[int, str]]) -> dict[tuple[int, str], tuple[int, str]]:
        """``(chain, id) -> (shard, item)`` of the rows of ``up`` whose ids are wanted."""
        if not wanted:
            return {}
        where = locate(self.index(up).frame, sorted({w for _, w in wanted}))
        if not where:
            return {}
        pos = pl.DataFrame({"_shard": [s for s, _ in where.values()], "_off": [o for _, o in where.values()]},
                           schema={"_shard": pl.Int32, "_off": pl.Int32})
        read = _read_at(self._shards(up), pos, ("id", "input_id"))
        item_of = {str(r["id"]): (s, str(r.get("input_id") or r["id"])) for (s, _), r in read.items()}
        return {(i, w): item_of[w] for i, w in wanted if w in item_of}

    def request_chain(self, stage: str, row_id: str) -> list[dict[str, Any]]:
        """The LLM requests of one row of ``stage`` and of the rows it was made from (``fabrika browse``'s
        ``api/requests``)."""
        where = locate(self.index(stage).frame, [row_id]).get(row_id)
        if where is None:
            raise StoreError(f"stage {stage!r}: no row {row_id!r}")
        pos = pl.DataFrame({"_shard": [where[0]], "_off": [where[1]]}, schema={"_shard": pl.Int32, "_off": pl.Int32})
        row = _read_at(self._shards(stage), pos, ("id", "input_id"))[where]
        return self._chains(stage, [(row_id, where[0], str(row.get("input_id") or row["id"]))], True)[0]

    def _join_scores(self, annotators: list[str], rows: list[dict[str, Any]]) -> None:
        """Each scorer's columns of a row as ``_scores[scorer]``; a scorer's rejection names the gate that used it."""
        ids = [r["id"] for r in rows]
        if not ids or not annotators:
            return
        by_id = {r["id"]: r for r in rows}
        for scorer in annotators:
            files = self._shards(scorer)
            if not files:
                continue
            found = None
            if scorer not in self._located:  # scorers write in their input's order: try its first shards first
                probe = shards.scan_files(files[:PROBE_SHARDS])
                assert probe is not None
                got = shards.collect_checked(files[:PROBE_SHARDS], probe.filter(pl.col("id").is_in(ids)).collect)
                if set(got["id"].to_list()) >= set(ids) or len(files) <= PROBE_SHARDS:
                    found = got.to_dicts()
            if found is None:
                if scorer not in self._located:  # where each of the scorer's ids is: built once, then O(page)
                    self._located[scorer] = _scan_positions(files, {"id": pl.String})
                where = self._located[scorer].filter(pl.col("id").is_in(ids))
                found = list(_read_at(files, where).values())
            for row in found:
                row = {k: v for k, v in row.items() if k not in ("input_id", "llm_backend")}
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


def _by_schema(files: list[Path], columns: tuple[str, ...] | None = None
               ) -> dict[tuple[tuple[str, str], ...], list[Path]]:
    """Shards grouped by their schema (of ``columns`` only, if given): one multi-file scan per group."""
    groups: dict[tuple[tuple[str, str], ...], list[Path]] = {}
    for f in files:
        schema = shards.file_schema(f)
        key = schema if columns is None else tuple((c, t) for c, t in schema if c in columns)
        groups.setdefault(key, []).append(f)
    return groups


def _positions(files: list[Path], parts: list[tuple[list[Path], pl.LazyFrame]]) -> pl.DataFrame:
    """Collect one multi-file scan per schema group and give each row its ``_shard`` (place among ``files``) and
    ``_off`` (row within the shard, from the footers' row counts), sorted into shard order — the order every read
    of the stage has."""
    frames = shards.collect_checked(files, lambda: pl.collect_all([lf for _, lf in parts]))
    return _place(files, [g for g, _ in parts], frames)


def _place(files: list[Path], groups: list[list[Path]], frames: list[pl.DataFrame]) -> pl.DataFrame:
    """:func:`_positions` for frames already read: ``frames[i]`` holds the rows of ``groups[i]``'s shards in order."""
    import numpy as np

    number = {f: i for i, f in enumerate(files)}
    out = []
    for group, frame in zip(groups, frames):
        counts = np.array([shards.shard_size(f)[0] for f in group], dtype=np.int64)
        if int(counts.sum()) != frame.height:
            raise StoreError(f"{group[0].parent}: shard footers count {int(counts.sum())} rows, the scan read "
                             f"{frame.height}; run `fabrika fsck`")
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        out.append(frame.with_columns(
            pl.Series("_shard", np.repeat([number[f] for f in group], counts), dtype=pl.Int32),
            pl.Series("_off", np.arange(frame.height) - starts, dtype=pl.Int32)))
    frame = out[0] if len(out) == 1 else pl.concat(out)
    return frame.sort(["_shard", "_off"], maintain_order=True) if len(out) > 1 else frame


def _read_at(files: list[Path], where: pl.DataFrame, columns: tuple[str, ...] = ()
             ) -> dict[tuple[int, int], dict[str, Any]]:
    """The full rows (or only ``columns`` of them) at ``where``'s ``(_shard, _off)`` positions, reading only
    those shards."""
    wanted: dict[int, list[int]] = {}
    for shard, off in where.select("_shard", "_off").iter_rows():
        wanted.setdefault(int(shard), []).append(int(off))
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for shard, offs in wanted.items():
        f = files[shard]
        lf = pl.scan_parquet(f).with_row_index("__off").filter(pl.col("__off").is_in(offs))
        if columns:
            have = set(lf.collect_schema().names())
            lf = lf.select("__off", *[c for c in columns if c in have])
        for row in shards.collect_checked([f], lf.collect).iter_rows(named=True):
            found[(shard, int(row.pop("__off")))] = row
    return found


def _scan_positions(files: list[Path], schema: dict[str, Any]) -> pl.DataFrame:
    """``schema``'s columns of every shard in one multi-file scan (absent columns null, a shard's all-null
    column cast), each row with its ``_shard`` and ``_off`` — no footer is read first, so a cold start on a
    stage of a thousand shards costs one parallel scan."""
    lf = pl.scan_parquet(files, schema=schema, missing_columns="insert", extra_columns="ignore",
                         include_file_paths="__file")
    frame = shards.collect_checked(files, lf.select(*schema, "__file").collect)
    number = {str(f): i for i, f in enumerate(files)}
    frame = frame.with_columns(pl.col("__file").replace_strict(number, return_dtype=pl.Int32).alias("_shard"))
    return frame.with_columns(pl.int_range(pl.len(), dtype=pl.Int32).over("_shard").alias("_off")).drop("__file")
