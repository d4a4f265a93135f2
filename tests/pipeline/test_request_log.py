"""Each item's LLM requests in a sidecar beside its shard: consistent with the shards through resume, ``kill -9``
and ``llm_workers: 2``, keyed by the LLM cache key, with the errors of failed attempts; never in a dataset."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from fabrika.errors import LLMError
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.journal import StageJournal
from fabrika.store.requests import RequestBodies, read_item_requests, sidecar_of
from fabrika.store.run import RunStore
from fabrika.store.shards import REQUESTS_KEY, write_shard
from fabrika.testing import ScriptedLLM
from tests.pipeline import llm_worker_stages as ws

STAGE = "test.wask"


def _config(tmp_path: Path, doc: dict[str, Any]) -> Any:
    cfg, issues = validate_data(doc, "w.yaml", tmp_path)
    assert cfg is not None, issues
    return cfg


def _logs(run: Path, stage: str = STAGE) -> dict[str, list[dict[str, Any]]]:
    """item -> its entries, over every shard's sidecar; an item in two sidecars fails the test."""
    out: dict[str, list[dict[str, Any]]] = {}
    for shard in RunStore(run).shards(stage):
        items = set(pl.read_parquet(shard)["input_id"].to_list())
        side = pl.read_parquet(sidecar_of(shard))
        assert set(side["item"].to_list()) == items  # exactly the shard's items, each once
        for item, entries in read_item_requests(shard, items).items():
            assert item not in out
            out[item] = entries
    return out


def _items(run: Path, stage: str = STAGE) -> list[str]:
    lf = RunStore(run).scan_raw(stage)
    assert lf is not None
    return lf.select("input_id").collect()["input_id"].to_list()


def test_every_shard_has_its_items_requests_keyed_by_the_cache_key_and_no_dataset_column(tmp_path: Path) -> None:
    run = tmp_path / "r"
    result = run_pipeline(_config(tmp_path, ws.pipeline_doc(run, 1, n=12)), resume=False, progress=False)
    assert result.manifest["status"] == "done"
    logs = _logs(run)
    assert sorted(logs) == sorted(_items(run)) and len(logs) == 12
    keys = [e["key"] for entries in logs.values() for e in entries]
    assert all(len(entries) == 1 for entries in logs.values())
    cached = {k for (k,) in sqlite3.connect(run / "cache.sqlite").execute("SELECT key FROM responses")}
    assert set(keys) <= cached  # the LLM cache key: the answer is found where it already lives
    entry = next(iter(logs.values()))[0]
    assert entry["tag"] == STAGE and entry["backend"] == "sim" and entry["cached"] is False
    assert entry["attempts"] == 1 and entry["prompt_tokens"] > 0 and "errors" not in entry
    bodies = RequestBodies(run / "requests.sqlite", readonly=True).bodies(keys)
    assert set(bodies) == set(keys)
    texts = {b["messages"][0]["content"] for b in bodies.values()}
    assert texts == {f"число {i}: скажи что-нибудь" for i in range(12)}
    # nothing of the log is a column: shards and the version hold the stage's rows only
    for shard in RunStore(run).shards(STAGE):
        assert REQUESTS_KEY not in pl.read_parquet(shard).columns
    data = pl.read_parquet(run / "versions" / "v1" / "data" / f"{STAGE}.parquet")
    assert not any("request" in c for c in data.columns)


def test_llm_workers_2_give_the_same_dataset_and_each_worker_s_shards_their_own_log(tmp_path: Path) -> None:
    one = run_pipeline(_config(tmp_path, ws.pipeline_doc(tmp_path / "one", 1, n=16)), resume=False, progress=False)
    two = run_pipeline(_config(tmp_path, ws.pipeline_doc(tmp_path / "two", 2, n=16)), resume=False, progress=False)
    assert one.manifest["status"] == two.manifest["status"] == "done"
    assert ws.dataset_digest(tmp_path / "one") == ws.dataset_digest(tmp_path / "two")
    assert len(RunStore(tmp_path / "two").shards(STAGE)) == 2  # one per worker (chunk_size 1000)
    a, b = _logs(tmp_path / "one"), _logs(tmp_path / "two")
    assert sorted(a) == sorted(b) == sorted(_items(tmp_path / "two"))
    strip = [{k: v for k, v in e.items() if k != "cached"} for item in sorted(a) for e in a[item]]
    assert strip == [{k: v for k, v in e.items() if k != "cached"} for item in sorted(b) for e in b[item]]


