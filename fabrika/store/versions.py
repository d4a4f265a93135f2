"""Materialised versions: gated dataset snapshots, rebuilt from scores in seconds.

``materialise`` decides every row of a dataset stage from the gate columns
alone (the stage's and its scorers', lined up by id), then reads the payload of
the kept rows only, and writes ``versions/<name>/``::

    data/<stage>.parquet      kept rows (the samples), sorted by id
    dropped/<stage>.parquet   ``id, dropped_by`` of each dropped row (the first gate that dropped it), sorted by id
    thresholds.json           the thresholds used (every registered gate group, defaults filled)
    version.json              ``base`` (the version whose thresholds it started from, or ``"config"``: the run's
                              config), ``changed`` (``group.param`` → value, against that base), ``thresholds``
                              and ``created_at``
    funnel.json               ``stages``: rows/ok/rejected-by-reason of every stage; ``gates``: in/out/
                              dropped_<gate> of every dataset stage; ``upstream_gates``: the same for the
                              other stages (what their consumers read, under these thresholds)

Memory is bounded (DESIGN contract 6): the decision holds only ids and gate
columns; kept rows beyond ``MATERIALISE_BYTES`` are sorted externally (spilled
per id range, each range sorted and appended as a row group), so the data file
is sorted by id whatever the size of the run.

The version is built in a hidden temporary directory and renamed into place, so
a crash leaves either the old version or the new one. It never builds an LLM
engine: refiltering is pure polars. Stage counts are kept in the manifest
(``stage_counts``, keyed by a fingerprint of each stage's immutable shards), so
a refilter recounts only stages that changed since the last materialisation.

Refiltering re-gates the *dataset* stages. Gates also decide, at run time,
which upstream rows a stage consumes; a changed threshold there takes effect
on the next ``fabrika run`` (new passing items are processed, rows already
written stay). Stages that want their upstream scores re-gated at
materialisation copy those score columns into their output rows.
:func:`fabrika.pipeline.versions.refilter` finds upstream items a loosened
gate admits that a consumer never processed, and says what to run.

A refilter starts from the run's config thresholds unless it names a base
version (``base``, ``fabrika refilter --from-base``): thresholds never stack
on the latest version silently. It refuses a run that did not finish
(:func:`require_finished`): gates over half a run would make a dataset that
no finished run gives.

This module logs (``logging``) and returns data; the CLI renders.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping

import polars as pl

import fabrika.store.shards as shards
from fabrika import gates
from fabrika.errors import ConfigError, StorageError, StoreError
from fabrika.schemas.ids import stable_id
from fabrika.store.lock import hold_run_dir
from fabrika.store.run import JOIN_DROP, RunStore, annotation_column
from fabrika.store.shards import atomic_write_json, fsync_dir, scan_files

log = logging.getLogger(__name__)

VERSION_NAME = re.compile(r"^[\w.-]+$")
#: ``dropped_by`` of a dataset row made from an item an upstream gate now drops (see :func:`_alive_ids`).
UPSTREAM_GATE = "upstream_gate"
#: ``version.json``'s ``base`` when a version starts from the run's config thresholds.
CONFIG_BASE = "config"
#: Decision-table flag per annotator: the scorer wrote no row for this id.
UNSCORED = "__unscored__"
#: Kept rows above this estimate (uncompressed bytes) are sorted externally (bounded memory: about this much per step).
MATERIALISE_BYTES = 16 << 20


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
    #: the version whose thresholds this one started from; ``"config"``: the run's config thresholds
    base: str = CONFIG_BASE
    #: ``group.param`` → value where the thresholds differ from the base's
    changed: dict[str, Any] = field(default_factory=dict)


def check_gate_groups(manifest: Mapping[str, Any]) -> None:
    """Every gate group registered when the run ran must be registered now, or its gates would be skipped.

    Gate groups register when their stage modules are imported; the store sits below
    those modules and does not import them. Callers in a fresh process load them
    first (:func:`fabrika.pipeline.registry.load_run_modules`, which
    :func:`fabrika.pipeline.versions.refilter` and ``fabrika refilter`` do).
    """
    missing = sorted(set(manifest.get("gate_groups") or ()) - set(gates.GATE_GROUPS))
    if missing:
        raise StoreError(f"gate group(s) {', '.join(missing)} of this run are not registered in this process, so "
                         "their gates would be skipped; load the run's stage modules first "
                         "(fabrika.pipeline.registry.load_run_modules(manifest)) or use fabrika.refilter / "
                         "`fabrika refilter`")


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
    vdir = version_dir(run_dir, name)
    if not vdir.is_dir():
        raise StoreError(f"{vdir}: no such version; versions: {', '.join(list_versions(run_dir)) or '(none)'}")
    meta = vdir / "version.json"
    return {
        "thresholds": json.loads((vdir / "thresholds.json").read_text(encoding="utf-8")),
        "funnel": json.loads((vdir / "funnel.json").read_text(encoding="utf-8")),
        "version": json.loads(meta.read_text(encoding="utf-8")) if meta.is_file() else {},
    }


def changed_thresholds(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``{"group.param": value}`` where the full threshold sets ``new`` and ``base`` differ (defaults filled)."""
    was = gates.thresholds_dump(gates.validate_thresholds(base))
    now = gates.thresholds_dump(gates.validate_thresholds(new))
    return {f"{g}.{k}": v for g, ps in now.items() for k, v in ps.items() if was.get(g, {}).get(k) != v}


