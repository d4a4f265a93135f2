"""Report at scale: `fabrika report` time and peak memory on 30K and 300K FC rows.

Builds a run whose `fc.samples` stage holds N rows (30% rejected across 6 reasons, each
rejection with a 2 KB raw-answer excerpt), materialises it with the real store, then
builds the report (charts + sample browser) in a fresh child process per size and
prints wall time, peak RSS (the child's VmHWM) and the page size side by side.

    .venv/bin/python bench/report_scale.py --rows 30000 300000
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REASONS = ["invalid_json", "unknown_tool", "schema_violation", "wrong_language", "truncated", "not_sampled"]


def build(run: Path, n: int) -> None:
    import polars as pl

    sys.path.insert(0, str(ROOT / "bench"))
    from export import make_rows  # bench/export.py's 300K-row FC generator

    from fabrika.store import RunStore
    from fabrika.store.versions import materialise

    store = RunStore(run)
    frame = make_rows(n)
    excerpt = ("<think>" + "рассуждение " * 150 + "</think> {\"name\": \"get_weather\"")[:2000]
    for start in range(0, n, 25_000):
        part = frame.slice(start, 25_000).to_dicts()
        for j, row in enumerate(part):
            i = start + j
            row["input_id"] = row["id"]
            row["reason"] = None
            if i % 10 < 3:
                row["status"] = "rejected"
                row["reason"] = f"{REASONS[i % len(REASONS)]}: row {i}"
                row["raw_excerpt"] = excerpt
        store.write("fc.samples", part)
    store.write_manifest({"name": "bench", "backend": "sim", "order": ["fc.samples"],
                          "config": {"dataset": {"stages": ["fc.samples"]}, "filters": {}},
                          "layout": {"fc.samples": {"inputs": [], "annotates": False}},
                          "stages": {"fc.samples": store.counts("fc.samples")}})
    materialise(run, name="v1")
    del pl


def vm_hwm_mb() -> float:
    """This process's peak RSS (VmHWM): unlike ru_maxrss it does not carry the parent's peak across exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(run: Path) -> None:
    from fabrika.export.report import build_report

    t = time.perf_counter()
    page = build_report(run)
    wall = time.perf_counter() - t
    peak = vm_hwm_mb()
    print(json.dumps({"wall": wall, "peak_mb": peak, "page_mb": page.stat().st_size / 2**20}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[30_000, 300_000])
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    results = []
    for n in args.rows:
        root = Path(tempfile.mkdtemp(prefix="fabrika-bench-report-"))
        try:
            t = time.perf_counter()
            build(root / "run", n)
            built = time.perf_counter() - t
            out = subprocess.run([sys.executable, __file__, "--child", str(root / "run")], capture_output=True,
                                 text=True, check=True, cwd=ROOT)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            results.append((n, res))
            print(f"{n:>8} rows (built in {built:.0f} s): report {res['wall']:.1f} s, peak RSS {res['peak_mb']:.0f} MB, "
                  f"page {res['page_mb']:.1f} MB")
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if len(results) >= 2:
        (n0, a), (n1, b) = results[0], results[-1]
        print(f"{n1 / n0:.0f}x rows: time {b['wall'] / a['wall']:.2f}x, peak RSS {b['peak_mb'] / a['peak_mb']:.2f}x, "
              f"page {b['page_mb'] / a['page_mb']:.2f}x")


if __name__ == "__main__":
    main()
