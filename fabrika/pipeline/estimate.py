"""``fabrika estimate CONFIG``: what a full run will take, extrapolated from a pilot run.

The pilot runs the whole pipeline on the configured backend, in a scratch run
directory with its own cache, but cuts the *first per-item stages* (those with no
per-item stage above them) to a fraction (``--pilot 0.2``) or a count
(``--pilot 50``) of their input, picked by stride over the input order
(:func:`stride_sample`), and never below :data:`MIN_PILOT_ITEMS` items (a mean over two
items says nothing); a fraction never below :func:`pilot_floor` (``ceil(64·N/(N+64))`` of
``N`` items: a small config's pilot is its full run, and its estimate exact). A stage whose
items come in kinds that fan out differently (:meth:`~fabrika.pipeline.stage.Stage.pilot_stratum`:
``fc.plans``' sample type, ``if.verifiers``' source and family) is sampled per kind, each in
proportion to its share of the input (:func:`stratified_sample`), and its per-item means are
weighed back to the input's shares (:func:`stratum_weights`). A cut stage whose pilot would be at least :data:`FULL_SHARE` of its
input runs in full (11 imported tools: a 5-tool pilot predicted 3.4x the rows).
Everything below them follows naturally. A first
per-item stage that feeds a pool-wide stage (``if.expand`` → ``if.dedup``,
``fc.tools`` → ``fc.tools_dedup``) runs in full instead, and the cut moves below the
pool (:func:`full_stages`): deduplication does not scale linearly.

Then every stage gets a point and a range for its items, requests, tokens, rows and
time, by the per-stage fan-out model of :mod:`fabrika.pipeline.estimate_model`:

* a stage's full input is known for the cut stages and for stages that make their own
  items (``if.multi.prompts``' slots, ``if.dialogues``' target count); every other
  stage's is predicted from the rows its inputs are predicted to write, times the share
  of them it read in the pilot (gates included), that share with its own error
  (:mod:`fabrika.pipeline.estimate_shares`);
* per item, the pilot's requests and tokens (counted per item by :class:`TimedEngine`)
  and rows (grouped by ``input_id``) give a mean and a spread;
* a cut :class:`~fabrika.pipeline.llm_stage.LLMStage` has its requests counted without
  calling the LLM (``requests(row)`` on every input row), so a stage that spreads a
  fixed number of calls over its first items (``if.expand``) is predicted exactly;
* global stages (dedup, clustering) keep their pilot's output/input ratio;
* dataset rows are each dataset stage's predicted rows times the share its gates kept
  in the pilot's materialised version (with that share's error);
* a stage that draws a declared share of its inputs (``fc.irrelevance``' ``share``) draws more in
  the pilot, so a few pilot items still reach that branch, and is weighed back
  (:mod:`fabrika.pipeline.estimate_draws`).

Wall time: the pilot runs one stage at a time without overlap, and each stage's time is
split into a fixed part, paid once, and the rest (:mod:`fabrika.pipeline.estimate_time`);
on the ``sim`` backend (CPU-bound) the rest scales with its requests (or items); on a real
endpoint :func:`stage_seconds` uses the measured mean latency and the configured
concurrency. What a run pays outside its stages is added once: each pilot invocation's time
outside its stages, and the phase before the pilot's invocation (the engine's start, counting the
cut stages' input), which loads what a run's first stages load lazily. What this cannot know is
listed in the estimate's ``assumptions``.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator, cast

from fabrika.errors import StoreError
from fabrika.gates import gate_lazy
from fabrika.pipeline.config import PipelineConfig, config_hash, execution_order, inputs_of, stage_dependencies
from fabrika.pipeline.estimate_draws import Draw, drawn_rows, pilot_draws, reweigh
from fabrika.pipeline.estimate_model import (
    MARGIN,
    Figure,
    Moments,
    Z,
    extrapolate,
    extrapolate_fit,
    fit_line,
    ratio_figure,
    ratio_var,
    times_share,
)
from fabrika.pipeline.estimate_schedule import TIME_RESOLUTION_S, Job, Schedule, simulate
from fabrika.pipeline.estimate_shares import gated_per_item, share_variance, version_per_item
from fabrika.pipeline.estimate_time import Clocks, clocked, full_seconds, split_fixed
from fabrika.pipeline.lifecycle import build_engine_for
from fabrika.pipeline.llm_wrap import ITEM_STATE
from fabrika.pipeline.overlap import streaming_inputs
from fabrika.pipeline.stage import STAGES, Row, Stage, StageConfig
from fabrika.store import RunStore

#: Marks a directory as an estimate's scratch run (only such a directory is emptied).
MARKER = ".fabrika-estimate"
#: The pilot runs at least this many items of a cut stage (all of them when it has fewer).
MIN_PILOT_ITEMS = 5
#: A fractional pilot of an N-item input holds at least ``ceil(PILOT_FLOOR * N / (N + PILOT_FLOOR))`` items
#: (:func:`pilot_floor`): a sample of PILOT_FLOOR from an endless input, fewer from a small one. A 20% pilot
#: of 60 plans (12) held 1 ``multi_turn`` plan against the run's 11: every stage below it read 0.66-0.78x.
#: On a small input the floor makes the pilot its full run (:data:`FULL_SHARE`), which is then exact.
PILOT_FLOOR = 64
#: A cut stage whose pilot would read at least this share of its input runs in full: a 5-item pilot of
#: 11 imported tools predicted 3.4x the rows (the tools' yields differ a lot), and the whole input
#: costs at most 1 / FULL_SHARE times the pilot.
FULL_SHARE = 0.4
#: Cut stages with more input rows than this are not dry-counted (their requests are extrapolated).
DRY_COUNT_LIMIT = 200_000
#: Margin of the time range on each side (latency and load vary more than counts).
TIME_MARGIN = 0.35

Note = Callable[[str], None]

#: The cut stage's item being processed in the pilot (set by :func:`sampled_inputs`): lets
#: :class:`TimedEngine` name each item's requests, which stratified weights need.
PILOT_ITEM: contextvars.ContextVar[str | None] = contextvars.ContextVar("fabrika_pilot_item", default=None)


class TimedEngine:
    """Delegates to an engine; records per stage (``request.meta["stage"]``) each call's latency and,
    per item (the runner's per-item :data:`~fabrika.pipeline.llm_wrap.ITEM_STATE`), its requests and tokens."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.latency: dict[str, list[float]] = {}
        #: stage -> per item [requests, prompt tokens, completion tokens]
        self.per_item: dict[str, dict[int, list[int]]] = {}
        self._keep: list[Any] = []  # the item states, kept alive so that their ids stay unique
        #: stage -> per item state (as in ``per_item``) -> the cut stage's item id (:data:`PILOT_ITEM`)
        self.item_ids: dict[str, dict[int, str]] = {}

    def _record(self, requests: Any, responses: Any, seconds: float) -> None:
        state = ITEM_STATE.get()
        if state is not None:
            self._keep.append(state)
        for r, resp in zip(requests, responses):
            stage = str(r.meta.get("stage", "?"))
            self.latency.setdefault(stage, []).append(seconds)
            if state is None:
                continue
            cell = self.per_item.setdefault(stage, {}).setdefault(id(state), [0, 0, 0])
            item = PILOT_ITEM.get()
            if item is not None:
                self.item_ids.setdefault(stage, {})[id(state)] = item
            usage = getattr(resp, "usage", None)
            cell[0] += 1
            cell[1] += int(getattr(usage, "prompt_tokens", 0) or 0)
            cell[2] += int(getattr(usage, "completion_tokens", 0) or 0)

    async def complete(self, requests: Any) -> Any:
        t = time.monotonic()
        out = await self._engine.complete(requests)
        self._record(requests, out, time.monotonic() - t)
        return out

    async def complete_one(self, request: Any) -> Any:
        t = time.monotonic()
        out = await self._engine.complete_one(request)
        self._record([request], [out], time.monotonic() - t)
        return out

    def moments(self, stage: str, items: int,
                weights: dict[str, float] | None = None) -> tuple[Moments, Moments, Moments]:
        """Per-item requests, prompt and completion tokens of ``stage`` over ``items`` items (zeros included);
        ``weights`` (item id -> stratum weight, :func:`stratum_weights`) weighs each item's values."""
        cells = self.per_item.get(stage, {})
        names = self.item_ids.get(stage, {})
        w = {k: (weights or {}).get(names.get(k, ""), 1.0) for k in cells}
        req, ptok, ctok = (Moments.of([float(c[j]) * w[k] for k, c in cells.items()], items) for j in range(3))
        return req, ptok, ctok

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


@dataclass
class Pilot:
    """How the pilot was cut: a fraction or a count of the cut stages' input."""

    fraction: float | None = None
    items: int | None = None

    @classmethod
    def parse(cls, value: str | float) -> "Pilot":
        number = float(value)
        if 0 < number < 1:
            return cls(fraction=number)
        if number >= 1 and number.is_integer():
            return cls(items=int(number))
        raise ValueError(f"--pilot must be a fraction in (0, 1) or an item count >= 1, got {value!r}")

    def size(self, full: int) -> int:
        """Pilot items of a cut stage with ``full`` input items: a fraction is floored (:func:`pilot_floor`),
        a count is taken as given."""
        if self.fraction is not None:
            return min(full, max(math.ceil(full * self.fraction), MIN_PILOT_ITEMS, pilot_floor(full)))
        return min(full, self.items or full)


def pilot_floor(full: int) -> int:
    """The fewest items a fractional pilot of ``full`` items holds: ``ceil(64 N / (N + 64))``
    (:data:`PILOT_FLOOR`; a sample of 64 with the finite-population correction)."""
    return min(full, math.ceil(PILOT_FLOOR * full / (full + PILOT_FLOOR))) if full > 0 else 0


@dataclass
class Estimate:
    """The pilot's measurements and the extrapolation (``as_dict`` is the JSON written)."""

    config: str
    backend: str
    pilot: dict[str, Any]
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    total: dict[str, Any] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)

    @property
    def sim(self) -> bool:
        return self.backend == "sim"

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config, "backend": self.backend, "sim": self.sim, "pilot": self.pilot,
                "stages": self.stages, "total": self.total, "assumptions": self.assumptions}


