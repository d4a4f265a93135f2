"""Requests per second with 1 and 2 LLM workers (``llm_workers``) on the FC pipeline, same dataset.

The fake OpenAI server runs in its own process (``bench/fc_scale.py --serve``: every FC role answered
by the sim responders, a fixed latency). The FC pipeline of ``bench/fc_scale.py`` without its
``fc.tools_dedup`` (the fake server's tool sets of different topics are near-duplicates, so dedup would
keep about 1 % of them and leave a few hundred requests): fc.tools → fc.plans → fc.dialogues →
fc.samples → fc.irrelevance → fc.answer_judge, cache off, so every run really asks. It runs once
per worker count through ``fabrika run --llm-workers N``, each into a fresh run directory.

Replay (the default; ``--no-replay`` turns it off): answering with the sim responders costs the server
about as much CPU per request as the client spends, so on a 2-core box client and server already
fill the machine and a second client process has no core to use. So a first, untimed pass (one
worker) runs against the server while it records every answer by request (tag and body bytes,
:mod:`fabrika.testing.replay`); then the server is switched to replay and the timed runs are answered
from those prebuilt bytes — the same answers the sim gave, a miss answered by the sim and counted.

Printed per run: wall seconds, LLM requests, requests/s over the whole run and over the LLM stages'
own seconds, each stage's seconds and the wall time outside every stage (the run's timeline), the
CPU seconds of the run's processes (driver and workers, ``RUSAGE_CHILDREN``) and of
the server over the run, the replay hits and misses, and the dataset hash of ``bench/determinism.py``
(the record pass's too); then the speed-up (medians over ``--repeat``, runs alternated) and whether
every hash is equal. The box's load average is printed before and after.

    .venv/bin/python bench/llm_workers.py [--training-turns 12000] [--workers 1 2] [--latency-ms 20]
        [--concurrency 256] [--repeat 1] [--no-replay] [--baseline DIR]

``--baseline DIR`` (another checkout, e.g. ``git archive main | tar -x -C DIR``) measures before and after
side by side against the same server and recorded answers: every timed run is done once with this tree
and once with ``DIR``'s, alternated, and both tables and speed-ups are printed (the hashes of both must
be equal).

The default size, 12,000 training turns (about 45,000 requests), is where a worker's fixed cost stops
deciding the ratio: each worker process pays its interpreter, imports, engine and per-process caches once
(about 2 CPU-s), which is a sixth of a 3,000-turn run on 2 cores and nothing at the 300K job's scale.
``--training-turns 3000`` measures that small-run case.

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
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from determinism import dataset_hash  # noqa: E402
from fc_scale import fc_bench_doc, proc_cpu_s  # noqa: E402

LLM_STAGES = ("fc.tools", "fc.plans", "fc.dialogues", "fc.irrelevance", "fc.answer_judge")


def write_config(workdir: Path, turns: int, port: int, concurrency: int, workers: int) -> Path:
    doc = fc_bench_doc(workdir, turns, port, concurrency, name="llm_workers_bench",
                       run_dir=workdir / f"run-{workers}", dedup=False)
    path = workdir / f"bench-{workers}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def replay_state(port: int, switch: bool = False) -> dict:
    """The server's replay counters (``switch``: first turn recording into serving)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/replay", data=b"{}" if switch else None,
                                 method="POST" if switch else "GET")
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())