def set_options(changed: Mapping[str, Any]) -> str:
    """``--set filters.g.p=v …`` (shell-quoted) that reproduces ``changed`` on ``fabrika run``."""
    return " ".join(f"--set {shlex.quote(f'filters.{k}=' + json.dumps(v, ensure_ascii=False, separators=(',', ':')))}"
                    for k, v in sorted(changed.items()))


def _gate_columns(names: list[str], params: Mapping[str, Any]) -> list[str]:
    """``id`` plus every column a gate decision reads (status columns and the active predicates' scores)."""
    cols = {"id"}
    for p in gates.active_predicates(names, params):
        cols.update(p.columns)
    return [c for c in names if c in cols]


def _aligned_gate_table(store: RunStore, stage: str, annotators: list[str], names: list[str],
                        params: Mapping[str, Any]) -> pl.DataFrame | None:
    """The gate columns of ``stage`` + annotations, sorted by id, without a hash join; ``None`` if not aligned.

    The usual case: every scorer annotated every row once, so the annotation
    tables, sorted by id, line up row for row with the (unique-id) stage and a
    horizontal concat equals :meth:`RunStore.scan`'s left join (a test pins
    that), at a fraction of the cost of joining on string ids. Anything else —
    a missing, extra or duplicated id — returns ``None`` and the caller joins.
    Column naming mirrors :meth:`RunStore.scan`.
    """
    wanted = set(_gate_columns(names, params))
    raw = store.scan_raw(stage)
    if raw is None:
        return None
    parts = [raw.select([c for c in raw.collect_schema().names() if c in wanted])]
    taken = set(raw.collect_schema().names())
    for scorer in annotators:
        ann = store.scan_raw(scorer)
        if ann is None:
            continue
        own = [c for c in ann.collect_schema().names() if c not in JOIN_DROP]
        renames = {c: annotation_column(c, scorer) for c in own
                   if c != "id" and (c in ("status", "reason") or c in taken)}
        taken.update(renames.get(c, c) for c in own)
        keep = [c for c in own if c == "id" or renames.get(c, c) in wanted]
        parts.append(ann.select(keep).rename({c: n for c, n in renames.items() if c in keep}))
    frames = pl.collect_all(parts)
    # scorers usually write in their input's order: then one sort of the stacked table is enough
    if not all(f["id"].equals(frames[0]["id"]) for f in frames[1:]):
        frames = [f.sort("id") for f in frames]
        if not all(f["id"].equals(frames[0]["id"]) for f in frames[1:]):
            return None
    table = pl.concat([frames[0], *(f.drop("id") for f in frames[1:])], how="horizontal").sort("id")
    ids = table["id"]
    unique = len(ids) < 2 or bool((ids.slice(1) > ids.slice(0, len(ids) - 1)).all())  # sorted: strictly increasing
    return table if unique and not ids.null_count() else None


