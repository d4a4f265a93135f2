"""The 300K-training-turn FC job (configs/fc_ru_300k.yaml), end to end against the fake server — resumable.

The fake OpenAI server runs in its own process and answers every request with fabrika's
own ``sim`` responder for the request's tag (the ``x-fabrika-tag`` header; the generic
schema-valid fallback where a tag has none), so the content is what ``backend: sim``
writes, but every request crosses real HTTP through the openai backend. The pipeline is
``fabrika run configs/fc_ru_300k.yaml`` with ``--set`` overrides only: the endpoint, the
run directory and, for a scaled run, ``stages.fc.topics.target_size.ru`` (25,000 × scale).
It runs as a child process (``nice -n 10`` by default) whose own CPU time and peak RSS are
read with ``os.wait4``; the server's CPU is read from ``/proc`` apart.

Resumable: the run directory persists, and running the same command again continues where
the last invocation stopped (the runner resumes by item id); every invocation appends a
segment to ``RUN_DIR/run_300k.json`` (wall, CPU, peak RSS, requests, exit code), and the
totals are summed over segments. Run it in the background::

    nohup .venv/bin/python bench/run_300k.py --scale 0.1 --run-dir runs/fc_300k_s10 > runs/fc_300k_s10.log 2>&1 &
    .venv/bin/python bench/run_300k.py --scale 0.1 --run-dir runs/fc_300k_s10 --report      # figures so far
    .venv/bin/python bench/run_300k.py --scale 0.1 --run-dir runs/fc_300k_s10 --progress    # a running segment
    .venv/bin/python bench/run_300k.py --scale 0.1 --run-dir runs/fc_300k_s10 --estimate 0.05
        # `fabrika estimate` on the same config and overrides (same fake server), compared with the run

The topic pool is the config's own: ``fc.topics`` clusters the demo corpus and the sim's
expander composes topics in the seeds' domains up to ``target_size``
(:mod:`fabrika.generators.fc.topics_sim`); the sim tool writer names each composed topic's
tools after it, so ``fc.tools_dedup`` keeps the topics apart. The full job is ``--scale 1``
(~1.3M requests by the config's sizing); ``--nice 19`` for a background run on a shared box.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
CONFIG = ROOT / "configs" / "fc_ru_300k.yaml"
FULL_TOPICS = 25_000


def serve(port: int, latency_ms: float, served_file: Path | None = None) -> None:
    """Child: the fake server, each tag answered by the sim responder registered for it; every 10 s (and on
    SIGTERM) it writes how many requests it has answered to ``served_file``."""
    from fabrika.llm.sim import find_sim_responder, generic_choice
    from fabrika.llm.types import ChatRequest, Choice
    from fabrika.pipeline.registry import load_modules
    from fabrika.schemas.ids import derive_seed
    from fabrika.testing import FakeOpenAIServer

    load_modules()  # every stage module registers its sim responder on import
    current = threading.local()

    def answer(req: dict[str, Any]) -> object:
        tag = getattr(current, "tag", "") or "default"
        request = ChatRequest(messages=tuple(req["messages"]), tools=tuple(req.get("tools") or ()) or None,
                              tool_choice=req.get("tool_choice"), response_format=req.get("response_format"),
                              max_tokens=req.get("max_tokens"), tag=tag, meta={})
        fn = find_sim_responder(tag)
        specs = []
        for k in range(int(req.get("n") or 1)):
            rng = random.Random(derive_seed(tag, json.dumps(req, sort_keys=True, ensure_ascii=False), k))
            out = fn(request, rng) if fn is not None else generic_choice(request, rng, marker="[fake]")
            if isinstance(out, Choice):
                spec: dict[str, Any] = {"content": out.content or "", "finish_reason": out.finish_reason or "stop"}
                if out.tool_calls:
                    spec = {"tool_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in out.tool_calls]}
                specs.append(spec)
            else:
                specs.append({"content": str(out)})
        return specs[0] if len(specs) == 1 else {"choices": specs}

    srv = FakeOpenAIServer(port=port, latency_ms=latency_ms)
    srv.script(tag="", responder=answer, name="sim")
    app = srv.app  # the tag header reaches the responder through the handler
    handle = app.handle

    def tagged(http: Any) -> Any:
        current.tag = http.headers.get("x-fabrika-tag", "")
        return handle(http)

    app.handle = tagged  # type: ignore[method-assign]
    app.record_limit = 0
    srv.start()
    stop = threading.Event()

    def write_served() -> None:
        if served_file is not None:
            tmp = served_file.with_suffix(".tmp")
            tmp.write_text(str(srv.served), encoding="utf-8")
            os.replace(tmp, served_file)

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"READY {srv.port}", flush=True)
    while not stop.wait(10):
        write_served()
    write_served()


def overrides(scale: float, port: int, run_dir: Path, concurrency: int, llm_workers: int = 1) -> list[str]:
    n = max(1, round(FULL_TOPICS * scale))
    return [f"run_dir={run_dir}", f"stages.fc.topics.target_size.ru={n}", f"llm_workers={llm_workers}",
            f'llm.endpoints=[{{"base_url": "http://127.0.0.1:{port}/v1", "api_key": "x", '
            f'"max_concurrency": {concurrency}}}]', "llm.model=fake", "llm.cache.enabled=false"]


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process (from /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _proc_rss_mb(pid: int) -> dict[str, float]:
    """Current and peak resident memory of a running process (VmRSS, VmHWM from /proc), MB."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


