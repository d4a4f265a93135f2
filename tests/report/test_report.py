"""`fabrika report`: the HTML page references every chart and every chart is a real, non-blank PNG."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from fabrika.cli.app import app  # noqa: E402
from fabrika.export.report import CHARTS, build_report  # noqa: E402
from fabrika.store import RunStore  # noqa: E402
from tests.export.export_fixtures import make_rows, make_run  # noqa: E402


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
    images = re.findall(r"<img alt='([^']+)' src='data:image/png;base64,([^']+)'>", text)
    assert images[0][0] == "funnel" and sorted(n for n, _ in images) == sorted(CHARTS)
    assert "SIMULATED DATA" in text and "38 rows kept" in text
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", text), "the page must not load anything from the network"
    for name, data in images:
        png = base64.b64decode(data)
        assert png == (page.parent / f"{name}.png").read_bytes() and len(png) > 5_000, name
        with Image.open(io.BytesIO(png)) as im:
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


def _embedded(page: Path) -> dict:
    return json.loads(page.read_text("utf-8").split("id='fabrika-samples'>", 1)[1].split("</script>", 1)[0])


def test_browser_data_groups_rejections_by_reason_next_to_the_raw_answer(tmp_path: Path):
    rows = make_rows(30)
    raw = "<think>hmm</think> Sure! Here is the JSON: {\"name\": \"get_weather\""
    for i in (3, 9, 15):
        rows[i].update(status="rejected", reason=f"invalid_json: unterminated object at {i}", raw_excerpt=raw)
    rows[4].update(status="rejected", reason="not_sampled: share=0.3")
    rows[7].update(status="rejected", reason="</script><script>alert(1)</script>")  # hostile text stays data
    page = build_report(make_run(tmp_path, rows))
    text = page.read_text("utf-8")
    assert "<script>alert(1)" not in text
    data = _embedded(page)
    by_group: dict[str, list[dict]] = {}
    for r in data["samples"]:
        by_group.setdefault(r["_group"], []).append(r)
    assert len(by_group["kept"]) == 25  # all 25 ok rows (fewer than the 30 per stage the page holds)
    bad = [r for r in by_group["rejected"] if r["_reason"] == "invalid_json"]
    assert len(bad) == 3 and all(r["raw_excerpt"] == raw and r["reason"].startswith("invalid_json:") for r in bad)
    assert [r["_reason"] for r in by_group["passed over"]] == ["not_sampled"]
    order = [(r["_group"], r["_reason"]) for r in data["samples"]]
    assert order == sorted(order, key=order.index) and len(set(order)) == len(
        [k for i, k in enumerate(order) if i == 0 or order[i - 1] != k])  # each (group, reason) is one block
    assert order[0] == ("kept", "") and ("rejected", "invalid_json") in order  # kept rows first, then by reason
    assert _embedded(page)["complete"] is True  # a small run: every row is in the page
    assert any(r["reason"].startswith("</script>") for r in by_group["rejected"])


def test_browser_bounds_rows_per_reason_and_cuts_long_cells(tmp_path: Path):
    from fabrika.export.browser import MAX_CELL_CHARS, BrowserLimits

    rows = make_rows(60)
    for i in range(0, 60, 2):
        rows[i].update(status="rejected", reason=f"schema_error: field {i}")
    rows[1]["meta"] = json.dumps({"episode_id": "x", "note": "я" * (MAX_CELL_CHARS + 50)}, ensure_ascii=False)
    page = build_report(make_run(tmp_path, rows), limits=BrowserLimits(max_rows=0, kept_per_stage=5,
                                                                                per_reason=3))
    data = _embedded(page)["samples"]
    assert sum(r["_group"] == "kept" for r in data) == 5
    assert sum(r["_group"] == "rejected" for r in data) == 3
    assert all(len(v) <= MAX_CELL_CHARS + 40 for r in data for v in r.values() if isinstance(v, str))


def test_report_refuses_to_overwrite_another_runs_report(tmp_path: Path):
    a = make_run(tmp_path / "a", make_rows(6))
    b = make_run(tmp_path / "b", make_rows(8))
    shared = tmp_path / "shared"
    assert CliRunner().invoke(app, ["report", str(a), "--out", str(shared)]).exit_code == 0
    assert CliRunner().invoke(app, ["report", str(a), "--out", str(shared)]).exit_code == 0  # same run: fine
    before = (shared / "index.html").read_bytes()
    res = CliRunner().invoke(app, ["report", str(b), "--out", str(shared)])
    assert res.exit_code == 2 and "--overwrite" in res.output
    assert (shared / "index.html").read_bytes() == before  # untouched
    res = CliRunner().invoke(app, ["report", str(b), "--out", str(shared), "--overwrite"])
    assert res.exit_code == 0 and "8 rows kept" in (shared / "index.html").read_text("utf-8")
    foreign = tmp_path / "site"
    foreign.mkdir()
    (foreign / "index.html").write_text("<html>someone's page</html>")
    assert CliRunner().invoke(app, ["report", str(a), "--out", str(foreign)]).exit_code == 2


def test_if_samples_carry_each_verifiers_verdict_from_their_response(tmp_path: Path):
    rows = make_rows(4)
    for i, r in enumerate(rows):
        r["meta"] = json.dumps({"response_id": f"ifr-{i}", "constraint_id": "c1"})
        r["ground_truth"] = json.dumps({"constraints": [{"id": "c1", "text": "Ответ без запятых."}]},
                                       ensure_ascii=False)
    run = make_run(tmp_path, rows, stage="if_samples")
    store = RunStore(run)
    verdicts = [{"sample_index": 0, "accuracy": 1.0, "status": "true", "passed": True},
                {"sample_index": 3, "accuracy": 0.2, "status": "false", "passed": False}]
    store.write("if_responses", [{"id": f"ifr-{i}", "status": "ok", "reason": None, "input_id": "p",
                                  "response": "ответ", "verifier_results": json.dumps(verdicts)} for i in range(4)])
    manifest = store.read_manifest()
    manifest["order"] = ["if_responses", "if_samples"]
    store.write_manifest(manifest)
    samples = [r for r in _embedded(build_report(run))["samples"] if r["_stage"] == "if_samples"]
    assert len(samples) == 4 and all(json.loads(r["verifier_results"]) == verdicts for r in samples)
