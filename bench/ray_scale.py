"""IF consistency (the sandbox-bound stage) with the local executor vs Ray with 1 and 2 workers.

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/ray_scale.py [--constraints 2000] [--rounds 2]``

``--stage filter.length|filter.language [--rows 20000]`` instead measures a cheap LLM-free scorer
(regex token estimate, lingua) over a prepared table of Russian prompts: local vs Ray with 1 and
2 workers, the stage's own seconds — whether shipping rows to actors pays for such a stage.
``--stage filter.dedup --rows 50000`` does the same for the global MinHash dedup: its signatures go
through ``ctx.map_cpu`` (in the driver locally, on the worker actors under Ray), LSH and union-find
stay in the driver; it prints the whole stage and the signatures phase.

1. Prepares once, on the offline ``sim`` backend: ``if.expand`` → ``if.dedup`` → ``if.verifiers``
   (k = 8) for the Russian constraints the sim library yields (~95 distinct), repeated under new ids up
   to ``--constraints`` rows (``replicate``: the CPU work per row is real, nothing is shared across rows).
2. Starts a local Ray cluster of 2 CPUs (127.0.0.1, no dashboard) once, before the first mode, and
   keeps it up for every mode, local ones included: it plays an existing cluster (as under
   ``ray job submit``), so its start is in no mode's time and its idle daemons run under all of them.
3. Each round runs every mode once, in an order rotated per round (load on a shared machine drifts;
   rotation spreads it over the modes); each run copies the prepared run directory without
   ``if_consistency`` and runs that stage:
   * ``local``    — executor: local, one sandbox worker process (the 1-CPU baseline)
   * ``local x2`` — executor: local, two sandbox worker processes (what one machine does today)
   * ``ray x1``   — executor: ray, 1 worker actor (num_cpus 1) with one sandbox process
   * ``ray x2``   — executor: ray, 2 worker actors with one sandbox process each
4. What is timed, the same for every mode: the stage's wall-clock seconds as the runner records them
   (``StageStats.seconds``, in the manifest): from the stage's start to its last row written. Local:
   the sandbox pool's start and every item. Ray: creating the worker actors (a process each, fabrika
   imported there; the run's pool of actors is started by its first worker stage, here this one),
   each actor's sandbox pool, shipping the rows, the workers' shard writes and ending the stage on
   each actor. Stopping the actors (and their sandbox pools) happens when the run ends, outside the
   stage (since the pool became one per run). Not timed anywhere: the Ray cluster's start and the
   preparation.
5. Prints the seconds of every run, the median per mode, the two goals on the medians — Ray overhead
   at one worker (``ray x1`` / ``local`` - 1, goal ≤ 15 %) and scaling (``ray x1`` / ``ray x2``, goal
   ≥ 1.7×) — the same ratios per round, the load average around each run, where the Ray-only time goes
   (actor start, per-batch round trip) and whether every run wrote the same rows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "fabrika" / "data" / "instruct" / "seeds_ru.jsonl"
MODES = [("local", "local", 1, 1), ("local x2", "local", 2, 1), ("ray x1", "ray", 1, 1), ("ray x2", "ray", 1, 2)]


def document(run_dir: Path, constraints: int, executor: str, sandbox_workers: int, ray_workers: int,
             batch_size: int = 32) -> dict:
    return {
        "name": "ray_scale", "seed": 0, "run_dir": str(run_dir), "executor": executor,
        "plugins": ["fabrika.generators.instruct"], "llm": {"backend": "sim", "model": "sim"},
        "sandbox": {"workers": sandbox_workers, "isolation": "auto"},
        "ray": {"workers": ray_workers, "num_cpus": 1, "batch_size": batch_size},
        "stages": [
            {"kind": "if.expand", "name": "if_expand", "library_seeds": True, "seed_files": [str(SEEDS)],
             "target_count": constraints, "candidates_per_request": 10},
            {"kind": "if.dedup", "name": "if_dedup", "input": "if_expand"},
            {"kind": "if.verifiers", "name": "if_verifiers", "input": "if_dedup", "k": 8},
            {"kind": "if.consistency", "name": "if_consistency", "input": "if_verifiers"},
        ],
    }


def replicate(base: Path, constraints: int) -> None:
    """The sim library holds fewer distinct constraints than the bench needs: repeat the ok
    ``if_verifiers`` rows under new ids until there are ``constraints`` (each copy is real sandbox work:
    its 8 functions run on its cases in freshly forked processes; nothing is cached across rows)."""
    from fabrika.store.run import RunStore
    from fabrika.store.shards import write_shard

    store = RunStore(base)
    frame = store.scan_raw("if_verifiers").collect()
    rows = frame.filter(pl.col("status") == "ok").to_dicts()
    out = frame.filter(pl.col("status") != "ok").to_dicts()  # kept: their inputs stay done
    copies = [{**r, "id": f"{r['id']}~{j}", "input_id": f"{r['input_id']}~{j}"}
              for j in range(1, -(-constraints // len(rows))) for r in rows]
    out += rows + copies[: max(0, constraints - len(rows))]
    shutil.rmtree(store.stage_dir("if_verifiers"))
    for i in range(0, len(out), 256):
        write_shard(store.stage_dir("if_verifiers"), out[i:i + 256])


def load(tmp: Path, name: str, doc: dict):
    from fabrika.pipeline.config import load_config

    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return load_config(path)


def ray_costs(tmp: Path, base: Path, constraints: int, batch_size: int) -> dict[str, float]:
    """The Ray-only parts of a Ray mode's time, measured on their own: starting one worker actor (a
    process, fabrika imported, the stage built) and its sandbox pool; and one batch sent to the actor vs
    the same batch processed by the same class in this process."""
    import ray

    from fabrika.ray.items import OWNER_FILE, ItemWorker, StageJob, readable_stages
    from fabrika.store.run import RunStore

    cfg = load(tmp, "costs", document(tmp / "costs", constraints, "ray", 1, 1, batch_size))
    stage = cfg.stage("if_consistency")
    job = StageJob(stage, "bench", 256, readable=readable_stages(cfg, "if_consistency"))
    rows = (RunStore(base).scan_raw("if_verifiers").collect().filter(pl.col("status") == "ok")
            .head(batch_size).to_dicts())
    batch = [(r["id"], r) for r in rows]
    out: dict[str, float] = {"batch_bytes": float(len(pickle.dumps(batch)))}
    for sub in ("remote", "local"):
        (tmp / "costs" / sub / "stages" / "if_consistency").mkdir(parents=True)
        (tmp / "costs" / sub / "stages" / "if_consistency" / OWNER_FILE).write_text("bench")
    t = time.perf_counter()
    actor = ray.remote(num_cpus=1)(ItemWorker).remote(cfg, str(tmp / "costs" / "remote"), "sim")
    ray.get(actor.pid.remote())
    out["actor_start_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ray.get(actor.process_batch.remote(job, 0, batch[:1]))  # the stage's setup (sandbox pool) + one item
    out["actor_setup_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ray.get(actor.process_batch.remote(job, 1, batch))
    out["remote_batch_s"] = time.perf_counter() - t
    ray.get(actor.close.remote())
    ray.kill(actor)
    worker = ItemWorker(cfg, str(tmp / "costs" / "local"), "sim")

    async def here() -> float:
        try:
            await worker.process_batch(job, 0, batch[:1])
            t = time.perf_counter()
            await worker.process_batch(job, 1, batch)
            return time.perf_counter() - t
        finally:
            await worker.close()

    out["local_batch_s"] = asyncio.run(here())
    return out


def run_mode(tmp: Path, base: Path, args: argparse.Namespace, mode: tuple, tag: str) -> tuple[float, Any, str]:
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store.run import RunStore

    label, executor, sandbox_workers, ray_workers = mode
    name = f"{label.replace(' ', '_')}-{tag}"
    run_dir = tmp / name
    shutil.copytree(base, run_dir)
    shutil.rmtree(run_dir / "stages" / "if_consistency", ignore_errors=True)
    cfg = load(tmp, name, document(run_dir, args.constraints, executor, sandbox_workers, ray_workers,
                                   args.batch_size))
    load_before = os.getloadavg()[0]
    result = run_pipeline(cfg, resume=True, progress=False, until=["if_consistency"])
    st = result.stats["if_consistency"]
    frame = RunStore(run_dir).scan_raw("if_consistency").collect()
    table = frame.select(sorted(frame.columns)).sort("id")
    note = (f"{st.processed} processed, isolation {st.report.get('sandbox_isolation')}, "
            f"load {load_before:.1f}→{os.getloadavg()[0]:.1f}")
    shutil.rmtree(run_dir, ignore_errors=True)
    return st.seconds, table, note


CHEAP_STAGES = {"filter.length": {}, "filter.language": {"text_field": "user", "languages": ["ru", "en"]},
                # a global stage: its per-text MinHash signatures go through ctx.map_cpu, LSH stays in the driver
                "filter.dedup": {"text_field": "user", "unit": None}}
CHEAP_MODES = [("local", "local", 1), ("ray x1", "ray", 1), ("ray x2", "ray", 2)]


def cheap_document(run_dir: Path, pool: Path, kind: str, executor: str, ray_workers: int, batch_size: int,
                   batch_seconds: float | None = None) -> dict:
    return {
        "name": "ray_cheap", "seed": 0, "run_dir": str(run_dir), "executor": executor,
        "llm": {"backend": "sim", "model": "sim"},
        "ray": {"workers": ray_workers, "num_cpus": 1, "batch_size": batch_size, "batch_seconds": batch_seconds},
        "stages": [{"kind": "general.prompts", "name": "pool", "path": str(pool)},
                   {"kind": kind, "name": "scored", "input": "pool", **CHEAP_STAGES[kind]}],
    }


def write_pool(path: Path, rows: int) -> None:
    """``rows`` distinct Russian prompts of ~3 sentences, built from the shipped demo pool."""
    import json

    records = [json.loads(line) for line in
               (ROOT / "fabrika" / "data" / "general" / "prompts_demo.jsonl").read_text(encoding="utf-8").splitlines()]
    demo = [r["prompt"] for r in records if isinstance(r.get("prompt"), str)]
    with path.open("w", encoding="utf-8") as fh:
        for i in range(rows):
            text = " ".join(demo[(i + j * 7) % len(demo)] for j in range(3))
            fh.write(json.dumps({"prompt": f"{text} (вариант {i})", "lang": "ru"}, ensure_ascii=False) + "\n")


def write_dedup_pool(path: Path, rows: int) -> None:
    """``rows`` Russian prompts for ``filter.dedup``: three demo prompts drawn at random (distinct texts) and,
    for about one in five, a near-duplicate next to it (punctuation, case, a greeting), as real pools have."""
    import json
    import random

    records = [json.loads(line) for line in
               (ROOT / "fabrika" / "data" / "general" / "prompts_demo.jsonl").read_text(encoding="utf-8").splitlines()]
    demo = [r["prompt"] for r in records if isinstance(r.get("prompt"), str)]
    rng = random.Random(0)
    texts: list[str] = []
    while len(texts) < rows:
        text = " ".join(rng.sample(demo, 3))
        texts.append(text)
        if rng.random() < 0.2:
            texts.append(rng.choice([text.rstrip(".!?") + "!", text.lower(), "Привет! " + text, text.replace(",", "")]))
    with path.open("w", encoding="utf-8") as fh:
        for text in texts[:rows]:
            fh.write(json.dumps({"prompt": text, "lang": "ru"}, ensure_ascii=False) + "\n")


def cheap_stage(args: argparse.Namespace) -> None:
    """``--stage filter.length|filter.language``: a cheap LLM-free scorer over ``--rows`` rows, local vs
    Ray x1 vs Ray x2 (rotated rounds, medians), the stage's seconds as the runner records them."""
    import ray

    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store.run import RunStore

    tmp = Path(tempfile.mkdtemp(prefix="ray_cheap-"))
    pool = tmp / "pool.jsonl"
    (write_dedup_pool if args.stage == "filter.dedup" else write_pool)(pool, args.rows)
    base = tmp / "base"
    run_pipeline(load(tmp, "prep", cheap_document(base, pool, args.stage, "local", 1, args.batch_size)),
                 resume=False, progress=False, until=["pool"])
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    grow = f"grown to ~{args.batch_seconds:g} s a batch" if args.batch_seconds else "fixed"
    print(f"{args.stage} over {args.rows} rows; {os.cpu_count()} CPUs; ray.batch_size {args.batch_size} ({grow})")
    seconds: dict[str, list[float]] = {m[0]: [] for m in CHEAP_MODES}
    tables = []
    for r in range(args.rounds):
        for label, executor, workers in CHEAP_MODES[r % 3:] + CHEAP_MODES[:r % 3]:
            run_dir = tmp / f"{label.replace(' ', '_')}-{r}"
            shutil.copytree(base, run_dir)
            cfg = load(tmp, run_dir.name, cheap_document(run_dir, pool, args.stage, executor, workers,
                                                         args.batch_size, args.batch_seconds or None))
            result = run_pipeline(cfg, resume=True, progress=False)
            st = result.stats["scored"]
            seconds[label].append(st.seconds)
            frame = RunStore(run_dir).scan_raw("scored").collect()
            tables.append(frame.select(sorted(frame.columns)).sort("id"))
            mapped = st.report.get("cpu_map", {}).get("minhash signatures", {})  # filter.dedup's map_cpu facts
            # the run's actors, started by this stage (a per-item stage's batches, or a global stage's map)
            start = float(st.report.get("ray_pool_start_s", mapped.get("ray_pool_start_s", 0.0)))
            seconds[f"{label} (pool started)"] = seconds.get(f"{label} (pool started)", []) + [st.seconds - start]
            rows = st.processed or int(mapped.get("items", 0)) or args.rows
            sizes = st.report.get("ray_batch_rows", {})
            where = st.report.get("executor", "local")
            if mapped:
                sig = float(mapped["seconds"]) - start
                seconds[f"{label} signatures"] = seconds.get(f"{label} signatures", []) + [sig]
                where = (f"signatures on {mapped['on']} {sig:.2f}s"
                         + (f" in {mapped['chunks']} chunks over {mapped['worker_processes']} process(es), "
                            f"{mapped['worker_seconds']:.2f}s of worker time" if "chunks" in mapped else ""))
            print(f"round {r + 1}  {label:7s} {st.seconds:7.2f}s  {rows / st.seconds:8.0f} rows/s  "
                  f"(of which starting the worker actors {start:.2f}s; {where}"
                  + (f"; {sizes['batches']} batches, up to {sizes['max']} rows" if sizes else "")
                  + f"; load {os.getloadavg()[0]:.1f})", flush=True)
            shutil.rmtree(run_dir, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in seconds.items()}
    print("\nmedian stage seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items() if "(" not in k))
    print(f"ray x1 / local: {med['ray x1'] / med['local']:.2f}x, ray x2 / local: {med['ray x2'] / med['local']:.2f}x "
          "(stage seconds, the run's worker actors started by this stage)")
    warm_x1, warm_x2 = med["ray x1 (pool started)"], med["ray x2 (pool started)"]
    print(f"without the actors' start (a pool already up, as for every worker-run stage after the first): "
          f"ray x1 / local {warm_x1 / med['local']:.2f}x, ray x2 / local {warm_x2 / med['local']:.2f}x")
    if "local signatures" in med:
        sig = {m[0]: med[f"{m[0]} signatures"] for m in CHEAP_MODES}
        print("median signature seconds (the map_cpu part, actor start excluded): "
              + ", ".join(f"{k} {v:.2f}" for k, v in sig.items())
              + f"; ray x1 / local {sig['ray x1'] / sig['local']:.2f}x, ray x2 / local {sig['ray x2'] / sig['local']:.2f}x")
    print(f"same rows in every run: {all(t.equals(tables[0]) for t in tables)}")
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--constraints", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2, help="Runs of every mode (rotated order); medians are reported.")
    ap.add_argument("--batch-size", type=int, default=32, help="ray.batch_size: items per Ray task (one shard).")
    ap.add_argument("--keep", type=Path, default=None, help="Keep the prepared run here (reused when present).")
    ap.add_argument("--stage", choices=sorted(CHEAP_STAGES), default=None,
                    help="Instead: a cheap LLM-free scorer over --rows rows, local vs ray x1 vs ray x2.")
    ap.add_argument("--rows", type=int, default=20000, help="Rows for --stage.")
    ap.add_argument("--batch-seconds", type=float, default=0.0,
                    help="ray.batch_seconds for --stage (0: fixed batches of --batch-size).")
    args = ap.parse_args()
    if args.stage:
        cheap_stage(args)
        return

    import ray

    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store.run import RunStore

    tmp = Path(tempfile.mkdtemp(prefix="ray_scale-"))
    base = args.keep or tmp / "base"
    if not (base / "stages" / "if_verifiers").is_dir():
        t0 = time.perf_counter()
        cfg = load(tmp, "prep", document(base, args.constraints, "local", 2, 1))
        run_pipeline(cfg, resume=False, progress=False, until=["if_verifiers"])
        print(f"prepared if_verifiers in {time.perf_counter() - t0:.1f}s")
        replicate(base, args.constraints)
    ok = RunStore(base).scan_raw("if_verifiers").collect().filter(pl.col("status") == "ok")
    print(f"if_verifiers: {ok.height} constraints with verifier answers (k=8); {os.cpu_count()} CPUs; "
          f"ray.batch_size {args.batch_size}")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)

    seconds: dict[str, list[float]] = {m[0]: [] for m in MODES}
    tables: dict[str, Any] = {}
    for r in range(args.rounds):
        order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
        for mode in order:
            secs, table, note = run_mode(tmp, base, args, mode, str(r))
            seconds[mode[0]].append(secs)
            tables[f"{mode[0]} #{r}"] = table
            print(f"round {r + 1}  {mode[0]:9s} {secs:8.1f}s  {ok.height / secs:7.1f} constraints/s  ({note})",
                  flush=True)
        print(f"round {r + 1}: ray x1 overhead {seconds['ray x1'][-1] / seconds['local'][-1] - 1:+.1%}, "
              f"ray x2 speed-up {seconds['ray x1'][-1] / seconds['ray x2'][-1]:.2f}x", flush=True)
    med = {k: statistics.median(v) for k, v in seconds.items()}
    print("\nmedian stage seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    overhead = med["ray x1"] / med["local"] - 1
    scaling = med["ray x1"] / med["ray x2"]
    print(f"ray x1 overhead vs local: {overhead:+.1%} (goal <= 15%)  {'MET' if overhead <= 0.15 else 'MISSED'}")
    print(f"ray x2 speed-up vs ray x1: {scaling:.2f}x (goal >= 1.7x)  {'MET' if scaling >= 1.7 else 'MISSED'}")
    print(f"local x2 speed-up vs local: {med['local'] / med['local x2']:.2f}x")
    costs = ray_costs(tmp, base, args.constraints, args.batch_size)
    print(f"Ray-only costs: actor start {costs['actor_start_s']:.2f}s, its sandbox pool + first item "
          f"{costs['actor_setup_s']:.2f}s (per actor, once per run); a batch of {args.batch_size} rows "
          f"({costs['batch_bytes'] / 1024:.0f} KiB pickled) {costs['remote_batch_s']:.2f}s on the actor vs "
          f"{costs['local_batch_s']:.2f}s in this process")
    reference = next(iter(tables.values()))
    print(f"same rows in every run: {all(t.equals(reference) for t in tables.values())}")
    ray.shutdown()
    if args.keep is None:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
