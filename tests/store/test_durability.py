"""Store pieces behind "a crash loses only what is in flight": journal, bounded done-id set, run-dir lock, redaction."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import polars as pl
import pytest

from fabrika.llm.redact import redact
from fabrika.store import RunStore
from fabrika.store.done_ids import MERGE_EVERY, DoneIds, digest
from fabrika.store.journal import JOURNAL, StageJournal, read_rows
from fabrika.store.lock import RunDirBusy, hold_run_dir


def test_done_ids_membership_across_merges_and_trailing_nul_digests() -> None:
    ids = [f"item-{i}" for i in range(MERGE_EVERY + 5000)]
    done = DoneIds(ids[:1000])
    for i in ids[1000:]:
        done.add(i)  # crosses a merge of the recent buffer
    assert len(done) == len(ids)
    assert all(i in done for i in ids[::97]) and "item-x" not in done and 5 not in done
    nul = next(f"n{k}" for k in range(10_000) if digest(f"n{k}").endswith(b"\x00"))
    assert nul in DoneIds([nul])  # numpy strips trailing NULs of S16 values on read
    assert DoneIds(ids).nbytes == 16 * len(ids)


def test_journal_rows_survive_a_crash_and_are_recovered_once(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    d = store.stage_dir("s")
    store.write("s", [{"id": "a", "input_id": "a", "v": 1}])  # already in a shard
    j = StageJournal(d, sync_s=0.0)
    j.append([{"id": "a", "input_id": "a", "v": 1}])  # crash between shard write and journal rewrite
    j.append([{"id": "b", "input_id": "b", "v": 2, "nested": {"k": [1, 2]}, "x": 1.5}])
    j.maybe_sync()
    # a torn last line, as a crash mid-write leaves it
    with open(d / JOURNAL, "a", encoding="utf-8") as fh:
        fh.write('{"id": "c", "input_id": "c", "v"')
    assert store.journal_rows("s") == 2  # intact records only: the torn line is no item
    done = store.done_ids("s")
    assert store.recover_journal("s", done) == 1
    assert "b" in done and not (d / JOURNAL).exists()
    rows = store.scan_raw("s").sort("id").collect()
    assert rows["id"].to_list() == ["a", "b"]
    b = rows.filter(pl.col("id") == "b").to_dicts()[0]
    assert json.loads(b["nested"]) == {"k": [1, 2]} and b["x"] == 1.5  # stored as a shard stores it


def test_journal_is_created_lazily_and_rewritten_with_the_rest(tmp_path: Path) -> None:
    d = tmp_path / "stage"
    j = StageJournal(d)
    j.close(remove=True)
    assert not d.exists()  # a stage that finished nothing leaves nothing
    j = StageJournal(d, sync_s=0.0)
    j.append([{"id": "1"}, {"id": "2"}])
    j.rewrite([{"id": "2"}])
    j.append([{"id": "3"}])
    j.sync()
    assert [r["id"] for r in read_rows(d)] == ["2", "3"]
    assert len((d / JOURNAL).read_bytes().splitlines()) == 2  # one record per item
    j.close(remove=True)
    assert not (d / JOURNAL).exists()


def _hold(path: str, ready: "multiprocessing.synchronize.Event", release: "multiprocessing.synchronize.Event") -> None:
    with hold_run_dir(path, "fabrika run other.yaml"):
        ready.set()
        release.wait(20)


def test_run_dir_lock_names_the_holder_and_dies_with_it(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    other = ctx.Process(target=_hold, args=(str(tmp_path), ready, release))
    other.start()
    try:
        assert ready.wait(20)
        with pytest.raises(RunDirBusy, match=rf"is in use by pid {other.pid} \(fabrika run other.yaml\)"):
            with hold_run_dir(tmp_path, "fabrika run mine.yaml"):
                pass
    finally:
        release.set()
        other.join(20)
    with hold_run_dir(tmp_path, "fabrika run mine.yaml"):
        with hold_run_dir(tmp_path, "nested materialise"):  # re-entrant in one process
            assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
    # killed holder: the kernel drops the flock, no stale lock
    ready2, never = ctx.Event(), ctx.Event()
    killed = ctx.Process(target=_hold, args=(str(tmp_path), ready2, never))
    killed.start()
    assert ready2.wait(20)
    killed.kill()
    killed.join(20)
    with hold_run_dir(tmp_path, "after a kill -9"):
        pass


def test_redact_keys_tokens_and_url_passwords_but_not_counts() -> None:
    cfg = {"llm": {"endpoints": [{"base_url": "https://u:pw@h/v1", "api_key": "sk-1", "api_key_env": "KEY_VAR"}],
                   "max_tokens": 64}, "export": {"hf_token": "hf_abc", "tokenizer": "Qwen/Qwen3-8B"},
           "other": [{"client_secret": "s", "password": "p"}]}
    out = redact(cfg)
    assert out["llm"]["endpoints"][0] == {"base_url": "https://u:***@h/v1", "api_key": "***", "api_key_env": "KEY_VAR"}
    assert out["llm"]["max_tokens"] == 64 and out["export"] == {"hf_token": "***", "tokenizer": "Qwen/Qwen3-8B"}
    assert out["other"] == [{"client_secret": "***", "password": "***"}]
