"""FC pipeline scale bench: Russian episodes over real HTTP against the fake server.

The fake OpenAI server runs in its own process with a fixed latency and answers
every FC role with the sim responders (so the content is valid and the error
paths run). Each size runs in a fresh child process (so its peak RSS is its
own) through the real runner and engine (openai backend, aiohttp transport):
fc.tools → fc.tools_dedup → fc.plans → fc.dialogues → fc.samples → fc.irrelevance.

Two counts, never mixed up: a *message* is one message of an accepted dialogue
(user, assistant or tool); a *training turn* is one training sample (a target
assistant turn of ``fc.samples`` or a derived ``fc.irrelevance`` sample) — what
"300K turns" of a dataset means. Sizes are given in training turns. Peak RSS is
the child's high-water mark after the last FC stage; the store's dataset
materialisation that follows is reported apart (``materialise``).

    .venv/bin/python bench/fc_scale.py --training-turns 30000 300000 --concurrency 256 --latency-ms 20

Client CPU (issue 30): each child reports its own CPU seconds (user + system, ``time.process_time``)
per stage run, and so client CPU per request and per training turn (the FC stages, without the
dataset materialisation; the fake server's CPU is reported apart). ``--baseline REV`` exports the
``fabrika`` package of commit REV (``git archive``) and runs every size with it and with this tree,
alternated, against the same server, so before/after are measured in one run; the two dataset
hashes (``bench/determinism.py``'s content hash) must be equal:

    .venv/bin/python bench/fc_scale.py --training-turns 3000 --baseline 0808ae8 --repeat 3

``--together`` runs the two codes' children at the same time instead (on a box whose load swings, the
same load for both; the CPU seconds are the figure, wall time is shared).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# ``--code DIR`` (the child of ``--baseline``) imports fabrika from an exported tree of another commit
CODE = Path(sys.argv[sys.argv.index("--code") + 1]) if "--code" in sys.argv else ROOT
sys.path.insert(0, str(CODE))
sys.path.insert(1, str(ROOT / "bench"))

# measured on the FC demo (bench/fc_sim_profiles.py): ~2.3 samples per accepted episode, ~0.9 of plans
# accepted as episodes; only used to size the topic pool
TRAINING_TURNS_PER_PLAN = 2.5  # 33,956 training turns from 13,640 plans (bench/RESULTS.md)
PLANS_PER_TOPIC = 10
NOUNS = ["Доставка", "Бронирование", "Ремонт", "Аренда", "Запись", "Оплата", "Обучение", "Страхование"]


def write_topics(path: Path, n: int) -> Path:
    """``n`` synthetic Russian topics (the sim's topic expansion on the demo corpus stops near 60); kept if present."""
    if not path.exists():
        with path.open("w", encoding="utf-8") as f:
            for i in range(n):
                noun = NOUNS[i % len(NOUNS)]
                f.write(json.dumps({"id": f"topic-{i}", "topic": f"{noun} номер {i}", "lang": "ru",
                                    "description": f"{noun}: услуги и заказы, раздел {i}",
                                    "keywords": [f"{noun.lower()}{i}"]}, ensure_ascii=False) + "\n")
    return path


def fc_bench_doc(workdir: Path, turns: int, port: int, concurrency: int, *, name: str, run_dir: Path,
                 dedup: bool = True) -> dict:
    """The FC pipeline config the client benches run against the fake server on ``port`` (cache off).
    ``dedup=False`` leaves out ``fc.tools_dedup`` (plans read ``fc.tools`` either way)."""
    n_topics = max(1, math.ceil(turns / (TRAINING_TURNS_PER_PLAN * PLANS_PER_TOPIC)))
    topics = write_topics(workdir / "topics.jsonl", n_topics)
    return {
        "name": name, "seed": 1, "run_dir": str(run_dir), "max_in_flight": concurrency,
        "plugins": ["fabrika.generators.fc.stages"],
        "llm": {"backend": "openai", "model": "fake", "max_in_flight": concurrency, "max_retries": 2,
                "endpoints": [{"base_url": f"http://127.0.0.1:{port}/v1", "max_concurrency": concurrency}],
                "cache": {"enabled": False}},
        "stages": [
            {"kind": "fc.tools", "topics_file": str(topics), "tools_per_topic": 3},
            *([{"kind": "fc.tools_dedup", "input": "fc.tools"}] if dedup else []),
            # fc.plans reads fc.tools, not fc.tools_dedup: the sim catalogue has a few tools per domain,
            # so dedup keeps a handful of tools for the whole bench and leaves most topics without plans
            {"kind": "fc.plans", "input": "fc.tools", "plans_per_topic": PLANS_PER_TOPIC},
            {"kind": "fc.dialogues", "input": "fc.plans", "sim_error_rate": 0.1},
            {"kind": "fc.samples", "input": "fc.dialogues"},
            {"kind": "fc.irrelevance", "input": "fc.dialogues", "share": 0.3},
            {"kind": "fc.answer_judge", "input": "fc.samples"},
        ],
        "dataset": {"stages": ["fc.samples", "fc.irrelevance"]},
    }


def serve(latency_ms: float, replay: bool = False) -> None:
    """Child: the fake server, every FC tag answered by the sim responders (``replay``: recorded
    until ``POST /v1/replay``, then served from the recorded bytes, :mod:`fabrika.testing.replay`)."""
    from fabrika.generators.fc import sim_responders as sr
    from fabrika.llm.types import ChatRequest, Choice
    from fabrika.schemas.ids import derive_seed
    from fabrika.testing import FakeOpenAIServer

    def wrap(tag: str, fn):  # noqa: ANN001, ANN202
        def responder(req: dict) -> object:
            request = ChatRequest(messages=tuple(req["messages"]), tools=tuple(req.get("tools") or ()) or None,
                                  tag=tag, meta={"sim_error_rate": 0.1})
            out = fn(request, random.Random(derive_seed(tag, req["messages"])))
            if isinstance(out, Choice):
                if out.tool_calls:
                    return {"tool_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in out.tool_calls]}
                return out.content or ""
            return out
        return responder

    srv = FakeOpenAIServer(latency_ms=latency_ms, replay=replay)
    for tag in ["fc.tools", "fc.planner", "fc.judge", "fc.user", "fc.tool", "fc.assistant",
                "fc.irrelevance.answer", "fc.irrelevance.judge", "fc.answer_judge"]:
        fn = sr.RESPONDERS["fc.irrelevance" if tag.startswith("fc.irrelevance") else tag]
        srv.script(tag=tag, responder=wrap(tag, fn))
    srv.start()
    print(f"READY {srv.port}", flush=True)
    threading.Event().wait()


def child(turns: int, port: int, concurrency: int, workdir: Path) -> dict:
    """Child: one pipeline run of about ``turns`` training turns; prints its measurements as JSON."""
    import polars as pl

    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store.run import RunStore

    doc = fc_bench_doc(workdir, turns, port, concurrency, name="fc_scale", run_dir=workdir / "run")
    # Run the stage list growing one stage at a time (resume skips finished stages), so the
    # monotone peak RSS after each run tells which stage raised it.
    stats: dict = {}
    rss_after: dict[str, float] = {}
    cpu_s: dict[str, float] = {}  # this process's CPU seconds (user + system) per stage run
    t0 = time.perf_counter()
    # The last run only materialises the dataset version (the store's step, measured apart).
    for k in range(1, len(doc["stages"]) + 2):
        last = k > len(doc["stages"])
        config, issues = validate_data({**doc, "stages": doc["stages"][:k],
                                        "dataset": doc["dataset"] if last else {"stages": []}}, "bench", workdir)
        if config is None:
            raise SystemExit("\n".join(str(i) for i in issues))
        if last:
            wall = time.perf_counter() - t0
        c0 = time.process_time()
        result = run_pipeline(config, resume=True, progress=False)
        name = "materialise" if last else doc["stages"][k - 1]["kind"]
        cpu_s[name] = time.process_time() - c0
        if not last:
            stats[name] = result.stats[name]
        rss_after[name] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    store = RunStore(workdir / "run")
    dialogues = store.scan_raw("fc.dialogues").select("status", "n_messages").collect()
    ok = dialogues.filter(pl.col("status") == "ok")
    stages = {name: {"seconds": round(s.seconds, 1), "requests": s.llm.requests, "rows": s.rows_written}
              for name, s in stats.items()}
    n_messages = int(ok["n_messages"].sum())
    samples = store.scan_raw("fc.samples").filter(pl.col("status") == "ok").select(pl.len()).collect().item()
    derived = store.scan_raw("fc.irrelevance").filter(pl.col("status") == "ok").select(pl.len()).collect().item()
    training = samples + derived
    requests = sum(s["requests"] for s in stages.values())
    client_cpu = sum(v for k, v in cpu_s.items() if k != "materialise")
    from determinism import dataset_hash

    digest, dataset_rows = dataset_hash(workdir / "run")
    n_topics = len((workdir / "topics.jsonl").read_text(encoding="utf-8").splitlines())
    return {
        "target_training_turns": turns, "topics": n_topics, "episodes": dialogues.height, "episodes_ok": ok.height,
        "messages": n_messages, "training_turns": training, "samples": samples, "irrelevance": derived,
        "wall_s": round(wall, 1), "training_turns_per_s": round(training / wall, 1),
        "messages_per_s": round(n_messages / wall, 1),
        "requests": requests,
        "client_cpu_s": round(client_cpu, 3),
        "client_cpu_ms_per_request": round(1000 * client_cpu / max(1, requests), 3),
        "client_cpu_ms_per_training_turn": round(1000 * client_cpu / max(1, training), 3),
        "cpu_s_per_stage": {k: round(v, 3) for k, v in cpu_s.items()},
        "dataset_hash": digest, "dataset_rows": dataset_rows,
        "peak_rss_mb": rss_after["fc.answer_judge"],  # the pipeline's stages, without materialise
        "concurrency": concurrency, "peak_rss_mb_after_stage": rss_after, "stages": stages,
    }


def export_tree(rev: str) -> Path:
    """The ``fabrika`` package of commit ``rev`` exported (``git archive``) into a fresh temporary directory."""
    dest = Path(tempfile.mkdtemp(prefix="fc_scale_base_"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "fabrika"],  # noqa: S603, S607
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)  # noqa: S603, S607
    return dest


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def print_cpu(results: list[dict]) -> None:
    """Client CPU per request and per training turn, by code and size (median over repeats), by stage."""
    groups: dict[tuple[int, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["target_training_turns"], r["code"]), []).append(r)
    print("\nclient CPU (the pipeline child: user + system, FC stages without materialise; median of repeats)")
    print(f"{'code':>14} {'turns':>7} {'requests':>9} {'ms/request':>11} {'ms/train turn':>14} {'server ms/req':>14} "
          f"{'dataset hash':>17}")
    medians: dict[tuple[int, str], dict] = {}
    for key, rs in groups.items():
        rs = sorted(rs, key=lambda r: r["client_cpu_ms_per_request"])
        med = medians[key] = rs[len(rs) // 2]
        hashes = ",".join(sorted({r["dataset_hash"] for r in rs}))
        print(f"{key[1]:>14} {med['training_turns']:>7} {med['requests']:>9} {med['client_cpu_ms_per_request']:>11} "
              f"{med['client_cpu_ms_per_training_turn']:>14} {med['server_cpu_ms_per_request']:>14} {hashes:>17}")
    print("\nCPU seconds per request by stage (stage CPU ÷ all FC requests of the run, so the rows add up)")
    stage_names = list(results[0]["cpu_s_per_stage"])
    print(f"{'code':>14} {'turns':>7} " + " ".join(f"{n.removeprefix('fc.'):>13}" for n in stage_names))
    for key, med in medians.items():
        per = [1000 * med["cpu_s_per_stage"][n] / max(1, med["requests"]) for n in stage_names]
        print(f"{key[1]:>14} {key[0]:>7} " + " ".join(f"{v:>11.3f}ms" for v in per))
    for turns in sorted({k[0] for k in medians}):
        base = [v for k, v in medians.items() if k[0] == turns and k[1] != "this tree"]
        mine = medians.get((turns, "this tree"))
        if base and mine:
            b = base[0]
            same = "identical" if b["dataset_hash"] == mine["dataset_hash"] else "DIFFERENT"
            print(f"{turns} turns: this tree ÷ base = {mine['client_cpu_ms_per_request'] / b['client_cpu_ms_per_request']:.2f}x "
                  f"client CPU per request ({b['client_cpu_ms_per_request']} → {mine['client_cpu_ms_per_request']} ms); "
                  f"datasets {same} ({b['dataset_hash']} / {mine['dataset_hash']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--training-turns", type=int, nargs="+", default=[30000, 300000],
                    help="Sizes to run, in training turns (samples), not messages.")
    ap.add_argument("--concurrency", type=int, default=256, help="Engine and endpoint in-flight limit.")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="Fake server latency per request.")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="Also run each size with the fabrika package of commit REV (git archive), alternated "
                         "with this tree against the same server: client CPU before/after in one run.")
    ap.add_argument("--repeat", type=int, default=1, help="Runs per size and code (the median is reported).")
    ap.add_argument("--together", action="store_true",
                    help="With --baseline: run both codes' children at the same time (the same load for both on "
                         "a shared box; CPU seconds, not wall time, are then the figure to compare).")
    ap.add_argument("--code", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.latency_ms, args.replay)
        return
    if args.child:
        with tempfile.TemporaryDirectory(prefix="fc_scale_") as tmp:
            print(json.dumps(child(args.training_turns[0], args.port, args.concurrency, Path(tmp))), flush=True)
        return
    base_tree = export_tree(args.baseline) if args.baseline else None
    server = subprocess.Popen([sys.executable, __file__, "--serve", "--latency-ms", str(args.latency_ms)],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline() if server.stdout else ""
        if not line.startswith("READY"):
            raise SystemExit(f"fake server did not start: {line!r}")
        port = int(line.split()[1])
        codes: list[tuple[str, Path | None]] = [("this tree", None)]
        if base_tree is not None:
            codes = [(f"base {args.baseline}", base_tree), *codes]
        results = []
        for turns in args.training_turns:
            for _ in range(args.repeat):
                cmds = []
                for label, tree in codes:
                    cmd = [sys.executable, __file__, "--child", "--training-turns", str(turns), "--port", str(port),
                           "--concurrency", str(args.concurrency)]
                    if tree is not None:
                        cmd += ["--code", str(tree)]
                    cmds.append((label, cmd))
                # --together: every code's child at once, so each meets the same load on a shared box (the
                # server's CPU is then the pair's, per request of both); else alternated, one after the other
                batches = [cmds] if args.together else [[c] for c in cmds]
                for batch in batches:
                    server_cpu0 = proc_cpu_s(server.pid)
                    procs = [(label, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # noqa: S603
                                                      text=True)) for label, cmd in batch]
                    done = []
                    for label, proc in procs:
                        stdout, stderr = proc.communicate()
                        if proc.returncode != 0:
                            raise SystemExit(f"child ({label}) for {turns} turns failed:\n{stderr[-3000:]}")
                        res = json.loads(stdout.strip().splitlines()[-1])
                        res["code"] = label
                        done.append(res)
                    server_ms = 1000 * (proc_cpu_s(server.pid) - server_cpu0) / max(1, sum(r["requests"] for r in done))
                    for res in done:
                        res["server_cpu_ms_per_request"] = round(server_ms, 3)
                        results.append(res)
                        print(json.dumps(res, ensure_ascii=False), flush=True)
        print(f"\nlatency {args.latency_ms} ms, concurrency {args.concurrency}")
        print(f"{'code':>14} {'training turns':>15} {'messages':>9} {'requests':>9} {'wall s':>8} {'train/s':>8} "
              f"{'peak RSS MB':>12} {'+ materialise':>14}")
        for r in results:
            print(f"{r['code']:>14} {r['training_turns']:>15} {r['messages']:>9} {r['requests']:>9} {r['wall_s']:>8} "
                  f"{r['training_turns_per_s']:>8} {r['peak_rss_mb']:>12} {r['peak_rss_mb_after_stage']['materialise']:>14}")
        print_cpu(results)
        mine = [r for r in results if r["code"] == "this tree"]
        if len(mine) > 1 and mine[0]["training_turns"] != mine[-1]["training_turns"]:
            first, last = mine[0], mine[-1]
            print(f"RSS growth {first['training_turns']} → {last['training_turns']} training turns: "
                  f"{last['peak_rss_mb'] / first['peak_rss_mb']:.2f}x (FC stages), "
                  f"{last['peak_rss_mb_after_stage']['materialise'] / first['peak_rss_mb_after_stage']['materialise']:.2f}x "
                  "(with materialise)")
    finally:
        server.terminate()
        server.wait(timeout=10)
        if base_tree is not None:
            shutil.rmtree(base_tree, ignore_errors=True)  # the mkdtemp directory itself, never its parent


if __name__ == "__main__":
    main()