def first_per_item(config: PipelineConfig, full: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Per-item stages not in ``full`` whose per-item ancestors are all in ``full``."""
    deps = stage_dependencies(config)
    per_item = {s.stage_name for s in config.stages if not STAGES[s.kind].global_stage}
    return [s.stage_name for s in execution_order(config) if s.stage_name in per_item - full
            and not ((_ancestors(deps, s.stage_name) & per_item) - full)]


def full_stages(config: PipelineConfig) -> set[str]:
    """The first per-item stages that feed a pool-wide stage (a global stage that is not a scorer: ``if.dedup``,
    ``fc.tools_dedup``), with nothing per-item between them: the pilot runs these in full.

    What such a stage keeps does not scale linearly (a deduplicated pool of 13 topics' tools keeps a far
    larger share than the pool of 63: 3.7x too many plans were predicted), so the pilot cuts below it.
    They are usually cheap (one request per topic or per seed) next to what follows them.
    """
    first = set(first_per_item(config))
    by_name = {s.stage_name: s for s in config.stages}
    consumers: dict[str, list[str]] = {}
    for s in config.stages:
        for u in inputs_of(s):
            consumers.setdefault(u, []).append(s.stage_name)
    out: set[str] = set()
    for name in first:
        todo, seen = list(consumers.get(name, [])), set()
        while todo:
            c = todo.pop()
            if c in seen:
                continue
            seen.add(c)
            cls = STAGES[by_name[c].kind]
            if cls.global_stage and not cls.annotates:
                out.add(name)
                break
            if cls.global_stage:  # a scorer over the pool: look further down
                todo.extend(consumers.get(c, []))
    return out


def cut_stages(config: PipelineConfig) -> list[str]:
    """Where the pilot is cut: the first per-item stages below those that run in full (:func:`full_stages`)."""
    return first_per_item(config, full_stages(config))


def _item_rng(seed: int, stage: str, *parts: Any) -> Any:
    from fabrika.pipeline.context import item_rng

    return item_rng(seed, stage, *parts)


def _fake_ctx(config: PipelineConfig, cfg: StageConfig, store: RunStore | None = None) -> Any:
    """A context good enough for ``input_rows`` and ``requests`` (no LLM, no setup)."""
    if store is not None:
        from fabrika.pipeline.context import RunContext

        annotators = {u: store.annotators_of(u) for u in inputs_of(cfg)}
        return RunContext(cfg.stage_name, store=store, pipeline=config, llm=None, backend_name="estimate",
                          report={}, resources={}, annotators=annotators)
    return SimpleNamespace(pipeline=config, seed=config.seed, llm=None, run_dir=config.resolved_run_dir,
                           backend_name="estimate", stage_name=cfg.stage_name,
                           rng=lambda *parts: _item_rng(config.seed, cfg.stage_name, *parts))


def _source_count(config: PipelineConfig, cfg: StageConfig) -> int:
    """Items a stage with its own ``input_rows`` would read (they need only the pipeline)."""
    n = sum(1 for _ in STAGES[cfg.kind](cfg, _fake_ctx(config, cfg)).input_rows())
    return n if cfg.max_items is None else min(n, cfg.max_items)


def _own_count(config: PipelineConfig, cfg: StageConfig) -> int | None:
    """How many items a stage makes itself, when that needs only the config (``None``: it reads upstream rows)."""
    try:
        return _source_count(config, cfg)
    except Exception:  # noqa: BLE001 - its items come from upstream tables: predicted from them instead
        return None


def _own_items(cfg: StageConfig) -> bool:
    """A per-item stage that makes its own items (slots, a target count) instead of reading its input's rows."""
    cls = STAGES[cfg.kind]
    return not cls.global_stage and cls.input_rows is not Stage.input_rows


def _input_count(store: RunStore, config: PipelineConfig, cfg: StageConfig) -> int:
    filters = config.filters
    total = 0
    for src in inputs_of(cfg):
        total += store.count_rows(src, store.annotators_of(src), lambda lf: gate_lazy(lf, filters))
    return total if cfg.max_items is None else min(total, cfg.max_items)


def count_items(config: PipelineConfig, cfg: StageConfig, store: RunStore,
                strata: dict[str, str] | None = None) -> tuple[list[str], dict[str, int] | None]:
    """The items a cut stage will read at full size, in order (its own ``input_rows`` over what ran above it),
    and, for an :class:`~fabrika.pipeline.llm_stage.LLMStage`, item id -> how many requests ``requests(row)``
    builds for each (``None`` when it is not one, has more than :data:`DRY_COUNT_LIMIT` items, or cannot
    build requests without its setup). ``strata``, when given, is filled with item id -> the kind of item
    (:meth:`~fabrika.pipeline.stage.Stage.pilot_stratum`) for a stage that declares kinds."""
    from fabrika.pipeline.llm_stage import LLMStage

    cls = STAGES[cfg.kind]
    try:
        stage = cls(cfg, _fake_ctx(config, cfg, None if cfg.input is None else store))
        rows = stage.input_rows()
    except Exception:  # noqa: BLE001 - its items need its setup: count its input's gated rows instead
        n = _source_count(config, cfg) if cfg.input is None else _input_count(store, config, cfg)
        return [f"#{i}" for i in range(n)], None
    dry: dict[str, int] | None = {} if issubclass(cls, LLMStage) else None
    kinds: dict[str, str] | None = strata if cls.pilot_stratum is not Stage.pilot_stratum else None
    n = 0
    ids: list[str] = []
    for row in rows:
        if cfg.max_items is not None and n >= cfg.max_items:
            break
        n += 1
        ids.append(stage.item_id(row))
        if kinds is not None:
            try:
                kind = stage.pilot_stratum(row)
            except Exception:  # noqa: BLE001 - a kind it cannot tell without its setup: one plain stride sample
                kinds.clear()
                kinds = None
            else:
                if kind is not None:
                    kinds[ids[-1]] = str(kind)
        if dry is None:
            continue
        if len(dry) >= DRY_COUNT_LIMIT:
            dry = None
            continue
        try:
            assert isinstance(stage, LLMStage)
            dry[stage.item_id(row)] = len(stage.requests(row))
        except Exception:  # noqa: BLE001 - a stage that needs its setup to build requests: extrapolate instead
            dry = None
    return ids, dry


def stride_sample(ids: list[str], n: int) -> set[str]:
    """``n`` ids spread evenly over the input order (systematic sampling): the first 20% of a table is
    often not like the rest (``if.dedup`` writes its LLM-written candidates before the library's seeds)."""
    if n >= len(ids):
        return set(ids)
    return {ids[min(len(ids) - 1, int((i + 0.5) * len(ids) / n))] for i in range(n)}


#: The kind of the items a stage does not tell apart (:meth:`~fabrika.pipeline.stage.Stage.pilot_stratum` ``None``).
ANY_KIND = ""


def _by_kind(ids: list[str], strata: dict[str, str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for i in ids:
        groups.setdefault(strata.get(i, ANY_KIND), []).append(i)
    return groups


def allocate(counts: dict[str, int], n: int) -> dict[str, int]:
    """Pilot items per kind: each kind's share of ``n`` is its share of the input (largest remainders, ties
    by name), and every kind with items gets at least one, so the total may exceed ``n`` by a few."""
    total = sum(counts.values())
    if n >= total:
        return dict(counts)
    quota = {k: n * c / total for k, c in counts.items()}
    out = {k: min(c, max(1, math.floor(quota[k]))) for k, c in counts.items() if c > 0}
    left = n - sum(out.values())
    for k in sorted(out, key=lambda k: (out[k] - quota[k], k)):
        if left <= 0:
            break
        if out[k] < counts[k]:
            out[k] += 1
            left -= 1
    return out


def stratified_sample(ids: list[str], strata: dict[str, str], n: int) -> set[str]:
    """About ``n`` ids, each kind's (``strata``: id -> kind) in proportion to its share of ``ids``
    (:func:`allocate`), each kind's by :func:`stride_sample` over its own input order. Items of different kinds
    fan out differently: a plain stride over 60 plans drew 1 of their 11 ``multi_turn`` plans in 12."""
    if not strata:
        return stride_sample(ids, n)
    groups = _by_kind(ids, strata)
    alloc = allocate({k: len(v) for k, v in groups.items()}, n)
    return set().union(*(stride_sample(v, alloc.get(k, 0)) for k, v in groups.items()))


def coarsen(strata: dict[str, str], n: int) -> dict[str, str]:
    """Kinds cut to their parent (``llm/length`` -> ``llm``) while there are more of them than half of an
    ``n``-item pilot can hold two of: 12 constraints over 11 source/family kinds gave each kind one item, the
    rare ones many times their share, and the stages below the cut (not weighed back) read 0.56x."""
    while len(set(strata.values())) > n / 2 and any("/" in k for k in strata.values()):
        strata = {i: k.rsplit("/", 1)[0] for i, k in strata.items()}
    return strata


def stratum_weights(ids: list[str], strata: dict[str, str], picks: set[str]) -> dict[str, float]:
    """Pilot item id -> the weight that brings its kind back to its share of the input (``N_h / N`` over
    ``n_h / n``; 1 for every item when the pilot's shares are exact). A per-item mean of the weighted values
    is the stratified mean ``sum_h N_h mean_h / N``."""
    groups = _by_kind(ids, strata)
    n = sum(1 for i in ids if i in picks)
    out: dict[str, float] = {}
    for members in groups.values():
        mine = [i for i in members if i in picks]
        if not mine:
            continue
        w = (len(members) / len(ids)) / (len(mine) / n)
        out.update({i: w for i in mine})
    return out


@contextmanager
def sampled_inputs(config: PipelineConfig, picks: dict[str, set[str]]) -> Iterator[None]:
    """While the pilot runs, the cut stages read only the picked items of their input (a subclass of each
    cut stage's class filters its ``input_rows``; the registry is restored afterwards)."""
    kinds = {s.kind for s in config.stages if s.stage_name in picks}
    saved = {kind: STAGES[kind] for kind in kinds}

    def sampling(base: type[Stage[Any]]) -> type[Stage[Any]]:
        def input_rows(self: Stage[Any]) -> Iterator[Row]:
            keep = picks.get(self.name)
            for row in base.input_rows(self):
                if keep is None or self.item_id(row) in keep:
                    yield row

        async def process(self: Stage[Any], row: Row) -> list[Row]:
            token = PILOT_ITEM.set(self.item_id(row))
            try:
                return await base.process(self, row)
            finally:
                PILOT_ITEM.reset(token)

        members: dict[str, Any] = {"input_rows": input_rows, "__module__": base.__module__,
                                   "__qualname__": base.__qualname__}
        if not base.global_stage:
            members["process"] = process
        return cast("type[Stage[Any]]", type(base.__name__, (base,), members))

    try:
        for kind, cls in saved.items():
            STAGES[kind] = sampling(cls)
        yield
    finally:
        STAGES.update(saved)


def _with_stage_updates(config: PipelineConfig, updates: dict[str, dict[str, Any]], run_dir: Path) -> PipelineConfig:
    stages = [s.model_copy(update=updates.get(s.stage_name, {})) for s in config.stages]
    llm = config.llm
    if llm.cache.path is not None:  # the pilot must not read a real run's cache
        llm = llm.model_copy(update={"cache": llm.cache.model_copy(update={"path": run_dir / "cache.sqlite"})})
    # One process: the pilot's sampling subclasses and per-item counters live in this process's registry and
    # runner, which ``llm_workers`` subprocesses or Ray actors would not see. One stage at a time, without
    # overlap: each stage's seconds are its own, not time spent waiting for a stage beside or above it
    # (neither setting is part of the config hash or changes an output).
    return config.model_copy(update={"stages": stages, "run_dir": run_dir, "llm": llm, "llm_workers": 1,
                                     "max_parallel_stages": 1, "overlap": False})


def _concurrency(config: PipelineConfig, cfg: StageConfig) -> tuple[int, int | None]:
    """(items in flight for the stage, requests the endpoints take at once; ``None`` = unbounded)."""
    items = cfg.max_in_flight or config.max_in_flight
    llm = config.llm
    caps = [e.max_concurrency for e in llm.endpoints]
    requests = sum(caps) if caps else None
    engine_cap = llm.max_in_flight
    if engine_cap:
        requests = min(requests, int(engine_cap)) if requests else int(engine_cap)
    return items, requests


def stage_seconds(items: float, requests: float, latency_s: float, pilot_items: int, pilot_requests: int,
                  item_slots: int, request_slots: int | None, pilot_seconds: float, global_stage: bool,
                  fixed: float = 0.0) -> float:
    """Wall time of one stage at full size on a real endpoint.

    Per-item stages: an item makes ``pilot_requests / pilot_items`` calls, assumed one after
    another (dialogues are turn by turn), so an item takes ``calls × latency``; ``item_slots``
    items run at once, and the endpoints serve at most ``request_slots`` calls at once —
    the slower of the two bounds wins, after the ``fixed`` seconds the stage pays once
    (:mod:`fabrika.pipeline.estimate_time`). Global and LLM-free stages scale the rest of their pilot time
    linearly.
    """
    if global_stage or pilot_requests == 0 or latency_s <= 0:
        return full_seconds(pilot_seconds, fixed, items / pilot_items if pilot_items else 1.0)
    per_item = pilot_requests / max(1, pilot_items) * latency_s
    by_items = math.ceil(items / item_slots) * per_item
    by_requests = requests * latency_s / request_slots if request_slots else 0.0
    return fixed + max(by_items, by_requests)


def rows_per_item(store: RunStore, name: str) -> tuple[dict[str, tuple[int, int]], int, int]:
    """(rows, ok rows) each item wrote (by ``input_id``), all rows and ok rows of the stage's own table."""
    import polars as pl

    lf = store.scan_raw(name)
    if lf is None:
        return {}, 0, 0
    cols = lf.collect_schema().names()
    has_status = "status" in cols
    if "input_id" not in cols:
        n = int(lf.select(pl.len()).collect().item())
        ok = int(lf.filter(pl.col("status") == "ok").select(pl.len()).collect().item()) if has_status else n
        return {}, n, ok
    df = lf.select(pl.col("input_id").cast(pl.Utf8), (pl.col("status") == "ok") if has_status
                   else pl.lit(True).alias("status")).collect()
    grouped = df.group_by("input_id").agg(pl.len().alias("n"), pl.col("status").sum().alias("ok"))
    per = {str(k): (int(v), int(o)) for k, v, o in grouped.iter_rows() if k is not None}
    return per, df.height, int(df["status"].sum())


async def arun_estimate(config: PipelineConfig, pilot: Pilot, work_dir: Path, config_name: str = "",
                        progress: bool = False, note: Note | None = None) -> Estimate:
    """Run the pilot in ``work_dir`` (emptied first) and extrapolate; see module docs.

    ``progress`` shows the runner's live per-stage progress; ``note`` gets one line per step.
    """
    from fabrika.pipeline.runner import arun_pipeline

    def say(line: str) -> None:
        if note is not None:
            note(line)

    marker = work_dir / MARKER
    if work_dir.exists() and any(work_dir.iterdir()) and not marker.exists():
        raise StoreError(f"{work_dir} is not empty and is not an estimate's scratch directory; "
                         "give --work-dir a new or empty directory")
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text("scratch run of `fabrika estimate`; deleted by the next estimate\n", encoding="utf-8")
    cuts = cut_stages(config)
    deps = stage_dependencies(config)
    by_name = {s.stage_name: s for s in config.stages}
    base = _with_stage_updates(config, {}, work_dir)
    t0 = time.monotonic()
    engine = TimedEngine(build_engine_for(base, work_dir, cache_only=False))
    kinds = {s.kind for s in config.stages}
    clocks: Clocks = {}
    clocks_above: Clocks = {}
    walls: list[tuple[float, dict[str, Any]]] = []  # each pipeline invocation's wall time and manifest
    try:
        full_in: dict[str, int] = {}
        above = sorted({d for c in cuts for d in deps[c]})
        first: dict[str, Any] = {}
        if above:  # stages above the cut run in full first, so the cut stages' input can be counted
            say(f"estimate 1/3: stages above the cut run in full: {', '.join(sorted(_ancestors(deps, *cuts)))}")
            t1 = time.monotonic()
            with clocked(kinds, clocks_above):
                first = (await arun_pipeline(base, resume=False, progress=progress, engine=engine,
                                             until=above)).manifest
            walls.append((time.monotonic() - t1, first))
        elif work_dir.exists():
            RunStore(work_dir).reset()
        store = RunStore(work_dir)
        dry: dict[str, dict[str, int]] = {}
        order: dict[str, list[str]] = {}
        strata: dict[str, dict[str, str]] = {}
        for name in cuts:
            strata[name] = {}
            order[name], counted = count_items(base, by_name[name], store, strata[name])
            full_in[name] = len(order[name])
            if counted is not None:
                dry[name] = counted
        sizes = {name: pilot.size(n) for name, n in full_in.items()}
        in_full = sorted(name for name, n in full_in.items() if sizes[name] >= FULL_SHARE * n)
        sizes.update({name: full_in[name] for name in in_full})
        updates: dict[str, dict[str, Any]] = {name: {"max_items": sizes[name]} for name in full_in
                                              if name not in in_full}
        # a share a stage draws is raised below the sampled cut, so the pilot sees that branch (estimate_draws)
        sampled = [n for n in updates if full_in[n]]
        below = set(sampled) | {s.stage_name for s in config.stages
                                if _ancestors(deps, s.stage_name) & set(sampled)}
        draws = pilot_draws(list(config.stages), below, min((sizes[n] / full_in[n] for n in sampled), default=1.0))
        for name, draw in draws.items():
            updates.setdefault(name, {})[draw.field] = draw.pilot_share
        say("estimate 2/3: pilot of " + ", ".join(f"{n} ({sizes[n]}/{full_in[n]} items"
                                                  + (", in full: a pilot would be most of it" if n in in_full else "")
                                                  + (f", {len(set(strata[n].values()))} kinds in proportion"
                                                     if strata[n] and n not in in_full else "")
                                                  + ")" for n in cuts)
            + (f"; requests counted without the LLM: {', '.join(sorted(dry))}" if dry else "")
            + "".join(f"; {n} draws {d.field} {d.pilot_share:.0%} (config: {d.share:.0%}), weighed back"
                      for n, d in sorted(draws.items())))
        piloted = _with_stage_updates(config, updates, work_dir)
        if above:  # the cut changed only max_items: the scratch run resumes without a "config changed" warning
            manifest = store.read_manifest()
            manifest["config_hash"] = config_hash(piloted)
            store.write_manifest(manifest)
        strata = {n: coarsen(k, sizes.get(n, 0)) for n, k in strata.items()}
        picks = {n: stratified_sample(order[n], strata[n], sizes[n]) for n in sampled if not order[n][:1] == ["#0"]}
        weights = {n: stratum_weights(order[n], strata[n], picks[n]) for n in picks if strata[n]}
        t1 = time.monotonic()
        # the engine's start and the counting above load what a run's first stages load lazily (a morphology
        # dictionary, a stage's modules): the pilot's stages then never pay it, a run does
        prepare = max(0.0, t1 - t0 - sum(wall for wall, _ in walls))
        with sampled_inputs(config, picks), clocked(kinds, clocks):
            result = await arun_pipeline(piloted, resume=True, progress=progress, engine=engine)
        walls.append((time.monotonic() - t1, result.manifest))
    finally:
        if hasattr(engine, "aclose"):
            await engine.aclose()
    say(f"estimate 3/3: extrapolating (the pilot took {time.monotonic() - t0:.0f} s)")
    manifest = result.manifest
    for name, entry in (first.get("stages") or {}).items():  # the second invocation only resumed these
        manifest.setdefault("stages", {})[name] = entry
        if name in clocks_above:
            clocks[name] = clocks_above[name]
    est = Estimate(config=config_name, backend=str(manifest.get("backend") or getattr(engine, "backend_name", "?")),
                   pilot={"fraction": pilot.fraction, "items": pilot.items, "cut_stages": cuts,
                          "full_inputs": full_in, "dry_counted": sorted(dry), "work_dir": str(work_dir),
                          "min_items": MIN_PILOT_ITEMS, "floor": PILOT_FLOOR, "run_in_full": in_full,
                          "strata": {n: _kinds(strata[n], picks[n]) for n in picks if strata[n]},
                          "oversampled": {n: d.as_dict() for n, d in sorted(draws.items())}})
    # what the invocations spent outside their stages (start-up, checks, materialising), and what was paid
    # before the pilot's invocation on the run's behalf (``prepare``): paid once
    overhead = sum(max(0.0, wall - sum(float(e.get("seconds") or 0.0) for e in (m.get("stages") or {}).values()
                                       if e.get("seen") or e.get("seconds")))
                   for wall, m in walls) if walls else 0.0
    est.pilot["prepare_seconds"] = round(prepare, 2)
    est.pilot["overhead_seconds"] = round(overhead + prepare, 2)
    extrapolate_pilot(est, config, manifest, store, engine, full_in, dry, result.version, clocks, draws, weights)
    return est


def _kinds(strata: dict[str, str], picks: set[str]) -> dict[str, dict[str, int]]:
    """Per kind of item: how many the input holds and how many the pilot took."""
    out: dict[str, dict[str, int]] = {}
    for i, kind in strata.items():
        cell = out.setdefault(kind, {"items": 0, "pilot": 0})
        cell["items"] += 1
        cell["pilot"] += i in picks
    return dict(sorted(out.items()))


def _costs(manifest: dict[str, Any]) -> tuple[dict[str, float], bool]:
    costs: dict[str, float] = {}
    priced = False
    for row in (manifest.get("accounting") or {}).get("rows") or []:
        if row.get("cost") is not None:
            priced = True
            costs[str(row.get("stage"))] = costs.get(str(row.get("stage")), 0.0) + float(row["cost"])
    return costs, priced


def extrapolate_pilot(est: Estimate, config: PipelineConfig, manifest: dict[str, Any], store: RunStore,
                      engine: TimedEngine, full_in: dict[str, int], dry: dict[str, dict[str, int]],
                      version: Any, clocks: Clocks | None = None, draws: dict[str, Draw] | None = None,
                      weights: dict[str, dict[str, float]] | None = None) -> None:
    """Fill ``est.stages`` and ``est.total`` from the pilot's manifest, store and per-item counts
    (``draws``: the stages whose declared share the pilot raised, :mod:`fabrika.pipeline.estimate_draws`;
    ``weights``: per cut stage, its pilot items' stratum weights, :func:`stratum_weights`)."""
    info_of = manifest.get("stages") or {}
    costs, priced = _costs(manifest)
    rows_fig: dict[str, Figure] = {}
    ok_fig: dict[str, Figure] = {}
    items_fig: dict[str, Figure] = {}
    pilot_ok: dict[str, int] = {}
    pilot_n: dict[str, int] = {}
    exact: dict[str, bool] = {}
    #: the pilot's items of the stage are among the full run's (same ids): the finite-population correction holds
    subset: dict[str, bool] = {}
    for s in execution_order(config):
        name, cls = s.stage_name, STAGES[s.kind]
        info = info_of.get(name, {})
        n = pilot_n[name] = int(info.get("seen") or 0)
        ins = [u for u in inputs_of(s) if u in ok_fig]
        # ---- the stage's full input: known, made by the stage itself, or predicted from its inputs' rows
        own = _own_count(config, s) if _own_items(s) else None
        if name in full_in:
            items, is_exact = Figure(float(full_in[name])), n >= full_in[name]
            sub = True
        elif own is not None:  # slots: the count is known, what they draw from upstream may not be
            is_exact = n >= own and all(exact[u] for u in ins)
            items, sub = Figure(float(own)), is_exact
        elif not ins:
            items, is_exact, sub = Figure(float(n)), True, True
        else:
            pilot_up = sum(pilot_ok[u] for u in ins)  # it reads their gated ok rows: the pilot's share of them
            share = n / pilot_up if pilot_up else 0.0
            is_exact = all(exact[u] for u in ins)
            sub = not cls.global_stage and all(subset[u] for u in ins)
            up = sum((ok_fig[u] for u in ins), Figure(0.0))
            var = 0.0 if is_exact else _input_share_variance(store, config, ins, share, exact, subset, pilot_n,
                                                             items_fig)
            items = times_share(up, share, var)
        if s.max_items is not None and items.point > s.max_items:
            items = Figure(float(s.max_items))
        items_fig[name], subset[name] = items, sub or is_exact
        scale = items.point / n if n else 1.0
        # ---- requests, tokens, rows
        llm = info.get("llm") or {}
        pilot_req = int(llm.get("requests") or 0)
        pilot_ptok, pilot_ctok = int(llm.get("prompt_tokens") or 0), int(llm.get("completion_tokens") or 0)
        per_item, all_rows, ok_rows = rows_per_item(store, name)
        pilot_ok[name] = ok_rows
        ids = dry.get(name)
        wts = (weights or {}).get(name) or {}
        if cls.global_stage:
            req = Figure(pilot_req * scale, 0.0 if is_exact else (0.1 * pilot_req * scale) ** 2)
            ptok, ctok = Figure(pilot_ptok * scale), Figure(pilot_ctok * scale)
            rows = ratio_figure(all_rows, n, items) if n else Figure(float(all_rows))
            ok = ratio_figure(ok_rows, n, items) if n else Figure(float(ok_rows))
        elif ids is not None:  # requests counted without the LLM; rows fitted on them per item
            pilot_ids = list(per_item) or list(ids)[:n]
            dry_pilot = sum(ids.get(i, 0) for i in pilot_ids)
            x_total = float(sum(ids.values()))
            req = Figure(x_total * (pilot_req / dry_pilot if dry_pilot else 0.0))
            f = min(1.0, n / items.point) if items.point and subset[name] else 0.0
            ptok, ctok = (_tokens_per_request(engine, name, j, req.point, total, pilot_req, f)
                          for j, total in ((1, pilot_ptok), (2, pilot_ctok)))
            xs = [float(ids.get(i, 0)) for i in pilot_ids]
            ws = [wts.get(i, 1.0) for i in pilot_ids]
            rows, ok = (extrapolate_fit(fit_line(xs, [float(per_item.get(i, (0, 0))[j]) for i in pilot_ids], ws),
                                        round(items.point), x_total) for j in (0, 1))
        else:
            mreq, mptok, mctok = engine.moments(name, n, wts)
            if not mreq.total and pilot_req:  # requests made outside items: no per-item spread known
                mreq, mptok, mctok = (Moments(n, float(v), float(v) ** 2 / max(1, n))
                                      for v in (pilot_req, pilot_ptok, pilot_ctok))
            sub = subset[name]
            req, ptok, ctok = (extrapolate(m, items, sub) for m in (mreq, mptok, mctok))
            if per_item:
                rows, ok = (extrapolate(Moments.of([float(v[j]) * wts.get(k, 1.0) for k, v in per_item.items()], n),
                                        items, sub) for j in (0, 1))
            else:
                rows, ok = Figure(all_rows * scale), Figure(ok_rows * scale)
        if is_exact:  # ran in full on exact inputs: the pilot's own figures
            req, ptok, ctok, rows, ok = (Figure(float(v)) for v in (pilot_req, pilot_ptok, pilot_ctok, all_rows,
                                                                     ok_rows))
        draw = (draws or {}).get(name)
        if draw is not None and not is_exact:  # the pilot drew more than the config does: weighed back
            full_draws = drawn_rows(store, name) * scale * draw.weight
            req, ptok, ctok, ok = (reweigh(fig, draw, full_draws) for fig in (req, ptok, ctok, ok))
        exact[name] = is_exact
        rows_fig[name], ok_fig[name] = rows, ok
        fixed, own_s = split_fixed((clocks or {}).get(name), float(info.get("seconds") or 0.0), cls.global_stage)
        est.stages[name] = _entry(config, s, info, engine, n, items, req, ptok, ctok, rows, ok, costs, priced,
                                  is_exact, est.sim, fixed, own_s)
        cpu = getattr((clocks or {}).get(name), "cpu", None)
        # the process's CPU while the stage ran in the pilot, beside its seconds (diagnostic: not yet in the model)
        est.stages[name]["pilot_cpu_seconds"] = None if cpu is None else round(cpu, 2)
    _totals(est, config, store, version, ok_fig, pilot_ok, exact, subset, pilot_n, items_fig, priced)
    est.assumptions = assumptions(config, est, above=[n for n, e in est.stages.items() if e["exact"]
                                                      and n not in full_in], priced=priced)


def _upstream_f(name: str, subset: dict[str, bool], pilot_n: dict[str, int], items_fig: dict[str, Figure]) -> float:
    """The share of ``name``'s full-run items its pilot saw (0 when they are not the same items)."""
    full = items_fig[name].point
    return min(1.0, pilot_n[name] / full) if subset[name] and full > 0 else 0.0


def _input_share_variance(store: RunStore, config: PipelineConfig, ins: list[str], share: float,
                          exact: dict[str, bool], subset: dict[str, bool], pilot_n: dict[str, int],
                          items_fig: dict[str, Figure]) -> float:
    """Variance of the share of its inputs' ok rows a stage read in the pilot (the gates between them),
    over the inexact inputs' items (:mod:`fabrika.pipeline.estimate_shares`)."""
    per: dict[str, tuple[float, float]] = {}
    kept = seen = 0.0
    f = 1.0
    for u in ins:
        if exact[u]:
            continue
        per_u, ok_u, kept_u = gated_per_item(store, u, config.filters)
        kept, seen = kept + kept_u, seen + ok_u
        f = min(f, _upstream_f(u, subset, pilot_n, items_fig))
        if per_u is not None:
            per.update({f"{u}/{k}": v for k, v in per_u.items()})
    return share_variance(per or None, kept, seen, share, f)


def _tokens_per_request(engine: TimedEngine, name: str, j: int, requests: float, pilot_total: int,
                        pilot_req: int, f: float) -> Figure:
    """Tokens of a stage whose requests were counted: tokens per request of the pilot (a ratio over its items,
    with that ratio's error) times the counted requests."""
    if not pilot_req:
        return Figure(0.0)
    pairs = [(float(c[0]), float(c[j])) for c in engine.per_item.get(name, {}).values()]
    return Figure(requests * pilot_total / pilot_req, requests ** 2 * ratio_var(pairs, f))


def _entry(config: PipelineConfig, s: StageConfig, info: dict[str, Any], engine: TimedEngine, n: int,
           items: Figure, req: Figure, ptok: Figure, ctok: Figure, rows: Figure, ok: Figure,
           costs: dict[str, float], priced: bool, is_exact: bool, sim: bool, fixed: float = 0.0,
           own_seconds: float | None = None) -> dict[str, Any]:
    """One stage's line of the estimate: points (the old keys) and ``range``."""
    name = s.stage_name
    pilot_req = int((info.get("llm") or {}).get("requests") or 0)
    scale = items.point / n if n else 1.0
    req_scale = req.point / pilot_req if pilot_req else scale
    latency = _mean(engine.latency.get(name) or [])
    item_slots, request_slots = _concurrency(config, s)
    # the stage's own seconds in the pilot (less its warm re-run, :mod:`fabrika.pipeline.estimate_time`)
    pilot_seconds = float(info.get("seconds") or 0.0) if own_seconds is None else own_seconds
    if is_exact:
        seconds = pilot_seconds
    elif sim or pilot_req == 0:  # CPU-bound: the part per item scales with the requests (or the items)
        seconds = full_seconds(pilot_seconds, fixed, req_scale)
    else:
        seconds = stage_seconds(items.point, req.point, latency, n, pilot_req, item_slots, request_slots,
                                pilot_seconds, STAGES[s.kind].global_stage, fixed)
    rel = req.sd / req.point if req.point else (items.sd / items.point if items.point else 0.0)
    secs = Figure(seconds, (rel * max(0.0, seconds - fixed)) ** 2)
    return {
        "scale": round(scale, 4), "pilot_items": n, "items": round(items.point),
        "pilot_requests": pilot_req, "requests": round(req.point),
        "prompt_tokens": round(ptok.point), "completion_tokens": round(ctok.point),
        "cost": round(costs[name] * req_scale, 4) if name in costs else (0.0 if priced else None),
        "latency_ms": round(latency * 1000, 1), "item_slots": item_slots, "request_slots": request_slots,
        "seconds": round(seconds, 2), "fixed_seconds": round(fixed, 2),
        "rows": round(rows.point), "ok_rows": round(ok.point), "exact": is_exact,
        "range": {"items": items.as_dict(is_exact), "requests": req.as_dict(is_exact),
                  "prompt_tokens": ptok.as_dict(is_exact), "completion_tokens": ctok.as_dict(is_exact),
                  "rows": rows.as_dict(is_exact), "ok_rows": ok.as_dict(is_exact),
                  "seconds": {"point": round(seconds, 2), "low": round(secs.low(TIME_MARGIN), 2),
                              "high": round(secs.high(TIME_MARGIN), 2)}},
    }


def _totals(est: Estimate, config: PipelineConfig, store: RunStore, version: Any, ok_fig: dict[str, Figure],
            pilot_ok: dict[str, int], exact: dict[str, bool], subset: dict[str, bool], pilot_n: dict[str, int],
            items_fig: dict[str, Figure], priced: bool) -> None:
    stages = est.stages
    total: dict[str, Any] = {}
    ranges: dict[str, dict[str, float]] = {}
    for key in ("requests", "prompt_tokens", "completion_tokens", "seconds"):
        value = sum(e[key] for e in stages.values())
        total[key] = round(value, 2) if key == "seconds" else round(value)
        # the stages' errors are correlated through their shared inputs: the total's range is the sum of theirs
        ranges[key] = {b: round(sum(e["range"][key][b] for e in stages.values()), 1) for b in ("point", "low", "high")}
    overhead = float(est.pilot.get("overhead_seconds") or 0.0)  # outside the stages, paid once
    pad = {"point": overhead, "low": overhead * (1 - TIME_MARGIN), "high": overhead * (1 + TIME_MARGIN)}
    # "seconds_sum": the stages one after another (as the pilot ran them); "seconds": the run's wall time,
    # the stages laid out by the runner's scheduling rules (:mod:`fabrika.pipeline.estimate_schedule`)
    total["seconds_sum"] = round(total["seconds"] + overhead, 2)
    ranges["seconds_sum"] = {b: round(sum(e["range"]["seconds"][b] for e in stages.values()) + pad[b], 1)
                             for b in ("point", "low", "high")}  # unrounded sums: the same inputs as the wall's
    walls, plan = wall_seconds(config, stages, est.sim)
    total["seconds"] = round(walls["point"] + overhead, 2)
    ranges["seconds"] = {b: round(walls[b] + pad[b], 1) for b in ("point", "low", "high")}
    total["schedule"] = plan
    total["cost"] = round(sum(e["cost"] or 0.0 for e in stages.values()), 4) if priced else None
    total["hours"] = round(total["seconds"] / 3600, 3)
    gates = dict((version.funnel or {}).get("gates") or {}) if version is not None else {}
    by_stage: dict[str, dict[str, float]] = {}
    point = low = high = 0.0
    for name in config.dataset.stages:
        g = gates.get(name) or {}
        kept, seen = int(g.get("out") or 0), pilot_ok.get(name, 0)
        # the version keeps "out" of the stage's ok rows in the pilot (rejections never reach it), a share
        # measured on the pilot's items with its own error
        share = kept / seen if seen else 0.0
        var = 0.0
        if seen and not exact.get(name, False) and version is not None:
            var = share_variance(version_per_item(store, Path(version.path), name), kept, seen, share,
                                 _upstream_f(name, subset, pilot_n, items_fig))
        d = times_share(ok_fig.get(name, Figure(0.0)), share, var).as_dict(exact.get(name, False))
        by_stage[name] = d
        point, low, high = point + d["point"], low + d["low"], high + d["high"]
    rows = version.rows if version is not None else 0
    cuts = est.pilot["cut_stages"]
    pilot_in = sum(int(stages[c]["pilot_items"]) for c in cuts if c in stages)
    full_total_in = sum(est.pilot["full_inputs"].values())
    total.update({"pilot_dataset_rows": rows, "dataset_rows": round(point),
                  "yield_per_input": round(point / full_total_in, 4) if full_total_in else 0.0,
                  "pilot_yield_per_input": round(rows / pilot_in, 4) if pilot_in else 0.0,
                  "inputs": full_total_in, "dataset_rows_by_stage": by_stage})
    ranges["dataset_rows"] = {"point": round(point, 1), "low": round(low, 1), "high": round(high, 1)}
    total["range"] = ranges
    est.total = total


def stage_pools(config: PipelineConfig, sim: bool) -> dict[str, str]:
    """Where each stage's time goes in a real run (:data:`fabrika.pipeline.estimate_schedule.POOLS`)."""
    out = {}
    for s in config.stages:
        cls = STAGES[s.kind]
        if getattr(cls, "uses_sandbox", False) and not cls.calls_llm:
            out[s.stage_name] = "workers"  # LLM-written code in sandbox worker processes
        elif cls.calls_llm and not cls.global_stage and (config.llm_workers > 1 or config.executor == "ray"):
            out[s.stage_name] = "workers" if sim else "wait"  # its items run in worker processes
        elif sim or not cls.calls_llm:
            out[s.stage_name] = "driver"  # CPU in this process (the sim answers in-process)
        else:
            out[s.stage_name] = "wait"  # waits on the endpoint
    return out


def wall_seconds(config: PipelineConfig, stages: dict[str, dict[str, Any]], sim: bool,
                 cores: int | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """The run's wall time (point, low, high) from the stages' predicted seconds, scheduled as the runner does
    (``max_parallel_stages``, ``overlap``, dependencies, the CPUs), and the plan behind the point."""
    deps = stage_dependencies(config)
    streams = streaming_inputs(config, list(config.stages))
    pools = stage_pools(config, sim)
    cores = cores or os.cpu_count() or 1
    walls: dict[str, float] = {}
    point: Schedule | None = None
    for bound in ("point", "low", "high"):
        jobs = [Job(n, float(e["range"]["seconds"][bound]), frozenset(deps.get(n, set()) & set(stages)),
                    streams.get(n) if streams.get(n) in stages else None, pools.get(n, "driver"))
                for n, e in stages.items()]
        sched = simulate(jobs, config.max_parallel_stages, cores)
        walls[bound] = sched.wall
        if bound == "point":
            point = sched
    assert point is not None
    plan = {"cores": cores, "max_parallel_stages": config.max_parallel_stages, "overlap": config.overlap,
            "streaming": {n: u for n, u in streams.items() if n in stages}, "resolution_s": TIME_RESOLUTION_S,
            "stages": {n: {"pool": pools.get(n, "driver"), "start": round(point.start[n], 2),
                           "end": round(point.end[n], 2)} for n in stages}}
    return walls, plan


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ancestors(deps: dict[str, set[str]], *names: str) -> set[str]:
    seen: set[str] = set()
    todo = [d for n in names for d in deps[n]]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(deps[n])
    return seen


def assumptions(config: PipelineConfig, est: Estimate, above: list[str], priced: bool) -> list[str]:
    out = []
    if est.sim:
        out.append("SIM BACKEND: requests and yield follow the pipeline's shape, but tokens, latency and refusals "
                   "are the sim's, not a real model's; run the estimate against your endpoint for real numbers")
    cut = ", ".join(f"{n} ({est.pilot['full_inputs'][n]} inputs)" for n in est.pilot["cut_stages"])
    share = f"{est.pilot['fraction']:.0%}" if est.pilot.get("fraction") else f"{est.pilot.get('items')} items"
    least = (f" (at least ceil({PILOT_FLOOR}·N/(N+{PILOT_FLOOR})) of N items, so a small input's pilot is its full "
             "run)" if est.pilot.get("fraction") else "")
    out.append(f"pilot: {share}{least} of the input of {cut}; each stage below "
               "scales with the rows its inputs are predicted to write, per item (requests, tokens, rows)")
    if est.pilot.get("strata"):
        out.append("sampled by kind of item, each kind in proportion to its share of the input (at least one each) "
                   "and weighed back to it: " + "; ".join(
                       f"{n}: " + ", ".join(f"{k or '-'} {c['pilot']}/{c['items']}" for k, c in kinds.items())
                       for n, kinds in est.pilot["strata"].items()))
    if est.pilot.get("run_in_full"):
        out.append(f"run in full, since a pilot would have been at least {FULL_SHARE:.0%} of their input: "
                   f"{', '.join(est.pilot['run_in_full'])}")
    if est.pilot.get("oversampled"):
        out.append("drawn by a declared share, so the pilot drew more and each figure but the rows is weighed back "
                   "by share / pilot share (the full run's own draw in the range): " + ", ".join(
                       f"{n} ({d['field']} {d['share']:g}, pilot {d['pilot_share']:g})"
                       for n, d in est.pilot["oversampled"].items()))
    if est.pilot.get("dry_counted"):
        out.append(f"requests counted exactly without the LLM: {', '.join(est.pilot['dry_counted'])}")
    if above:
        out.append(f"ran in full in the pilot, so exact: {', '.join(above)}")
    out.append(f"range: point ± ({Z:g} standard errors + {MARGIN:.0%}) per stage, summed over stages for the total; "
               "a standard error is widened to Student's t for the items it was measured on, and the shares the "
               "gates kept in the pilot carry their own error (over items, not rows); time ± a further "
               f"{TIME_MARGIN:.0%}. The pilot is a stride sample of the cut stages' items in their input order (per kind of "
               "item where the stage tells kinds apart), not a random one, and dedup usually removes more at scale")
    out.append("wall time: the pilot runs one stage at a time; each stage's seconds are a fixed part (up to the end "
               "of its first item, which runs alone: setup, model and pool loading; for a stage without LLM calls, "
               "what a warm re-run of a few of its items leaves over) paid once, plus the rest scaled "
               "(on sim by its requests; on an endpoint, calls within an item one after another at the measured "
               "mean latency, items in flight = max_in_flight, requests at once = the endpoints' max_concurrency); "
               "the total is the run's wall time: the stages laid out by the runner's rules (dependencies, "
               f"max_parallel_stages = {config.max_parallel_stages}, overlap = {str(config.overlap).lower()}) over "
               f"{est.total.get('schedule', {}).get('cores', '?')} cores (stages in this process share one core, "
               "sandbox workers use the others, stages waiting on an endpoint use none), plus the pilot's time "
               "outside its stages; the sum of the stages is shown beside it. A time point is right within "
               f"max(25%, {TIME_RESOLUTION_S:g} s): a run of a second or two is start-up and the box's load")
    if not priced:
        out.append("cost: no llm.price_per_1m for the model, so no cost")
    return out


def run_estimate(config: PipelineConfig, pilot: Pilot, work_dir: Path, config_name: str = "",
                 progress: bool = False, note: Note | None = None) -> Estimate:
    return asyncio.run(arun_estimate(config, pilot, work_dir, config_name, progress=progress, note=note))
