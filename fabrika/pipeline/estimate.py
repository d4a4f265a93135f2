"""``fabrika estimate CONFIG``: what a full run will take, extrapolated from a pilot run.

The pilot runs the whole pipeline on the configured backend, in a scratch run
directory with its own cache, but cuts the *first per-item stages* (those with no
per-item stage above them) to a fraction (``--pilot 0.2``) or a count
(``--pilot 50``) of their input. Everything below them follows naturally. Then,
per stage, the pilot's LLM requests, tokens and cost are scaled by how much of
its input the pilot saw (a stage inherits the largest scale of its cut
ancestors). Wall time uses the measured mean latency per request and the
configured concurrency, see :func:`stage_seconds`. Yield is dataset rows per
input item of the cut stages.

What this cannot know is listed in the estimate's ``assumptions``: outputs scale
linearly with inputs (dedup may remove more at scale), global stages above the
cut run in full in the pilot and are counted once, the sim backend's numbers say
nothing about a real model's lengths or refusals.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fabrika.errors import StoreError
from fabrika.gates import gate_lazy
from fabrika.pipeline.config import PipelineConfig, config_hash, execution_order, inputs_of, stage_dependencies
from fabrika.pipeline.lifecycle import build_engine_for
from fabrika.pipeline.stage import STAGES, StageConfig
from fabrika.store import RunStore

#: Marks a directory as an estimate's scratch run (only such a directory is emptied).
MARKER = ".fabrika-estimate"


class TimedEngine:
    """Delegates to an engine and records the latency of each call per stage (``request.meta["stage"]``)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.latency: dict[str, list[float]] = {}

    def _record(self, requests: Any, seconds: float) -> None:
        for r in requests:
            self.latency.setdefault(str(r.meta.get("stage", "?")), []).append(seconds)

    async def complete(self, requests: Any) -> Any:
        t = time.monotonic()
        out = await self._engine.complete(requests)
        self._record(requests, time.monotonic() - t)
        return out

    async def complete_one(self, request: Any) -> Any:
        t = time.monotonic()
        out = await self._engine.complete_one(request)
        self._record([request], time.monotonic() - t)
        return out

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
        if self.fraction is not None:
            return max(1, math.ceil(full * self.fraction))
        return min(full, self.items or full)


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


def cut_stages(config: PipelineConfig) -> list[str]:
    """Per-item stages with no per-item stage among their ancestors: where the pilot is cut."""
    deps = stage_dependencies(config)
    per_item = {s.stage_name for s in config.stages if not STAGES[s.kind].global_stage}
    return [s.stage_name for s in execution_order(config)
            if s.stage_name in per_item and not (_ancestors(deps, s.stage_name) & per_item)]


def _source_count(config: PipelineConfig, cfg: StageConfig) -> int:
    """Items a source stage would read (its ``input_rows`` need only the pipeline)."""
    ctx = SimpleNamespace(pipeline=config, seed=config.seed, llm=None, run_dir=config.resolved_run_dir,
                          backend_name="estimate")
    n = sum(1 for _ in STAGES[cfg.kind](cfg, ctx).input_rows())
    return n if cfg.max_items is None else min(n, cfg.max_items)


def _input_count(store: RunStore, config: PipelineConfig, cfg: StageConfig) -> int:
    filters = config.filters
    total = 0
    for src in inputs_of(cfg):
        total += store.count_rows(src, store.annotators_of(src), lambda lf: gate_lazy(lf, filters))
    return total if cfg.max_items is None else min(total, cfg.max_items)


def _with_stage_updates(config: PipelineConfig, updates: dict[str, dict[str, Any]], run_dir: Path) -> PipelineConfig:
    stages = [s.model_copy(update=updates.get(s.stage_name, {})) for s in config.stages]
    llm = config.llm
    if llm.cache.path is not None:  # the pilot must not read a real run's cache
        llm = llm.model_copy(update={"cache": llm.cache.model_copy(update={"path": run_dir / "cache.sqlite"})})
    return config.model_copy(update={"stages": stages, "run_dir": run_dir, "llm": llm})


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
                  item_slots: int, request_slots: int | None, pilot_seconds: float, global_stage: bool) -> float:
    """Wall time of one stage at full size.

    Per-item stages: an item makes ``pilot_requests / pilot_items`` calls, assumed one after
    another (dialogues are turn by turn), so an item takes ``calls × latency``; ``item_slots``
    items run at once, and the endpoints serve at most ``request_slots`` calls at once —
    the slower of the two bounds wins. Global and LLM-free stages scale their pilot time linearly.
    """
    if global_stage or pilot_requests == 0 or latency_s <= 0:
        return pilot_seconds * (items / pilot_items if pilot_items else 1.0)
    per_item = pilot_requests / max(1, pilot_items) * latency_s
    by_items = math.ceil(items / item_slots) * per_item
    by_requests = requests * latency_s / request_slots if request_slots else 0.0
    return max(by_items, by_requests)