def test_a_worker_killed_with_kill_9_leaves_shards_and_logs_consistent(tmp_path: Path) -> None:
    import os

    run = tmp_path / "r"
    doc = ws.pipeline_doc(run, 2, n=16, kill_on=7, marker=str(tmp_path / "kills"), driver_pid=os.getpid(),
                          log=str(tmp_path / "calls.log"))
    doc["stages"][1]["chunk_size"] = 2  # shards before the kill, and items left in the journal
    result = run_pipeline(_config(tmp_path, doc), resume=False, progress=False)
    assert result.manifest["status"] == "done"
    assert (tmp_path / "kills").read_text() == "1"
    logs = _logs(run)
    assert sorted(logs) == sorted(_items(run)) and len(logs) == 16


def test_resume_logs_only_the_items_it_does_and_an_item_s_retried_attempt_shows_both(tmp_path: Path) -> None:
    """Run 1: items 3 and 5 meet a dead server (pending, nothing written); item 8's first attempt fails with a
    500 and the engine's retry succeeds. Run 2 (resume) does items 3 and 5 only."""
    down = {3, 5}
    seen: dict[int, int] = {}

    def handler(request: ChatRequest) -> Any:
        i = int(request.messages[-1]["content"].split()[1].rstrip(":"))
        seen[i] = seen.get(i, 0) + 1
        if i in down:
            raise LLMError("connection", "cannot connect: refused")
        if i == 8 and seen[i] == 1:
            raise LLMError("server", "HTTP 500: upstream overloaded", status_code=500)
        return f"ответ {i}"

    run = tmp_path / "r"
    doc = ws.pipeline_doc(run, 1, n=10)
    doc["llm"] = {"backend": "openai", "model": "m", "max_retries": 1, "probe": False,
                  "endpoints": [{"base_url": "http://127.0.0.1:9/v1"}]}
    first = run_pipeline(_config(tmp_path, doc), resume=True, progress=False,
                         engine=ScriptedLLM(handler, cache=run / "cache.sqlite"))
    assert first.manifest["status"] == "incomplete"
    logs = _logs(run)
    assert len(logs) == 8
    retried = [e for entries in logs.values() for e in entries if e["attempts"] == 2]
    assert len(retried) == 1 and retried[0]["errors"] == ["server: HTTP 500: upstream overloaded"]
    assert "error" not in retried[0]  # the request succeeded on its second attempt
    body = RequestBodies(run / "requests.sqlite", readonly=True).bodies([retried[0]["key"]])
    assert body[retried[0]["key"]]["messages"][-1]["content"] == "число 8: скажи что-нибудь"
    down.clear()
    second = run_pipeline(_config(tmp_path, doc), resume=True, progress=False,
                          engine=ScriptedLLM(handler, cache=run / "cache.sqlite"))
    assert second.manifest["status"] == "done"
    again = _logs(run)  # every item once: the items of run 1 kept their log, 3 and 5 got theirs
    assert sorted(again) == sorted(_items(run)) and len(again) == 10
    assert {k: v for k, v in again.items() if k in logs} == logs


def test_a_sidecar_is_written_before_its_shard_and_ignored_without_it(tmp_path: Path) -> None:
    d = tmp_path / "stages" / "s"
    rows = [{"id": "a", "input_id": "x", "status": "ok", REQUESTS_KEY: [{"key": "k1", "call": 1, "i": 0}]},
            {"id": "b", "input_id": "x", "status": "ok"}]
    shard = write_shard(d, rows)
    assert sidecar_of(shard).is_file() and pl.read_parquet(shard).columns == ["id", "input_id", "status"]
    assert read_item_requests(shard, {"x"}) == {"x": [{"key": "k1", "call": 1, "i": 0}]}
    # through the journal (a crash before the shard): recovered with the log
    journal = StageJournal(d)
    journal.append([{"id": "c", "input_id": "y", "status": "ok", REQUESTS_KEY: [{"key": "k2", "call": 1, "i": 0}]}])
    journal.close(remove=False)
    from fabrika.store.done_ids import DoneIds

    assert RunStore(tmp_path).recover_journal("s", DoneIds()) == 1
    recovered = [s for s in RunStore(tmp_path).shards("s") if s != shard]
    assert read_item_requests(recovered[0], {"y"}) == {"y": [{"key": "k2", "call": 1, "i": 0}]}
    shard.unlink()  # a sidecar whose shard is gone (a crash between the renames) is never read
    assert read_item_requests(shard, {"x"}) == {}


@pytest.mark.parametrize("workers", [1])
def test_the_log_holds_no_times_and_is_sorted_by_key(tmp_path: Path, workers: int) -> None:
    run = tmp_path / "r"
    doc = ws.pipeline_doc(run, workers, n=6)
    run_pipeline(_config(tmp_path, doc), resume=False, progress=False)
    for shard in RunStore(run).shards(STAGE):
        for text in pl.read_parquet(sidecar_of(shard))["requests"].to_list():
            entries = json.loads(text)
            assert [e["key"] for e in entries] == sorted(e["key"] for e in entries)
            assert not any(k in e for e in entries for k in ("time", "started_at", "latency_s", "at"))


