"""The card's Lengths section describes the rows the export wrote (not the whole run), in the unit the rows were
measured in; an unknown `--mix-kinds` name is one clear line (exit 2), not "0 rows available"."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.export.card import length_stats
from fabrika.export.mix import MixConfig
from fabrika.export.source import open_version
from fabrika.export.writer import ExportConfig, export
from fabrika.filters.text import count_tokens, messages_text
from tests.export.export_fixtures import make_rows, make_run


def _measured(card: str) -> tuple[int, str]:
    m = re.search(r"Measured on (\d+) rows with (.+?)\.\n", card)
    assert m, card
    return int(m.group(1)), m.group(2)


def test_lengths_are_measured_on_the_exported_rows(tmp_path: Path) -> None:
    rows = make_rows(40)
    long_text = " ".join(["слово"] * 700)
    rows[3]["completion"] = rows[3]["completion"].replace("Готово", long_text)  # one huge row in the run
    run = make_run(tmp_path, rows)
    out = tmp_path / "ds"
    res = export(open_version(run), ExportConfig(kind="sft", out=out, validate_rows=0,
                                                 mix=MixConfig(size=10, seed=1, dimensions=[
                                                     {"column": "lang", "shares": {"ru": 0.5, "en": 0.5}}])))
    assert res.rows == 10
    n, unit = _measured((out / "README.md").read_text(encoding="utf-8"))
    assert n == 10 and "razdel" in unit
    import datasets

    written = {r["id"] for r in datasets.load_from_disk(str(out))}
    kept = [r for r in rows if r["id"] in written]
    longest = max(count_tokens(messages_text(r["prompt"])) + count_tokens(r["tools"] or "")
                  + count_tokens(messages_text(r["completion"], with_calls=True)) for r in kept)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "| total | " in card and re.search(rf"\| total \| \d+ \| \d+ \| {longest} \|", card)


def test_stored_token_counts_are_reported_in_their_own_unit_and_a_mix_says_so(tmp_path: Path) -> None:
    rows = make_rows(12)
    for i, r in enumerate(rows):
        if i < 8:
            r.update(len_prompt_tokens=100 + i, len_completion_tokens=20, len_total_tokens=120 + i,
                     len_tokenizer="hf:qwen3")
    source = open_version(make_run(tmp_path, rows))
    only_stored = length_stats(source, "sft", frame=source.frame.filter(pl.col("len_prompt_tokens").is_not_null()))
    assert only_stored is not None and only_stored["rows"] == 8 and only_stored["model_tokens"]
    assert only_stored["tokenizer"] == "the tokenizer `hf:qwen3`"
    assert only_stored["completion"]["max"] == 20
    mixed = length_stats(source, "sft")
    assert mixed is not None and mixed["rows"] == 12
    assert "8 rows" in mixed["tokenizer"] and "4 rows have no token count" in mixed["tokenizer"]


@pytest.mark.parametrize("shares, hint", [("general=0.5,iff=0.5", "did you mean 'if'"),
                                          ("chat=0.5,fc=0.5", "kinds are fc, if, general")])
def test_an_unknown_mix_kind_is_one_clear_line(tmp_path: Path, shares: str, hint: str) -> None:
    run = make_run(tmp_path, make_rows(12))
    res = CliRunner().invoke(app, ["export", str(run), "--out", str(tmp_path / "o"), "--mix-kinds", shares,
                                   "--size", "4"])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "unknown kind" in lines[0] and hint in lines[0], res.output
