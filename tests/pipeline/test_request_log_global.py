"""A global stage's LLM requests are logged too: each row carries the requests that made it (``request_scope``),
the rest is the stage's shared record; every request the run sent is in the log, through resume and ``kill -9``,
and the explorer's made-from chain reaches the global stages (a sample → dialogue → plan → tool → topic)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from fabrika.export.explorer import RunExplorer
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.requests import read_item_requests, sidecar_of
from fabrika.store.run import RunStore
from fabrika.store.shards import SHARED_ITEM
from tests.pipeline import request_log_global_stages as gs

ROOT = Path(__file__).parents[2]


def _config(base: Path, doc: dict[str, Any], where: Path | None = None) -> Any:
    cfg, issues = validate_data(doc, str(where or base / "p.yaml"), where.parent if where else base)
    assert cfg is not None, [str(i) for i in issues]
    return cfg


def _sidecars(run: Path, stage: str) -> dict[str, list[dict[str, Any]]]:
    """sidecar item -> entries over the stage's shards (the shared record of every shard under ``""``); each
    sidecar names only rows of its own shard (or the shared item)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for shard in RunStore(run).shards(stage):
        frame = pl.read_parquet(shard)
        items = {str(i or r) for i, r in zip(frame["input_id"].to_list(), frame["id"].to_list())}
        path = sidecar_of(shard)
        if not path.is_file():
            continue
        side = set(pl.read_parquet(path)["item"].to_list())
        assert side <= items | {SHARED_ITEM}, side - items
        for item, entries in read_item_requests(shard, side).items():
            out.setdefault(item, []).extend(entries)
    return out


def _table(run: Path, stage: str) -> pl.DataFrame:
    lf = RunStore(run).scan_raw(stage)
    assert lf is not None
    return lf.collect()


def _distinct(entries: list[dict[str, Any]]) -> set[tuple[str, int, int]]:
    return {(e["key"], e["call"], e["i"]) for e in entries}


# ---- a generic global stage: scoped rows, shared set-up, a request whose row is never written -------------
def test_a_global_stage_s_rows_carry_their_requests_and_the_rest_is_the_shared_record(tmp_path: Path) -> None:
    run = tmp_path / "r"
    result = run_pipeline(_config(tmp_path, gs.pipeline_doc(run, n=8)), resume=False, progress=False)
    assert result.manifest["status"] == "done"
    logs = _sidecars(run, "test.glog")
    rows = _table(run, "test.glog")
    assert len(RunStore(run).shards("test.glog")) == 3  # 3 + 3 + 2 rows
    for rid in rows["id"].to_list():  # each row: exactly the request that made it
        assert [e["tag"] for e in logs[rid]] == ["test.glog.row"]
    shared = logs[SHARED_ITEM]
    assert sorted(e["tag"] for e in shared) == ["test.glog.orphan", "test.glog.setup"]
    # nothing dropped: every request the stage sent (the engine's count, the cache) is in the log exactly once
    entries = [e for es in logs.values() for e in es]
    assert len(entries) == len(_distinct(entries)) == result.manifest["stages"]["test.glog"]["llm"]["requests"] == 10
    cached = {k for (k,) in sqlite3.connect(run / "cache.sqlite").execute("SELECT key FROM responses")}
    assert {e["key"] for e in entries} == cached
    assert all(not any("request" in c for c in pl.read_parquet(s).columns) for s in RunStore(run).shards("test.glog"))


def test_a_global_stage_killed_with_kill_9_is_redone_with_its_log_whole(tmp_path: Path) -> None:
    run = tmp_path / "r"
    doc = gs.pipeline_doc(run, n=8, kill_after_first=True, marker=str(tmp_path / "killed"))
    code = ("import sys, json; from fabrika.pipeline.config import validate_data; "
            "from fabrika.pipeline.runner import run_pipeline; from pathlib import Path; "
            "doc = json.loads(sys.argv[1]); cfg, _ = validate_data(doc, sys.argv[2], Path(sys.argv[2]).parent); "
            "run_pipeline(cfg, resume=False, progress=False)")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(doc), str(tmp_path / "p.yaml")], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert len(RunStore(run).shards("test.glog")) == 1  # one shard (and its log) was written before the kill
    assert set(_sidecars(run, "test.glog")) == {f"g-{r}" for r in
                                               pl.read_parquet(RunStore(run).shards("test.glog")[0])["id"].str.slice(2)
                                               } | {SHARED_ITEM}
    result = run_pipeline(_config(tmp_path, doc), resume=True, progress=False)
    assert result.manifest["status"] == "done"
    logs = _sidecars(run, "test.glog")
    rows = _table(run, "test.glog")["id"].to_list()
    assert sorted(set(logs) - {SHARED_ITEM}) == sorted(rows) and len(rows) == 8
    entries = [e for es in logs.values() for e in es]
    assert len(entries) == len(_distinct(entries)) == 10  # the redo's log only: no entry twice, none missing
    assert sorted(e["tag"] for e in logs[SHARED_ITEM]) == ["test.glog.orphan", "test.glog.setup"]
    # a resume of the finished run keeps the shards and their logs as they are
    before = {s.name: sidecar_of(s).read_bytes() for s in RunStore(run).shards("test.glog")}
    again = run_pipeline(_config(tmp_path, doc), resume=True, progress=False)
    assert again.manifest["status"] == "done"
    assert {s.name: sidecar_of(s).read_bytes() for s in RunStore(run).shards("test.glog")} == before


