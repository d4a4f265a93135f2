"""Estimate vs reality on every shipped config: `fabrika estimate --pilot` beside a full run.

For each config (offline: the ``sim`` backend; ``fc_ru_300k`` scaled down by ``--set``
overrides, since its full size is ~1.3M requests and it names a real endpoint) the
estimate runs its pilot in a scratch directory, then the full pipeline runs in another,
and the bench prints per config and in total: predicted point and range, the real figure,
real/point, and whether the real figure is inside the range — for requests, prompt and
completion tokens, rows per stage and dataset rows, plus the sum of stage seconds.

    .venv/bin/python bench/estimate_table.py --pilot 0.2 --out runs/estimate_table.json
    .venv/bin/python bench/estimate_table.py --configs fc_demo smoke --stages   # per-stage lines too
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Config name -> --set overrides that make it run offline (and small enough for this box).
CONFIGS: dict[str, list[str]] = {
    "smoke": [],
    "fc_demo": [],
    "fc_import_demo": [],
    "general_demo": [],
    "if_demo": [],
    "demo": [],
    # 1/100 of the shipped 25K topics, on sim instead of the localhost:8000 endpoint it names
    "fc_ru_300k": ["llm.backend=sim", "stages.fc.topics.target_size.ru=250"],
}
KEYS = ("requests", "prompt_tokens", "completion_tokens")


def real_figures(result: Any) -> dict[str, Any]:
    """Per stage: requests, tokens, rows and seconds of a full run; dataset rows per dataset stage."""
    from fabrika.pipeline.estimate import rows_per_item
    from fabrika.store import RunStore

    store = RunStore(result.run_dir)
    stages = {}
    for name, s in result.stats.items():
        _, rows, ok = rows_per_item(store, name)
        stages[name] = {"requests": s.llm.requests, "prompt_tokens": s.llm.prompt_tokens,
                        "completion_tokens": s.llm.completion_tokens, "rows": rows, "ok_rows": ok,
                        "seconds": s.seconds}
    gates = (result.version.funnel or {}).get("gates") or {} if result.version is not None else {}
    return {"stages": stages, "dataset_rows": result.version.rows if result.version is not None else 0,
            "dataset_rows_by_stage": {k: int(v.get("out") or 0) for k, v in gates.items()}}


def compare(est: dict[str, Any], real: dict[str, Any]) -> dict[str, Any]:
    """Per quantity: point, low, high, real, real/point, inside — totals, and per stage."""
    from fabrika.pipeline.estimate_model import inside

    def line(rng: dict[str, float], value: float) -> dict[str, Any]:
        return {**rng, "real": value, "ratio": round(rng["point"] / value, 3) if value else None,
                "inside": inside(value, rng)}

    out: dict[str, Any] = {"total": {}, "stages": {}}
    tot = est["total"]["range"]
    for key in (*KEYS, "seconds"):
        out["total"][key] = line(tot[key], sum(s[key] for s in real["stages"].values()))
    out["total"]["dataset_rows"] = line(tot["dataset_rows"], real["dataset_rows"])
    for name, s in est["stages"].items():
        r = real["stages"].get(name)
        if r is None:
            continue
        out["stages"][name] = {key: line(s["range"][key], r[key]) for key in (*KEYS, "rows", "ok_rows", "seconds")}
    return out


def run_one(name: str, overrides: list[str], pilot: str, work: Path) -> dict[str, Any]:
    from fabrika.pipeline.config import validate_file
    from fabrika.pipeline.estimate import Pilot, run_estimate
    from fabrika.pipeline.runner import run_pipeline

    path = ROOT / "configs" / f"{name}.yaml"
    sets = [*overrides, f"run_dir={work / name / 'full'}"]
    cfg, issues = validate_file(path, sets)
    if cfg is None:
        raise SystemExit(f"{name}: " + "; ".join(str(i) for i in issues))
    t = time.monotonic()
    est = run_estimate(cfg, Pilot.parse(pilot), work / name / "pilot", name).as_dict()
    pilot_wall = time.monotonic() - t
    t = time.monotonic()
    full = run_pipeline(cfg, resume=False, progress=False)
    full_wall = time.monotonic() - t
    return {"config": name, "overrides": overrides, "pilot": pilot, "pilot_wall_s": round(pilot_wall, 1),
            "full_wall_s": round(full_wall, 1), "estimate": est, "real": real_figures(full),
            "compare": compare(est, real_figures(full))}


def fmt(line: dict[str, Any]) -> str:
    mark = "" if line["inside"] else " **OUT**"
    ratio = "-" if line["ratio"] is None else f"{line['ratio']:.2f}"
    return f"{line['point']:,.0f} ({line['low']:,.0f}–{line['high']:,.0f}) | {line['real']:,.0f} | {ratio}{mark}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--pilot", default="0.2")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "estimate_table")
    ap.add_argument("--out", type=Path, default=None, help="Write every figure as JSON here.")
    ap.add_argument("--stages", action="store_true", help="Print the per-stage lines too.")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    results = []
    for name in args.configs:
        res = run_one(name, CONFIGS[name], args.pilot, args.work)
        results.append(res)
        print(f"{name}: pilot {res['pilot_wall_s']} s, full run {res['full_wall_s']} s", file=sys.stderr, flush=True)
    print(f"pilot {args.pilot}; each cell: predicted point (range) | real | point/real\n")
    print("| config | requests | prompt tokens | completion tokens | dataset rows | stage seconds |")
    print("|---|---|---|---|---|---|")
    for res in results:
        c = res["compare"]["total"]
        print(f"| {res['config']} | " + " | ".join(fmt(c[k]).replace(" | ", " / ")
                                                 for k in (*KEYS, "dataset_rows", "seconds")) + " |")
    counted = [(res["config"], n, k, v) for res in results for n, s in res["compare"]["stages"].items()
               for k, v in s.items() if k != "seconds"]
    misses = [(c, n, k, v) for c, n, k, v in counted if not v["inside"]]
    far = [(c, n, k, v) for c, n, k, v in counted if v["real"] and abs(v["point"] / v["real"] - 1) > 0.25]
    totals = [(res["config"], k, v) for res in results for k, v in res["compare"]["total"].items() if k != "seconds"]
    print(f"\ntotals inside the range: {sum(v['inside'] for _, _, v in totals)}/{len(totals)}; "
          f"point within ±25%: {sum(bool(v['real']) and abs(v['point'] / v['real'] - 1) <= 0.25 for _, _, v in totals)}"
          f"/{sum(bool(v['real']) for _, _, v in totals)}")
    print(f"per-stage figures (requests, tokens, rows, ok rows) inside the range: {len(counted) - len(misses)}/"
          f"{len(counted)}; point off by more than 25%: {len(far)}")
    for c, n, k, v in misses:
        print(f"  outside: {c} {n} {k}: {fmt(v)}")
    if args.stages:
        for res in results:
            print(f"\n{res['config']}: stage | requests | rows | ok rows")
            for n, s in res["compare"]["stages"].items():
                print(f"  {n} | {fmt(s['requests'])} | {fmt(s['rows'])} | {fmt(s['ok_rows'])}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
