"""Fleet bench: the FC pipeline on a simulated vLLM fleet — least-loaded vs prefix-affinity routing,
sequential vs overlapping stages (when the runner has the setting), and K sample requests vs one
n=K request.

A child process serves ``--servers`` fake OpenAI servers in vLLM mode
(:mod:`fabrika.testing.sim_vllm`: ``--slots`` sequence slots each, a prefix cache bounded by
``--kv-tokens`` of KV memory per server (default: an 8B model on an 80 GB GPU, see
``sim_vllm.KV_CACHE_TOKENS``), answer times from the cost model) that answer every FC role with
the sim responders. For each configuration a fresh fleet (empty caches) serves the FC pipeline
through the real runner and engine (openai backend, aiohttp, LLM cache off): fc.tools →
fc.tools_dedup → fc.plans → fc.dialogues → fc.samples. The client never queues a request
itself: the engine's ``max_in_flight`` is the endpoints' sum and endpoint ``max_concurrency`` is
four times the slots (at least twice the items in flight), so every request the pipeline has goes straight to a server, each server
keeps its own queue (as a vLLM server does), and the routing policy — not whichever client slot
freed first — decides placement. What the client has in flight is bounded only by the items the
runner processes at once (``--items-in-flight``: episodes in the dialogues stage).

Then the *samples* scenario: ``--prompts`` prompts × ``--k`` samples each (as IF
verifiers or difficulty pass rates ask) through the engine, with
``llm.group_samples`` off (K requests) and on (n=K).

Per configuration it prints: makespan (simulated seconds, first arrival to last answer across
the fleet), ideal makespan (total slot-seconds of work ÷ all slots), utilisation (busy
slot-seconds ÷ slots × makespan per server: mean, min), the steady part (from the first to the
last second in which the fleet's slots were at least 90% busy: ramp-up before it and the drain
after it are left out, idle gaps inside it — stage boundaries — are counted) and its share of the
makespan, where idle slot-time went (no request anywhere in the fleet: the pipeline had nothing
to send; or idle on one server while another had a queue: placement), prompt tokens prefilled vs
served from the prefix cache, per role, affinity's home / spill / fallback counts, and the ratios;
plus whether the datasets of the configurations are equal.

    .venv/bin/python bench/fleet.py --servers 4 --slots 64 --topics 100
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NOUNS = ["Доставка", "Бронирование", "Ремонт", "Аренда", "Запись", "Оплата", "Обучение", "Страхование"]
FC_TAGS = ["fc.tools", "fc.planner", "fc.judge", "fc.user", "fc.tool", "fc.assistant"]


def serve(n: int, slots: int, time_scale: float, kv_tokens: int, turns: int = 0) -> None:
    """Child: ``n`` vLLM-mode fake servers; FC roles answered by the sim responders (``turns``: user turns
    of every multi_turn plan, each a two-round call chain; 0: the sim planner's own 2-3 short turns)."""
    from fabrika.generators.fc import sim_responders as sr
    from fabrika.llm.types import ChatRequest, Choice
    from fabrika.schemas.ids import derive_seed
    from fabrika.testing import FakeOpenAIServer, SimVLLMConfig

    def wrap(tag: str, fn):  # noqa: ANN001, ANN202
        def responder(req: dict) -> object:
            request = ChatRequest(messages=tuple(req["messages"]), tools=tuple(req.get("tools") or ()) or None,
                                  tag=tag, meta={"sim_error_rate": 0.1, "sim_turns": turns})
            out = fn(request, random.Random(derive_seed(tag, req["messages"], req.get("seed"))))
            if isinstance(out, Choice):
                if out.tool_calls:
                    return {"tool_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in out.tool_calls]}
                return out.content or ""
            return out
        return responder

    ports = []
    cfg = SimVLLMConfig(slots=slots, time_scale=time_scale, cache_blocks=kv_tokens // SimVLLMConfig.block_tokens)
    for _ in range(n):
        srv = FakeOpenAIServer(vllm=cfg)
        for tag in FC_TAGS:
            srv.script(tag=tag, responder=wrap(tag, sr.RESPONDERS[tag]))
        srv.app.record_limit = 0
        srv.start()
        ports.append(srv.port)
    print("READY " + " ".join(map(str, ports)), flush=True)
    threading.Event().wait()


class Fleet:
    """The server child: start, read its ports, fetch stats, stop."""

    def __init__(self, servers: int, slots: int, time_scale: float, kv_tokens: int, turns: int = 0) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(servers), str(slots), str(time_scale),
                                      str(kv_tokens), str(turns)],
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("READY"):
            raise SystemExit(f"fleet did not start: {line!r}")
        self.urls = [f"http://127.0.0.1:{p}/v1" for p in line.split()[1:]]

    def cpu_s(self) -> float:
        """CPU seconds the server child has used (Linux /proc; 0 elsewhere)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def stats(self) -> list[dict]:
        out = []
        for u in self.urls:
            with urllib.request.urlopen(u + "/stats", timeout=10) as resp:
                out.append(json.loads(resp.read()))
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


#: the FC stages by the roles that call the LLM in them (the server sees only the role header)
STAGE_ROLES = {"fc.tools": ("fc.tools",), "fc.plans": ("fc.planner", "fc.judge"),
               "fc.dialogues": ("fc.user", "fc.tool", "fc.assistant")}
#: the roles of the last LLM stage: its items' first requests mark when its input was exhausted
LAST_STAGE_TAGS = frozenset(STAGE_ROLES["fc.dialogues"])
#: the pipeline's head: requests that all finish before any later stage starts (fc.tools_dedup is global
#: and fc.plans indexes its whole input, so they are barriers with and without overlap)
HEAD_TAGS = frozenset(STAGE_ROLES["fc.tools"])


def workload_window(log: list[list], demand: list[float], slots: int, first: int, b: float) -> tuple[float, float]:
    """The steady part, defined by the workload rather than by the utilisation it reached:
    from the first second in which the servers held at least ``slots`` requests (the pipeline had
    enough to fill the fleet) to the moment the last item of the last stage sent its first request
    (its input is exhausted; after it the fleet only drains the items in flight). Without keyed
    last-stage requests (the samples scenario) the end is the last arrival."""
    start = next(((first + i) * b for i, v in enumerate(demand) if v >= slots - 1e-9), None)
    episode_start: dict[str, float] = {}
    for key, tag, arrival, _s, _d in log:
        if key and tag in LAST_STAGE_TAGS and key not in episode_start:
            episode_start[key] = arrival
    end = max(episode_start.values()) if episode_start else max((e[3] for e in log), default=0.0)
    if start is None or start >= end:
        return end, end
    return start, end


def critical_path(log: list[list], work: float, slots: int) -> dict[str, float]:
    """Lower bounds on the makespan from the run's dependency structure, at the service times as run
    (a request's ``done - start``: prefill of its uncached tokens and decode, no queue wait).

    * ``head``: the longest request of the head (fc.tools); nothing after the tools barrier starts before it.
    * ``chain``: per routing key (a plan: its planner/judge rounds, then its episode's turns), requests are
      grouped in arrival order, one that arrives while an earlier one is still running counting as parallel
      (the tool agent's answers to parallel calls), and the groups' longest services add up; ``head + the
      longest chain`` bounds any schedule, overlapping stages included.
    * ``stages``: with each stage a barrier, ``head + the longest plan part + the longest episode part``.
    * ``work``: ``head + (all work - the head's work) / slots``.
    """
    head = max((d - s for _k, tag, _a, s, d in log if tag in HEAD_TAGS), default=0.0)
    head_work = sum(d - s for _k, tag, _a, s, d in log if tag in HEAD_TAGS)
    by_key: dict[str, list[tuple[float, float, float, bool]]] = {}
    for key, tag, arrival, start, done in log:
        if key:
            by_key.setdefault(key, []).append((arrival, start, done, tag in LAST_STAGE_TAGS))
    longest = longest_plan = longest_episode = 0.0
    for entries in by_key.values():
        entries.sort()
        parts = [0.0, 0.0]  # plan part, episode part
        group_end, group_cost, group_part = float("-inf"), 0.0, 0
        for arrival, start, done, last_stage in entries:
            if arrival >= group_end - 1e-9:
                parts[group_part] += group_cost
                group_end, group_cost, group_part = done, 0.0, int(last_stage)
            group_end = max(group_end, done)
            group_cost = max(group_cost, done - start)
        parts[group_part] += group_cost
        longest = max(longest, sum(parts))
        longest_plan, longest_episode = max(longest_plan, parts[0]), max(longest_episode, parts[1])
    return {"head_s": head, "chain_s": head + longest, "stages_s": head + longest_plan + longest_episode,
            "work_s": head + (work - head_work) / slots, "longest_chain_s": longest}


def _series(line: dict[str, float], bucket: float, first: int, last: int) -> list[float]:
    """Per bucket ``first..last`` (inclusive): the value ÷ bucket length (busy slots, or requests in the server)."""
    return [line.get(str(i), 0.0) / bucket for i in range(first, last + 1)]


def summarise(stats: list[dict]) -> dict:
    """Makespan, ideal, utilisation (whole run and steady part), where idle time went, tokens per role."""
    start = min(s["first_arrival"] for s in stats if s["first_arrival"] >= 0)
    end = max(s["last_done"] for s in stats)
    makespan = end - start
    slots = sum(s["slots"] for s in stats)
    work = sum(s["busy_slot_s"] for s in stats)
    util = [s["busy_slot_s"] / (s["slots"] * makespan) for s in stats]
    b = stats[0]["bucket_s"]
    first, last = int(start // b), int(end // b)
    busy = [_series(s["timeline"], b, first, last) for s in stats]
    demand = [_series(s["demand"], b, first, last) for s in stats]
    fleet_busy = [sum(col) for col in zip(*busy)]
    fleet_demand = [sum(col) for col in zip(*demand)]
    log = sorted((e for s in stats for e in s.get("log", [])), key=lambda e: e[2])
    # the steady part, from the workload: the fleet first offered >= slots requests .. the last stage's
    # input exhausted (whole buckets from the first one's to the end's)
    w0, w1 = workload_window(log, fleet_demand, slots, first, b)
    w0 = max(w0, start)  # the first bucket may begin before the first arrival
    lo, hi = int(w0 // b) - first, int(w1 // b) - first
    if hi > lo:
        steady = [sum(row[lo:hi]) / (s["slots"] * (hi - lo)) for row, s in zip(busy, stats)]
        steady_s = (hi - lo) * b
    else:
        steady, steady_s = [0.0] * len(stats), 0.0
    # idle slot-time: nothing queued anywhere (the pipeline had nothing to send) vs idle here while
    # another server had a queue (placement could have used this slot)
    idle_starved = idle_misplaced = 0.0
    for i in range(len(fleet_busy)):
        queued_elsewhere = [d[i] > s["slots"] + 1e-9 for d, s in zip(demand, stats)]
        for k, s in enumerate(stats):
            idle = max(0.0, s["slots"] - busy[k][i]) * b
            if any(q for j, q in enumerate(queued_elsewhere) if j != k):
                idle_misplaced += idle
            else:
                idle_starved += idle
    by_tag: dict[str, dict[str, float]] = {}
    for s in stats:
        for tag, c in s.get("by_tag", {}).items():
            agg = by_tag.setdefault(tag, {})
            for key, v in c.items():
                if key == "first_arrival":
                    agg[key] = min(agg.get(key, v), v)
                elif key == "last_done":
                    agg[key] = max(agg.get(key, v), v)
                else:
                    agg[key] = agg.get(key, 0) + v
    # per stage (its roles' first request to last answer): utilisation and requests in the servers
    stages = {}
    for stage, tags in STAGE_ROLES.items():
        seen = [by_tag[t] for t in tags if t in by_tag]
        if not seen:
            continue
        t0, t1 = min(c["first_arrival"] for c in seen), max(c["last_done"] for c in seen)
        i0, i1 = int(t0 // b) - first, min(len(fleet_busy), int(t1 // b) - first + 1)
        if i1 > i0:
            stages[stage] = {"window_s": t1 - t0, "share": (t1 - t0) / makespan,
                             "util": sum(fleet_busy[i0:i1]) / (slots * (i1 - i0)),
                             "in_servers": sum(sum(d[i0:i1]) for d in demand) / (i1 - i0)}
    prefilled = sum(s["prompt_tokens_prefilled"] for s in stats)
    cached = sum(s["prompt_tokens_cached"] for s in stats)
    span = len(fleet_busy) * b
    bounds = critical_path(log, work, slots)
    lower = max(work / slots, bounds["chain_s"], bounds["work_s"])
    return {"makespan_s": makespan, "ideal_s": work / slots, "util_mean": sum(util) / len(util), "util_min": min(util),
            "steady_util_mean": sum(steady) / len(steady), "steady_util_min": min(steady),
            "steady_share": steady_s / makespan if makespan else 0.0,
            "steady_from_s": w0 - start, "steady_to_s": w1 - start, "bounds": bounds, "lower_bound_s": lower,
            "lower_bound_stages_s": max(lower, bounds["stages_s"]),
            "idle_starved": idle_starved / (slots * span), "idle_misplaced": idle_misplaced / (slots * span),
            "mean_in_servers": sum(sum(d) for d in demand) / len(fleet_busy),
            "queue_wait_s": sum(s["queue_wait_s"] for s in stats) / max(1, sum(s["sequences"] for s in stats)),
            "prefilled": prefilled, "cached": cached, "by_tag": by_tag, "stages": stages,
            "evicted_blocks": sum(s["evicted_blocks"] for s in stats),
            "kv_overcommit_blocks": max(s.get("kv_overcommit_blocks", 0) for s in stats),
            "requests": sum(s["requests"] for s in stats), "sequences": sum(s["sequences"] for s in stats),
            "prompt_tokens": sum(s["prompt_tokens"] for s in stats),
            "series": {"start": first * b, "bucket_s": b, "busy": [round(v, 2) for v in fleet_busy],
                       "in_servers": [round(v, 2) for v in fleet_demand],
                       "steady": [round(w0 - first * b, 1), round(w1 - first * b, 1)]}}


def overlap_setting() -> tuple[str, object, object] | None:
    """The pipeline's overlapping-stages setting as ``(field, sequential value, overlapping value)``,
    or None while the runner has none (found by name: a field about overlap or lookahead)."""
    from fabrika.pipeline.config import PipelineConfig

    for name, f in PipelineConfig.model_fields.items():
        if "overlap" not in name and "lookahead" not in name:
            continue
        if f.annotation is bool:
            return name, False, True
        if f.annotation is int:
            on = f.default if isinstance(f.default, int) and f.default > 0 else 4
            return name, 0, on
    return None


class LagProbe(threading.Thread):
    """A thread that sleeps 10 ms at a time and records how late it wakes: on a box with more runnable
    processes than cores (or a GIL held long) the client's event loop is late by about as much, and
    late requests look like idle servers. It also looks at the main thread (the client's event loop)
    each time: a stretch of at least ``BUSY_STRETCH_S`` in which the loop is never back in ``select``
    is time in which no answer is read and no request is sent (the loop is running Python, or the
    process is waiting for a core), which the fleet sees as idle seconds."""

    BUSY_STRETCH_S = 0.25

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.lags: list[float] = []
        self._done = threading.Event()
        self._main = threading.main_thread().ident
        self.samples = self.busy_samples = 0
        self.stretches: list[float] = []

    def _loop_idle(self) -> bool:
        frame = sys._current_frames().get(self._main)  # noqa: SLF001 - a sampling probe, like py-spy's
        return frame is None or frame.f_code.co_name in ("select", "poll") or frame.f_code.co_filename.endswith(
            "selectors.py")

    def run(self) -> None:
        since: float | None = None
        while not self._done.is_set():
            t = time.perf_counter()
            time.sleep(0.01)
            now = time.perf_counter()
            self.lags.append(now - t - 0.01)
            self.samples += 1
            if self._loop_idle():
                if since is not None and now - since >= self.BUSY_STRETCH_S:
                    self.stretches.append(now - since)
                since = None
            else:
                self.busy_samples += 1
                since = now if since is None else since

    def stop(self) -> dict[str, float]:
        self._done.set()
        self.join()
        lags = sorted(self.lags) or [0.0]
        return {"lag_mean_ms": 1000 * sum(lags) / len(lags), "lag_p99_ms": 1000 * lags[int(0.99 * (len(lags) - 1))],
                "loop_busy_share": self.busy_samples / max(1, self.samples),
                "loop_stretches_s": sum(self.stretches), "loop_longest_stretch_s": max(self.stretches, default=0.0)}


class AffinityProbe:
    """Collects the affinity policies the engine builds, for their home / spill / fallback counts."""

    def __init__(self) -> None:
        from fabrika.llm import routing

        self.policies: list = []
        self._cls = routing.AffinityPolicy
        self._orig = self._cls.__post_init__
        probe = self

        def post_init(policy) -> None:  # noqa: ANN001
            probe._orig(policy)
            probe.policies.append(policy)

        self._cls.__post_init__ = post_init  # type: ignore[method-assign]

    def counts(self) -> dict[str, int]:
        out = {"home": 0, "spill": 0, "fallback": 0, "rehomed": 0, "waited": 0, "waited_then_spilled": 0}
        for p in self.policies:
            for k, v in {**p.stats, **p.wait_stats}.items():
                out[k] = out.get(k, 0) + v
        self.policies.clear()
        return out


def fc_run(urls: list[str], routing: str, topics: int, plans: int, per_endpoint: int, items: int, workdir: Path,
           epsilon: float = 0.25, overlap: tuple[str, object] | None = None,
           sample_types: dict[str, float] | None = None, chunk_size: int = 256, home_wait: float = 0.0,
           saturation: float = 0.0) -> str:
    """The FC pipeline against ``urls``; returns a hash of the dataset's content (order-independent)."""
    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store.run import RunStore

    topics_file = workdir / "topics.jsonl"
    with topics_file.open("w", encoding="utf-8") as f:
        for i in range(topics):
            noun = NOUNS[i % len(NOUNS)]
            f.write(json.dumps({"id": f"topic-{i}", "topic": f"{noun} номер {i}", "lang": "ru",
                                "description": f"{noun}: услуги и заказы, раздел {i}",
                                "keywords": [f"{noun.lower()}{i}"]}, ensure_ascii=False) + "\n")
    doc = {
        "name": "fleet", "seed": 1, "run_dir": str(workdir / "run"), "max_in_flight": items,
        "plugins": ["fabrika.generators.fc.stages"],
        "llm": {"backend": "openai", "model": "fake", "max_in_flight": per_endpoint * len(urls), "max_retries": 2,
                "routing": routing, "routing_epsilon": epsilon, "routing_home_wait_s": home_wait,
                # the bench's own baseline is the plain bound (saturation 0: the figures before the
                # routing_saturation default); --variant NAME:saturation=0.5 measures the config default
                "routing_saturation": saturation,
                "timeout_s": 600.0, "probe": False,
                "endpoints": [{"base_url": u, "max_concurrency": per_endpoint} for u in urls],
                "cache": {"enabled": False}},
        "stages": [
            {"kind": "fc.tools", "topics_file": str(topics_file), "tools_per_topic": 3, "chunk_size": chunk_size},
            {"kind": "fc.tools_dedup", "input": "fc.tools", "chunk_size": chunk_size},
            {"kind": "fc.plans", "input": "fc.tools_dedup", "plans_per_topic": plans, "chunk_size": chunk_size,
             **({"sample_types": sample_types} if sample_types else {})},
            {"kind": "fc.dialogues", "input": "fc.plans", "sim_error_rate": 0.1, "chunk_size": chunk_size},
            {"kind": "fc.samples", "input": "fc.dialogues", "chunk_size": chunk_size},
        ],
        "dataset": {"stages": ["fc.samples"]},
    }
    if overlap is not None:
        doc[overlap[0]] = overlap[1]
    config, issues = validate_data(doc, "bench", workdir)
    if config is None:
        raise SystemExit("\n".join(str(i) for i in issues))
    result = run_pipeline(config, resume=True, progress=False)
    if not result.complete:
        raise SystemExit(f"FC run ({routing}) did not finish: {result.problems}")
    frame = RunStore(workdir / "run").scan_raw("fc.samples").collect()
    frame = frame.select(sorted(c for c in frame.columns if c not in ("created_at", "seconds"))).sort("id")
    return hashlib.sha256(frame.write_csv().encode("utf-8")).hexdigest()[:16]


async def samples_run(urls: list[str], group: bool, prompts: int, k: int, per_endpoint: int) -> None:
    from fabrika.llm import ChatRequest, LLMConfig, build_engine

    cfg = LLMConfig(backend="openai", model="fake", routing="affinity", group_samples=group, timeout_s=600.0,
                    max_in_flight=per_endpoint * len(urls), cache={"enabled": False},
                    endpoints=[{"base_url": u, "max_concurrency": per_endpoint} for u in urls])
    eng = build_engine(cfg, None)
    body = "Напиши функцию evaluate(response), которая проверяет, что ответ содержит ровно три абзаца. " * 6
    reqs = [ChatRequest(messages=({"role": "user", "content": f"Ограничение {p}. {body}"},), temperature=1.0,
                        seed=7, sample_index=i, tag="if.verifiers") for p in range(prompts) for i in range(k)]
    async with eng:
        resps = await eng.complete(reqs)
    bad = sum(1 for r in resps if not r.ok)
    if bad:
        raise SystemExit(f"samples run: {bad} failed requests")


def show(name: str, m: dict) -> None:
    print(f"{name:<30} makespan {m['makespan_s']:8.1f} s  ideal {m['ideal_s']:8.1f} s  "
          f"(x{m['makespan_s'] / m['ideal_s']:.2f})  util mean {m['util_mean']:.2f} min {m['util_min']:.2f}  "
          f"steady {m['steady_util_mean']:.2f} (min {m['steady_util_min']:.2f}) over {m['steady_share']:.0%} of the run  "
          f"prompt tokens prefilled {m['prefilled']:>10,} cached {m['cached']:>10,}  "
          f"requests {m['requests']:,} sequences {m['sequences']:,}", flush=True)
    bd = m["bounds"]
    print(f"{'':<30} steady part = {m['steady_from_s']:.1f}-{m['steady_to_s']:.1f} s (the fleet first held >= slots "
          f"requests .. the last episode's first request, or the last request's start); "
          f"lower bound on the makespan {m['lower_bound_s']:.1f} s "
          f"(x{m['lower_bound_s'] / m['ideal_s']:.2f} ideal; with every stage a barrier "
          f"{m['lower_bound_stages_s']:.1f} s, x{m['lower_bound_stages_s'] / m['ideal_s']:.2f}) = max of ideal, "
          f"head {bd['head_s']:.1f} s + rest of the work / slots = {bd['work_s']:.1f} s, head + longest chain "
          f"{bd['longest_chain_s']:.1f} s = {bd['chain_s']:.1f} s; makespan / lower bound "
          f"x{m['makespan_s'] / m['lower_bound_s']:.2f}", flush=True)
    print(f"{'':<30} idle slot-time {m['idle_starved']:.0%} with no request queued anywhere, "
          f"{m['idle_misplaced']:.0%} while another server had a queue; mean requests in the servers "
          f"{m['mean_in_servers']:.0f}, mean server queue wait {m['queue_wait_s']:.2f} s; evicted blocks "
          f"{m['evicted_blocks']:,}, most KV blocks over the pool {m['kv_overcommit_blocks']:,}"
          + (f"; wall {m['wall_s']:.0f} s, CPU of the client {m['client_cpu']:.0%} and the servers "
             f"{m['server_cpu']:.0%}, client wake-up lag mean {m['lag_mean_ms']:.1f} ms p99 {m['lag_p99_ms']:.0f} ms; "
             f"client event loop busy {m['loop_busy_share']:.0%} of the wall, {m['loop_stretches_s']:.0f} s of it in "
             f"stretches >= {LagProbe.BUSY_STRETCH_S} s without reading an answer (longest "
             f"{m['loop_longest_stretch_s']:.1f} s)"
             if "client_cpu" in m else ""),
          flush=True)
    if m.get("affinity"):
        a = m["affinity"]
        total = max(1, a["home"] + a["spill"] + a["fallback"])
        print(f"{'':<30} affinity: home {a['home'] / total:.1%}, spill {a['spill'] / total:.1%}, "
              f"fallback {a['fallback'] / total:.1%} of {total:,} placements"
              + (f"; {a['waited']:,} waited for their home, {a['waited_then_spilled']:,} of them spilled after the wait"
                 if a.get("waited") else ""), flush=True)
    for stage, w in m.get("stages", {}).items():
        if len(m["stages"]) > 1:
            print(f"{'':<30}   stage {stage:<13} {w['window_s']:7.1f} s ({w['share']:.0%} of the makespan): "
                  f"utilisation {w['util']:.2f}, mean requests in the servers {w['in_servers']:.0f}", flush=True)
    for tag, c in sorted(m["by_tag"].items(), key=lambda kv: -kv[1]["prompt_tokens"]):
        if len(m["by_tag"]) > 1:
            print(f"{'':<30}   {tag or '-':<14} prompt tokens {c['prompt_tokens']:>10,} "
                  f"({c['prompt_tokens'] / max(1, m['prompt_tokens']):.0%})  cached "
                  f"{c['prompt_tokens_cached'] / max(1, c['prompt_tokens']):.0%}", flush=True)


def main() -> None:
    from fabrika.testing.sim_vllm import KV_CACHE_TOKENS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--kv-tokens", type=int, default=KV_CACHE_TOKENS,
                    help="KV memory per server in tokens (running sequences and prefix cache together)")
    ap.add_argument("--topics", type=int, default=100, help="FC topics (episodes = topics x plans)")
    ap.add_argument("--plans", type=int, default=10)
    ap.add_argument("--items-in-flight", type=int, default=512,
                    help="items the runner processes at once per stage (episodes in the dialogues stage)")
    ap.add_argument("--prompts", type=int, default=256, help="samples scenario: distinct prompts")
    ap.add_argument("--k", type=int, default=8, help="samples scenario: samples per prompt")
    ap.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall second")
    ap.add_argument("--epsilon", type=float, default=0.25, help="affinity's load bound (llm.routing_epsilon)")
    ap.add_argument("--routings", nargs="+", default=["least_loaded", "affinity"],
                    choices=["least_loaded", "affinity"])
    ap.add_argument("--chunk-size", type=int, default=256, help="FC stages' chunk_size (shard size: overlap's step)")
    ap.add_argument("--skip-samples", action="store_true", help="only the FC routing comparison")
    ap.add_argument("--skip-fc", action="store_true", help="only the samples scenario")
    ap.add_argument("--sample-types", metavar="TYPE=W,...",
                    help="fc.plans sample_types weights, e.g. multi_turn=1,clarification=1 (default: the stage's mix)")
    ap.add_argument("--skip-overlap", action="store_true", help="no sequential-vs-overlap pair")
    ap.add_argument("--overlap-setting", metavar="FIELD:SEQUENTIAL:OVERLAP",
                    help="the pipeline field and its two values (JSON) when detection by name does not find it, "
                         "e.g. lookahead_shards:0:8")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE,...",
                    help="an extra affinity configuration (overlapping stages when the pipeline has them), "
                         "e.g. wait:home_wait=0.25 or eps1:epsilon=1.0 (keys: epsilon, saturation, home_wait in wall "
                         "seconds); repeatable")
    ap.add_argument("--series", help="write per-second busy slots and requests in the servers here (JSON)")
    ap.add_argument("--turns", type=int, default=0,
                    help="user turns of every multi_turn plan (each a chain of two calls in two rounds; the sim "
                         "planner reads it from the request), e.g. 6 with --sample-types multi_turn=3,single=1: "
                         "long episodes, so the pipeline's fixed head is a small share; 0: the planner's 2-3 turns")
    ap.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(int(args.serve[0]), int(args.serve[1]), float(args.serve[2]), int(args.serve[3]), int(args.serve[4]))
        return
    # a client-side slot must never be what decides placement: any one endpoint may be asked to hold every
    # item of two overlapping stages (with 4 x slots alone, overlap runs of 128 items per stage on 16-slot
    # servers had 17% of placements bypass the policy: one endpoint with a free client slot)
    per_endpoint = max(4 * args.slots, 2 * args.items_in_flight)
    results: dict[str, dict] = {}
    hashes: dict[str, str] = {}
    print(f"fleet: {args.servers} servers x {args.slots} slots, KV {args.kv_tokens:,} tokens per server; FC pipeline "
          f"{args.topics} topics x {args.plans} plans, {args.items_in_flight} items in flight; endpoint "
          f"max_concurrency {per_endpoint}; time scale {args.time_scale:g}"
          + (f"; multi_turn plans of {args.turns} turns" if args.turns else "")
          + (f"; sample types {args.sample_types}" if args.sample_types else ""), flush=True)
    sample_types = ({k: float(v) for k, v in (p.split("=") for p in args.sample_types.split(","))}
                    if args.sample_types else None)
    probe = AffinityProbe()
    overlap = None if args.skip_overlap else overlap_setting()
    if args.overlap_setting and not args.skip_overlap:
        field, off, on = args.overlap_setting.split(":", 2)
        overlap = (field, json.loads(off), json.loads(on))
    runs: list[tuple[str, str, tuple[str, object] | None]] = [] if args.skip_fc else [
        (f"FC {r}" + (", sequential" if overlap else ""), r, (overlap[0], overlap[1]) if overlap else None)
        for r in args.routings]
    if overlap is not None and not args.skip_fc:
        runs += [(f"FC {r}, overlap ({overlap[0]}={overlap[2]})", r, (overlap[0], overlap[2])) for r in args.routings]
    extra: dict[str, dict[str, object]] = {}
    for spec in [] if args.skip_fc else args.variant:
        label, _, kvs = spec.partition(":")
        opts = {k: v for k, v in (p.split("=", 1) for p in kvs.split(",") if p)}
        unknown = set(opts) - {"epsilon", "home_wait", "saturation"}
        if unknown:
            raise SystemExit(f"--variant {spec!r}: unknown keys {sorted(unknown)}; use epsilon, home_wait, saturation")
        name = f"FC affinity, {label}" + (f", overlap ({overlap[0]}={overlap[2]})" if overlap else "")
        extra[name] = {"epsilon": float(opts.get("epsilon", args.epsilon)), "home_wait": float(opts.get("home_wait", 0.0)),
                       "saturation": float(opts.get("saturation", 0.0))}
        runs.append((name, "affinity", (overlap[0], overlap[2]) if overlap else None))
    for name, routing, setting in runs:
        knobs = extra.get(name, {"epsilon": args.epsilon})
        fleet = Fleet(args.servers, args.slots, args.time_scale, args.kv_tokens, args.turns)
        try:
            t0, cpu0, server_cpu0 = time.perf_counter(), time.process_time(), fleet.cpu_s()
            lag = LagProbe()
            lag.start()
            with tempfile.TemporaryDirectory() as tmp:
                hashes[name] = fc_run(fleet.urls, routing, args.topics, args.plans, per_endpoint,
                                      args.items_in_flight, Path(tmp), overlap=setting, sample_types=sample_types,
                                      chunk_size=args.chunk_size, **knobs)  # type: ignore[arg-type]
            results[name] = summarise(fleet.stats())
            wall = results[name]["wall_s"] = time.perf_counter() - t0
            # near 1.0: that process (the client: runner + engine on one event loop; or the fake
            # servers) was the limit, not the simulated fleet
            results[name]["client_cpu"] = (time.process_time() - cpu0) / wall
            results[name]["server_cpu"] = (fleet.cpu_s() - server_cpu0) / wall
            results[name].update(lag.stop())
            results[name]["affinity"] = probe.counts() if routing == "affinity" else {}
        finally:
            fleet.stop()
        show(name, results[name])
    for name in extra:
        base = "FC affinity" + (f", overlap ({overlap[0]}={overlap[2]})" if overlap else "")
        ll = "FC least_loaded" + (f", overlap ({overlap[0]}={overlap[2]})" if overlap else "")
        for ref in (base, ll):
            if ref in results and name in results:
                a, r = results[name], results[ref]
                print(f"{name} / {ref}: cached prompt tokens x{a['cached'] / max(1, r['cached']):.2f}, prefilled "
                      f"x{a['prefilled'] / max(1, r['prefilled']):.2f}, makespan x{a['makespan_s'] / r['makespan_s']:.2f}",
                      flush=True)
    for suffix in sorted({n[len(f"FC {r}"):] for n, r, _ in runs if n not in extra}):
        ll, af = results.get(f"FC least_loaded{suffix}"), results.get(f"FC affinity{suffix}")
        if ll and af:
            print(f"affinity / least-loaded{suffix}: cached prompt tokens x{af['cached'] / max(1, ll['cached']):.2f}, "
                  f"prefilled x{af['prefilled'] / max(1, ll['prefilled']):.2f}, "
                  f"makespan x{af['makespan_s'] / ll['makespan_s']:.2f}", flush=True)
    if overlap is None and not args.skip_overlap and not args.skip_fc:
        print("overlap rows not measured: the pipeline config has no overlapping-stages setting "
              "(a field named *overlap* or *lookahead*); every stage is a barrier", flush=True)
    if hashes:
        print(f"datasets equal across configurations: {len(set(hashes.values())) == 1} "
              f"({', '.join(sorted(set(hashes.values())))})", flush=True)
    for group in () if args.skip_samples else (False, True):
        fleet = Fleet(args.servers, args.slots, args.time_scale, args.kv_tokens)
        try:
            asyncio.run(samples_run(fleet.urls, group, args.prompts, args.k, per_endpoint))
            m = summarise(fleet.stats())
        finally:
            fleet.stop()
        m["affinity"] = probe.counts()
        results[f"samples_n{'K' if group else '1'}"] = m
        show(f"samples {'n=K' if group else 'K requests'} (K={args.k})", m)
        per_prompt = m["prompt_tokens"] / m["requests"]
        print(f"  prompts prefilled per sample: {m['prefilled'] / per_prompt / m['sequences']:.3f}"
              f" (1/K = {1 / args.k:.3f})", flush=True)
    if args.series:  # fleet-wide busy slots and requests in the servers per second, per configuration
        Path(args.series).write_text(json.dumps({k: v.pop("series") for k, v in results.items()}), encoding="utf-8")
    for v in results.values():
        v.pop("series", None)
    print("JSON " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
