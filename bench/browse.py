"""`fabrika browse` at scale: time to the first page, and to later pages, on a 300K-row run.

Builds a run whose dataset stage `fc.samples` holds N rows in shards of 256 rows (the
default `chunk_size`), 10% rejected by the stage (with a raw-answer excerpt), plus a length
scorer whose threshold drops about 5% of the rest, materialised as `v1` and refiltered as
`v2` (a tighter threshold). Then, in a fresh child process, it starts the browse server on
127.0.0.1 and measures over HTTP what the browser asks for:

* **first page**: `GET /` (the page with every count, which indexes every stage) and then
  `GET /api/rows` for the first 50 rows — the first screen, cold;
* a middle and the last page, the gate-dropped rows, the version diff, and a value search
  (cold: it reads the string columns of every shard), warm;

and, side by side, what loading the stage whole costs (`RunStore.scan(...).collect()`: what
a browser that loads the run before showing it pays). Module imports (the run's stage modules,
loaded to know its gates) are timed apart: they are paid once per process, whatever the run.

    .venv/bin/python bench/browse.py --rows 300000
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARD_ROWS = 256


def build(run: Path, n: int) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from export import make_rows  # bench/export.py's FC row generator

    from fabrika.pipeline.registry import load_run_modules
    from fabrika.store import RunStore
    from fabrika.store.versions import materialise

    store = RunStore(run)
    frame = make_rows(n)
    excerpt = ("<think>" + "рассуждение " * 100 + "</think> {\"name\": \"get_weather\"")[:1200]
    manifest = {"name": "bench-browse", "backend": "sim", "order": ["fc.samples", "fc_length"],
                "config": {"dataset": {"stages": ["fc.samples"]}, "filters": {"length": {"max_tokens": 995}}},
                "layout": {"fc.samples": {"inputs": [], "annotates": False},
                           "fc_length": {"inputs": ["fc.samples"], "annotates": True}},
                "gate_groups": ["length"]}
    load_run_modules(manifest)
    for start in range(0, n, SHARD_ROWS):
        part = frame.slice(start, SHARD_ROWS).to_dicts()
        scores = []
        for j, row in enumerate(part):
            i = start + j
            row["input_id"] = row["id"]
            row["reason"] = None
            if i % 10 == 3:
                row["status"] = "rejected"
                row["reason"] = f"invalid_json: row {i}"
                row["raw_excerpt"] = excerpt
            scores.append({"id": row["id"], "status": "ok", "reason": None, "len_total_tokens": 900 + (i * 7919) % 100,
                           "len_completion_tokens": 20})
        store.write("fc.samples", part)
        store.write("fc_length", scores)
    store.write_manifest({**manifest, "status": "done",
                          "stages": {s: {**store.counts(s), "complete": True} for s in manifest["order"]}})
    materialise(run, name="v1")
    materialise(run, thresholds={"length": {"max_tokens": 990}}, name="v2", previous="v1")


def child(run: Path) -> None:
    import threading

    t = time.perf_counter()
    import fabrika.export.explorer_server as srv
    from fabrika.pipeline.registry import load_run_modules
    from fabrika.store import RunStore

    load_run_modules(RunStore(run).read_manifest())
    imports = time.perf_counter() - t

    t = time.perf_counter()
    server = srv.ExplorerServer(run, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def get(path: str) -> bytes:
        with urllib.request.urlopen(server.url + path, timeout=600) as resp:
            return resp.read()

    started = time.perf_counter() - t
    page_html = get("")
    html_s = time.perf_counter() - t - started
    first = json.loads(get("api/rows?stage=fc.samples&limit=50"))
    first_page = time.perf_counter() - t
    assert len(first["rows"]) == 50 and b"fabrika-samples" in page_html
    out = {"imports_s": imports, "first_page_s": first_page, "total": first["total"], "start_s": started,
           "html_s": html_s, "rows_s": first_page - started - html_s}
    time.sleep(0.5)
    while not all(s in server.explorer._index for s in server.explorer.stages()) or \
            "fc_length" not in server.explorer._located:  # the background index
        time.sleep(0.1)
    out["indexed_s"] = time.perf_counter() - t

    def timed(name: str, path: str) -> None:
        t0 = time.perf_counter()
        doc = json.loads(get(path))
        out[name] = time.perf_counter() - t0
        out[name + "_rows"] = doc["total"]

    n = first["total"]
    timed("middle_page_s", f"api/rows?stage=fc.samples&offset={n // 2}&limit=50")
    timed("last_page_s", f"api/rows?stage=fc.samples&offset={n - 50}&limit=50")
    timed("gate_dropped_s", "api/rows?stage=fc.samples&group=gate-dropped&limit=50")
    timed("diff_s", "api/rows?stage=fc.samples&group=removed&vs=v1&limit=50")
    timed("search_cold_s", "api/rows?stage=fc.samples&q=request%20123&limit=50")
    timed("search_warm_s", "api/rows?stage=fc.samples&q=request%20123&offset=50&limit=50")
    server.shutdown()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            out["peak_mb"] = int(line.split()[1]) / 1024  # before the whole-stage load below

    t0 = time.perf_counter()
    whole = RunStore(run).scan("fc.samples", ["fc_length"]).collect()  # type: ignore[union-attr]
    out["load_whole_s"] = time.perf_counter() - t0
    out["load_whole_rows"] = whole.height
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--keep", type=Path, help="Build the run here and keep it (default: a temporary directory).")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    root = args.keep or Path(tempfile.mkdtemp(prefix="fabrika-bench-browse-"))
    run = root / "run"
    try:
        t = time.perf_counter()
        if not (run / "manifest.json").is_file():
            build(run, args.rows)
        print(f"run of {args.rows} rows in {len(list((run / 'stages' / 'fc.samples').glob('*.parquet')))} shards "
              f"(built in {time.perf_counter() - t:.0f} s)")
        proc = subprocess.run([sys.executable, __file__, "--child", str(run)], capture_output=True, text=True,
                              cwd=ROOT)
        if proc.returncode:
            sys.exit(proc.stderr)
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"imports (once per process): {res['imports_s']:.2f} s")
        print(f"first page (GET / with every count, then 50 rows), cold: {res['first_page_s']:.2f} s "
              f"({res['total']} rows in the stage): server start {res['start_s']:.2f} s, GET / {res['html_s']:.2f} s, "
              f"first rows {res['rows_s']:.2f} s")
        print(f"every stage indexed in the background by {res['indexed_s']:.2f} s after start")
        for key, what in (("middle_page_s", "middle page"), ("last_page_s", "last page"),
                          ("gate_dropped_s", "gate-dropped rows"), ("diff_s", "removed by v2 vs v1"),
                          ("search_cold_s", "value search, cold"), ("search_warm_s", "same search, next page")):
            print(f"{what:<24} {res[key]:6.3f} s  ({res[key + '_rows']} rows match)")
        print(f"loading the stage whole (scan + collect): {res['load_whole_s']:.2f} s = "
              f"{res['load_whole_s'] / res['first_page_s']:.1f}x the first page")
        print(f"peak RSS of the server process: {res['peak_mb']:.0f} MB")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