async def arun_estimate(config: PipelineConfig, pilot: Pilot, work_dir: Path, config_name: str = "") -> Estimate:
    """Run the pilot in ``work_dir`` (emptied first) and extrapolate; see module docs."""
    from fabrika.pipeline.runner import arun_pipeline

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
    engine = TimedEngine(build_engine_for(base, work_dir, cache_only=False))
    try:
        full_in: dict[str, int] = {}
        above = sorted({d for c in cuts for d in deps[c]})
        first: dict[str, Any] = {}
        if above:  # global stages above the cut run in full first, so the cut stages' input can be counted
            first = (await arun_pipeline(base, resume=False, progress=False, engine=engine, until=above)).manifest
        elif work_dir.exists():
            RunStore(work_dir).reset()
        store = RunStore(work_dir)
        for name in cuts:
            cfg = by_name[name]
            full_in[name] = _source_count(config, cfg) if cfg.input is None else _input_count(store, base, cfg)
        updates = {name: {"max_items": pilot.size(n)} for name, n in full_in.items()}
        piloted = _with_stage_updates(config, updates, work_dir)
        if above:  # the cut changed only max_items: the scratch run resumes without a "config changed" warning
            manifest = store.read_manifest()
            manifest["config_hash"] = config_hash(piloted)
            store.write_manifest(manifest)
        result = await arun_pipeline(piloted, resume=True, progress=False, engine=engine)
    finally:
        if hasattr(engine, "aclose"):
            await engine.aclose()
    manifest = result.manifest
    for name, entry in (first.get("stages") or {}).items():  # the second invocation only resumed these
        manifest.setdefault("stages", {})[name] = entry
    backend = str(manifest.get("backend") or getattr(engine, "backend_name", "?"))
    scale: dict[str, float] = {}
    for s in execution_order(config):
        name = s.stage_name
        seen = int((manifest.get("stages") or {}).get(name, {}).get("seen") or 0)
        if name in full_in:
            scale[name] = full_in[name] / seen if seen else 1.0
        else:
            scale[name] = max((scale[d] for d in deps[name]), default=1.0)
    costs: dict[str, float] = {}
    priced = False
    for row in (manifest.get("accounting") or {}).get("rows") or []:
        if row.get("cost") is not None:
            priced = True
            costs[str(row.get("stage"))] = costs.get(str(row.get("stage")), 0.0) + float(row["cost"])
    est = Estimate(config=config_name, backend=backend,
                   pilot={"fraction": pilot.fraction, "items": pilot.items, "cut_stages": cuts,
                          "full_inputs": full_in, "work_dir": str(work_dir)})
    totals: dict[str, Any] = {"requests": 0.0, "prompt_tokens": 0.0, "completion_tokens": 0.0,
                              "cost": 0.0 if priced else None, "seconds": 0.0}
    for s in execution_order(config):
        name = s.stage_name
        info = (manifest.get("stages") or {}).get(name, {})
        llm = info.get("llm") or {}
        k = scale[name]
        lat = engine.latency.get(name) or []
        latency = sum(lat) / len(lat) if lat else 0.0
        items_slots, request_slots = _concurrency(config, s)
        seen = int(info.get("seen") or 0)
        requests = int(llm.get("requests") or 0)
        global_stage = STAGES[s.kind].global_stage
        factor = k
        seconds = stage_seconds(seen * factor, requests * factor, latency, seen, requests, items_slots,
                                request_slots, float(info.get("seconds") or 0.0), global_stage)
        entry = {
            "scale": round(factor, 4), "pilot_items": seen, "items": round(seen * factor),
            "pilot_requests": requests, "requests": round(requests * factor),
            "prompt_tokens": round(int(llm.get("prompt_tokens") or 0) * factor),
            "completion_tokens": round(int(llm.get("completion_tokens") or 0) * factor),
            "cost": round(costs[name] * factor, 4) if name in costs else (0.0 if priced else None),
            "latency_ms": round(latency * 1000, 1), "item_slots": items_slots, "request_slots": request_slots,
            "seconds": round(seconds, 2), "ok_rows": round(int(info.get("ok") or 0) * factor),
        }
        est.stages[name] = entry
        for key in ("requests", "prompt_tokens", "completion_tokens", "seconds"):
            totals[key] += entry[key]
        if priced and entry["cost"] is not None:
            totals["cost"] += entry["cost"]
    rows = result.version.rows if result.version is not None else 0
    pilot_in = sum(int((manifest.get("stages") or {}).get(c, {}).get("seen") or 0) for c in cuts)
    full_total_in = sum(full_in.values())
    yield_per_input = rows / pilot_in if pilot_in else 0.0
    counts = ("requests", "prompt_tokens", "completion_tokens")
    est.total = {**{k: (round(v) if k in counts else round(v, 4) if isinstance(v, float) else v)
                    for k, v in totals.items()},
                 "hours": round(totals["seconds"] / 3600, 3),
                 "pilot_dataset_rows": rows, "dataset_rows": round(yield_per_input * full_total_in),
                 "yield_per_input": round(yield_per_input, 4), "inputs": full_total_in}
    est.assumptions = assumptions(config, est, above=[n for n in est.stages if est.stages[n]["scale"] == 1.0
                                                      and n not in full_in], priced=priced)
    return est


def _ancestors(deps: dict[str, set[str]], name: str) -> set[str]:
    seen: set[str] = set()
    todo = list(deps[name])
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
    out.append(f"pilot: {share} of the input of {cut}; every stage below scales with it linearly")
    if above:
        out.append(f"ran in full in the pilot and counted once: {', '.join(above)}")
    out.append("rejection and dedup rates stay as in the pilot (dedup usually removes more at scale)")
    out.append("wall time: calls within an item one after another at the measured mean latency; items in flight "
               "= max_in_flight; requests at once = the endpoints' max_concurrency (llm.max_in_flight caps it); "
               "stages without LLM calls take their pilot time x scale (one-off setup such as loading a model "
               "is scaled too, so that is an upper bound); stages are summed as if they ran one after another")
    if not priced:
        out.append("cost: no llm.price_per_1m for the model, so no cost")
    return out


def run_estimate(config: PipelineConfig, pilot: Pilot, work_dir: Path, config_name: str = "") -> Estimate:
    return asyncio.run(arun_estimate(config, pilot, work_dir, config_name))
