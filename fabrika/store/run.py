"""A run on disk: ``manifest.json`` plus ``stages/<name>/`` shard directories.

Layout::

    runs/<name>/
      manifest.json                 config, hashes, versions, counts, timings, accounting
      stages/<stage>/part-*.parquet one directory per stage, atomic id-keyed shards
      versions/<version>/           materialised datasets (``fabrika.store.materialise``)

Annotating stages (scorers, ``Stage.annotates``) write ``id`` + score columns in
their own directory; :meth:`RunStore.scan` left-joins them onto the stage they
annotate, lazily, so data rows are never rewritten. An annotation's ``status``
and ``reason`` arrive as ``status__<scorer>`` / ``reason__<scorer>``, and a score
column whose name is already taken gets the ``__<scorer>`` suffix.
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import polars as pl

import fabrika.store.journal as journal
import fabrika.store.shards as shards
from fabrika.errors import StoreError

if TYPE_CHECKING:  # imported where used: numpy is not needed to read a run (``fabrika browse``)
    from fabrika.store.done_ids import DoneIds

MANIFEST = "manifest.json"
#: A stage's output generation: a token that changes whenever its shards are dropped (see :meth:`RunStore.epoch`).
EPOCH_FILE = ".epoch"
JOIN_DROP = ("input_id", "llm_backend")
#: One read of :meth:`RunStore.iter_frames` holds at most about this many rows / uncompressed bytes.
READ_ROWS = 16_384
READ_BYTES = 4 << 20
#: Annotation tables up to this size (uncompressed) are held in memory during a read.
ANNOTATION_BYTES = 64 << 20
#: Groups are this many times larger when annotation tables are too big to hold (each group scans them).
SCANNED_GROUP_FACTOR = 8


def annotation_column(column: str, scorer: str) -> str:
    """Name an annotation's own ``status``/``reason`` (or a clashing score) takes after the join."""
    return f"{column}__{scorer}"


