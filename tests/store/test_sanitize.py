"""Text made storable at the store boundary (lone surrogates and control characters, nothing else); storage errors that cross processes."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from fabrika.store import RunStore
from fabrika.store.journal import StageJournal, read_rows
from fabrika.store.shards import flatten_row
from fabrika.textutil.sanitize import REPLACEMENT, clean_text, clean_value, is_clean


def test_clean_text_replaces_what_cannot_be_stored_and_keeps_the_rest() -> None:
    assert clean_text("ответ\ud800!") == f"ответ{REPLACEMENT}!"
    assert clean_text("\udfff\ud800") == REPLACEMENT * 2  # reversed halves are no pair
    assert clean_text("x\ud83d\ude00y") == "x😀y"  # a pair split into two code points is joined
    assert clean_text("a\x00b\x1b[1m\x7f") == f"a{REPLACEMENT}b{REPLACEMENT}[1m{REPLACEMENT}"
    keep = "tab\tnl\ncr\r ё «ёлка» 😀 \u200b"
    assert clean_text(keep) is keep and is_clean(keep)
    once = clean_text("z\ud800\x00")
    assert clean_text(once) == once and once.encode("utf-8")
    assert clean_value({"k\x00": ["\ud800", 1, None]}) == {f"k{REPLACEMENT}": [REPLACEMENT, 1, None]}


def test_rows_with_surrogates_and_nul_are_written_and_read_back_sanitised(tmp_path: Path) -> None:
    reason = "verifier_error: ValueError: bad \ud800 byte\x00"
    row = {"id": "a", "input_id": "a", "status": "rejected", "reason": reason,
           "nested": {"msg": "x\ud800", "list": ["\x01"]}}
    flat = flatten_row(row)
    assert flat["reason"] == f"verifier_error: ValueError: bad {REPLACEMENT} byte{REPLACEMENT}"
    assert json.loads(flat["nested"]) == {"msg": f"x{REPLACEMENT}", "list": ["\x01"]}  # JSON escapes controls itself
    store = RunStore(tmp_path)
    d = store.stage_dir("s")
    j = StageJournal(d, sync_s=0.0)
    j.append([row])  # used to raise UnicodeEncodeError: surrogates not allowed
    j.sync()
    assert read_rows(d) == [{**flat}]
    store.write("direct", [row])
    assert store.recover_journal("s", store.done_ids("s")) == 1
    journaled = store.scan_raw("s").collect().to_dicts()
    direct = store.scan_raw("direct").collect().to_dicts()
    assert journaled == direct and journaled[0]["reason"] == flat["reason"]
    assert pl.read_parquet(store.shards("s")[0])["reason"].to_list() == [flat["reason"]]


def test_storage_errors_survive_pickling() -> None:
    """A Ray worker's full disk reaches the driver as the same one-line error with its exit code."""
    import errno
    import pickle

    from fabrika.errors import ShardCorruptError, StorageError

    full = StorageError.from_os(OSError(errno.ENOSPC, "No space left on device"), "/run/stages/s/part-000001.parquet")
    for exc in (full, ShardCorruptError("/run/x.parquet", "damaged parquet shard (cut)", "run fsck")):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc) and back.exit_code == exc.exit_code
    assert full.exit_code == 3 and "free disk space" in str(full)
