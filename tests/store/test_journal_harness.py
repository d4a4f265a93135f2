"""The journal under damage: a cut at every byte of a multi-row item, flipped bytes anywhere.

Each case ends in exactly one of two ways: the damage is *detected* (a loud
:class:`StoreError` naming the file and the repair) or the damaged item is *redone* (not
counted done, none of its rows kept). Never a silent loss (an item counted done with part
of its rows) and never a silent change (a row that reads differently from what was written).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from fabrika.errors import StoreError
from fabrika.store import RunStore
from fabrika.store.journal import JOURNAL, StageJournal

STAGE = "s"


def item(name: str, n: int) -> list[dict[str, Any]]:
    """One item's rows as the runner writes them (same ``input_id``), nested values and Russian text included."""
    return [{"id": f"{name}-{k}", "input_id": name, "status": "ok", "reason": None, "k": k,
             "text": f"ответ {name}.{k}: всё хорошо", "meta": {"tags": ["а", name], "score": k / 3}}
            for k in range(n)]


ITEMS = {"a": item("a", 2), "b": item("b", 3), "c": item("c", 1)}


def stored(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as a shard stores them (nested values as JSON text), for comparison."""
    return [{k: json.dumps(v, ensure_ascii=False, separators=(",", ":")) if isinstance(v, dict) else v
             for k, v in r.items()} for r in rows]


def write_journal(run: Path, names: list[str]) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """The journal bytes of ``names`` (appended one item at a time) and each item's byte span."""
    d = RunStore(run).stage_dir(STAGE)
    j = StageJournal(d, sync_s=0.0)
    spans = {}
    for name in names:
        start = (d / JOURNAL).stat().st_size if (d / JOURNAL).exists() else 0
        j.append(ITEMS[name])
        j.sync()
        spans[name] = (start, (d / JOURNAL).stat().st_size)
    j.close(remove=False)
    return (d / JOURNAL).read_bytes(), spans


def recover(run: Path, data: bytes) -> dict[str, list[dict[str, Any]]] | StoreError:
    """Put ``data`` in place as the journal of a stopped run and resume: the items the store now counts
    done, with their rows as read back, or the error it raised."""
    store = RunStore(run)
    d = store.stage_dir(STAGE)
    store.drop_stage(STAGE)
    d.mkdir(parents=True)
    (d / JOURNAL).write_bytes(data)
    done = store.done_ids(STAGE)
    try:
        store.recover_journal(STAGE, done)
    except StoreError as exc:
        assert (d / JOURNAL).read_bytes() == data  # a refused journal is left as it was, for fsck
        return exc
    lf = store.scan_raw(STAGE)
    rows = [] if lf is None else lf.collect().to_dicts()
    got: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        got.setdefault(r["input_id"], []).append({k: v for k, v in r.items() if v is not None or k == "reason"})
    for name in ITEMS:  # counted done <=> rows kept
        assert (name in done) == (name in got), name
    return got


def assert_whole(got: dict[str, list[dict[str, Any]]]) -> None:
    """Every item kept is kept whole and unchanged."""
    for name, rows in got.items():
        assert sorted(rows, key=lambda r: r["id"]) == stored(ITEMS[name]), f"item {name} changed or cut"


def test_a_cut_at_every_byte_of_a_multi_row_item_redoes_the_item(tmp_path: Path) -> None:
    data, spans = write_journal(tmp_path / "w", ["a", "b"])
    start, end = spans["b"]
    assert end - start > 300  # a real multi-row record, cut at each of its bytes below
    outcomes = {"whole": 0, "redone": 0}
    for cut in range(start, end + 1):
        got = recover(tmp_path / "r", data[:cut])
        assert not isinstance(got, StoreError), f"cut at {cut}: a torn tail is what a crash leaves, not an error"
        assert_whole(got)
        assert "a" in got  # the item before the cut is never lost
        if cut == end:
            assert "b" in got
            outcomes["whole"] += 1
        else:
            assert "b" not in got, f"cut at {cut}: item b counted done with {len(got.get('b', []))} of 3 rows"
            outcomes["redone"] += 1
    assert outcomes == {"whole": 1, "redone": end - start}


@pytest.mark.parametrize("mask", [0x01, 0x20, 0xFF])
def test_a_flipped_byte_anywhere_is_detected_or_redone_never_read(tmp_path: Path, mask: int) -> None:
    data, spans = write_journal(tmp_path / "w", ["a", "b", "c"])
    detected = redone = 0
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= mask
        got = recover(tmp_path / "r", bytes(bad))
        if isinstance(got, StoreError):
            msg = str(got)
            assert JOURNAL in msg and "line " in msg and "byte " in msg and "fabrika fsck" in msg and "--repair" in msg
            assert len(msg.splitlines()) == 1
            detected += 1
            continue
        assert_whole(got)
        missing = set(ITEMS) - set(got)
        assert missing, f"flip at {pos} went unnoticed"
        # only the tail can be dropped quietly: damage before an intact record is a loud error
        assert pos >= spans["b"][1] - 1, f"flip at {pos} (before the last record) dropped {missing} quietly"
        redone += 1
    assert detected and redone and detected + redone == len(data)


def test_two_flipped_bytes_never_reach_the_rows(tmp_path: Path) -> None:
    data, _ = write_journal(tmp_path / "w", ["a", "b", "c"])
    rng = random.Random(25)
    for _ in range(300):
        bad = bytearray(data)
        for pos in rng.sample(range(len(data)), 2):
            bad[pos] ^= rng.randrange(1, 256)
        got = recover(tmp_path / "r", bytes(bad))
        if not isinstance(got, StoreError):
            assert_whole(got)
            assert set(got) != set(ITEMS)


def test_a_legacy_journal_is_read_without_its_possibly_cut_last_item(tmp_path: Path) -> None:
    """Journals of earlier versions (one row per line, no checksum): whole items are kept, the last one is redone."""
    lines = [json.dumps(r, ensure_ascii=False) for name in ("a", "b") for r in stored(ITEMS[name])]
    got = recover(tmp_path / "r", ("\n".join(lines[:-1]) + "\n" + lines[-1][:10]).encode())
    assert not isinstance(got, StoreError)
    assert_whole(got)
    assert set(got) == {"a"}
    garbled = recover(tmp_path / "r", ("\n".join([lines[0], "{garbage", *lines[1:]]) + "\n").encode())
    assert isinstance(garbled, StoreError) and "line 2" in str(garbled)


def test_fsck_counts_temp_files_and_names_an_unreadable_manifest_and_a_damaged_version(tmp_path: Path) -> None:
    from fabrika.store.fsck import fsck

    run = tmp_path / "run"
    store = RunStore(run)
    store.write(STAGE, ITEMS["a"])
    (store.stage_dir(STAGE) / ".tmp-crashed.parquet").write_bytes(b"PAR1")
    (run / "manifest.json").write_text("{not json", encoding="utf-8")
    version = run / "versions" / "v1" / "data" / "s.parquet"
    version.parent.mkdir(parents=True)
    version.write_bytes(store.shards(STAGE)[0].read_bytes()[:-9])
    report = fsck(run)
    assert report.temp_files == 1 and report.shards == 2 and not report.clean
    assert {p.path.name for p in report.problems} == {"manifest.json", "s.parquet"}
    [v] = [p for p in report.problems if p.path == version]
    assert "refilter" in v.fix and "--name v1 --overwrite" in v.fix
    repaired = fsck(run, repair=True)
    assert not list(store.stage_dir(STAGE).glob(".tmp-*"))  # temp files are removed
    assert not repaired.clean and store.shards(STAGE)  # the intact shard stays, the reported damage is left


@pytest.mark.parametrize("tail", [b"\0" * 512, b"\0" * 100 + b"\n", b"fj2 ", b"\n"])
def test_garbage_after_the_last_record_is_a_torn_tail(tmp_path: Path, tail: bytes) -> None:
    """What a power loss can leave past the last write (zeros of an extended file, a newline alone)."""
    data, _ = write_journal(tmp_path / "w", ["a", "b"])
    got = recover(tmp_path / "r", data + tail)
    assert not isinstance(got, StoreError)
    assert_whole(got)
    assert set(got) == {"a", "b"}


def test_a_failed_append_cuts_back_to_the_last_whole_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    import fabrika.store.journal as journal_mod
    from fabrika.errors import StorageError

    d = tmp_path / "run" / "stages" / STAGE
    j = StageJournal(d, sync_s=0.0)
    j.append(ITEMS["a"])
    whole = (d / JOURNAL).read_bytes()

    def half_then_full(fd: int, data: Any) -> int:
        os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal_mod, "_write", half_then_full)
    with pytest.raises(StorageError) as info:
        j.append(ITEMS["b"])
    assert info.value.exit_code == 3 and str(d / JOURNAL) in str(info.value)
    assert (d / JOURNAL).read_bytes() == whole  # the half record is gone
    monkeypatch.undo()
    with pytest.raises(StorageError):  # nothing more goes in behind a failed write
        j.append(ITEMS["c"])
    j.rewrite([*ITEMS["a"], *ITEMS["c"]])  # the runner's next shard flush starts the journal afresh
    j.append(ITEMS["b"])
    j.close(remove=False)
    assert [len(i) for i in journal_mod.read_items(d).items] == [2, 1, 3]
