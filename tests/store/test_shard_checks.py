"""Shards under damage: flipped bits anywhere are caught by ``verify_shard`` (what ``fabrika fsck`` runs)
or change nothing; a cut shard is one line naming it on every read path."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from fabrika.errors import ShardCorruptError, StorageError
from fabrika.store import RunStore
from fabrika.store.shards import CONTENT_KEY, verify_shard

ROWS = [{"id": f"i{i:04d}", "input_id": f"i{i:04d}", "status": "ok", "reason": None, "x": i / 3 if i % 2 else None,
         "flag": bool(i % 3), "text": "ответ " * (i % 40), "meta": {"k": [i]}} for i in range(400)]


def test_flipped_bits_in_a_shard_are_caught_or_harmless(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    path = store.write("s", ROWS)
    expect = pl.read_parquet(path)
    assert CONTENT_KEY.encode() in (pq.read_metadata(path).metadata or {})
    data = path.read_bytes()
    rng = random.Random(25)
    caught = harmless = 0
    for pos in rng.sample(range(len(data)), 400):
        bad = bytearray(data)
        bad[pos] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(bad))
        try:
            verify_shard(path)
        except ShardCorruptError as exc:
            assert str(path) in str(exc) and "fabrika fsck" in str(exc) and len(str(exc).splitlines()) == 1
            caught += 1
            continue
        assert pl.read_parquet(path).equals(expect), f"bit flip at byte {pos} changed the rows unnoticed"
        harmless += 1
    assert caught > harmless > 0  # most flips change something; some hit padding or unread statistics


@pytest.mark.parametrize("keep", [0, 3, 11, 0.5, -1])
def test_a_cut_shard_is_one_line_from_every_reader(tmp_path: Path, keep: float) -> None:
    store = RunStore(tmp_path / "run")
    store.write("s", ROWS[:200])
    path = store.write("s", ROWS[200:])
    data = path.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else (keep if keep >= 0 else len(data) + keep)
    path.write_bytes(data[:n])
    readers = [lambda: store.scan_raw("s"), lambda: store.done_ids("s"), lambda: store.counts("s"),
               lambda: list(store.iter_frames("s")), lambda: store.count_rows("s")]
    for read in readers:
        with pytest.raises(StorageError) as info:
            read()
        msg = str(info.value)
        assert str(path) in msg and "damaged parquet shard" in msg and len(msg.splitlines()) == 1
        assert info.value.exit_code == 2
