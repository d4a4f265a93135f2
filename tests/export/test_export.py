"""Export end to end: formats, nested data integrity, card, atomic output, hub gating."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from fabrika.errors import ConfigError, StoreError
from fabrika.export.mix import MixConfig
from fabrika.export.records import grpo_record
from fabrika.export.source import open_version
from fabrika.export.writer import ExportConfig, export, read_export
from fabrika.schemas.chat import sft_record


def test_hf_round_trip_keeps_different_keys_intact(run_dir: Path, rows, tmp_path: Path):
    res = export(open_version(run_dir), ExportConfig(kind="sft", format="hf", out=tmp_path / "sft"))
    assert res.rows == len(rows) and res.validation is not None and res.validation.ok, res.validation.summary()
    ds = datasets.load_from_disk(str(tmp_path / "sft"))
    assert set(ds.column_names) >= {"prompt", "completion", "tools", "id", "lang", "target_type"}
    by_id = {r["id"]: r for r in ds}
    for row in rows:
        assert by_id[row["id"]] == sft_record(row)  # nothing merged, nothing nulled
    # arguments with different keys in neighbouring rows stayed different
    calls = [by_id[r["id"]]["completion"][0]["tool_calls"][0]["function"]["arguments"]
             for r in rows if r["target_type"] == "tool_call"]
    assert {frozenset(a) for a in calls} >= {frozenset({"city"}), frozenset({"city", "days"})}
    assert all(None not in a.values() for a in calls)


def test_grpo_export_carries_reward_columns(run_dir: Path, rows, tmp_path: Path):
    res = export(open_version(run_dir), ExportConfig(kind="grpo", format="hf", out=tmp_path / "grpo"))
    ds = datasets.load_from_disk(str(tmp_path / "grpo"))
    assert res.validation.ok and {"prompt", "ground_truth", "target_type", "lang", "tools"} <= set(ds.column_names)
    first = {r["id"]: r for r in ds}[rows[0]["id"]]
    assert first == grpo_record(rows[0]) and first["prompt"][-1]["role"] == "user"
    assert "completion" not in ds.column_names


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_flat_formats_read_back_equal(run_dir: Path, rows, tmp_path: Path, fmt: str):
    out = tmp_path / fmt
    res = export(open_version(run_dir), ExportConfig(kind="sft", format=fmt, out=out))
    assert res.validation.ok and any(f.endswith(fmt) for f in res.files)
    got = {r["id"]: r for r in read_export(out, fmt)}
    assert [got[r["id"]] for r in rows] == [sft_record(r) for r in rows]
    if fmt == "jsonl":
        line = (out / "data" / "part-00000.jsonl").read_text("utf-8").splitlines()[0]
        assert "Ты — полезный ассистент" in line  # ensure_ascii=False


def test_card_says_sim_loudly_and_lists_numbers(run_dir: Path, tmp_path: Path):
    export(open_version(run_dir), ExportConfig(kind="sft", format="hf", out=tmp_path / "o", license="apache-2.0"))
    card = (tmp_path / "o" / "README.md").read_text("utf-8")
    assert card.startswith("---\nlicense: apache-2.0")
    assert "WARNING: SIMULATED DATA" in card and "qwen3-235b-sim" in card
    assert "rows: **24**" in card and "## Funnel" in card and '"dropped_rejected"' in card


def test_mix_in_export_gives_exact_size(run_dir: Path, tmp_path: Path):
    mix = MixConfig(size=8, seed=3, dimensions=[{"column": "lang", "shares": {"en": 0.75, "ru": 0.25}}])
    res = export(open_version(run_dir), ExportConfig(kind="sft", format="jsonl", out=tmp_path / "m", mix=mix))
    got = list(read_export(tmp_path / "m", "jsonl"))
    assert res.rows == 8 and sorted(r["lang"] for r in got).count("ru") == 2
    assert res.mix.achieved_shares["lang"] == {"en": 0.75, "ru": 0.25}


def test_existing_output_needs_overwrite_and_failed_export_leaves_old(run_dir: Path, tmp_path: Path):
    out = tmp_path / "o"
    export(open_version(run_dir), ExportConfig(kind="sft", format="jsonl", out=out))
    with pytest.raises(ConfigError, match="--overwrite"):
        export(open_version(run_dir), ExportConfig(kind="sft", format="jsonl", out=out))
    bad = MixConfig(size=1000, dimensions=[{"column": "lang", "shares": {"en": 0.5, "ru": 0.5}}])
    with pytest.raises(ConfigError, match="missing"):
        export(open_version(run_dir), ExportConfig(kind="sft", format="jsonl", out=out, overwrite=True, mix=bad))
    assert len(list(read_export(out, "jsonl"))) == 24  # the old export is untouched
    assert not list(tmp_path.glob(".tmp-export-*"))


def test_push_only_with_repo_and_token(run_dir: Path, tmp_path: Path, monkeypatch):
    calls = []
    monkeypatch.setattr(datasets.Dataset, "push_to_hub", lambda self, repo, **kw: calls.append((repo, kw)))
    export(open_version(run_dir), ExportConfig(kind="sft", out=tmp_path / "a", push_to_hub="me/ds"))
    assert calls == []  # no token: nothing leaves the machine
    res = export(open_version(run_dir), ExportConfig(kind="sft", out=tmp_path / "b", push_to_hub="me/ds",
                                                          token="hf_SECRET123"))
    assert res.pushed_to == "me/ds" and calls[0][0] == "me/ds" and calls[0][1]["token"] == "hf_SECRET123"
    assert "hf_SECRET123" not in (tmp_path / "b" / "README.md").read_text("utf-8")
    assert "hf_SECRET123" not in repr(ExportConfig(kind="sft", out=tmp_path, token="hf_SECRET123"))


def test_missing_version_is_a_clear_error(run_dir: Path):
    with pytest.raises(StoreError, match="no such version"):
        open_version(run_dir, "v9")


def test_grpo_if_rows_carry_constraints_and_teacher_rm_mean(tmp_path: Path):
    from fabrika.schemas import Message, Sample, to_row
    from tests.export.export_fixtures import make_run

    rows = []
    for i in range(3):
        spec = [{"id": "ru.punct.no_commas", "params": {}}] if i % 2 else \
            [{"id": "ru.length.words_max", "params": {"n": 5 + i}}, {"verifier_code": "def evaluate(r): return True"}]
        s = Sample(id=f"if{i}", expert="if", lang="ru", prompt=[Message(role="user", content=f"Опиши кота {i}.")],
                   completion=[Message(role="assistant", content="Кот спит.", train=True)], target_type="text",
                   ground_truth={"constraints": spec})
        rows.append({**to_row(s), "status": "ok", "reason": None, "llm_backend": "openai", "teacher_rm_mean": 0.25 * i})
    run = make_run(tmp_path, rows, stage="if.grpo")
    res = export(open_version(run), ExportConfig(kind="grpo", out=tmp_path / "g"))
    ds = datasets.load_from_disk(str(tmp_path / "g"))
    assert res.validation.ok and {"constraints", "teacher_rm_mean", "ground_truth"} <= set(ds.column_names)
    got = {r["id"]: r for r in ds}
    assert got["if0"]["constraints"][1] == {"verifier_code": "def evaluate(r): return True"}
    assert got["if1"]["constraints"] == [{"id": "ru.punct.no_commas", "params": {}}]  # no keys merged in
    assert [got[f"if{i}"]["teacher_rm_mean"] for i in range(3)] == [0.0, 0.25, 0.5]
    assert "SIMULATED" not in (tmp_path / "g" / "README.md").read_text("utf-8")


def test_exports_pass_the_trainers_dataset_checks(run_dir: Path, tmp_path: Path):
    from fabrika.train.data import load_split, prepare_grpo_dataset, prepare_sft_dataset

    export(open_version(run_dir), ExportConfig(kind="sft", out=tmp_path / "sft"))
    export(open_version(run_dir), ExportConfig(kind="grpo", out=tmp_path / "grpo"))
    sft = prepare_sft_dataset(load_split(tmp_path / "sft"))
    grpo = prepare_grpo_dataset(load_split(tmp_path / "grpo"), ["ground_truth", "target_type"])
    assert len(sft) == len(grpo) == 24
    assert grpo[0]["prompt"][0]["role"] == "system" and "<tools>" in grpo[0]["prompt"][0]["content"]
