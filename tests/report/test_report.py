"""`fabrika report`: the HTML page references every chart and every chart is a real, non-blank PNG."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from tests.export.export_fixtures import make_rows, make_run  # noqa: E402

from fabrika.cli.app import app  # noqa: E402
from fabrika.export.report import CHARTS, build_report  # noqa: E402
from fabrika.store import RunStore  # noqa: E402


def _run_with_accounting(tmp_path: Path) -> Path:
    rows = make_rows(40)
    rows[3].update(status="rejected", reason="invalid_json: oops")
    rows[5].update(status="rejected", reason="unknown_tool: foo")
    run = make_run(tmp_path, rows)
    store = RunStore(run)
    manifest = store.read_manifest()
    manifest["accounting"] = {"rows": [
        {"stage": "fc.samples", "tag": "fc.assistant", "model": "qwen3", "requests": 120, "cache_hits": 30,
         "prompt_tokens": 50_000, "completion_tokens": 9_000, "failures": {"timeout": 2}},
        {"stage": "fc.samples", "tag": "fc.user", "model": "qwen3", "requests": 80, "cache_hits": 0,
         "prompt_tokens": 20_000, "completion_tokens": 4_000, "failures": {}}],
        "totals": {"requests": 200, "cache_hits": 30, "prompt_tokens": 70_000, "completion_tokens": 13_000}}
    store.write_manifest(manifest)
    return run


def test_report_has_funnel_first_and_nonblank_charts(tmp_path: Path):
    run = _run_with_accounting(tmp_path)
    page = build_report(run)
    text = page.read_text("utf-8")
    images = re.findall(r"<img src='([^']+)'", text)
    assert images[0] == "funnel.png" and sorted(images) == sorted(f"{c}.png" for c in CHARTS)
    assert "SIMULATED DATA" in text and "38 rows kept" in text
    for name in images:
        path = page.parent / name
        assert path.stat().st_size > 5_000, name
        with Image.open(path) as im:
            assert im.format == "PNG" and im.width >= 400 and im.height >= 250, name
            pixels = np.asarray(im.convert("L"), dtype=float)
        assert pixels.std() > 5, f"{name} is blank"  # something was drawn


def test_report_cli_writes_to_out(tmp_path: Path):
    run = _run_with_accounting(tmp_path)
    res = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rep" / "index.html").is_file() and (tmp_path / "rep" / "accounting.png").is_file()
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2


def test_turns_count_once_per_episode():
    import json

    import polars as pl

    from fabrika.export.report import sample_stats

    def msgs(n: int) -> str:
        return json.dumps([{"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(n)])

    frame = pl.DataFrame({
        "prompt": [msgs(1), msgs(3), msgs(1), "просто текст"],
        "completion": [msgs(0)[:-1] + ']', msgs(0), msgs(0), "ответ"],
        "tools": ["[]", "[]", '[{"type": "function", "function": {"name": "f"}}]', None],
        "meta": ['{"episode_id": "a"}', '{"episode_id": "a"}', '{"episode_id": "b"}', None],
    })
    stats = sample_stats(frame)
    assert sorted(stats["turns"]) == [1, 2, 3] and stats["episodes"] == 2  # a: max(1, 3); b: 1; plain row: 2
    assert stats["tools"] == [0, 0, 1, 0]