def _decide(store: RunStore, stage: str, annotators: list[str], thresholds: Mapping[str, Any],
            params: Mapping[str, Any]) -> tuple[pl.LazyFrame, pl.DataFrame, list[str]] | None:
    """``(joined rows lazily, (id, dropped_by) of every row sorted by id, gate reasons)``; ``None`` if no rows.

    Only the columns the gates read are loaded for the decision; payload
    columns are read later, for the kept rows only.
    """
    lf = store.scan(stage, annotators)
    if lf is None:
        return None
    names = lf.collect_schema().names()
    table = _aligned_gate_table(store, stage, annotators, names, params)
    source = table.lazy() if table is not None else lf.select(_gate_columns(names, params))
    marked, reasons = gates.mark_dropped(source, thresholds)
    # status__<scorer> is null where that scorer wrote no row for the id: the row is unscored by it
    presence = [pl.col(annotation_column("status", a)).is_null().alias(UNSCORED + a) for a in annotators
                if annotation_column("status", a) in source.collect_schema().names()]
    decided = marked.select("id", *gates.marker_columns(marked.collect_schema().names()), *presence)
    if table is None:
        decided = decided.sort("id")
    return lf, decided.collect(), reasons


def _refuse_duplicates(stage: str, ids: pl.Series) -> None:
    """A dataset never holds one id twice: two writers or a stage bug would otherwise double samples silently."""
    dup = ids.filter(ids.is_duplicated())
    if len(dup):
        n = dup.n_unique()
        raise StoreError(f"stage {stage!r}: {n} id(s) written more than once (e.g. {dup[0]!r}); refusing to "
                         "materialise a dataset with duplicates — ids must be unique per stage (derive them from "
                         "the inputs that make the item distinct); rerun with --no-resume to rebuild the stage")


def _unscored(store: RunStore, stage: str, annotators: list[str], decided: pl.DataFrame) -> dict[str, int]:
    """``{scorer: kept rows it never scored}`` — rows a loosened earlier gate let through unseen."""
    kept = decided.filter(pl.col(gates.DROPPED_BY).is_null())
    out = {}
    for a in annotators:
        col = UNSCORED + a
        n = int(kept[col].sum()) if col in kept.columns else (kept.height if not store.has_rows(a) else 0)
        if n:
            out[a] = n
    return out


def _unscored_error(run_dir: Path, manifest: Mapping[str, Any], stage: str, missing: dict[str, int],
                    thresholds: Mapping[str, Any]) -> StoreError:
    sets = set_options(changed_thresholds(manifest.get("config", {}).get("filters", {}), thresholds))
    what = ", ".join(f"{n} by {a}" for a, n in sorted(missing.items()))
    return StoreError(
        f"these thresholds would keep rows of {stage!r} that a scorer never saw ({what}): an earlier gate dropped "
        f"them at run time, so their scores are null, and null is not a pass; score them first with "
        f"`fabrika run {manifest.get('config_file') or 'CONFIG'} --cache-only {sets}`".rstrip() + " (--cache-only: no "
        "new LLM calls; an LLM scorer leaves uncached rows pending, and this check names them again), then refilter")


def _passing_ids(store: RunStore, manifest: Mapping[str, Any], upstream: str, consumer: str,
                 thresholds: Mapping[str, Any]) -> pl.Series | None:
    """Ids of ``upstream`` rows that ``consumer`` reads under ``thresholds`` (its annotators before it joined)."""
    names = list(manifest.get("layout", {}))
    before = set(names[: names.index(consumer)]) if consumer in names else set(names)
    annotators = [a for a in store.annotators_of(upstream, dict(manifest)) if a in before]
    lf = store.scan(upstream, annotators)
    if lf is None:
        return None
    return gates.gate_lazy(lf, thresholds).select("id").collect()["id"]