class RunStore:
    """Reads and writes one run directory. Cheap to construct; holds no data."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)

    # -- layout -----------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.run_dir / MANIFEST

    def stage_dir(self, stage: str) -> Path:
        return self.run_dir / "stages" / stage

    def shards(self, stage: str) -> list[Path]:
        return shards.shard_files(self.stage_dir(stage))

    def has_rows(self, stage: str) -> bool:
        return bool(self.shards(stage))

    def epoch(self, stage: str, create: bool = False) -> str | None:
        """The stage's output generation: a random token kept until the stage's output is dropped.

        Shards are immutable and only appended, so a reader that saw the same epoch at its first
        read and after the stage finished has seen only rows of the final table. ``create``
        writes a fresh token when there is none; otherwise a missing one is ``None``.
        """
        path = self.stage_dir(stage) / EPOCH_FILE
        if path.is_file():
            return path.read_text(encoding="utf-8").strip() or None
        if not create:
            return None
        token = uuid.uuid4().hex
        shards.atomic_write_bytes(path, token.encode())
        return token

    # -- writing ----------------------------------------------------------------
    def write(self, stage: str, rows: list[dict[str, Any]], *, flat: bool = False) -> Path:
        """Append one shard of ``rows`` to ``stage`` atomically (``flat``: rows that
        :func:`~fabrika.store.shards.flatten_row` made, as the journal holds them)."""
        return shards.write_shard(self.stage_dir(stage), rows, flat=flat)

    def clean_temp(self, stage: str) -> int:
        return shards.clean_temp(self.stage_dir(stage))

    def drop_stage(self, stage: str) -> None:
        """Forget a stage's output (global stages restart from scratch; a stage whose config changed is redone)."""
        shutil.rmtree(self.stage_dir(stage), ignore_errors=True)

    def reset(self) -> None:
        """Start the run over (``--no-resume``): remove stages, versions and the manifest, keep caches."""
        shutil.rmtree(self.run_dir / "stages", ignore_errors=True)
        shutil.rmtree(self.run_dir / "versions", ignore_errors=True)
        self.manifest_path.unlink(missing_ok=True)

    # -- reading ----------------------------------------------------------------
    def scan_raw(self, stage: str) -> pl.LazyFrame | None:
        """The stage's own rows, lazily; ``None`` when nothing is written yet."""
        return shards.scan_files(self.shards(stage))

    def _annotations(self, stage_names: Sequence[str], annotators: Sequence[str],
                     files: Mapping[str, Sequence[Path]] | None = None) -> list[pl.LazyFrame]:
        """Each present annotating stage's table, ready to left-join on ``id`` (see module docs for naming)."""
        taken = set(stage_names)
        out = []
        for scorer in annotators:
            ann = shards.scan_files(files[scorer]) if files and scorer in files else self.scan_raw(scorer)
            if ann is None:
                continue
            names = ann.collect_schema().names()
            if "id" not in names:
                raise StoreError(f"annotating stage {scorer!r} wrote rows without an 'id' column")
            keep = [c for c in names if c not in JOIN_DROP]
            renames = {}
            for col in keep:
                if col == "id":
                    continue
                if col in ("status", "reason") or col in taken:
                    renames[col] = annotation_column(col, scorer)
            taken.update(renames.get(c, c) for c in keep)
            out.append(ann.select(keep).rename(renames))
        return out

    def scan(self, stage: str, annotators: Sequence[str] = (),
             files: Mapping[str, Sequence[Path]] | None = None) -> pl.LazyFrame | None:
        """The stage's rows with every annotating stage in ``annotators`` left-joined on ``id``.

        One lazy query over the whole table: fine for aggregates and narrow columns;
        to go through the rows use :meth:`iter_frames` (bounded memory). ``files``: per stage (or
        annotator), only these of its shards (a reader that knows where its rows are).
        """
        lf = shards.scan_files(files[stage]) if files and stage in files else self.scan_raw(stage)
        if lf is None:
            return None
        for ann in self._annotations(lf.collect_schema().names(), annotators, files):
            lf = lf.join(ann, on="id", how="left", maintain_order="left")
        return lf

    def iter_frames(
        self,
        stage: str,
        annotators: Sequence[str] = (),
        *,
        where: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None,
        columns: Sequence[str] | None = None,
        max_rows: int = READ_ROWS,
        max_bytes: int = READ_BYTES,
        only: Sequence[Path] | None = None,
    ) -> Iterator[pl.DataFrame]:
        """The rows of :meth:`scan`, a group of shards at a time (DESIGN contract 6: memory stays flat).

        Shards are read in sequence order (rows in shard order), grouped up to ``max_rows`` rows / ``max_bytes``
        uncompressed bytes; each group is conformed to the whole table's schema, so
        ``where`` (e.g. :func:`fabrika.gates.gate_lazy`, whose predicates depend
        on which columns exist) sees the same columns as on :meth:`scan`. Annotations are
        joined per group, on the annotation rows whose ``id`` is in the group: annotation
        tables (narrow: ids and scores) up to ``ANNOTATION_BYTES`` in all are read once and
        kept; larger ones are scanned once per group (time, not memory, grows: about
        rows / ``max_rows`` passes over them). ``columns`` selects after
        ``where``. Empty groups are skipped. ``only`` reads just those shards (a reader that
        follows a table as it grows), conformed to the schema of every shard there is now.
        """
        files = self.shards(stage)
        scan = shards.scan_files(files)
        if scan is None:  # no shards
            return
        schema = scan.collect_schema()
        if only is not None:  # a subset, read exactly as it reads within the whole table
            wanted = {p.name for p in only}
            files = [f for f in files if f.name in wanted]
            if not files:
                return
        anns = self._annotations(schema.names(), annotators)
        present = [a for a in annotators if self.has_rows(a)]
        if anns and sum(shards.shard_size(f)[1] for a in present for f in self.shards(a)) <= ANNOTATION_BYTES:
            # narrow tables that fit the budget are read once, not once per group
            ann_files = [f for a in present for f in self.shards(a)]
            anns = [df.lazy() for df in shards.collect_checked(ann_files, lambda: pl.collect_all(anns))]
        elif anns:  # scanned once per group: fewer, larger groups
            max_rows, max_bytes = max_rows * SCANNED_GROUP_FACTOR, max_bytes * SCANNED_GROUP_FACTOR
        for group in shards.group_files(files, max_rows, max_bytes, shards.memory_ratio(files[0])):
            parts = [shards.conform(pl.scan_parquet(f), schema, shards.file_schema(f)) for f in group]
            lf = parts[0] if len(parts) == 1 else pl.concat(parts)  # in shard order, whatever the grouping
            if anns:
                id_scan = pl.concat([pl.scan_parquet(f).select("id") for f in group])
                ids = shards.collect_checked(group, id_scan.collect)["id"].implode()
                for ann in anns:
                    lf = lf.join(ann.filter(pl.col("id").is_in(ids)), on="id", how="left", maintain_order="left")
            if where is not None:
                lf = where(lf)
            if columns:
                lf = lf.select(list(columns))
            frame = shards.collect_checked(group, lf.collect)
            if frame.height:
                yield frame

    def table_schema(self, stage: str) -> pl.Schema | None:
        """The schema a read of the stage's table conforms every shard to (``None``: no shards)."""
        lf = shards.scan_files(self.shards(stage))
        return None if lf is None else lf.collect_schema()

    def count_rows(self, stage: str, annotators: Sequence[str] = (),
                   where: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None) -> int:
        """How many rows :meth:`iter_frames` yields; from shard footers when nothing filters or joins."""
        if where is None and not annotators:
            return sum(shards.shard_size(f)[0] for f in self.shards(stage))
        return sum(f.height for f in self.iter_frames(stage, annotators, where=where, columns=["id"]))

    def done_input_ids(self, stage: str) -> set[str]:
        """Input ids already processed by ``stage`` (reads only the ``input_id`` column)."""
        lf = self.scan_raw(stage)
        if lf is None:
            return set()
        if "input_id" not in lf.collect_schema().names():
            return set()
        done: set[str] = set()

        def collect() -> None:
            for batch in lf.select("input_id").collect_batches(chunk_size=65536):
                done.update(v for v in batch.get_column("input_id").to_list() if v is not None)

        shards.collect_checked(self.shards(stage), collect)
        return done

    def done_ids(self, stage: str) -> DoneIds:
        """:meth:`done_input_ids` in bounded memory (:class:`~fabrika.store.done_ids.DoneIds`, ~16 B per id)."""
        from fabrika.store.done_ids import DoneIds

        done = DoneIds()
        lf = self.scan_raw(stage)
        if lf is None or "input_id" not in lf.collect_schema().names():
            return done

        def ids() -> Iterator[str]:
            for batch in lf.select("input_id").collect_batches(chunk_size=65536):
                yield from (v for v in batch.get_column("input_id").to_list() if v is not None)

        shards.collect_checked(self.shards(stage), lambda: done.extend(ids()))
        return done

    def recover_journal(self, stage: str, done: DoneIds, names: Sequence[str] | None = None) -> int:
        """Whole items a crashed writer left in the stage's journals become a shard (see
        :mod:`fabrika.store.journal`); their input ids join ``done``. A torn tail is dropped
        (those items are redone); a damaged record before it raises
        :class:`~fabrika.errors.JournalCorruptError` and leaves the journal as it is.
        ``names``: the journal files to recover (default every journal of the stage: its own and
        its LLM workers'). Returns how many rows were recovered."""
        d = self.stage_dir(stage)
        total = 0
        for name in journal.journal_names(d) if names is None else names:
            total += self._recover_one(stage, d, name, done)
        return total

    def _recover_one(self, stage: str, d: Path, name: str, done: DoneIds) -> int:
        found = journal.read_items(d, name)
        if found.torn:
            sys.stderr.write(f"{stage}: dropped {len(found.torn)} cut record(s) at the end of {found.path} "
                             "(a write stopped by a crash, kill or full disk); those items are redone\n")
        if found.legacy:
            sys.stderr.write(f"{stage}: {found.path} is an older fabrika's journal (one row per line, no "
                             f"checksums); its last item ({found.legacy_dropped} row(s)) is redone in case it "
                             "was cut\n")
        rows: list[dict[str, Any]] = []
        for item in found.items:
            key = journal.item_key(item[0])
            if key not in done:
                rows.extend(item)
                done.add(key)
        if rows:
            shards.write_shard(d, rows)
        (d / name).unlink(missing_ok=True)
        return len(rows)

    def journal_rows(self, stage: str) -> int:
        """Finished rows waiting in the stage's journal (durable, not yet in a shard)."""
        return journal.count_rows(self.stage_dir(stage))

    def counts(self, stage: str) -> dict[str, Any]:
        """Rows, ok and rejected-by-reason counts of a stage (an aggregate; nothing else is loaded)."""
        lf = self.scan_raw(stage)
        if lf is None:
            return {"rows": 0, "ok": 0, "rejected": {}, "duplicate_ids": 0}
        names = lf.collect_schema().names()
        status = pl.col("status") if "status" in names else pl.lit("ok")
        reason = pl.col("reason") if "reason" in names else pl.lit(None, dtype=pl.String)
        query = lf.select(status.alias("s"), reason.cast(pl.String).str.split(":").list.first().alias("r"))
        agg = shards.collect_checked(self.shards(stage), query.group_by("s", "r").len().collect)
        unique_ids = shards.collect_checked(self.shards(stage), lf.select(pl.col("id").n_unique()).collect).item()
        out: dict[str, Any] = {"rows": 0, "ok": 0, "rejected": {}}
        for s, r, n in agg.iter_rows():
            out["rows"] += n
            if s == "ok":
                out["ok"] += n
            else:
                key = r or s or "unknown"
                out["rejected"][key] = out["rejected"].get(key, 0) + n
        out["rejected"] = dict(sorted(out["rejected"].items()))
        out["duplicate_ids"] = out["rows"] - unique_ids
        return out

    # -- manifest ---------------------------------------------------------------
    def read_manifest(self) -> dict[str, Any]:
        """The manifest, or ``{}`` for a run not started yet."""
        if not self.manifest_path.exists():
            return {}
        try:
            return json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise StoreError(f"{self.manifest_path}: unreadable manifest ({exc}); delete it and rerun") from exc

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        shards.atomic_write_json(self.manifest_path, manifest)

    def annotators_of(self, stage: str, manifest: dict[str, Any] | None = None) -> list[str]:
        """Annotating stages whose input is ``stage``, in pipeline order (from the manifest layout)."""
        manifest = self.read_manifest() if manifest is None else manifest
        layout = manifest.get("layout", {})
        return [n for n, info in layout.items() if info.get("annotates") and stage in info.get("inputs", [])]