# ---- the FC and IF generators on sim: fc.topics (global), fc.tools, plans … samples; if.expand, if.dedup ----
@pytest.fixture(scope="module")
def gen_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))
    fc = yaml.safe_load((ROOT / "configs" / "fc_demo.yaml").read_text(encoding="utf-8"))
    by_kind = {s["kind"]: dict(s) for s in demo["stages"]}
    topics = {**by_kind["fc.topics"], "languages": ["ru"], "target_size": {"ru": 14}, "expand_per_call": 4}
    stages: list[dict[str, Any]] = [topics]
    for s in fc["stages"][:5]:
        s = dict(s)
        if s["kind"] == "fc.tools":
            s.pop("topics_file", None)
            s["input"] = "fc.topics"
        if s["kind"] == "fc.plans":
            s["plans_per_topic"] = 1
        stages.append(s)
    stages += [{**by_kind["if.expand"], "target_count": 30}, dict(by_kind["if.dedup"])]
    run = tmp_path_factory.mktemp("gen") / "run"
    doc = {"name": "gen", "seed": 7, "run_dir": str(run), "llm": {"backend": "sim", "sim": {"seed": 7}},
           "stages": stages, "dataset": {"stages": ["fc.samples"]}}
    result = run_pipeline(_config(ROOT / "configs", doc, ROOT / "configs" / "demo.yaml"), resume=False,
                          progress=False)
    assert result.manifest["status"] == "done"
    return run, result.manifest


def test_every_request_of_the_generators_is_in_the_log(gen_run: tuple[Path, dict[str, Any]]) -> None:
    run, manifest = gen_run
    logged: set[str] = set()
    for stage, info in manifest["stages"].items():
        entries = [e for es in _sidecars(run, stage).values() for e in es]
        assert len(_distinct(entries)) == int((info.get("llm") or {}).get("requests") or 0), stage
        logged |= {e["key"] for e in entries}
    assert int(manifest["stages"]["fc.topics"]["llm"]["requests"]) > 0
    cached = {k for (k,) in sqlite3.connect(run / "cache.sqlite").execute("SELECT key FROM responses")}
    assert logged == cached
    topics = _sidecars(run, "fc.topics")
    assert SHARED_ITEM not in topics  # fc.topics says which topics each of its requests made
    tags = {e["tag"] for es in topics.values() for e in es}
    assert tags == {"fc.topics.label", "fc.topics.expand"}
    frame = _table(run, "fc.topics")
    assert set(frame["id"].to_list()) == set(topics)  # every topic row, kept or rejected, has its request
    expanded = frame.filter(pl.col("source") == "llm_expansion")["id"].to_list()
    assert expanded and all([e["tag"] for e in topics[t]] == ["fc.topics.expand"] for t in expanded)


def _chain(explorer: RunExplorer, stage: str, row_id: str) -> list[dict[str, Any]]:
    return explorer.request_chain(stage, row_id)


def test_a_tool_s_card_lists_its_tool_writing_request_and_a_sample_s_chain_reaches_the_topic(
        gen_run: tuple[Path, dict[str, Any]]) -> None:
    run, _ = gen_run
    explorer = RunExplorer(run)
    tools = explorer.index("fc.tools_dedup").frame.filter(pl.col("_s") == "ok")
    tool = tools["id"][0]
    steps = _chain(explorer, "fc.tools_dedup", tool)
    assert [s["stage"] for s in steps] == ["fc.tools", "fc.topics"]
    topic_id = json.loads(_table(run, "fc.tools_dedup").filter(pl.col("id") == tool)["spec"][0])["topic_id"]
    assert steps[0]["item"] == topic_id and [e["tag"] for e in steps[0]["requests"]] == ["fc.tools"]
    assert steps[1]["row"] == topic_id and steps[1]["requests"][0]["tag"] in ("fc.topics.label", "fc.topics.expand")
    assert steps[1]["requests"][0].get("sent")  # the excerpt of what was asked
    # the offline page's rows carry the same chain for a tool row
    page = explorer.rows("fc.tools_dedup", explorer.index("fc.tools_dedup").frame.filter(pl.col("id") == tool),
                         upstream=True)
    assert [s["stage"] for s in page[0]["_requests"]] == ["fc.tools", "fc.topics"]
    sample = explorer.index("fc.samples").frame["id"][0]
    stages = [s["stage"] for s in _chain(explorer, "fc.samples", sample)]
    assert stages[:2] == ["fc.dialogues", "fc.plans"] and "fc.tools" in stages and stages[-1] == "fc.topics"
    # one step per item: tools of one topic share their tool-writing request
    chain = _chain(explorer, "fc.samples", sample)
    assert len({(s["stage"], s["item"]) for s in chain}) == len(chain)