def _alive_ids(store: RunStore, manifest: Mapping[str, Any], stage: str, thresholds: Mapping[str, Any],
               traceable: Collection[str], memo: dict[str, pl.Series | None]) -> pl.Series | None:
    """Ids of ``stage``'s rows whose whole chain of inputs still passes ``thresholds``; ``None``: not traced.

    A fresh run at these thresholds makes no row from an item an upstream gate now drops, so a
    version leaves such rows out (``dropped_by = upstream_gate``). Traced are the stages in
    ``traceable`` (they read their gated input row by row, keyed by the row's id, and record it
    as ``input_id``); the chain stops at any other stage (a source, a global stage, a stage with
    its own reading), whose rows all count as alive.
    """
    if stage in memo:
        return memo[stage]
    memo[stage] = None
    inputs = (manifest.get("layout", {}).get(stage) or {}).get("inputs") or []
    raw = store.scan_raw(stage)
    if stage not in traceable or not inputs or raw is None or "input_id" not in raw.collect_schema().names():
        return None
    passing: list[pl.Series] = []
    for upstream in inputs:
        ids = _passing_ids(store, manifest, upstream, stage, thresholds)
        if ids is None:
            continue
        above = _alive_ids(store, manifest, upstream, thresholds, traceable, memo)
        passing.append(ids if above is None else ids.filter(ids.is_in(above.implode())))
    admitted = pl.concat(passing) if passing else pl.Series("id", [], dtype=pl.String)
    rows = raw.select("id", "input_id").collect()
    alive = rows.filter(pl.col("input_id").is_in(admitted.implode()))["id"]
    memo[stage] = alive
    return alive


def _write_parquet(frame: pl.DataFrame, path: Path) -> None:
    """Write and fsync (the version directory is renamed into place only after every file is durable)."""
    with open(path, "wb") as fh:
        frame.write_parquet(fh)
        fh.flush()
        os.fsync(fh.fileno())


def _row_bytes(store: RunStore, stage: str, annotators: list[str]) -> float:
    """Estimated in-memory bytes per row of the joined table (shard footers × :func:`shards.memory_ratio`)."""
    rows = sum(shards.shard_size(f)[0] for f in store.shards(stage))
    size = 0.0
    for table in [stage, *annotators]:
        files = store.shards(table)
        if files:
            size += sum(shards.shard_size(f)[1] for f in files) * shards.memory_ratio(files[0])
    return size / max(1, rows)


def _write_kept(store: RunStore, stage: str, annotators: list[str], lf: pl.LazyFrame, kept_ids: pl.Series,
                path: Path, spill: Path, budget: int | None = None) -> None:
    """Write the kept rows (``kept_ids``, sorted) of the joined stage to ``path``, sorted by id, in bounded memory.

    Sorted by id, so a version's files do not depend on the order items completed in.
    Kept rows that fit ``budget`` (estimated uncompressed bytes) are collected and
    sorted in memory. Larger ones take an external bucket sort: the kept ids, already
    sorted, are cut into consecutive id ranges of about ``budget`` bytes each; the
    stage is read a bounded group of shards at a time (:meth:`RunStore.iter_frames`)
    and each group's kept rows are spilled to ``spill`` per range; then each range is
    read back, sorted and appended to ``path`` as one parquet row group. Memory is
    one group plus one range, whatever the size of the stage.
    """
    budget = MATERIALISE_BYTES if budget is None else budget
    per_row = _row_bytes(store, stage, annotators)
    if len(kept_ids) * per_row <= budget:
        _write_parquet(lf.filter(pl.col("id").is_in(kept_ids.implode())).sort("id").collect(), path)
        return
    step = max(1, int(budget / max(per_row, 1.0)))
    bounds = kept_ids.gather(list(range(step, len(kept_ids), step)))
    spill.mkdir(parents=True, exist_ok=True)
    wanted = kept_ids.implode()
    frames = store.iter_frames(stage, annotators, where=lambda g: g.filter(pl.col("id").is_in(wanted)),
                               max_rows=step, max_bytes=budget)
    for g, frame in enumerate(frames):
        buckets = bounds.search_sorted(frame["id"], side="right")
        for (b,), part in frame.with_columns(buckets.alias("__bucket")).partition_by("__bucket", as_dict=True).items():
            part.drop("__bucket").write_parquet(spill / f"b{b:06d}-g{g:06d}.parquet")
    import pyarrow.parquet as pq  # here: a reader of versions (`fabrika browse`) never needs pyarrow

    writer: pq.ParquetWriter | None = None
    with open(path, "wb") as fh:
        for b in range(len(bounds) + 1):
            files = sorted(spill.glob(f"b{b:06d}-g*.parquet"))
            if not files:
                continue
            table = pl.read_parquet(files).sort("id").to_arrow(compat_level=pl.CompatLevel.oldest())
            if writer is None:
                writer = pq.ParquetWriter(fh, table.schema, compression="zstd")
            writer.write_table(table)
            for f in files:
                f.unlink()
        if writer is None:  # no kept row: an empty file with the table's columns
            lf.head(0).collect().write_parquet(fh)
        else:
            writer.close()
        fh.flush()
        os.fsync(fh.fileno())
    shutil.rmtree(spill, ignore_errors=True)


