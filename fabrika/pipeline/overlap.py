"""Overlapping stages (``overlap: true``): a per-item stage reads its upstream's shards as they commit.

Without overlap a stage starts when the stages it depends on have finished, so the
LLM fleet drains at every stage boundary and waits on each stage's slowest tail.
With it, a stage that :func:`streaming_inputs` allows starts as soon as its upstream
has started (past its resume checks) and consumes each shard the upstream commits;
it finishes only after the upstream has finished and its last shard was read.

Who may stream: a per-item stage with the default ``input_rows`` (it reads nothing but
its one input, gated), no ``max_items`` (which items come first would depend on
timing), reading a per-item upstream that has no scorers. A scorer's gate must be
final before a row is consumed — a row read before its scorer ran would pass a gate
it fails — so a stage whose input is scored waits for the scorers, as do global
stages (dedup, topics: they need the whole table) and stages the executor runs on
workers.

Why the dataset is the sequential run's: shards are immutable and only appended, so
a row read early is a row of the final table — except that a read conforms each
shard to the schema of the shards written *so far*, and gates apply only when their
columns exist. A column that appears only in later shards (``raw_excerpt`` comes
with the first rejection that has one) would leave a gate on it unapplied to the
rows read early; a type widened by a later shard would change values (``3`` vs
``3.0``). So the stage records, in ``stages/<stage>/.overlap-read.json`` and before
it consumes a row, the upstream's epoch (:meth:`RunStore.epoch`) and, per schema it
read under, the shards and how many rows passed the gates. When the upstream has
finished, :func:`verify_read` checks them against the final table: same epoch; and
per earlier schema, either no change, or only columns added and the same number of
those shards' rows passing the gates under the final schema (a gate on an added
column can only drop rows, so equal counts mean equal rows). Anything else drops
the stage's rows and redoes it over the final table (answers to unchanged requests
come from the cache), loudly. The record survives a crash, so a resumed run checks
the rows a killed one read early before trusting them.

The one difference tolerated: a row read before a column existed lacks that key,
where a sequential read has it as ``None`` — the same difference a sequential read
already shows between a table with and without such rows. Stages read optional
columns with ``row.get``.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import polars as pl

from fabrika.pipeline.config import PipelineConfig, inputs_of, stage_dependencies
from fabrika.pipeline.execute import STARVED
from fabrika.pipeline.stage import STAGES, Row, Stage, StageConfig
from fabrika.schemas.ids import stable_id
from fabrika.store.shards import atomic_write_json

if TYPE_CHECKING:
    from fabrika.store.run import RunStore

#: A starved stage looks for newly committed upstream shards at most this often.
POLL_SECONDS = 0.2
#: Shards read (and recorded) in one step: bounds what one step holds in memory.
SHARDS_PER_STEP = 8
RECORD = ".overlap-read.json"


def streaming_inputs(config: PipelineConfig, stages: list[StageConfig]) -> dict[str, str]:
    """``{stage: upstream}`` for the stages of this invocation that may start on their upstream's shards."""
    if not config.overlap:
        return {}
    deps = stage_dependencies(config)
    running = {s.stage_name for s in stages}
    out: dict[str, str] = {}
    for cfg in stages:
        cls = STAGES[cfg.kind]
        ins = inputs_of(cfg)
        if cls.global_stage or cls.input_rows is not Stage.input_rows or len(ins) != 1 or cfg.max_items is not None:
            continue
        up = ins[0]
        if up not in running or STAGES[config.stage(up).kind].global_stage:
            continue
        if deps[cfg.stage_name] != {up}:  # the input's scorers must finish first (their gates)
            continue
        out[cfg.stage_name] = up
    return out


def schema_fingerprint(schema: pl.Schema | None) -> str:
    return stable_id([[name, str(dtype)] for name, dtype in (schema or {}).items()])


class ReadRecord:
    """What a streaming stage read of its upstream: the epoch and the schemas, kept until verified."""

    def __init__(self, store: "RunStore", stage: str, upstream: str) -> None:
        self.store = store
        self.stage = stage
        self.upstream = upstream
        self.path: Path = store.stage_dir(stage) / RECORD
        self.doc: dict[str, Any] = load_record(store, stage) or {"upstream": upstream, "epoch": None, "schemas": {}}

    def note(self, epoch: str | None, schema: pl.Schema | None, rows: dict[str, int]) -> None:
        """Record a read (its epoch, its schema, and per shard the rows that passed the gates),
        durably, before any of its rows is consumed."""
        fp = schema_fingerprint(schema)
        if self.doc.get("epoch") is None:
            self.doc["epoch"] = epoch
        elif self.doc["epoch"] != epoch:
            self.doc["epoch_changed"] = True
        entry = self.doc["schemas"].setdefault(fp, {"columns": [[n, str(t)] for n, t in (schema or {}).items()],
                                                    "shards": {}})
        entry["shards"].update(rows)
        atomic_write_json(self.path, self.doc)


