"""Estimate vs reality: `fabrika estimate --pilot` against a full run, on the fake server with latency.

The fake OpenAI server (its own process, fixed latency per request) answers every FC role
with the sim responders. The FC demo pipeline (``configs/fc_demo.yaml`` with more topics)
runs through the real engine (openai backend). First ``estimate`` runs a pilot and
extrapolates requests and wall time; then the full pipeline runs and is timed. The bench
prints both side by side.

    .venv/bin/python bench/estimate_time.py --topics 40 --latency-ms 40 --pilot 0.2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NOUNS = ["Доставка", "Бронирование", "Ремонт", "Аренда", "Запись", "Оплата", "Обучение", "Страхование"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=40)
    ap.add_argument("--latency-ms", type=float, default=40.0)
    ap.add_argument("--pilot", default="0.2")
    ap.add_argument("--in-flight", type=int, default=16, help="items in flight per stage")
    ap.add_argument("--endpoint-concurrency", type=int, default=32)
    args = ap.parse_args()

    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.estimate import Pilot, run_estimate
    from fabrika.pipeline.runner import run_pipeline

    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fc_scale.py"), "--serve",
                               "--latency-ms", str(args.latency_ms)], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()  # type: ignore[union-attr]
        port = int(line.split()[1])
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            topics = work / "topics.jsonl"
            topics.write_text("".join(json.dumps({"id": f"topic-{i}", "topic": f"{NOUNS[i % 8]} номер {i}",
                                                  "lang": "ru", "keywords": [f"услуга{i}"]}, ensure_ascii=False)
                                      + "\n" for i in range(args.topics)), encoding="utf-8")
            data = yaml.safe_load((ROOT / "configs" / "fc_demo.yaml").read_text("utf-8"))
            data["llm"] = {"backend": "openai", "model": "fake", "cache": {"enabled": False},
                           "endpoints": [{"base_url": f"http://127.0.0.1:{port}/v1", "api_key": "x",
                                          "max_concurrency": args.endpoint_concurrency}],
                           "price_per_1m": {"fake": {"prompt": 0.2, "completion": 0.6}}}
            data["max_in_flight"] = args.in_flight
            data["stages"][0]["topics_file"] = str(topics)
            data["run_dir"] = str(work / "full")
            cfg, issues = validate_data(data, str(work / "bench.yaml"), work)
            assert cfg is not None, [str(i) for i in issues]
            t = time.monotonic()
            est = run_estimate(cfg, Pilot.parse(args.pilot), work / "pilot", "bench").as_dict()
            pilot_wall = time.monotonic() - t
            t = time.monotonic()
            full = run_pipeline(cfg, resume=False, progress=False)
            full_wall = time.monotonic() - t
    finally:
        server.terminate()
        server.wait(timeout=10)
    measured = {n: s.llm.requests for n, s in full.stats.items()}
    print(f"latency {args.latency_ms:g} ms, {args.topics} topics, pilot {args.pilot}, "
          f"{args.in_flight} items in flight, endpoint concurrency {args.endpoint_concurrency}")
    print(f"{'stage':<16} {'est req':>8} {'real req':>8} {'est s':>7} {'real s':>7}")
    for name, s in est["stages"].items():
        real_s = full.stats[name].seconds
        print(f"{name:<16} {s['requests']:>8} {measured[name]:>8} {s['seconds']:>7.1f} {real_s:>7.1f}")
    est_req, real_req = est["total"]["requests"], sum(measured.values())
    real_stage_s = sum(s.seconds for s in full.stats.values())
    print(f"{'total':<16} {est_req:>8} {real_req:>8} {est['total']['seconds']:>7.1f} {real_stage_s:>7.1f}")
    print(f"requests: estimate/real = {est_req / real_req:.2f}; time: estimate/real = "
          f"{est['total']['seconds'] / real_stage_s:.2f} (stage seconds; full wall {full_wall:.1f} s, "
          f"pilot wall {pilot_wall:.1f} s); cost estimate ${est['total']['cost']:.4f}")


if __name__ == "__main__":
    main()
