"""Wrong, truncated, refused and non-Russian answers at every IF stage: recorded rejections, the run goes on.

Server errors (5xx) are not results: their items stay pending and the run reports that it did not finish.

The fake server answers each IF role with the package's own sim responders (over
real HTTP), and injects seeded faults into 25 % of all requests.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import polars as pl

from fabrika.generators.instruct import sim_responders as sim
from fabrika.llm.types import ChatRequest, Choice
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.run import RunStore
from fabrika.testing import FakeOpenAIServer

ROLES = {"if.verifiers": sim.sim_verifier, "if.backtranslate": sim.sim_backtranslate, "if.respond": sim.sim_respond,
         "if.expand": sim.sim_expand}


_SEEDS = itertools.count()  # one sequence for every responder: no two answers share a seed


def over_http(tag: str, fn, counter=_SEEDS):
    def responder(req: dict):
        request = ChatRequest(messages=tuple(req["messages"]), tag=tag)
        out = fn(request, random.Random(next(counter)))
        return {"content": out.content, "finish_reason": out.finish_reason} if isinstance(out, Choice) else out
    return responder


def test_faults_at_every_stage_become_reasons(tmp_path: Path):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in [
        "Весь ответ должен быть написан строчными буквами.", "В ответе не должно быть ни одной запятой.",
        "Ответ должен заканчиваться фразой «Удачи!».", "Ответ должен содержать не менее 20 слов."]), encoding="utf-8")
    with FakeOpenAIServer() as srv:
        for tag, fn in ROLES.items():
            srv.script(tag=tag, responder=over_http(tag, fn))
        srv.faults(rate=0.25, kinds=["server", "bad_request", "length", "wrong_language", "truncated_json"], seed=7)
        config, issues = validate_data({
            "name": "if_faults", "seed": 5, "run_dir": str(tmp_path / "run"),
            "llm": {"backend": "openai", "model": "fake", "endpoints": [{"base_url": srv.base_url}],
                    "max_retries": 0, "cache": {"enabled": False},
                    "group_samples": False},  # one HTTP request per sample: counts and faults are per request
            "stages": [
                {"kind": "if.expand", "library_seeds": False, "seed_files": [str(seeds)], "target_count": 80},
                {"kind": "if.dedup", "input": "if.expand"},
                {"kind": "if.verifiers", "input": "if.dedup", "k": 8},
                {"kind": "if.consistency", "input": "if.verifiers", "workers": 2, "timeout_s": 0.5},
                {"kind": "if.backtranslation", "input": "if.verifiers", "similarity": {"backend": "tfidf"}},
                {"kind": "if.queries", "input": "if.verifiers", "queries_per_constraint": 3},
                {"kind": "if.responses", "input": "if.queries", "k": 3},
                {"kind": "if.samples", "input": "if.responses"},
            ],
            "filters": {"consistency": {"min_unique_functions": 2, "min_unique_cases": 5}},
            "dataset": {"stages": ["if.samples"]},
        }, "test", tmp_path)
        assert config is not None, [str(i) for i in issues]
        result = run_pipeline(config, resume=False, progress=False)
        assert sum(srv.counts["faults"].values()) > 10

    assert result.internal_errors == 0
    # a 5xx after its retries is an outage, not a result: those items stay pending for the next run
    assert result.pending > 0 and not result.complete
    store = RunStore(tmp_path / "run")
    allowed = {"llm_error", "truncated", "not_russian", "garbled", "invalid_json", "syntax_error", "too_short",
               "no_valid_verifiers", "missing_function", "no_test_cases", "bad_test_case", "no_evaluate_function",
               "empty_answer", "no_constraints", "no_backtranslation", "no_surviving_function", "too_long"}
    seen: dict[str, set[str]] = {}
    for stage in ("if.expand", "if.verifiers", "if.backtranslation", "if.responses"):
        reasons = store.scan_raw(stage).collect().filter(pl.col("status") == "rejected")["reason"].to_list()
        kinds = {r.split(":")[0] for r in reasons}
        assert kinds <= allowed, (stage, kinds - allowed)
        seen[stage] = kinds
    assert seen["if.expand"] and seen["if.verifiers"] and seen["if.responses"]
    assert "llm_error" in set().union(*seen.values())
    assert {"truncated", "not_russian"} <= seen["if.responses"] | seen["if.expand"]
    assert store.scan_raw("if.samples").collect().height > 0  # the run went on to produce samples