def load_record(store: "RunStore", stage: str) -> dict[str, Any] | None:
    path = store.stage_dir(stage) / RECORD
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"upstream": None, "epoch": None, "schemas": {}, "unreadable": True}
    return doc if isinstance(doc, dict) else {"upstream": None, "epoch": None, "schemas": {}, "unreadable": True}


def _schema_change(old: list[list[str]], new: pl.Schema | None) -> tuple[str, bool]:
    """What changed, and whether it is only added columns."""
    before = {n: t for n, t in old}
    after = {n: str(t) for n, t in (new or {}).items()}
    added = [f"+{n}" for n in after if n not in before]
    other = [f"-{n}" for n in before if n not in after]
    other += [f"{n}: {before[n]} -> {after[n]}" for n in after if n in before and before[n] != after[n]]
    return ", ".join(added + other) or "column order", not other


def verify_read(store: "RunStore", stage: str, upstream: str,
                where: Callable[[pl.LazyFrame], pl.LazyFrame] | None) -> tuple[str | None, list[str]]:
    """``(problem, notes)``: ``problem`` is ``None`` when every row ``stage`` read early is a row of
    ``upstream``'s final table as a sequential read gives it (the record is then removed); ``notes``
    name the tolerated changes (columns added after an early read)."""
    doc = load_record(store, stage)
    if doc is None:
        return None, []
    problem = None
    notes: list[str] = []
    if doc.get("unreadable") or doc.get("upstream") != upstream:
        problem = "its record of what it read is unreadable"
    elif doc.get("epoch_changed") or doc.get("epoch") != store.epoch(upstream):
        problem = f"{upstream}'s rows were dropped and rewritten while {stage} read them"
    else:
        final = store.table_schema(upstream)
        fp = schema_fingerprint(final)
        for key, entry in doc.get("schemas", {}).items():
            if key == fp:
                continue
            change, only_added = _schema_change(entry.get("columns") or [], final)
            if not only_added:
                problem = f"{upstream}'s columns changed after {stage} read its first rows ({change})"
                break
            read: dict[str, int] = entry.get("shards") or {}
            files = [f for f in store.shards(upstream) if f.name in read]
            now = sum(f.height for f in store.iter_frames(upstream, (), where=where, columns=["id"], only=files))
            if len(files) != len(read) or now != sum(read.values()):
                problem = (f"{upstream}'s columns changed after {stage} read its first rows ({change}) and the "
                           f"gates now keep {now} of the {sum(read.values())} rows it read then")
                break
            notes.append(change)
    if problem is None:
        (store.stage_dir(stage) / RECORD).unlink(missing_ok=True)
    return problem, sorted(set(notes))


class UpstreamTail:
    """The gated rows of an upstream table as its shards commit, until it has finished.

    :meth:`rows` yields rows, or :data:`~fabrika.pipeline.execute.STARVED` when nothing new
    is committed yet (the item loop then waits a little); ``rows_early`` counts the rows
    read before the upstream finished (what overlapping gained).
    """

    def __init__(self, store: "RunStore", upstream: str, record: ReadRecord,
                 where: Callable[[pl.LazyFrame], pl.LazyFrame] | None, finished: asyncio.Event) -> None:
        self.store = store
        self.upstream = upstream
        self.record = record
        self.where = where
        self.finished = finished
        self.rows_early = 0

    def rows(self) -> Iterator[Row | object]:
        consumed: set[str] = set()
        last_poll = float("-inf")
        while True:
            if time.monotonic() - last_poll < POLL_SECONDS:
                yield STARVED
                continue
            last_poll = time.monotonic()
            done = self.finished.is_set()  # before listing: every shard written before the end is listed
            files = self.store.shards(self.upstream)
            new = [f for f in files if f.name not in consumed]
            if not new:
                if done:
                    return
                yield STARVED
                continue
            for start in range(0, len(new), SHARDS_PER_STEP):
                step = new[start : start + SHARDS_PER_STEP]
                consumed.update(f.name for f in step)
                schema = self.store.table_schema(self.upstream)
                try:
                    frames = list(self.store.iter_frames(self.upstream, (), where=self.where, only=step))
                    owner = {i: f.name for f in step for i in pl.read_parquet(f, columns=["id"])["id"].to_list()}
                except (OSError, pl.exceptions.PolarsError):
                    if all(f.exists() for f in step):
                        raise
                    # the upstream dropped its shards (it is being redone): its epoch changed, so
                    # verify_read redoes this stage over the final table
                    frames, owner = [], {}
                rows = dict.fromkeys(owner.values(), 0)  # per shard: its rows that passed the gates
                for frame in frames:
                    for i in frame["id"].to_list():
                        rows[owner[i]] += 1
                self.record.note(self.store.epoch(self.upstream), schema, rows)
                if not done:
                    self.rows_early += sum(rows.values())
                for frame in frames:
                    yield from frame.iter_rows(named=True)
            last_poll = float("-inf")  # more may have committed while these were read


__all__ = ["POLL_SECONDS", "ReadRecord", "UpstreamTail", "streaming_inputs", "verify_read"]