def _wait(pid: int, max_rss_mb: float) -> tuple[int, Any, bool]:
    """Wait for the pipeline child, polling its memory: past ``max_rss_mb`` it is killed (no swap on a shared box:
    a run that outgrows memory is stopped, not left to the OOM killer's choice of victim). Rerun to resume."""
    over = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage, over
        if not over and _proc_rss_mb(pid).get("VmRSS", 0.0) > max_rss_mb:
            over = True
            os.kill(pid, signal.SIGKILL)
        time.sleep(2)


def start_server(port: int, latency_ms: float, served_file: Path | None = None) -> subprocess.Popen[str]:
    extra = ["--served-file", str(served_file)] if served_file is not None else []
    server = subprocess.Popen([sys.executable, __file__, "--serve", "--port", str(port), "--latency-ms",
                               str(latency_ms), *extra], stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline() if server.stdout else ""
    if not line.startswith("READY"):
        raise SystemExit(f"fake server did not start: {line!r}")
    return server


def requests_of(manifest: dict[str, Any]) -> dict[str, int]:
    return {n: int((s.get("llm") or {}).get("requests") or 0) for n, s in (manifest.get("stages") or {}).items()}


def segment(args: argparse.Namespace) -> dict[str, Any]:
    """One invocation of ``fabrika run`` (resuming), measured."""
    run_dir = args.run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    served_file = run_dir / "run_300k.served"
    served_file.unlink(missing_ok=True)
    server = start_server(args.port, args.latency_ms, served_file)
    try:
        cmd = ["nice", "-n", str(args.nice), sys.executable, "-m", "fabrika", "run", str(CONFIG), "--no-progress",
               *sum((["--set", s] for s in overrides(args.scale, args.port, run_dir, args.concurrency,
                                                                 args.llm_workers)), [])]
        t = time.monotonic()
        child = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                 stdout=open(run_dir / "run.log", "a", encoding="utf-8"), stderr=subprocess.STDOUT)
        (run_dir / "run_300k.live.json").write_text(json.dumps(
            {"child_pid": child.pid, "server_pid": server.pid, "started": time.time(), "scale": args.scale}),
            encoding="utf-8")
        status, usage, over = _wait(child.pid, args.max_rss_mb)
        wall = time.monotonic() - t
        server_cpu = _proc_cpu(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        (run_dir / "run_300k.live.json").unlink(missing_ok=True)
    served = int(served_file.read_text("utf-8")) if served_file.exists() else None
    manifest = json.loads((run_dir / "manifest.json").read_text("utf-8")) if (run_dir / "manifest.json").exists() else {}
    return {"started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - wall)),
            "exit": os.waitstatus_to_exitcode(status), "wall_s": round(wall, 1),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "server_cpu_s": round(server_cpu, 1), "served": served, "requests": requests_of(manifest),
            **({"killed": f"RSS over {args.max_rss_mb} MB"} if over else {})}


def report(run_dir: Path, scale: float) -> dict[str, Any]:
    """Totals over segments, and the run's yield."""
    import polars as pl

    from fabrika.store import RunStore

    record = json.loads((run_dir / "run_300k.json").read_text("utf-8"))
    segs = record["segments"]
    requests: dict[str, int] = {}
    for s in segs:
        for n, v in s["requests"].items():
            requests[n] = requests.get(n, 0) + v
    total_req = sum(requests.values())
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    version = (manifest.get("versions") or {}).get(manifest.get("latest_version") or "", {})
    rows = int(version.get("rows") or 0) if isinstance(version, dict) else 0
    if not rows and (run_dir / "versions").exists():
        for v in sorted((run_dir / "versions").iterdir()):
            if (v / "version.json").exists():
                rows = int(json.loads((v / "version.json").read_text("utf-8")).get("rows") or 0)

    def ok(stage: str) -> int:
        lf = store.scan_raw(stage)
        return 0 if lf is None else int(lf.filter(pl.col("status") == "ok").select(pl.len()).collect().item())

    cpu = sum(s["cpu_s"] for s in segs)
    topics, plans = ok("fc.topics"), ok("fc.plans")
    return {"scale": scale, "segments": len(segs), "exit": segs[-1]["exit"],
            "wall_s": round(sum(s["wall_s"] for s in segs), 1), "client_cpu_s": round(cpu, 1),
            "server_cpu_s": round(sum(s["server_cpu_s"] for s in segs), 1),
            "peak_rss_mb": max(s["peak_rss_mb"] for s in segs), "requests": total_req,
            "served": sum(int(s.get("served") or 0) for s in segs),
            "requests_by_stage": requests, "client_cpu_ms_per_request": round(1000 * cpu / total_req, 3) if total_req else None,
            "topics": topics, "plans_ok": plans, "episodes_ok": ok("fc.dialogues"), "samples_ok": ok("fc.samples"),
            "irrelevance_ok": ok("fc.irrelevance"), "dataset_rows": rows,
            "training_turns_per_plan": round(rows / plans, 3) if plans else None,
            "training_turns_per_topic": round(rows / topics, 3) if topics else None,
            "requests_per_training_turn": round(total_req / rows, 2) if rows else None}


def progress(run_dir: Path) -> dict[str, Any]:
    """A running segment, read from outside: ok rows per stage so far (shards written), requests the fake server has
    answered (this segment; written every 10 s), the pipeline child's CPU and memory, and rates since it started."""
    import polars as pl

    from fabrika.store import RunStore

    live_path = run_dir / "run_300k.live.json"
    if not live_path.exists():
        return {"running": False, "note": "no segment running; see --report"}
    live = json.loads(live_path.read_text("utf-8"))
    elapsed = time.time() - live["started"]
    cpu = _proc_cpu(live["child_pid"])
    served_file = run_dir / "run_300k.served"
    served = int(served_file.read_text("utf-8")) if served_file.exists() else 0
    store = RunStore(run_dir)
    rows: dict[str, int] = {}
    for stage in ("fc.topics", "fc.tools", "fc.plans", "fc.dialogues", "fc.samples", "fc.irrelevance"):
        try:
            lf = store.scan_raw(stage)
            rows[stage] = 0 if lf is None else int(lf.filter(pl.col("status") == "ok").select(pl.len()).collect().item())
        except Exception:  # noqa: BLE001 - a stage mid-write reads as unknown, not as an error
            rows[stage] = -1
    prior = json.loads((run_dir / "run_300k.json").read_text("utf-8"))["segments"] if (run_dir / "run_300k.json").exists() else []
    return {"running": True, "scale": live.get("scale"), "elapsed_s": round(elapsed), "served_this_segment": served,
            "served_before": sum(int(s.get("served") or 0) for s in prior), "requests_per_s": round(served / elapsed, 1),
            "client_cpu_s": round(cpu, 1), "client_cpu_ms_per_request": round(1000 * cpu / served, 3) if served else None,
            "server_cpu_s": round(_proc_cpu(live["server_pid"]), 1), **_proc_rss_mb(live["child_pid"]),
            "ok_rows": rows, "note": "fc.samples + fc.irrelevance ok rows are training turns before the gates"}


def estimate(args: argparse.Namespace) -> dict[str, Any]:
    """``fabrika estimate`` on the same config and overrides against the same fake server."""
    from fabrika.pipeline.config import validate_file
    from fabrika.pipeline.estimate import Pilot, run_estimate

    run_dir = args.run_dir.resolve()
    server = start_server(args.port, args.latency_ms)
    try:
        cfg, issues = validate_file(CONFIG, overrides(args.scale, args.port, run_dir, args.concurrency))
        if cfg is None:
            raise SystemExit("; ".join(str(i) for i in issues))
        t = time.monotonic()
        est = run_estimate(cfg, Pilot.parse(args.estimate), run_dir.parent / (run_dir.name + ".estimate"),
                           "fc_ru_300k", note=lambda line: print(line, file=sys.stderr, flush=True)).as_dict()
        wall = time.monotonic() - t
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    return {"pilot": args.estimate, "pilot_wall_s": round(wall, 1), "total": est["total"],
            "stages": {n: {"requests": s["requests"], "range": s["range"]["requests"], "pilot_items": s["pilot_items"]}
                       for n, s in est["stages"].items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.1, help="Share of the 25K topics (0.1: 30K training turns).")
    ap.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "fc_300k_s10")
    ap.add_argument("--port", type=int, default=18731, help="Fixed, so that a resumed run keeps its endpoint.")
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--llm-workers", type=int, default=1, help="Processes per LLM-calling stage (the dataset is "
                    "the same for any N; a resumed run may change it).")
    ap.add_argument("--max-rss-mb", type=float, default=6144, help="Kill the pipeline child past this resident "
                    "memory (resume with the same command).")
    ap.add_argument("--progress", action="store_true", help="Print a running segment's progress (rows so far, "
                    "requests served, CPU, RSS); run nothing.")
    ap.add_argument("--report", action="store_true", help="Print the totals so far; run nothing.")
    ap.add_argument("--estimate", default=None, help="Run `fabrika estimate --pilot X` on the same config instead.")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--served-file", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.port, args.latency_ms, args.served_file)
        return
    run_dir = args.run_dir.resolve()
    record_path = run_dir / "run_300k.json"
    if args.progress:
        print(json.dumps(progress(run_dir), ensure_ascii=False, indent=1))
        return
    if args.estimate is not None:
        est = estimate(args)
        rec = report(run_dir, args.scale) if record_path.exists() else {}
        out = {"estimate": est, "real_requests": rec.get("requests"), "real_by_stage": rec.get("requests_by_stage")}
        if rec.get("requests"):
            out["estimate_over_real"] = round(est["total"]["requests"] / rec["requests"], 3)
        (run_dir / "estimate_vs_run.json").write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
        print(json.dumps(out, ensure_ascii=False, indent=1))
        return
    if not args.report:
        seg = segment(args)
        record = json.loads(record_path.read_text("utf-8")) if record_path.exists() else {"segments": []}
        record["segments"].append(seg)
        record["command"] = " ".join(sys.argv)
        record_path.write_text(json.dumps(record, ensure_ascii=False, indent=1), encoding="utf-8")
        print(json.dumps(seg, ensure_ascii=False), flush=True)
    print(json.dumps(report(run_dir, args.scale), ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
