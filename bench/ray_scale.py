"""IF consistency (the sandbox-bound stage) with the local executor vs Ray with 1 and 2 workers.

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/ray_scale.py [--constraints 2000]``

1. Prepares once, on the offline ``sim`` backend: ``if.expand`` → ``if.dedup`` → ``if.verifiers``
   (k = 8) for the Russian constraints the sim library yields (~95 distinct), repeated under new ids up
   to ``--constraints`` rows (``replicate``: the CPU work per row is real, nothing is shared across rows).
2. For each mode, copies that run directory without ``if_consistency`` and runs the stage:
   every constraint's 8 verifiers on all its cases, a fresh forked process per verifier batch.
   * ``local``    — executor: local, one sandbox worker process (the 1-CPU baseline)
   * ``local x2`` — executor: local, two sandbox worker processes (what one machine does today)
   * ``ray x1``   — executor: ray, 1 worker actor (num_cpus 1) with one sandbox process
   * ``ray x2``   — executor: ray, 2 worker actors with one sandbox process each
   The Ray times include starting the actors and their sandbox pools (a local cluster of
   2 CPUs is started once, before the first Ray mode).
3. Prints seconds of the stage, constraints/s and the two goals: Ray overhead at one worker
   (``ray x1`` / ``local`` - 1, goal ≤ 15 %) and scaling (``ray x1`` / ``ray x2``, goal ≥ 1.7×);
   and checks every mode wrote the same rows.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "fabrika" / "data" / "instruct" / "seeds_ru.jsonl"


def document(run_dir: Path, constraints: int, executor: str, sandbox_workers: int, ray_workers: int) -> dict:
    return {
        "name": "ray_scale", "seed": 0, "run_dir": str(run_dir), "executor": executor,
        "plugins": ["fabrika.generators.instruct"], "llm": {"backend": "sim", "model": "sim"},
        "sandbox": {"workers": sandbox_workers, "isolation": "auto"},
        "ray": {"workers": ray_workers, "num_cpus": 1, "batch_size": 32},
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--constraints", type=int, default=2000)
    ap.add_argument("--keep", type=Path, default=None, help="Keep the prepared run here (reused when present).")
    args = ap.parse_args()

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
    print(f"if_verifiers: {ok.height} constraints with verifier answers (k=8)")

    modes = [("local", "local", 1, 1), ("local x2", "local", 2, 1), ("ray x1", "ray", 1, 1), ("ray x2", "ray", 1, 2)]
    seconds: dict[str, float] = {}
    tables = {}
    for label, executor, sandbox_workers, ray_workers in modes:
        if executor == "ray":
            import ray

            if not ray.is_initialized():
                ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
        run_dir = tmp / label.replace(" ", "_")
        shutil.copytree(base, run_dir)
        shutil.rmtree(run_dir / "stages" / "if_consistency", ignore_errors=True)
        cfg = load(tmp, label.replace(" ", "_"), document(run_dir, args.constraints, executor, sandbox_workers,
                                                          ray_workers))
        result = run_pipeline(cfg, resume=True, progress=False, until=["if_consistency"])
        st = result.stats["if_consistency"]
        seconds[label] = st.seconds
        frame = RunStore(run_dir).scan_raw("if_consistency").collect()
        tables[label] = frame.select(sorted(frame.columns)).sort("id")
        print(f"{label:9s} {st.seconds:8.1f}s  {st.processed / st.seconds:7.1f} constraints/s  "
              f"({st.processed} processed, isolation {st.report.get('sandbox_isolation')})", flush=True)
    same = all(t.equals(tables["local"]) for t in tables.values())
    overhead = seconds["ray x1"] / seconds["local"] - 1
    scaling = seconds["ray x1"] / seconds["ray x2"]
    print(f"ray x1 overhead vs local: {overhead:+.1%} (goal <= 15%)  {'MET' if overhead <= 0.15 else 'MISSED'}")
    print(f"ray x2 speed-up vs ray x1: {scaling:.2f}x (goal >= 1.7x)  {'MET' if scaling >= 1.7 else 'MISSED'}")
    print(f"local x2 speed-up vs local: {seconds['local'] / seconds['local x2']:.2f}x")
    print(f"same rows in every mode: {same}")
    if args.keep is None:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