def _shards_fingerprint(files: list[Path]) -> str:
    """Shards are immutable once renamed into place: names, sizes and mtimes identify a stage's content."""
    stats = [(f.name, st.st_size, st.st_mtime_ns) for f in files for st in (f.stat(),)]
    return stable_id(stats)


def _stage_counts(store: RunStore, stages: list[str], cache: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{stage: {"fingerprint", "counts"}}``: :meth:`RunStore.counts`, reused from ``cache`` for unchanged stages.

    Stage rows never change between refilters, so recounting them every time is
    pure cost; a stage whose shard fingerprint changed is counted afresh. The
    cache is the manifest's ``stage_counts`` (rewritten by every materialisation).
    """
    out = {}
    for stage in stages:
        key = _shards_fingerprint(store.shards(stage))
        hit = cache.get(stage)
        counts = hit["counts"] if isinstance(hit, dict) and hit.get("fingerprint") == key else store.counts(stage)
        out[stage] = {"fingerprint": key, "counts": counts}
    return out


def _build(
    store: RunStore, manifest: dict[str, Any], config: dict[str, Any], thresholds: dict[str, Any],
    params: Mapping[str, Any], tmp: Path, traceable: Collection[str] | None = None,
) -> tuple[dict[str, Any], int, dict[str, Any], dict[str, Any]]:
    """Write a version's files into ``tmp``; returns the funnel, the sample count, the thresholds, the counts cache.

    Per stage, one narrow pass decides every row (id + gate columns); the funnel
    and the dropped file (``id, dropped_by``) come from that decision in memory,
    and only the kept rows' payload is read (an ``id`` filter pushed into every
    scan of the join).
    """
    (tmp / "data").mkdir(parents=True)
    (tmp / "dropped").mkdir()
    funnel: dict[str, Any] = {"stages": {}, "gates": {}, "upstream_gates": {}}
    dataset_stages = config.get("dataset", {}).get("stages", [])
    layout = manifest.get("layout", {})
    order = list(manifest.get("order", list(layout)))
    stage_counts = _stage_counts(store, order, manifest.get("stage_counts") or {})
    funnel["stages"] = {stage: got["counts"] for stage, got in stage_counts.items()}
    for stage in order:
        if stage not in dataset_stages and not layout.get(stage, {}).get("annotates"):
            # what these thresholds let through to the stages reading this one (they applied at run time)
            got = _decide(store, stage, store.annotators_of(stage, manifest), thresholds, params)
            if got is not None:
                funnel["upstream_gates"][stage] = gates.funnel_of(got[1].lazy(), got[2])
    total = 0
    memo: dict[str, pl.Series | None] = {}
    for stage in dataset_stages:
        annotators = store.annotators_of(stage, manifest)
        got = _decide(store, stage, annotators, thresholds, params)
        if got is None:
            funnel["gates"][stage] = {"in": 0, "out": 0}
            continue
        lf, decided, reasons = got
        _refuse_duplicates(stage, decided["id"])
        alive = None if traceable is None else _alive_ids(store, manifest, stage, thresholds, traceable, memo)
        if alive is not None:  # rows made from items an upstream gate now drops: a fresh run has none
            decided = decided.with_columns(
                pl.when(pl.col(gates.DROPPED_BY).is_null() & ~pl.col("id").is_in(alive.implode()))
                .then(pl.lit(UPSTREAM_GATE)).otherwise(pl.col(gates.DROPPED_BY)).alias(gates.DROPPED_BY))
        missing = _unscored(store, stage, annotators, decided)
        if missing:
            raise _unscored_error(store.run_dir, manifest, stage, missing, thresholds)
        counts = gates.funnel_of(decided.lazy(), reasons)
        funnel["gates"][stage] = counts
        total += counts["out"]
        dropped = pl.col(gates.DROPPED_BY).is_not_null()
        _write_parquet(decided.filter(dropped).select("id", gates.DROPPED_BY), tmp / "dropped" / f"{stage}.parquet")
        scoped = [c for c in decided.columns if c.startswith(gates.SCOPED)]
        if scoped:  # export-kind-scoped drops: rows stay in the version, the export of that kind leaves them out
            (tmp / "scoped").mkdir(exist_ok=True)
            _write_parquet(decided.filter(~dropped & pl.any_horizontal(pl.col(c).is_not_null() for c in scoped))
                           .select("id", *scoped), tmp / "scoped" / f"{stage}.parquet")
        kept_ids = decided.filter(~dropped)["id"]
        _write_kept(store, stage, store.annotators_of(stage, manifest), lf, kept_ids,
                    tmp / "data" / f"{stage}.parquet", tmp / f".spill-{stage}")
    dumped = gates.thresholds_dump(params)
    atomic_write_json(tmp / "thresholds.json", dumped)
    atomic_write_json(tmp / "funnel.json", funnel)
    fsync_dir(tmp)
    return funnel, total, dumped, stage_counts


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
    overwrite: bool = True,
    base: str | None = None,
    base_thresholds: Mapping[str, Any] | None = None,
    traceable: Collection[str] | None = None,
) -> VersionInfo:
    """Gate the dataset stages of ``run_dir`` into ``versions/<name>``.

    Args:
        thresholds: gate thresholds by group; ``None`` uses the config's ``filters``.
        name: version name; default the next free ``vN``.
        previous: version this one derives from (recorded for ``status``/diffs).
        overwrite: replace an existing version of that name; ``False`` raises instead
            (export cards cite versions by name).
        base: the version whose thresholds these started from (default ``previous``, else
            ``"config"``); ``version.json`` records it and what changed against it.
        base_thresholds: the base's thresholds (default read from the base version or the config).
        traceable: stages whose rows trace to their input rows by ``input_id`` (they read the gated
            input row by row): dataset rows whose chain an upstream gate now drops are left out
            (``dropped_by = upstream_gate``). ``None``: no tracing (only the rows' own gates).

    Raises:
        StoreError: kept rows that a scorer never scored (see :func:`_unscored_error`),
            or an existing ``name`` without ``overwrite``.
    """
    store = RunStore(run_dir)
    if not store.manifest_path.is_file():
        raise StoreError(f"{store.run_dir}: not a run directory (no manifest.json); run `fabrika run CONFIG` first")
    with hold_run_dir(store.run_dir, f"fabrika refilter {store.run_dir}"):  # re-entrant inside `fabrika run`
        return _materialise(store, thresholds, name, previous, overwrite, base or previous or CONFIG_BASE,
                            base_thresholds, traceable)


def _base_thresholds(run_dir: Path, manifest: Mapping[str, Any], base: str) -> Mapping[str, Any]:
    if base != CONFIG_BASE and (version_dir(run_dir, base) / "thresholds.json").is_file():
        return read_version(run_dir, base)["thresholds"]
    return manifest.get("config", {}).get("filters", {})


def _storage_problem(store: RunStore, manifest: Mapping[str, Any], exc: BaseException,
                     target: Path) -> StorageError | None:
    """A failed build as one line: a write that hit the disk (full, read-only) names ``target``;
    a read that failed names the first damaged shard of the run; anything else is not storage's."""
    if isinstance(exc, StorageError) or not isinstance(exc, shards.READ_ERRORS):
        return None
    os_exc = shards.os_error_of(exc)
    if os_exc is not None and os_exc.errno is not None:
        return StorageError.from_os(os_exc, target)
    for stage in manifest.get("order", list(manifest.get("layout", {}))):
        for f in store.shards(stage):
            try:
                shards.verify_shard(f, full=True)
            except StorageError as bad:
                return bad
    return None


def _materialise(store: RunStore, thresholds: Mapping[str, Any] | None, name: str | None,
                 previous: str | None, overwrite: bool, base: str,
                 base_thresholds: Mapping[str, Any] | None = None,
                 traceable: Collection[str] | None = None) -> VersionInfo:
    run_dir = store.run_dir
    manifest = store.read_manifest()
    check_gate_groups(manifest)
    config = manifest.get("config", {})
    thresholds = dict(config.get("filters", {}) if thresholds is None else thresholds)
    params = gates.validate_thresholds(thresholds)
    name = name or next_version_name(run_dir)
    if not VERSION_NAME.match(name):
        raise StoreError(f"version name {name!r}: use letters, digits, '.', '_' or '-'")
    if not overwrite and version_dir(run_dir, name).is_dir():
        raise StoreError(f"version {name!r} exists (export cards may cite it); pass --overwrite to replace it "
                         f"or choose another --name (next free: {next_version_name(run_dir)})")

    root = store.run_dir / "versions"
    root.mkdir(parents=True, exist_ok=True)
    _clean_stale(root)
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    was = _base_thresholds(run_dir, manifest, base) if base_thresholds is None else base_thresholds
    changed = changed_thresholds(was, thresholds)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        funnel, total, dumped, stage_counts = _build(store, manifest, config, thresholds, params, tmp, traceable)
        atomic_write_json(tmp / "version.json", {"name": name, "base": base, "changed": changed,
                                                 "thresholds": dumped, "rows": total, "created_at": created})
        fsync_dir(tmp)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed build never becomes (or hides) a version
        problem = _storage_problem(store, manifest, exc, root / name)
        if problem is not None:
            raise problem from exc
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
        "base": base,
        "changed": changed,
        "thresholds": dumped,
        "created_at": created,
    }
    manifest["latest_version"] = name
    manifest["stage_counts"] = stage_counts
    store.write_manifest(manifest)
    log.info("version %s: %d samples (base %s, changed %s)", name, total, base, changed or "nothing")
    return VersionInfo(name=name, path=final, thresholds=dumped, funnel=funnel, rows=total, previous=previous,
                       base=base, changed=changed)


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


