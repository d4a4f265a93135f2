"""`fabrika browse` at scale: time from the command to the first page, and to later pages, on a 300K-row run.

Builds a run whose dataset stage `fc.samples` holds N rows in shards of 256 rows (the
default `chunk_size`), 10% rejected by the stage (with a raw-answer excerpt), plus a length
scorer whose threshold drops about 5% of the rest, materialised as `v1` and refiltered as
`v2` (a tighter threshold). Upstream of it, as in a real FC run, a stage outside the dataset,
`fc.dialogues` (N/3 rows, first in pipeline order, so the page opens on it) with a length scorer
of its own: its gate-dropped rows are decided at browse time, from the gate predicates the run's
manifest names (`gate_modules`). Each row carries a request log (its item's LLM requests).

Measured, each in a fresh process:

* **from the command**, side by side with a base tree (``git archive --base`` into a temporary
  directory, or ``--base-tree DIR``), the trees alternated, ``--repeat`` runs each:
  ``python -m fabrika browse RUN --port 0`` started, then, as the browser does, ``GET /`` (the page
  with every count) and ``GET /api/rows`` for the first 50 rows of the first stage — process start
  to the first page's rows, what a user waits for — with the CPU seconds the server process had used
  by then (``/proc/PID/stat``: what the box's load does not change) and the 1-minute load average
  before each run. Both trees must show the same first page (ids, groups, total);
* in a child process that imports the server module itself: the first page split (server start,
  ``GET /``, first rows), then after the background index a middle and the last page of
  ``fc.samples``, the gate-dropped rows, the version diff, a value search (cold: it reads the string
  columns of every shard), and one row's requests up its lineage;

and, side by side, what loading the stage whole costs (``RunStore.scan(...).collect()``: what
a browser that loads the run before showing it pays).

    .venv/bin/python bench/browse.py --rows 300000 [--keep DIR] [--repeat 5] [--base main | --base-tree DIR]
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARD_ROWS = 256


def build(run: Path, n: int) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from export import make_rows  # bench/export.py's FC row generator

    from fabrika.pipeline.registry import load_run_modules
    from fabrika.store import RunStore
    from fabrika.store.shards import REQUESTS_KEY
    from fabrika.store.versions import materialise

    store = RunStore(run)
    frame = make_rows(n)
    excerpt = ("<think>" + "рассуждение " * 100 + "</think> {\"name\": \"get_weather\"")[:1200]
    manifest = {"name": "bench-browse", "backend": "sim",
                "order": ["fc.dialogues", "fc_dlen", "fc.samples", "fc_length"],
                "config": {"dataset": {"stages": ["fc.samples"]}, "filters": {"length": {"max_tokens": 995}}},
                "layout": {"fc.dialogues": {"inputs": [], "annotates": False},
                           "fc_dlen": {"inputs": ["fc.dialogues"], "annotates": True},
                           "fc.samples": {"inputs": ["fc.dialogues"], "annotates": False},
                           "fc_length": {"inputs": ["fc.samples"], "annotates": True}},
                "gate_groups": ["length"], "gate_modules": {"length": "fabrika.filters.length"},
                "gate_columns": {"length": ["len_completion_tokens", "len_total_tokens"]}}
    load_run_modules(manifest)

    def log(i: int) -> list[dict]:
        return [{"key": f"{(i * 7919 + t) % (1 << 60):064x}", "call": t + 1, "i": 0, "tag": "fc.assistant",
                 "model": "sim", "backend": "sim", "cached": False, "attempts": 1, "prompt_tokens": 300 + 40 * t,
                 "completion_tokens": 30, "messages": 2 + 2 * t} for t in range(4)]

    dialogues = n // 3
    for start in range(0, dialogues, SHARD_ROWS):
        rows, scores = [], []
        for i in range(start, min(dialogues, start + SHARD_ROWS)):
            rows.append({"id": f"dlg-{i:07d}", "input_id": f"plan-{i:07d}", "status": "ok", "reason": None,
                         "dialogue": json.dumps({"messages": [{"role": "user", "content": f"диалог {i}"}]},
                                                ensure_ascii=False), REQUESTS_KEY: log(i)})
            scores.append({"id": f"dlg-{i:07d}", "status": "ok", "reason": None,
                           "len_total_tokens": 900 + (i * 7919) % 100})
        store.write("fc.dialogues", rows)
        store.write("fc_dlen", scores)
    for start in range(0, n, SHARD_ROWS):
        part = frame.slice(start, SHARD_ROWS).to_dicts()
        scores = []
        for j, row in enumerate(part):
            i = start + j
            row["input_id"] = f"dlg-{i % dialogues:07d}"
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


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a live process has used (``/proc/PID/stat``)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def command(run: Path, tree: Path = ROOT) -> dict[str, Any]:
    """``python -m fabrika browse RUN --port 0`` of ``tree`` from process start to the first page's rows: wall
    seconds, and the CPU seconds the server process had used by then (what the box's load does not change)."""
    import os
    import re

    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "fabrika", "browse", str(run), "--port", "0"], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        if found is None:
            sys.exit(f"fabrika browse did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
        listening = time.perf_counter() - t0
        with urllib.request.urlopen(found.group(0), timeout=600) as resp:
            page = resp.read()
        html = time.perf_counter() - t0
        first = json.loads(page.split(b"id='fabrika-samples'>", 1)[1].split(b"</script>", 1)[0])["summary"]["browsable"][0]
        with urllib.request.urlopen(found.group(0) + f"api/rows?stage={first}&limit=50", timeout=600) as resp:
            rows = json.loads(resp.read())
        done = time.perf_counter() - t0
        cpu = _cpu_s(proc.pid)
        assert len(rows["rows"]) == 50 and rows["rows"][0].get("_requests")
        return {"listening_s": listening, "html_s": html, "first_page_s": done, "cpu_s": cpu, "stage": first,
                "load": load, "ids": [r["id"] for r in rows["rows"]], "groups": [r["_group"] for r in rows["rows"]],
                "total": rows["total"]}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def base_tree(ref: str) -> Path:
    """``git archive REF`` of this checkout, unpacked into a temporary directory (the tree compared against)."""
    out = Path(tempfile.mkdtemp(prefix="fabrika-bench-browse-base-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def side_by_side(run: Path, base: Path, repeat: int) -> None:
    """The command → first rows, base tree and this tree alternated, ``repeat`` fresh processes each."""
    import statistics

    got: dict[str, list[dict[str, Any]]] = {"base": [], "this": []}
    for k in range(repeat):
        for name, tree in (("base", base), ("this", ROOT)) if k % 2 == 0 else (("this", ROOT), ("base", base)):
            cmd = command(run, tree)
            got[name].append(cmd)
            print(f"{name:>4} run {k + 1}: load {cmd['load']:5.1f}  listening {cmd['listening_s']:5.2f} s  page with "
                  f"every count {cmd['html_s']:5.2f} s  first 50 rows of {cmd['stage']} **{cmd['first_page_s']:5.2f} s**"
                  f"  (server CPU by then {cmd['cpu_s']:.2f} s)")
    a, b = got["base"], got["this"]
    assert all(x["ids"] == a[0]["ids"] and x["groups"] == a[0]["groups"] and x["total"] == a[0]["total"]
               for x in a + b), "the two trees show different first pages"
    med = {n: {k: statistics.median(x[k] for x in v) for k in ("first_page_s", "cpu_s", "listening_s", "load")}
           for n, v in got.items()}
    print(f"median of {repeat}: base {med['base']['first_page_s']:.2f} s wall / {med['base']['cpu_s']:.2f} s CPU, "
          f"this tree {med['this']['first_page_s']:.2f} s wall / {med['this']['cpu_s']:.2f} s CPU: "
          f"{med['base']['first_page_s'] / med['this']['first_page_s']:.2f}x wall, "
          f"{med['base']['cpu_s'] / med['this']['cpu_s']:.2f}x CPU; load {min(x['load'] for x in a + b):.1f}–"
          f"{max(x['load'] for x in a + b):.1f}; same first page in both trees")
    print(f"under 1 s from the command: {'yes' if med['this']['first_page_s'] < 1 else 'NO'} "
          f"(wall median {med['this']['first_page_s']:.2f} s)")


def child(run: Path) -> None:
    import threading

    t = time.perf_counter()
    import fabrika.export.explorer_server as srv
    from fabrika.store import RunStore

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
    head = json.loads(get("api/rows?stage=fc.dialogues&limit=50"))
    first_page = time.perf_counter() - t
    assert len(head["rows"]) == 50 and b"fabrika-samples" in page_html
    first = json.loads(get("api/rows?stage=fc.samples&limit=50"))
    out = {"imports_s": imports, "first_page_s": first_page, "total": first["total"], "start_s": started,
           "html_s": html_s, "rows_s": first_page - started - html_s, "head_total": head["total"]}
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
    t0 = time.perf_counter()
    chain = json.loads(get(f"api/requests?stage=fc.samples&id={first['rows'][0]['id']}"))
    out["chain_s"] = time.perf_counter() - t0
    out["chain_rows"] = sum(len(s["requests"]) for s in chain["steps"])
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
    ap.add_argument("--repeat", type=int, default=5, help="How many times the command is timed per tree (fresh "
                    "processes, the trees alternated).")
    ap.add_argument("--base", default="main", help="Git ref of the tree compared against (`git archive`).")
    ap.add_argument("--base-tree", help="A tree already unpacked (instead of --base).")
    ap.add_argument("--only-command", action="store_true", help="Only the side-by-side command timing.")
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
        base = Path(args.base_tree) if args.base_tree else base_tree(args.base)
        try:
            side_by_side(run, base, args.repeat)
        finally:
            if not args.base_tree:
                shutil.rmtree(base, ignore_errors=True)
        if args.only_command:
            return
        proc = subprocess.run([sys.executable, __file__, "--child", str(run)], capture_output=True, text=True,
                              cwd=ROOT)
        if proc.returncode:
            sys.exit(proc.stderr)
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"in a child process: importing the server module {res['imports_s']:.2f} s")
        print(f"first page (GET / with every count, then 50 rows of fc.dialogues), cold: {res['first_page_s']:.2f} s "
              f"({res['head_total']} rows in the stage): server start {res['start_s']:.2f} s, GET / "
              f"{res['html_s']:.2f} s, first rows {res['rows_s']:.2f} s")
        print(f"every stage indexed in the background by {res['indexed_s']:.2f} s after start")
        for key, what in (("middle_page_s", "middle page"), ("last_page_s", "last page"),
                          ("gate_dropped_s", "gate-dropped rows"), ("diff_s", "removed by v2 vs v1"),
                          ("search_cold_s", "value search, cold"), ("search_warm_s", "same search, next page")):
            print(f"{what:<24} {res[key]:6.3f} s  ({res[key + '_rows']} rows match)")
        print(f"{'one row up its lineage':<24} {res['chain_s']:6.3f} s  ({res['chain_rows']} requests)")
        print(f"loading the stage whole (scan + collect): {res['load_whole_s']:.2f} s = "
              f"{res['load_whole_s'] / res['first_page_s']:.1f}x the first page")
        print(f"peak RSS of the server process: {res['peak_mb']:.0f} MB")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
