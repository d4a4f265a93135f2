"""The shared input reader: same records from JSON lines and parquet, errors that say where."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from fabrika.errors import InputError
from fabrika.inputs import DATA_DIR, iter_records, resolve_data_path, where


def test_jsonl_and_parquet_give_the_same_records_numbered_from_one(tmp_path: Path) -> None:
    rows = [{"text": f"запрос {i}", "id": i} for i in range(2500)]  # more than one parquet batch
    pl.DataFrame(rows).write_parquet(tmp_path / "q.parquet")
    lines = [pl.DataFrame([r]).write_ndjson().strip() for r in rows[:3]]
    (tmp_path / "q.jsonl").write_text(lines[0] + "\n\n" + "\n".join(lines[1:]) + "\n", encoding="utf-8")
    assert list(iter_records(tmp_path / "q.jsonl", what="pool")) == [(1, rows[0]), (3, rows[1]), (4, rows[2])]
    got = list(iter_records(tmp_path / "q.parquet", what="pool"))
    assert [n for n, _ in got] == list(range(1, 2501)) and [r for _, r in got] == rows
    only = list(iter_records(tmp_path / "q.parquet", what="pool", columns=["text"]))
    assert only[0] == (1, {"text": "запрос 0"})
    assert where(tmp_path / "q.parquet", 7) == f"{tmp_path / 'q.parquet'}: row 7"
    assert where(tmp_path / "q.jsonl", 7) == f"{tmp_path / 'q.jsonl'}:7"


def test_errors_name_path_line_and_what_was_expected(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{broken\n', encoding="utf-8")
    with pytest.raises(InputError, match=rf"{bad}:2: invalid JSON .*seed file holds one JSON object per line"):
        list(iter_records(bad, what="seed file"))
    arr = tmp_path / "arr.jsonl"
    arr.write_text("[1]\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"{arr}:1: expected a JSON object, got list"):
        list(iter_records(arr, what="seed file"))
    with pytest.raises(InputError, match=r"none\.jsonl: benchmark file not found; .*; fix `benchmarks\[\]\.path`"):
        list(iter_records(tmp_path / "none.jsonl", what="benchmark file", hint="fix `benchmarks[].path`"))
    pl.DataFrame({"prompt": ["x"]}).write_parquet(tmp_path / "b.parquet")
    with pytest.raises(InputError, match=r"no column 'question' \(columns: \['prompt'\]\); fix it"):
        list(iter_records(tmp_path / "b.parquet", what="benchmark file", hint="fix it", columns=["question"]))
    fake = tmp_path / "fake.parquet"
    fake.write_text("not parquet", encoding="utf-8")
    with pytest.raises(InputError, match=r"fake\.parquet: not a readable parquet corpus"):
        list(iter_records(fake, what="corpus"))


def test_resolve_data_path(tmp_path: Path) -> None:
    assert resolve_data_path("package://topics/corpus_demo.jsonl") == DATA_DIR / "topics" / "corpus_demo.jsonl"
    assert (DATA_DIR / "topics" / "corpus_demo.jsonl").is_file()
    assert resolve_data_path("x.jsonl", tmp_path) == tmp_path / "x.jsonl"
    assert resolve_data_path("/abs/x.jsonl", tmp_path) == Path("/abs/x.jsonl")
    assert resolve_data_path("x.jsonl", lambda p: tmp_path / "cfg" / p) == tmp_path / "cfg" / "x.jsonl"
    assert resolve_data_path("x.jsonl") == Path("x.jsonl")
