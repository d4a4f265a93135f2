"""``llm_workers: N`` with stages that may run at once: the endpoint limit is shared among every engine
that can send at the same time — the workers of each split stage and the driver when a global LLM
stage of its may run next to one — so the fleet never sees more than ``max_concurrency`` in flight."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fabrika.pipeline.config import PipelineConfig, limit_shares, validate_data
from fabrika.pipeline.partition import driver_config, worker_config
from fabrika.pipeline.runner import run_pipeline
from fabrika.testing import FakeOpenAIServer
from tests.pipeline import llm_worker_stages as ws

ENDPOINT = "http://127.0.0.1:1/v1"


def config(tmp_path: Path, doc: dict[str, Any]) -> PipelineConfig:
    cfg, issues = validate_data(doc, "w.yaml", tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    return cfg


def doc(run_dir: Path, workers: int, stages: list[dict[str, Any]], limit: int = 12, **top: Any) -> dict[str, Any]:
    return {"name": "w", "run_dir": str(run_dir), "plugins": ["tests.pipeline.llm_worker_stages"],
            "llm": {"backend": "openai", "model": "fake", "max_retries": 0,
                    "endpoints": [{"base_url": ENDPOINT, "max_concurrency": limit}]},
            "llm_workers": workers, "max_in_flight": 4, "stages": stages, **top}


NUM = {"kind": "test.numbers", "n": 4}


def ask(name: str, src: str = "test.numbers") -> dict[str, Any]:
    return {"kind": "test.wask", "name": name, "input": src}


def test_engines_that_may_send_at_once_are_read_from_the_dependency_graph(tmp_path: Path) -> None:
    chain = [NUM, ask("a"), ask("b", "a")]  # b waits for a: one split stage at a time, nothing in the driver
    assert limit_shares(config(tmp_path, doc(tmp_path / "r", 2, chain))) == (2, False)
    branches = [NUM, ask("a"), ask("b")]  # two independent split stages
    assert limit_shares(config(tmp_path, doc(tmp_path / "r", 2, branches))) == (4, False)
    assert limit_shares(config(tmp_path, doc(tmp_path / "r", 2, branches, max_parallel_stages=1))) == (2, False)
    beside = [NUM, ask("a"), {"kind": "test.wask_global", "name": "g", "input": "test.numbers"}]
    assert limit_shares(config(tmp_path, doc(tmp_path / "r", 2, beside))) == (3, True)
    after = [NUM, ask("a"), {"kind": "test.wask_global", "name": "g", "input": "a"}]  # g waits for a
    assert limit_shares(config(tmp_path, doc(tmp_path / "r", 2, after))) == (2, False)
    assert limit_shares(config(tmp_path, doc(tmp_path / "r", 1, beside))) == (1, False)


def test_every_engine_gets_one_share_and_together_they_stay_within_the_limit(tmp_path: Path) -> None:
    beside = [NUM, ask("a"), {"kind": "test.wask_global", "name": "g", "input": "test.numbers"}]
    cfg = config(tmp_path, doc(tmp_path / "r", 2, beside, limit=12))
    worker, driver = worker_config(cfg, 2), driver_config(cfg)
    assert worker.llm.endpoints[0].max_concurrency == driver.llm.endpoints[0].max_concurrency == 4
    assert 2 * worker.llm.endpoints[0].max_concurrency + driver.llm.endpoints[0].max_concurrency <= 12
    assert 2 * worker.llm.max_in_flight + driver.llm.max_in_flight <= cfg.llm.max_in_flight
    alone = config(tmp_path, doc(tmp_path / "r", 2, [NUM, ask("a")]))
    assert driver_config(alone) is alone  # nothing of the driver's runs next to a split stage: undivided


def test_an_endpoint_limit_below_the_engines_that_share_it_is_a_config_error(tmp_path: Path) -> None:
    beside = [NUM, ask("a"), {"kind": "test.wask_global", "name": "g", "input": "test.numbers"}]
    cfg, issues = validate_data(doc(tmp_path / "r", 2, beside, limit=2), "w.yaml", tmp_path)
    errors = [i for i in issues if i.level == "error"]
    assert cfg is None and errors and errors[0].path == "llm.endpoints[0].max_concurrency"
    assert "3 engine clients" in errors[0].message and "at least 3" in errors[0].message


def test_a_global_llm_stage_next_to_a_split_one_shares_the_endpoint_limit(tmp_path: Path) -> None:
    """The driver's global stage starts asking once the split stage's workers are well into their items
    (it waits for 5 lines of their call log: both workers have sent, one has finished), so both send at
    once. The server's peak in flight stays within the endpoint's limit (before the driver took a share,
    it reached the limit plus the workers': 10 of 6), and the dataset is the one-process run's."""
    limit = 6
    digests = {}
    with FakeOpenAIServer(latency_ms=300) as srv:
        for n in (1, 2):
            log = tmp_path / f"calls{n}.log"
            stages = [{"kind": "test.numbers", "n": 24},
                      {"kind": "test.wask", "name": "split", "input": "test.numbers", "log": str(log)},
                      {"kind": "test.wask_global", "name": "beside", "input": "test.numbers", "wait_for": str(log),
                       "wait_lines": 5}]
            d = doc(tmp_path / f"r{n}", n, stages, limit=limit, dataset={"stages": ["split", "beside"]})
            d["llm"]["endpoints"][0]["base_url"] = srv.base_url
            cfg = config(tmp_path, d)
            srv.reset_counts()
            result = run_pipeline(cfg, resume=False, progress=False)
            assert result.complete, result.problems
            assert (result.stats["split"].ok_rows, result.stats["beside"].ok_rows) == (24, 24)
            assert srv.max_in_flight <= limit, (n, srv.max_in_flight)
            digests[n] = ws.dataset_digest(cfg.resolved_run_dir)
            if n == 2:
                assert result.stats["split"].report["llm_workers"]["workers"] == 2
    assert digests[1] == digests[2] and digests[1][1] == 48
