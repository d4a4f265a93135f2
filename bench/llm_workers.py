"""Requests per second with 1 and 2 LLM workers (``llm_workers``) on the FC pipeline, same dataset.

The fake OpenAI server runs in its own process (``bench/fc_scale.py --serve``: every FC role answered
by the sim responders, a fixed latency). The FC pipeline of ``bench/fc_scale.py`` without its
``fc.tools_dedup`` (the fake server's tool sets of different topics are near-duplicates, so dedup would
keep about 1 % of them and leave a few hundred requests): fc.tools → fc.plans → fc.dialogues →
fc.samples → fc.irrelevance → fc.answer_judge, cache off, so every run really asks. It runs once
per worker count through ``fabrika run --llm-workers N``, each into a fresh run directory. Printed
per run: wall seconds, LLM requests, requests/s over the whole run and over the LLM stages' own
seconds, the CPU seconds the run's processes used (driver and workers, from ``RUSAGE_CHILDREN``), and
the dataset hash of ``bench/determinism.py``; then the speed-up and whether every hash is equal. The
box's load average is printed before and after (the box is shared: a loaded box caps what a second process can add).

    .venv/bin/python bench/llm_workers.py [--training-turns 3000] [--workers 1 2] [--latency-ms 20]
        [--concurrency 256]

Exit 0 when the datasets are identical, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from determinism import dataset_hash  # noqa: E402
from fc_scale import fc_bench_doc  # noqa: E402

LLM_STAGES = ("fc.tools", "fc.plans", "fc.dialogues", "fc.irrelevance", "fc.answer_judge")


def write_config(workdir: Path, turns: int, port: int, concurrency: int, workers: int) -> Path:
    doc = fc_bench_doc(workdir, turns, port, concurrency, name="llm_workers_bench",
                       run_dir=workdir / f"run-{workers}", dedup=False)
    path = workdir / f"bench-{workers}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def one_run(config: Path, run_dir: Path, workers: int) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "fabrika", "run", str(config), "--no-resume", "--no-progress",  # noqa: S603
                          "--llm-workers", str(workers)],
                         capture_output=True, text=True, check=False, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"run {config.name} exited {out.returncode}:\n{out.stderr[-3000:]}")
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    stages = manifest.get("stages", {})
    requests = sum(int((stages.get(s, {}).get("llm") or {}).get("requests", 0)) for s in LLM_STAGES)
    llm_seconds = sum(float(stages.get(s, {}).get("seconds", 0.0)) for s in LLM_STAGES)
    digest, rows = dataset_hash(run_dir)
    return {"wall_s": round(wall, 1), "requests": requests, "llm_stage_s": round(llm_seconds, 1),
            "rps_wall": round(requests / wall, 1), "rps_llm_stages": round(requests / llm_seconds, 1),
            "cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 1),
            "rows": rows, "hash": digest}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--training-turns", type=int, default=3000, help="Size of the FC run, in training turns.")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="llm_workers values to compare.")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="Fake server latency per request.")
    ap.add_argument("--concurrency", type=int, default=256, help="Endpoint and engine in-flight limit (divided).")
    ap.add_argument("--keep", type=Path, default=None, help="Keep the run directories here.")
    args = ap.parse_args()
    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fc_scale.py"), "--serve",  # noqa: S603
                               "--latency-ms", str(args.latency_ms)], stdout=subprocess.PIPE, text=True)
    tmp = tempfile.TemporaryDirectory(prefix="llm_workers_")
    workdir = args.keep or Path(tmp.name)
    workdir.mkdir(parents=True, exist_ok=True)
    results = {}
    try:
        line = server.stdout.readline() if server.stdout else ""
        if not line.startswith("READY"):
            raise SystemExit(f"fake server did not start: {line!r}")
        port = int(line.split()[1])
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs",
              flush=True)
        for n in args.workers:
            config = write_config(workdir, args.training_turns, port, args.concurrency, n)
            res = results[n] = one_run(config, workdir / f"run-{n}", n)
            print(f"llm_workers={n}: " + json.dumps(res), flush=True)
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        server.terminate()
        server.wait(timeout=10)
        tmp.cleanup()
    base = results[args.workers[0]]
    print(f"\n{'llm_workers':>11} {'wall s':>7} {'requests':>9} {'req/s':>7} {'req/s LLM stages':>17} "
          f"{'CPU s':>6} {'rows':>6}  hash")
    for n, r in results.items():
        print(f"{n:>11} {r['wall_s']:>7} {r['requests']:>9} {r['rps_wall']:>7} {r['rps_llm_stages']:>17} "
              f"{r['cpu_s']:>6} {r['rows']:>6}  {r['hash']}")
    for n, r in results.items():
        if n != args.workers[0]:
            print(f"speed-up {n} vs {args.workers[0]} worker(s): {r['rps_wall'] / base['rps_wall']:.2f}x (whole run), "
                  f"{r['rps_llm_stages'] / base['rps_llm_stages']:.2f}x (LLM stages)")
    same = len({r["hash"] for r in results.values()}) == 1
    print("datasets identical: " + ("yes" if same else "NO") + f" ({', '.join(r['hash'] for r in results.values())})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
