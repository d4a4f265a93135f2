"""Storage faults through the CLI: each ends in one line naming the path and the fix, the right exit
code and nothing half-written, and the same command after the fix gives the uninterrupted dataset.

A full disk and an unwritable directory are injected where the store meets the OS
(``tempfile.mkstemp`` of the atomic writers, the journal's ``os.write``): the tests run as root,
so a read-only directory cannot be made to refuse a write.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

import fabrika.store.journal as journal
from fabrika.cli.app import app
from fabrika.store import RunStore
from fabrika.store.shards import TEMP_PREFIX
from fabrika.textutil.sanitize import clean_text
from tests.store.store_stages import NASTY

runner = CliRunner()
N = 12
STAGE = "multi"


def config(tmp_path: Path, name: str, **stage: Any) -> Path:
    doc = {
        "name": name, "run_dir": str(tmp_path / name), "plugins": ["tests.store.store_stages"],
        "llm": {"backend": "sim"},
        "stages": [{"kind": "test.store.multi", "name": STAGE, "n": N, "chunk_size": 1000, **stage}],
        "dataset": {"stages": [STAGE]},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def run(cfg: Path) -> Result:
    return runner.invoke(app, ["run", str(cfg), "--no-progress"])


def error_line(result: Result) -> str:
    """The error the command ended with: its last stderr line, a one-liner (asserted)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines, result.output
    assert "Traceback" not in result.stderr, result.stderr
    return lines[-1]


def dataset(run_dir: Path) -> list[dict[str, Any]]:
    from fabrika.store.versions import scan_version

    lf = scan_version(run_dir, "v1")
    return [] if lf is None else lf.sort("id").collect().to_dicts()


def table(run_dir: Path) -> list[dict[str, Any]]:
    """The stage's own rows, rejections included, sorted by id."""
    lf = RunStore(run_dir).scan_raw(STAGE)
    return [] if lf is None else lf.sort("id").collect().to_dicts()


def no_temp_files(run_dir: Path) -> bool:
    return not [p for p in run_dir.rglob("*") if p.name.startswith(TEMP_PREFIX)]


@pytest.fixture
def reference(tmp_path: Path) -> list[dict[str, Any]]:
    """The dataset of an uninterrupted run."""
    result = run(config(tmp_path, "ref", nasty_item=2))
    assert result.exit_code == 0, result.output
    rows = dataset(tmp_path / "ref")
    assert len(rows) == N * 3 - 1  # item 2's first row is a rejection
    return rows


