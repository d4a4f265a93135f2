"""Run store: atomic shards, temp files never read, resume ids, annotation joins, counts."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

from fabrika.errors import StorageError, StoreError
from fabrika.store import RunStore
from fabrika.store.shards import TEMP_PREFIX, clean_temp, shard_files, write_shard


def test_shards_are_sorted_by_id_and_sequenced(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.write("a", [{"id": "b", "input_id": "1", "x": 1}, {"id": "a", "input_id": "2", "x": 2}])
    store.write("a", [{"id": "c", "input_id": "3", "x": 3}])
    files = store.shards("a")
    assert [f.name[:11] for f in files] == ["part-000000", "part-000001"]
    assert pl.read_parquet(files[0])["id"].to_list() == ["a", "b"]
    assert store.scan("a").collect()["x"].sort().to_list() == [1, 2, 3]


def test_crashed_temp_file_is_never_read_and_is_cleaned(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.write("a", [{"id": "a", "input_id": "a"}])
    d = store.stage_dir("a")
    # a writer killed mid-write leaves a truncated temp file behind
    (d / f"{TEMP_PREFIX}crash.parquet").write_bytes(b"PAR1\x00\x00garbage")
    assert len(shard_files(d)) == 1
    assert store.scan("a").collect().height == 1
    assert store.done_input_ids("a") == {"a"}
    assert clean_temp(d) == 1
    assert sorted(p.name for p in d.iterdir()) == [f.name for f in shard_files(d)]


def test_failed_write_leaves_no_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: object, **k: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(StorageError, match="disk full"):
        write_shard(tmp_path / "s", [{"id": "a"}])
    assert list((tmp_path / "s").iterdir()) == []


def test_shards_with_different_schemas_read_together(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.write("a", [{"id": "1", "status": "ok", "reason": None, "score": None}])
    store.write("a", [{"id": "2", "status": "rejected", "reason": "bad: x", "score": 0.5, "extra": 3}])
    df = store.scan("a").sort("id").collect()
    assert df["reason"].to_list() == [None, "bad: x"]
    assert df["score"].to_list() == [None, 0.5]
    assert df["extra"].to_list() == [None, 3]


def test_nested_values_are_stored_as_json_and_mixed_types_fail_clearly(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.write("a", [{"id": "1", "messages": [{"role": "user", "content": "привет"}]}])
    assert store.scan("a").collect()["messages"][0] == '[{"role":"user","content":"привет"}]'
    with pytest.raises(StoreError, match="column 'v' mixes value types"):
        store.write("b", [{"id": "1", "v": 1}, {"id": "2", "v": "x"}])


def test_done_input_ids_reads_all_shards(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    assert store.done_input_ids("a") == set()
    for k in range(3):
        store.write("a", [{"id": f"o{k}{j}", "input_id": f"i{k}"} for j in range(2)])
    assert store.done_input_ids("a") == {"i0", "i1", "i2"}


def test_annotations_are_left_joined_without_rewriting_data(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.write("data", [{"id": i, "input_id": i, "status": "ok", "reason": None, "text": i * 2} for i in "abc"])
    store.write("judge", [{"id": "a", "input_id": "a", "status": "ok", "reason": None, "score": 0.9, "text": "x"}])
    store.write("judge", [{"id": "b", "input_id": "b", "status": "rejected", "reason": "bad json", "score": None}])
    store.write("lang", [{"id": "c", "input_id": "c", "status": "ok", "reason": None, "ru": 1.0}])
    before = {p: p.stat().st_mtime_ns for p in store.shards("data")}
    df = store.scan("data", ["judge", "lang"]).sort("id").collect()
    assert df.columns == ["id", "input_id", "status", "reason", "text", "status__judge", "reason__judge",
                          "score", "text__judge", "status__lang", "reason__lang", "ru"]
    assert df["score"].to_list() == [0.9, None, None]
    assert df["status__judge"].to_list() == ["ok", "rejected", None]
    assert df["ru"].to_list() == [None, None, 1.0]
    assert df["text"].to_list() == ["aa", "bb", "cc"]
    assert {p: p.stat().st_mtime_ns for p in store.shards("data")} == before


def test_counts_group_rejections_by_reason_prefix(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.write("a", [
        {"id": "1", "status": "ok", "reason": None},
        {"id": "2", "status": "rejected", "reason": "invalid_json: line 1"},
        {"id": "3", "status": "rejected", "reason": "invalid_json: line 7"},
        {"id": "4", "status": "rejected", "reason": "unknown_tool: foo"},
    ])
    assert store.counts("a") == {"rows": 4, "ok": 1, "rejected": {"invalid_json": 2, "unknown_tool": 1},
                                 "duplicate_ids": 0}
    store.write("a", [{"id": "1", "status": "ok", "reason": None}])
    assert store.counts("a")["duplicate_ids"] == 1
    assert store.counts("missing") == {"rows": 0, "ok": 0, "rejected": {}, "duplicate_ids": 0}


def test_manifest_roundtrip_and_corruption_message(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    assert store.read_manifest() == {}
    store.write_manifest({"name": "x", "stages": {}})
    assert store.read_manifest()["name"] == "x"
    store.manifest_path.write_text("{broken", encoding="utf-8")
    with pytest.raises(StoreError, match="unreadable manifest"):
        store.read_manifest()


def test_clean_temp_removes_what_a_kill_left_in_the_request_log_sidecar(tmp_path: Path) -> None:
    """A kill mid-write leaves a temp file in ``requests/`` (once in the whole suite, under load), or a sidecar
    whose shard rename never happened; both go before the stage runs again, the logs of real shards stay."""
    from fabrika.store.shards import REQUESTS_DIR, REQUESTS_KEY

    d = tmp_path / "s"
    shard = write_shard(d, [{"id": "a", "input_id": "1", REQUESTS_KEY: [{"key": "k", "call": 0, "i": 0}]}])
    sidecar = d / REQUESTS_DIR
    assert (sidecar / shard.name).is_file()
    (sidecar / f"{TEMP_PREFIX}abc.parquet").write_bytes(b"PAR1 torn")
    (sidecar / "part-000009-deadbeef.parquet").write_bytes(b"PAR1")  # its shard never got renamed in
    assert clean_temp(d) == 2
    assert sorted(p.name for p in sidecar.iterdir()) == [shard.name]
    assert sorted(p.name for p in d.iterdir()) == sorted([shard.name, REQUESTS_DIR])
