"""Estimate vs reality on every shipped config: `fabrika estimate --pilot` beside a full run.

For each config (offline: the ``sim`` backend; ``fc_ru_300k`` scaled down by ``--set``
overrides, since its full size is ~1.3M requests and it names a real endpoint) the
estimate runs its pilot in a scratch directory, then the full pipeline runs in another,
and the bench prints per config and in total: predicted point and range, the real figure,
real/point, and whether the real figure is inside the range — for requests, prompt and
completion tokens, rows per stage and dataset rows, and time: the estimate's total seconds
the estimate's wall time (the stages laid out by the runner's scheduling rules,
:mod:`fabrika.pipeline.estimate_schedule`) and, beside it, the sum of the stages' seconds, both against
the full run's wall time. A time point counts as right within ±25%; the line after it also counts a
point within max(25%, 1 s) (a run of a second or two is start-up and the box's load).

A fractional pilot is floored at ``ceil(64·N/(N+64))`` of a cut stage's N items
(:func:`fabrika.pipeline.estimate.pilot_floor`): at ``--pilot 0.2`` every shipped config but
``fc_ru_300k`` then runs its cut stages in full, so its estimate is its full run. ``--pilot 12``
(a count, not floored) shows a sampled pilot of the small configs, stratified by kind of item where
a stage declares kinds (``Stage.pilot_stratum``).

The pilot and the full run each run in a fresh process (``--child``): a full run that follows
the pilot in the same process finds the embedding model, the language detector and the
sandbox's imports already loaded, and a pilot that follows another config's run does too —
either way the time compared would not be what a user's ``fabrika run`` takes.

    .venv/bin/python bench/estimate_table.py --pilot 0.2 --out runs/estimate_table.json
    .venv/bin/python bench/estimate_table.py --configs fc_demo smoke --stages   # per-stage lines too
    .venv/bin/python bench/estimate_table.py --configs fc_demo if_demo --pilot 12 --stages   # a sampled pilot
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
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
    for key in KEYS:
        out["total"][key] = line(tot[key], sum(s[key] for s in real["stages"].values()))
    # time: the run's wall time (its stages overlap, so their seconds do not add up to it)
    wall = real.get("wall_s", sum(s["seconds"] for s in real["stages"].values()))
    out["total"]["seconds"] = line(tot["seconds"], wall)  # the overlapped schedule's wall time
    if "seconds_sum" in tot:  # the stages one after another, for comparison (not counted in the totals)
        out["seconds_sum"] = line(tot["seconds_sum"], wall)
    out["total"]["dataset_rows"] = line(tot["dataset_rows"], real["dataset_rows"])
    for name, s in est["stages"].items():
        r = real["stages"].get(name)
        if r is None:
            continue
        out["stages"][name] = {key: line(s["range"][key], r[key]) for key in (*KEYS, "rows", "ok_rows", "seconds")}
    return out


def _config(name: str, overrides: list[str], work: Path) -> Any:
    from fabrika.pipeline.config import validate_file

    cfg, issues = validate_file(ROOT / "configs" / f"{name}.yaml", [*overrides, f"run_dir={work / name / 'full'}"])
    if cfg is None:
        raise SystemExit(f"{name}: " + "; ".join(str(i) for i in issues))
    return cfg


def child(kind: str, name: str, pilot: str, work: Path, out: Path) -> None:
    """One step in this (fresh) process: ``estimate`` (the pilot) or ``full`` (the run); JSON to ``out``."""
    from fabrika.pipeline.estimate import Pilot, run_estimate
    from fabrika.pipeline.runner import run_pipeline

    cfg = _config(name, CONFIGS[name], work)
    t = time.monotonic()
    if kind == "estimate":
        doc: dict[str, Any] = {"estimate": run_estimate(cfg, Pilot.parse(pilot), work / name / "pilot", name).as_dict()}
    else:
        full = run_pipeline(cfg, resume=False, progress=False)
        doc = {"real": real_figures(full)}
    doc["wall_s"] = time.monotonic() - t
    out.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")


def _in_child(kind: str, name: str, pilot: str, work: Path) -> dict[str, Any]:
    out = work / name / f"{kind}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, __file__, "--child", kind, "--configs", name, "--pilot", pilot,
                    "--work", str(work), "--child-out", str(out)], check=True)
    return dict(json.loads(out.read_text("utf-8")))


def run_one(name: str, overrides: list[str], pilot: str, work: Path) -> dict[str, Any]:
    est_doc = _in_child("estimate", name, pilot, work)
    full_doc = _in_child("full", name, pilot, work)
    est, real = est_doc["estimate"], full_doc["real"]
    real["wall_s"] = round(full_doc["wall_s"], 2)
    return {"config": name, "overrides": overrides, "pilot": pilot, "pilot_wall_s": round(est_doc["wall_s"], 1),
            "full_wall_s": round(full_doc["wall_s"], 1), "estimate": est, "real": real,
            "compare": compare(est, real)}


def fmt(line: dict[str, Any]) -> str:
    mark = "" if line["inside"] else " **OUT**"
    ratio = "-" if line["ratio"] is None else f"{line['ratio']:.2f}"
    return f"{line['point']:,.0f} ({line['low']:,.0f}–{line['high']:,.0f}) | {line['real']:,.0f} | {ratio}{mark}"


def main() -> None:
    from fabrika.pipeline.estimate_schedule import TIME_RESOLUTION_S, within

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--pilot", default="0.2")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "estimate_table")
    ap.add_argument("--out", type=Path, default=None, help="Write every figure as JSON here.")
    ap.add_argument("--stages", action="store_true", help="Print the per-stage lines too.")
    ap.add_argument("--child", choices=["estimate", "full"], help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.configs[0], args.pilot, args.work, args.child_out)
        return
    shutil.rmtree(args.work, ignore_errors=True)
    results = []
    for name in args.configs:
        res = run_one(name, CONFIGS[name], args.pilot, args.work)
        results.append(res)
        print(f"{name}: pilot {res['pilot_wall_s']} s, full run {res['full_wall_s']} s", file=sys.stderr, flush=True)
    print(f"pilot {args.pilot}; each cell: predicted point (range) | real | point/real\n")
    print("| config | requests | prompt tokens | completion tokens | dataset rows | seconds: wall (overlapped) "
          "| seconds: sum of stages |")
    print("|---|---|---|---|---|---|---|")
    for res in results:
        c = res["compare"]["total"]
        summed = res["compare"].get("seconds_sum")
        print(f"| {res['config']} | " + " | ".join(fmt(c[k]).replace(" | ", " / ")
                                                 for k in (*KEYS, "dataset_rows", "seconds"))
              + f" | {fmt(summed).replace(' | ', ' / ') if summed else '-'} |")
    counted = [(res["config"], n, k, v) for res in results for n, s in res["compare"]["stages"].items()
               for k, v in s.items() if k != "seconds"]
    misses = [(c, n, k, v) for c, n, k, v in counted if not v["inside"]]
    far = [(c, n, k, v) for c, n, k, v in counted if v["real"] and abs(v["point"] / v["real"] - 1) > 0.25]
    totals = [(res["config"], k, v) for res in results for k, v in res["compare"]["total"].items()]
    def near(v: dict[str, Any], floor: float) -> bool:
        return bool(v["real"]) and within(v["point"], v["real"], 0.25, floor)

    for label, keep in (("all five totals", lambda k: True), ("counts only", lambda k: k != "seconds")):
        sel = [v for _, k, v in totals if keep(k)]
        both = sum(v["inside"] and near(v, 0.0) for v in sel)
        print(f"\ntotals ({label}) inside the range: {sum(v['inside'] for v in sel)}/{len(sel)}; point within ±25%: "
              f"{sum(near(v, 0.0) for v in sel)}/{sum(bool(v['real']) for v in sel)}; both: {both}/{len(sel)}")
    times = [(res["config"], res["compare"]["total"]["seconds"], res["compare"].get("seconds_sum")) for res in results]
    print(f"time (wall, overlapped): inside the range {sum(v['inside'] for _, v, _ in times)}/{len(times)}; point "
          f"within ±25% {sum(near(v, 0.0) for _, v, _ in times)}/{len(times)}; within max(25%, "
          f"{TIME_RESOLUTION_S:g} s) {sum(near(v, TIME_RESOLUTION_S) for _, v, _ in times)}/{len(times)}")
    sums = [s for _, _, s in times if s]
    print(f"time (sum of stages, the old total): inside {sum(v['inside'] for v in sums)}/{len(sums)}; point within "
          f"±25% {sum(near(v, 0.0) for v in sums)}/{len(sums)}")
    for c, v, _ in times:
        if not near(v, 0.0):
            print(f"  time point off by more than 25%: {c}: {fmt(v)}"
                  + ("" if not near(v, TIME_RESOLUTION_S) else f" (within the {TIME_RESOLUTION_S:g} s resolution)"))
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