def test_each_request_records_the_endpoint_that_answered_and_each_attempt_s(tmp_path: Path) -> None:
    """Two endpoints; each answers item 8's first request to it with a 500. Every fresh entry names the endpoint
    that answered (its base URL as written down: no trailing slash); item 8's names every attempt's, in order,
    and each endpoint named for a failed attempt is one that saw item 8 fail."""
    from fabrika.testing import FakeOpenAIServer

    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        for srv in (a, b):
            srv.script(match="число 8:", responses=[{"fault": "server"}])
        run = tmp_path / "r"
        doc = ws.pipeline_doc(run, 1, n=10)
        doc["llm"] = {"backend": "openai", "model": "fake", "max_retries": 2, "probe": False,
                      "backoff_initial_s": 0.01, "backoff_max_s": 0.02, "backoff_jitter_s": 0.0,
                      "endpoints": [{"base_url": a.base_url + "/"}, {"base_url": b.base_url}]}
        result = run_pipeline(_config(tmp_path, doc), resume=True, progress=False)
        assert result.manifest["status"] == "done"
        seen_8 = {a.base_url: [r for r in a.requests if "число 8:" in json.dumps(r, ensure_ascii=False)],
                  b.base_url: [r for r in b.requests if "число 8:" in json.dumps(r, ensure_ascii=False)]}
    entries = [e for got in _logs(run).values() for e in got]
    assert len(entries) == 10 and {e["endpoint"] for e in entries} <= {a.base_url, b.base_url}
    assert not a.base_url.endswith("/")
    (retried,) = [e for e in entries if e["attempts"] > 1]
    assert len(retried["endpoints"]) == retried["attempts"] == len(retried["errors"]) + 1
    assert retried["endpoints"][-1] == retried["endpoint"]
    for url in (a.base_url, b.base_url):  # a failed attempt per 500 that endpoint sent, a success at most once
        assert retried["endpoints"][:-1].count(url) == min(1, len(seen_8[url]))
    assert sum(len(v) for v in seen_8.values()) == retried["attempts"]
    assert all("endpoints" not in e for e in entries if e["attempts"] == 1)


@pytest.mark.parametrize(("url", "shown"), [
    ("http://gpu-1:8000/v1/", "http://gpu-1:8000/v1"),
    ("https://user:hunter2@api.example.com/v1?api-key=sk-123#x", "https://api.example.com/v1"),
    ("http://[::1]:9000/v1", "http://[::1]:9000/v1"),
    ("http://host:notaport/v1", "***"),
])
def test_an_endpoint_is_written_down_without_credentials_or_query(url: str, shown: str) -> None:
    from fabrika.llm.redact import public_url

    assert public_url(url) == shown


def test_request_bodies_are_the_json_documents_json_writes_and_read_back_whole(tmp_path: Path) -> None:
    """The body store's orjson encoding writes the bytes ``json`` writes (sorted, compact, UTF-8) for what requests
    hold — so a message keeps its content hash — and falls back to ``json`` for what orjson refuses."""
    from fabrika.store.requests import _dump_bytes

    values: list[Any] = [
        {"role": "user", "content": "Привет, \"мир\"\n\t\u2028 😀 \\ / <>& \x00\x1f"},
        {"type": "function", "function": {"name": "get_x", "parameters": {
            "type": "object", "properties": {"b": {"type": "integer", "default": 3}, "a": {"enum": [1, "2", None]}},
            "required": ["a"]}}},
        ({"role": "tool", "content": "{\"ok\": true}", "tool_call_id": "c1"},),
        {"stop": ("\n\n",), "temperature": 0.7, "seed": 2**63 - 1, "flag": False},
        {"huge": 12345678901234567890123},  # past 64 bits: json writes it
    ]
    for value in values:
        assert _dump_bytes(value) == json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                                                default=str).encode("utf-8")
    tools = tuple(values[1:2])
    bodies = RequestBodies(tmp_path / "requests.sqlite")
    for n in range(3):  # one tool tuple sent three times: stored once, read back whole each time
        bodies.put(f"k{n}", ChatRequest(messages=({"role": "user", "content": f"вопрос {n}"},), tools=tools, tag="t"))
    bodies.close()
    got = RequestBodies(tmp_path / "requests.sqlite", readonly=True).bodies(["k0", "k1", "k2"])
    assert [got[f"k{n}"]["messages"][0]["content"] for n in range(3)] == ["вопрос 0", "вопрос 1", "вопрос 2"]
    assert all(got[f"k{n}"]["tools"] == list(tools) for n in range(3))
    blobs = sqlite3.connect(tmp_path / "requests.sqlite").execute("SELECT COUNT(*) FROM blobs").fetchone()[0]
    assert blobs == 4  # three messages and one tool list
