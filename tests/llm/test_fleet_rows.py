"""Stage rows do not depend on how the fleet is used: n=K vs K requests, least-loaded vs affinity routing.

The runs go through the real runner, engine and HTTP transport against fake servers in vLLM mode
(which seed choice ``j`` of an ``n``-sample request as a lone request with ``seed + j``, as vLLM's
v1 engine does), so a difference in request shape or placement that leaked into the data would
show up as different rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.run import RunStore
from fabrika.testing import FakeOpenAIServer, SimVLLMConfig

SEEDS = {"c-lower": "Весь ответ должен быть написан строчными буквами.",
         "c-comma": "В ответе не должно быть ни одной запятой.",
         "c-words": "Ответ должен содержать не менее 5 слов."}
BODIES = ["return response == response.lower()", "return ',' not in response",
          "return len(response.split()) >= 5", "return len(response) > 3", "не код вовсе ("]


def verifier(req: dict) -> str:
    """A different function per sample seed (the seed is what tells two samples apart)."""
    k = int(req.get("seed") or 0)
    body = BODIES[k % len(BODIES)]
    code = "def evaluate(response):\n    " + body
    cases = [{"input": "пример текста без запятых", "output": True}, {"input": "Да, Нет", "output": k % 2 == 0}]
    return json.dumps({"func": code, "cases": cases}, ensure_ascii=False)


def run_verifiers(tmp_path: Path, name: str, *, group: bool, routing: str = "affinity", servers: int = 1,
                  k: int = 5) -> tuple[pl.DataFrame, list[list[int]]]:
    seeds = tmp_path / f"{name}-seeds.jsonl"
    seeds.write_text("\n".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) for i, t in SEEDS.items()),
                     encoding="utf-8")
    fleet = [FakeOpenAIServer(vllm=SimVLLMConfig(slots=4, time_scale=1000.0)) for _ in range(servers)]
    for srv in fleet:
        srv.script(tag="if.verifiers", responder=verifier)
        srv.start()
    try:
        config, issues = validate_data({
            "name": name, "seed": 3, "run_dir": str(tmp_path / name),
            "plugins": ["fabrika.generators.instruct"],
            "llm": {"backend": "openai", "model": "fake", "seed": 11, "temperature": 1.0, "max_retries": 0,
                    "cache": {"enabled": False}, "group_samples": group, "routing": routing, "probe": False,
                    "endpoints": [{"base_url": s.base_url, "max_concurrency": 8} for s in fleet]},
            "stages": [
                {"kind": "if.expand", "library_seeds": False, "seed_files": [str(seeds)], "target_count": 0},
                {"kind": "if.dedup", "input": "if.expand"},
                {"kind": "if.verifiers", "input": "if.dedup", "k": k},
            ],
            "dataset": {"stages": ["if.verifiers"]},
        }, "test", tmp_path)
        assert config is not None, [str(i) for i in issues]
        result = run_pipeline(config, resume=False, progress=False)
        assert result.complete, result.problems
        ns = [[int(b.get("n") or 1) for b in s.requests] for s in fleet]
    finally:
        for srv in fleet:
            srv.stop()
    frame = RunStore(tmp_path / name).scan_raw("if.verifiers").collect()
    return frame.select(sorted(c for c in frame.columns if c not in ("created_at", "seconds"))).sort("id"), ns


def test_n_k_and_k_requests_give_the_same_rows(tmp_path: Path) -> None:
    grouped, ns_grouped = run_verifiers(tmp_path, "grouped", group=True)
    separate, ns_separate = run_verifiers(tmp_path, "separate", group=False)
    assert sorted(ns_grouped[0]) == [5, 5, 5]  # one n=5 request per constraint
    assert ns_separate[0] == [1] * 15
    assert grouped.height > 0 and grouped.equals(separate)
    # the samples differ (a grouped run that copied one sample five times would not be equal anyway)
    assert grouped.filter(pl.col("status") == "ok").height >= 2


def test_rows_identical_between_routing_modes(tmp_path: Path) -> None:
    affinity, ns_a = run_verifiers(tmp_path, "affinity", group=False, routing="affinity", servers=3)
    least, ns_l = run_verifiers(tmp_path, "least", group=False, routing="least_loaded", servers=3)
    assert sum(map(len, ns_a)) == sum(map(len, ns_l)) == 15
    assert affinity.equals(least)