class RunNotFinished(StoreError):
    """Refilter of a run whose stages did not all finish (interrupted, killed, failed or incomplete)."""


def unfinished_stage(manifest: Mapping[str, Any]) -> str | None:
    """The first stage (pipeline order) that did not complete, if any."""
    layout = manifest.get("layout", {})
    stages = manifest.get("stages", {})
    for name in list(layout) or list(manifest.get("order", [])):
        if not (stages.get(name) or {}).get("complete"):
            return name
    return None


def require_finished(manifest: Mapping[str, Any], allow_partial: bool = False) -> None:
    """Raise :class:`RunNotFinished` unless the run is ``done`` (or ``incomplete`` with ``allow_partial``).

    Gating half a run would write a version no finished run gives (today: an empty ``v1``);
    the message names the stage and the command that finishes the run.
    """
    from fabrika.store.manifest import effective_status

    status = effective_status(dict(manifest))
    stage = unfinished_stage(manifest)
    if status == "done" and stage is None:
        return
    if allow_partial and status == "incomplete":
        return
    config = manifest.get("config_file") or "CONFIG"
    where = f"stage {stage!r} did not finish" if stage else "its last invocation did not finish"
    hint = " (or pass --allow-partial to gate what there is)" if status == "incomplete" else ""
    raise RunNotFinished(f"run {manifest.get('name', '?')!r} is {status}: {where}; finish it with "
                         f"`fabrika run {config}` (it resumes where it stopped), then refilter{hint}")


