"""Gates scoped to an export kind: the difficulty band prunes GRPO exports, never SFT ones; unmeasured rows
are kept and counted; export warns about rows longer than the trainer's max_length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets

import fabrika.filters.difficulty  # noqa: F401  (registers the difficulty gate group, as a run's registry does)
import fabrika.filters.length  # noqa: F401
from fabrika.export.source import open_version
from fabrika.export.writer import ExportConfig, export
from fabrika.store import RunStore
from fabrika.store.versions import materialise
from tests.export.export_fixtures import make_rows


def _run(root: Path, rows: list[dict[str, Any]], rates: list[float | None], lengths: list[int]) -> Path:
    run = root / "run"
    store = RunStore(run)
    store.write("fc.samples", rows)
    store.write("difficulty", [{"id": r["id"], "input_id": r["id"], "status": "ok", "reason": None,
                                "difficulty_pass_rate": p, "difficulty_k": 4, "difficulty_errors": 4 if p is None else 0}
                               for r, p in zip(rows, rates)])
    store.write("length", [{"id": r["id"], "input_id": r["id"], "status": "ok", "reason": None,
                            "len_total_tokens": n, "len_prompt_tokens": n // 2, "len_completion_tokens": n - n // 2,
                            "len_tokenizer": "hf:tok"} for r, n in zip(rows, lengths)])
    store.write_manifest({
        "config": {"dataset": {"stages": ["fc.samples"]}, "filters": {}},
        # as a real run records them: materialise then refuses to gate while the group is not loaded
        "gate_groups": ["difficulty", "length"],
        "order": ["fc.samples", "difficulty", "length"],
        "layout": {"fc.samples": {"inputs": [], "annotates": False},
                   "difficulty": {"inputs": ["fc.samples"], "annotates": True},
                   "length": {"inputs": ["fc.samples"], "annotates": True}},
    })
    return run


def test_difficulty_prunes_grpo_but_not_sft(tmp_path: Path) -> None:
    rows = make_rows(12)
    # 0.0 never solved, 1.0 too easy, 0.5 in band, None unmeasured (requests failed)
    rates = [0.0, 1.0, 0.5, None] * 3
    run = _run(tmp_path, rows, rates, [100] * 12)
    info = materialise(run, name="v1")
    gates = info.funnel["gates"]["fc.samples"]
    assert info.rows == 12 and gates["out"] == 12  # the version keeps every row
    assert gates["grpo.dropped_difficulty.min_pass_rate_exclusive"] == 3
    assert gates["grpo.dropped_difficulty.max_pass_rate"] == 3 and gates["grpo.out"] == 6
    assert gates["kept_null_difficulty.min_pass_rate_exclusive"] == 3  # unmeasured: kept, counted

    sft = export(open_version(run), ExportConfig(kind="sft", out=tmp_path / "sft", validate_rows=0))
    grpo = export(open_version(run), ExportConfig(kind="grpo", out=tmp_path / "grpo", validate_rows=0))
    assert sft.rows == 12 and sft.left_out_for_kind == {}
    assert grpo.rows == 6
    assert grpo.left_out_for_kind == {"difficulty.min_pass_rate_exclusive": 3, "difficulty.max_pass_rate": 3}
    kept = {r["id"] for r in datasets.load_from_disk(str(tmp_path / "grpo"))}
    assert kept == {r["id"] for r, p in zip(rows, rates) if p is None or 0 < p <= 0.8}
    card = (tmp_path / "grpo" / "README.md").read_text("utf-8")
    assert "hf:tok" in card  # which tokenizer counted the lengths

    # applied to the whole version on request
    both = materialise(run, {"difficulty": {"apply_to": ["sft", "grpo"]}}, name="v2")
    assert both.rows == 6


def test_export_warns_about_rows_longer_than_max_length(tmp_path: Path) -> None:
    rows = make_rows(6)
    run = _run(tmp_path, rows, [0.5] * 6, [100, 200, 5000, 300, 8000, 50])
    materialise(run, name="v1")
    res = export(open_version(run), ExportConfig(kind="sft", out=tmp_path / "sft", validate_rows=0, max_length=1024))
    assert res.warnings == ["2 of 6 rows are longer than max_length=1024 tokens (longest 8000); TRL truncates them "
                            "(a completion past the limit is cut or fully masked) — raise the trainer's max_length "
                            "or refilter with --set filters.length.max_tokens=N"]
    quiet = export(open_version(run), ExportConfig(kind="sft", out=tmp_path / "sft2", validate_rows=0))
    assert quiet.warnings == []  # the SFT preset's 32768 fits