def one_run(config: Path, run_dir: Path, workers: int, server_pid: int, port: int | None, tree: Path = ROOT) -> dict:
    replay0 = replay_state(port) if port is not None else None
    server0 = proc_cpu_s(server_pid)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the driver and its workers import ``tree``'s fabrika
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "fabrika", "run", str(config), "--no-resume", "--no-progress",  # noqa: S603
                          "--llm-workers", str(workers)],
                         capture_output=True, text=True, check=False, cwd=tree, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"run {config.name} exited {out.returncode}:\n{out.stderr[-3000:]}")
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    stages = manifest.get("stages", {})
    requests = sum(int((stages.get(s, {}).get("llm") or {}).get("requests", 0)) for s in LLM_STAGES)
    llm_seconds = sum(float(stages.get(s, {}).get("seconds", 0.0)) for s in LLM_STAGES)
    stage_s = {s: round(float(d.get("seconds") or 0.0), 1) for s, d in stages.items()}
    server_cpu = proc_cpu_s(server_pid) - server0
    digest, rows = dataset_hash(run_dir)
    res = {"wall_s": round(wall, 1), "requests": requests, "llm_stage_s": round(llm_seconds, 1),
           "rps_wall": round(requests / wall, 1), "rps_llm_stages": round(requests / llm_seconds, 1),
           "cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 1),
           "server_cpu_s": round(server_cpu, 1), "rows": rows, "hash": digest,
           # where the wall time went: each stage's own seconds, and what is outside every stage (the
           # driver's start-up and imports, materialisation); the stages run one after another here
           "stage_s": stage_s, "outside_stages_s": round(wall - sum(stage_s.values()), 1)}
    if replay0 is not None and port is not None:
        replay1 = replay_state(port)
        res["replay_hits"] = replay1["hits"] - replay0["hits"]
        res["replay_misses"] = replay1["misses"] - replay0["misses"]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--training-turns", type=int, default=12000, help="Size of the FC run, in training turns.")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="llm_workers values to compare.")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="Fake server latency per request.")
    ap.add_argument("--concurrency", type=int, default=256, help="Endpoint and engine in-flight limit (divided).")
    ap.add_argument("--repeat", type=int, default=1, help="Timed runs per worker count, alternated (median).")
    ap.add_argument("--no-replay", action="store_true",
                    help="Answer every timed run with the sim responders (no record pass, no replay).")
    ap.add_argument("--keep", type=Path, default=None, help="Keep the run directories here.")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="Another checkout: every timed run is also done with its fabrika, alternated (before/after).")
    args = ap.parse_args()
    replay = not args.no_replay
    trees = {"": ROOT, **({"baseline ": args.baseline.resolve()} if args.baseline else {})}
    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fc_scale.py"), "--serve",  # noqa: S603
                               "--latency-ms", str(args.latency_ms), *(["--replay"] if replay else [])],
                              stdout=subprocess.PIPE, text=True)
    tmp = tempfile.TemporaryDirectory(prefix="llm_workers_")
    workdir = args.keep or Path(tmp.name)
    workdir.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, int], list[dict]] = {(t, n): [] for t in trees for n in args.workers}
    hashes: set[str] = set()
    try:
        line = server.stdout.readline() if server.stdout else ""
        if not line.startswith("READY"):
            raise SystemExit(f"fake server did not start: {line!r}")
        port = int(line.split()[1])
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs",
              flush=True)
        if replay:  # the untimed record pass: the sim answers every request once, the server keeps the bytes
            config = write_config(workdir, args.training_turns, port, args.concurrency, 0)
            rec = one_run(config, workdir / "run-0", 1, server.pid, None)
            state = replay_state(port, switch=True)
            hashes.add(rec["hash"])
            print(f"record pass (1 worker, sim answers, untimed): {json.dumps(rec)}; server now replays "
                  f"{state['recorded']} recorded answers", flush=True)
        for rep in range(args.repeat):
            for n in args.workers:
                for label, tree in (trees.items() if rep % 2 == 0 else reversed(trees.items())):
                    config = write_config(workdir, args.training_turns, port, args.concurrency, n)
                    res = one_run(config, workdir / f"run-{n}", n, server.pid, port if replay else None, tree)
                    runs[(label, n)].append(res)
                    hashes.add(res["hash"])
                    print(f"{label}llm_workers={n} (run {rep + 1}): " + json.dumps(res), flush=True)
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        server.terminate()
        server.wait(timeout=10)
        tmp.cleanup()
    print(f"\nserver: {'replayed answers' if replay else 'sim responders'}; median of {args.repeat} run(s)")
    for label, tree in trees.items():
        med = {n: sorted(rs, key=lambda r: r["rps_wall"])[len(rs) // 2] for (t, n), rs in runs.items() if t == label}
        base = med[args.workers[0]]
        print(f"\n{label or 'this tree '}({tree})")
        print(f"{'llm_workers':>11} {'wall s':>7} {'requests':>9} {'req/s':>7} {'req/s LLM stages':>17} "
              f"{'client CPU s':>13} {'server CPU s':>13} {'rows':>6}  hash")
        for n, r in med.items():
            print(f"{n:>11} {r['wall_s']:>7} {r['requests']:>9} {r['rps_wall']:>7} {r['rps_llm_stages']:>17} "
                  f"{r['cpu_s']:>13} {r['server_cpu_s']:>13} {r['rows']:>6}  {r['hash']}")
        for n, r in med.items():
            if n != args.workers[0]:
                print(f"{label}speed-up {n} vs {args.workers[0]} worker(s): {r['rps_wall'] / base['rps_wall']:.2f}x "
                      f"(whole run), {r['rps_llm_stages'] / base['rps_llm_stages']:.2f}x (LLM stages)")
    same = len(hashes) == 1
    print("datasets identical: " + ("yes" if same else "NO") + f" ({', '.join(sorted(hashes))})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