def refilter_thresholds(run_dir: str | Path, assignments: list[str],
                        base: str | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(base, base's version doc, new thresholds)``: ``--set`` over the base's thresholds.

    ``base`` ``None`` (or ``"config"``) starts from the run's config thresholds, so two refilters
    never stack unless the second names the first; a named base must be a version.
    """
    manifest = RunStore(run_dir).read_manifest()
    if base not in (None, CONFIG_BASE):
        if not (version_dir(run_dir, str(base)) / "thresholds.json").is_file():
            raise ConfigError(f"--from-base {base!r}: no such version; versions: "
                              f"{', '.join(list_versions(run_dir)) or '(none)'} (or 'config')")
        old = read_version(run_dir, str(base))
        return str(base), old, gates.parse_set(assignments, old["thresholds"])
    old = {"thresholds": manifest.get("config", {}).get("filters", {}), "funnel": {}}
    return CONFIG_BASE, old, gates.parse_set(assignments, old["thresholds"])


def refilter(
    run_dir: str | Path, assignments: list[str], name: str | None = None, base: str | None = None,
    overwrite: bool = False, allow_partial: bool = False,
) -> tuple[VersionInfo, list[tuple[str, str, int, int]]]:
    """New thresholds (``base`` version's, default the run's config thresholds, with ``--set`` overrides) → a version.

    Never builds an LLM engine. The run's gate groups must be registered (see
    :func:`check_gate_groups`) and the run finished (:func:`require_finished`). Returns the
    version and its funnel difference against ``base`` (against the latest version when the
    base is the config). Raises :class:`~fabrika.errors.ConfigError` on an unknown gate group or
    parameter, a wrongly typed value or an unknown ``base``, :class:`RunNotFinished`, and
    :class:`StoreError` when ``name`` exists and ``overwrite`` is not set.
    """
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    if not manifest:
        raise StoreError(f"{store.run_dir}: not a run directory (no manifest.json)")
    check_gate_groups(manifest)
    require_finished(manifest, allow_partial)
    base_name, old, thresholds = refilter_thresholds(run_dir, assignments, base)
    return refilter_to(run_dir, thresholds, base_name, old, name=name, overwrite=overwrite)


def refilter_to(run_dir: str | Path, thresholds: dict[str, Any], base: str, old: Mapping[str, Any],
                name: str | None = None, overwrite: bool = False, traceable: Collection[str] | None = None,
                latest: str | None = None) -> tuple[VersionInfo, list[tuple[str, str, int, int]]]:
    """Materialise ``thresholds`` as a refilter from ``base``; the funnel difference is against the base
    (the ``latest`` version, default the manifest's, when the base is the config)."""
    manifest = RunStore(run_dir).read_manifest()
    compare, against = old.get("funnel") or {}, base if base != CONFIG_BASE else None
    latest = latest or manifest.get("latest_version")
    if base == CONFIG_BASE and latest and (version_dir(run_dir, latest) / "funnel.json").is_file():
        compare, against = read_version(run_dir, latest)["funnel"], latest
    info = materialise(run_dir, thresholds=thresholds, name=name or next_version_name(run_dir), previous=against,
                       overwrite=overwrite, base=base, base_thresholds=old.get("thresholds"), traceable=traceable)
    return info, funnel_diff(compare, info.funnel)