def shards_fail(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """Every parquet shard write fails with ``code`` (the manifest and the journal still write)."""
    real = tempfile.mkstemp

    def mkstemp(*a: Any, **k: Any) -> tuple[int, str]:
        if k.get("suffix") == ".parquet":
            raise OSError(code, os.strerror(code))
        return real(*a, **k)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def stopped_with_a_journal(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run whose shard writes hit a full disk: exit 3, one line, every finished item in the journal."""
    cfg = config(tmp_path, name, nasty_item=2)
    with monkeypatch.context() as m:
        shards_fail(m, errno.ENOSPC)
        result = run(cfg)
    assert result.exit_code == 3, result.output
    line = error_line(result)
    assert str(tmp_path / name / "stages" / STAGE) in line and "no space left" in line and "free disk space" in line
    assert no_temp_files(tmp_path / name)
    found = journal.scan(RunStore(tmp_path / name).stage_dir(STAGE) / journal.JOURNAL)
    assert len(found.items) == N and not found.damage
    return cfg


def test_a_lone_surrogate_in_a_verifier_message_is_stored_sanitised(tmp_path: Path, reference: list[dict[str, Any]],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    [nasty] = [r for r in table(tmp_path / "ref") if r["status"] != "ok"]
    assert nasty["reason"] == clean_text(NASTY) == "verifier_error: ValueError: bad byte \ufffd at \ufffd\ufffd[31m end"
    assert nasty["text"].endswith("\ufffd")
    # the same row through the journal (a stopped run, then the resume) reads exactly the same
    cfg = stopped_with_a_journal(tmp_path, "viaj", monkeypatch)
    again = run(cfg)
    assert again.exit_code == 0, again.output
    assert dataset(tmp_path / "viaj") == reference
    assert table(tmp_path / "viaj") == table(tmp_path / "ref")


@pytest.mark.parametrize("where", ["first byte", "middle", "last byte"])
def test_a_journal_cut_inside_a_multi_row_item_redoes_the_whole_item(
        tmp_path: Path, reference: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    cfg = stopped_with_a_journal(tmp_path, "cut", monkeypatch)
    path = RunStore(tmp_path / "cut").stage_dir(STAGE) / journal.JOURNAL
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1  # the last record (one item, three rows)
    cut = {"first byte": last + 1, "middle": (last + len(data)) // 2, "last byte": len(data) - 1}[where]
    path.write_bytes(data[:cut])
    result = run(cfg)
    assert result.exit_code == 0, result.output
    assert "cut record" in result.stderr  # said, not silent
    assert dataset(tmp_path / "cut") == reference  # the cut item was redone whole: nothing lost


def test_flipped_bytes_in_the_journal_stop_the_run_and_fsck_repairs(
        tmp_path: Path, reference: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = stopped_with_a_journal(tmp_path, "flip", monkeypatch)
    run_dir = tmp_path / "flip"
    path = RunStore(run_dir).stage_dir(STAGE) / journal.JOURNAL
    data = bytearray(path.read_bytes())
    at = data.index("ответ".encode()) + 1  # inside the first record: "��твет" used to reach the dataset
    data[at] ^= 0x11
    data[at + 1] ^= 0x22
    path.write_bytes(bytes(data))
    stopped = run(cfg)
    assert stopped.exit_code == 2, stopped.output
    line = error_line(stopped)
    assert str(path) in line and "line 1, byte 0" in line and f"fabrika fsck {run_dir} --repair" in line
    assert path.read_bytes() == bytes(data) and not RunStore(run_dir).shards(STAGE)  # nothing read from it

    check = runner.invoke(app, ["fsck", str(run_dir)])
    assert check.exit_code == 1 and str(path) in check.output and "line 1" in check.output
    repair = runner.invoke(app, ["fsck", str(run_dir), "--repair"])
    assert repair.exit_code == 0, repair.output
    assert "1 damaged journal record(s) dropped" in repair.output
    assert [p.name for p in (run_dir / "quarantine").rglob("*") if p.is_file()] == [journal.JOURNAL]
    assert runner.invoke(app, ["fsck", str(run_dir)]).exit_code == 0
    again = run(cfg)
    assert again.exit_code == 0, again.output
    assert dataset(run_dir) == reference  # the dropped item was redone, the others came from the journal


def test_a_truncated_shard_is_one_line_from_run_status_and_refilter_and_fsck_repairs(
        tmp_path: Path, reference: list[dict[str, Any]]) -> None:
    cfg = config(tmp_path, "trunc", nasty_item=2, chunk_size=4)
    assert run(cfg).exit_code == 0
    run_dir = tmp_path / "trunc"
    store = RunStore(run_dir)
    assert len(store.shards(STAGE)) == 3
    shard = store.shards(STAGE)[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    fix = f"fabrika fsck {run_dir} --repair"

    for args in (["refilter", str(run_dir)], ["run", str(cfg), "--no-progress"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        line = error_line(result)
        assert str(shard) in line and "damaged parquet shard" in line and fix in line, (args, line)
    m = json.loads(store.manifest_path.read_text(encoding="utf-8"))
    m["status"] = "interrupted"  # status counts the shards of a run that did not finish
    store.manifest_path.write_text(json.dumps(m), encoding="utf-8")
    status = runner.invoke(app, ["status", str(run_dir)])
    assert status.exit_code == 2 and str(shard) in error_line(status) and fix in error_line(status)

    check = runner.invoke(app, ["fsck", str(run_dir)])
    assert check.exit_code == 1 and str(shard) in check.output
    repair = runner.invoke(app, ["fsck", str(run_dir), "--repair"])
    assert repair.exit_code == 0, repair.output
    assert not shard.exists() and len(list((run_dir / "quarantine").rglob(shard.name))) == 1
    assert runner.invoke(app, ["fsck", str(run_dir)]).exit_code == 0
    again = run(cfg)
    assert again.exit_code == 0, again.output
    assert dataset(run_dir) == reference


@pytest.mark.parametrize(("code", "exit_code", "words"), [
    (errno.ENOSPC, 3, "free disk space"),
    (errno.EACCES, 2, "make the run directory writable"),
    (errno.EROFS, 2, "read-only file system"),
])
def test_an_unwritable_or_full_run_dir_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    code: int, exit_code: int, words: str) -> None:
    cfg = config(tmp_path, "nowrite")

    def refuse(*a: Any, **k: Any) -> tuple[int, str]:
        raise OSError(code, os.strerror(code))

    with monkeypatch.context() as m:
        m.setattr(tempfile, "mkstemp", refuse)
        result = run(cfg)
    assert result.exit_code == exit_code, result.output
    line = error_line(result)
    assert str(tmp_path / "nowrite") in line and words in line
    assert no_temp_files(tmp_path / "nowrite") and not (tmp_path / "nowrite" / "manifest.json").exists()


def test_a_full_disk_while_journaling_keeps_whole_items_and_the_rerun_completes(
        tmp_path: Path, reference: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path, "jfull", nasty_item=2)
    calls = {"n": 0}
    real = journal._write

    def write(fd: int, data: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 5:  # half a record reaches the disk, then it is full
            real(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    with monkeypatch.context() as m:
        m.setattr(journal, "_write", write)
        result = run(cfg)
    assert result.exit_code == 3, result.output
    line = error_line(result)
    assert str(RunStore(tmp_path / "jfull").stage_dir(STAGE) / journal.JOURNAL) in line and "free disk space" in line
    assert no_temp_files(tmp_path / "jfull")
    found = journal.scan(RunStore(tmp_path / "jfull").stage_dir(STAGE) / journal.JOURNAL)
    assert not found.damage  # the half record was cut back
    again = run(cfg)
    assert again.exit_code == 0, again.output
    assert dataset(tmp_path / "jfull") == reference


def test_fsck_of_a_clean_run_and_of_a_global_stage(tmp_path: Path, reference: list[dict[str, Any]]) -> None:
    run_dir = tmp_path / "ref"
    clean = runner.invoke(app, ["fsck", str(run_dir)])
    assert clean.exit_code == 0, clean.output
    assert "0 problem(s)" in clean.output and f"{N * 3} row(s)" in clean.output.replace("\n", "")
    # a global stage is all or nothing: one damaged shard sets all of them aside
    m = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    m["layout"][STAGE]["global"] = True
    (run_dir / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    store = RunStore(run_dir)
    store.write(STAGE, [{"id": "extra", "input_id": "extra", "status": "ok"}])
    first = store.shards(STAGE)[0]
    first.write_bytes(b"PAR1" + b"\0" * 40)
    assert runner.invoke(app, ["fsck", str(run_dir), "--repair"]).exit_code == 0
    assert store.shards(STAGE) == []
    assert len(list((run_dir / "quarantine").rglob("*.parquet"))) == 2
    shutil.rmtree(run_dir / "quarantine")
    assert runner.invoke(app, ["fsck", str(tmp_path / "nothing")]).exit_code == 2
