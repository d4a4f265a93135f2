"""Bench: re-filter 300K scored rows with new thresholds — fabrika's store vs HF ``datasets.filter``.

Builds a temporary run directory with one dataset stage (300K FC sample rows as
parquet shards) and four annotating scorer stages (language, dedup, difficulty,
length scores), materialises ``v1`` with default thresholds, then times:

* fabrika: ``fabrika.materialise`` (the run's gate groups loaded, then ``store.versions``) with new thresholds (gate
  columns of the stage and its scorers aligned by id + polars gate predicates +
  funnel, then the kept rows' full payload and the dropped rows' ``id, dropped_by``
  written as parquet) — the ``fabrika refilter`` path; stage counts come from
  the manifest (recorded when ``v1`` was materialised) as in a real refilter;
* HF: the same joined rows as a ``datasets.Dataset`` (built beforehand, not
  timed), ``Dataset.filter`` with the same predicate — batched (the fast way)
  and per row (the default call) — then ``save_to_disk`` of the kept rows (``load_from_cache_file=False``: a repeat must not read the
  previous run's cached result).

Each variant runs ``--repeat`` times (default 3) and the median is reported.

Both must keep exactly the same ids. LLM calls are counted by patching the
engine's ``complete``: must stay 0. Goal: fabrika <= 2 s and >= 10x faster.

    .venv/bin/python bench/refilter.py [--rows 300000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from fabrika import gates
from fabrika.pipeline.versions import materialise
from fabrika.store import RunStore
from fabrika.store.versions import _decide

NEW = {"language": {"min_confidence": 0.9, "max_homoglyph_share": 0.05},
       # the band applies to the whole version here (by default it prunes GRPO exports only)
       "difficulty": {"min_pass_rate_exclusive": 0.1, "max_pass_rate": 0.7, "apply_to": ["sft", "grpo"]},
       "length": {"max_tokens": 600}, "dedup": {"keep_representatives_only": True}}


def build_run(root: Path, n: int, shards: int = 10) -> Path:
    rng = np.random.default_rng(0)
    ids = [f"{i:020x}" for i in range(n)]
    langs = np.where(rng.random(n) < 0.7, "en", "ru")
    types = rng.choice(["tool_call", "text", "clarification", "irrelevance"], size=n, p=[0.8, 0.1, 0.08, 0.02])
    prompt = json.dumps([{"role": "user", "content": "Какая погода в Казани завтра?"}], ensure_ascii=False)
    completion = json.dumps([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "name": "get_weather", "arguments": {"city": "Казань"}}]}], ensure_ascii=False)
    tools = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}])
    base = pl.DataFrame({"id": ids, "input_id": ids, "status": np.where(rng.random(n) < 0.97, "ok", "rejected"),
                         "reason": None, "llm_backend": "sim", "expert": "fc", "lang": langs, "target_type": types,
                         "prompt": prompt, "completion": completion, "tools": tools, "ground_truth": "{}",
                         "meta": "{}"}, schema_overrides={"reason": pl.String})
    scores = {
        "filter.language": {"lang_detected": langs, "lang_confidence": rng.random(n) * 0.3 + 0.7,
                            "lang_matches": rng.random(n) < 0.98, "homoglyph_share": rng.random(n) * 0.1},
        "filter.dedup": {"dup_cluster": ids, "dup_is_representative": rng.random(n) < 0.9},
        "filter.difficulty": {"difficulty_pass_rate": rng.integers(0, 9, n) / 8, "difficulty_k": 8},
        "filter.length": {"len_total_tokens": rng.integers(20, 900, n)},
    }
    run = root / "run"
    layout = {"fc.samples": {"inputs": [], "annotates": False}}
    step = -(-n // shards)
    for s in range(shards):
        part = slice(s * step, min(n, (s + 1) * step))
        d = run / "stages" / "fc.samples"
        d.mkdir(parents=True, exist_ok=True)
        base[part].write_parquet(d / f"part-{s:06d}-{s:08x}.parquet")
        for stage, cols in scores.items():
            frame = pl.DataFrame({"id": ids[part], "status": "ok", "reason": None,
                                  **{k: (v[part] if not isinstance(v, (int, str)) else v) for k, v in cols.items()}},
                                 schema_overrides={"reason": pl.String})
            (run / "stages" / stage).mkdir(parents=True, exist_ok=True)
            frame.write_parquet(run / "stages" / stage / f"part-{s:06d}-{s:08x}.parquet")
            layout[stage] = {"inputs": ["fc.samples"], "annotates": True}
    RunStore(run).write_manifest({"config": {"dataset": {"stages": ["fc.samples"]}, "filters": {}},
                                  "order": list(layout), "layout": layout})
    return run


def keep_batch(batch: dict) -> list[bool]:
    """The NEW thresholds as a Python predicate over a batch (what an HF user writes)."""
    out = []
    for st, conf, match, homo, rep, rate, toks in zip(
            batch["status"], batch["lang_confidence"], batch["lang_matches"], batch["homoglyph_share"],
            batch["dup_is_representative"], batch["difficulty_pass_rate"], batch["len_total_tokens"]):
        out.append(st == "ok" and conf >= 0.9 and match and homo <= 0.05 and rep and 0.1 < rate <= 0.7
                   and toks <= 600 and toks is not None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per variant; the median is reported")
    args = ap.parse_args()
    import datasets

    from fabrika.llm.engine import LLMEngine

    calls = {"n": 0}
    original = LLMEngine.complete

    async def counting(self, requests):  # noqa: ANN001, ANN202
        calls["n"] += len(requests)
        return await original(self, requests)

    LLMEngine.complete = counting  # type: ignore[method-assign]
    datasets.disable_progress_bars()
    root = Path(tempfile.mkdtemp(prefix="fabrika-bench-refilter-"))
    try:
        t0 = time.perf_counter()
        run = build_run(root, args.rows)
        v1 = materialise(run, name="v1")
        print(f"built run with {args.rows} rows + 4 scorers, v1 kept {v1.rows} ({time.perf_counter() - t0:.1f}s)")

        joined = RunStore(run).scan("fc.samples", ["filter.language", "filter.dedup", "filter.difficulty",
                                                   "filter.length"]).collect()
        ds = datasets.Dataset(joined.to_arrow())
        hf_dir = root / "hf"
        ds.save_to_disk(str(hf_dir / "all"))
        ds = datasets.load_from_disk(str(hf_dir / "all"))

        def timed(fn):  # noqa: ANN001, ANN202 - median of REPEAT runs: one run on a shared box is noise
            times, out = [], None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                out = fn()
                times.append(time.perf_counter() - t0)
            return statistics.median(times), out

        t_fab, v2 = timed(lambda: materialise(run, NEW, name="v2", previous="v1"))

        def decide():  # noqa: ANN202 - the decision materialise makes: gate columns only, no payload
            store = RunStore(run)
            params = gates.validate_thresholds(NEW)
            _, decided, reasons = _decide(store, "fc.samples", store.annotators_of("fc.samples"), NEW, params)
            gates.funnel_of(decided.lazy(), reasons)
            return set(decided.filter(pl.col(gates.DROPPED_BY).is_null())["id"].to_list())

        t_gates, gate_ids = timed(decide)

        def hf_batched():  # noqa: ANN202
            kept = ds.filter(keep_batch, batched=True, batch_size=10_000, load_from_cache_file=False)
            kept.save_to_disk(str(hf_dir / "kept"))
            return kept

        t_hf, kept = timed(hf_batched)

        def hf_row():  # noqa: ANN202
            kept_row = ds.filter(lambda r: keep_batch({k: [v] for k, v in r.items()})[0], load_from_cache_file=False)
            kept_row.save_to_disk(str(hf_dir / "kept_row"))
            return kept_row

        t_hf_row, kept_row = timed(hf_row)
        assert len(kept_row) == len(kept)

        fab_ids = set(pl.read_parquet(v2.path / "data" / "fc.samples.parquet", columns=["id"])["id"].to_list())
        hf_ids = set(kept["id"])
        assert fab_ids == hf_ids == gate_ids, f"kept sets differ: fabrika {len(fab_ids)} vs HF {len(hf_ids)}"
        print(f"refilter v1 -> v2: kept {v2.rows} of {args.rows}; funnel {v2.funnel['gates']['fc.samples']}")
        print(f"median of {args.repeat} runs each")
        print(f"fabrika materialise (funnel + kept rows with full payload + dropped ids): {t_fab:.2f} s")
        print(f"fabrika gate decision only (gate columns aligned + predicates + funnel): {t_gates:.2f} s")
        print(f"HF datasets.filter (batched) + save_to_disk: {t_hf:.2f} s")
        print(f"HF datasets.filter (per row, the default) + save_to_disk: {t_hf_row:.2f} s")
        print(f"speed-up materialise: {t_hf / t_fab:.1f}x vs batched, {t_hf_row / t_fab:.1f}x vs per-row")
        print(f"speed-up gate decision: {t_hf / t_gates:.1f}x vs batched, {t_hf_row / t_gates:.1f}x vs per-row")
        print(f"LLM calls: {calls['n']}")
        def verdict(ok: bool) -> str:
            return "OK" if ok else "MISSED"

        print(f"goals (materialise): <= 2 s {verdict(t_fab <= 2)}; >= 10x vs batched {verdict(t_hf / t_fab >= 10)}, "
              f"vs per-row {verdict(t_hf_row / t_fab >= 10)}; 0 LLM calls {verdict(calls['n'] == 0)}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
