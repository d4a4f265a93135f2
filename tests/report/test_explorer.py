"""The run explorer's data: every row of every stage with what happened to it, counts equal to `fabrika status`,
scores joined onto rows, version diffs, search over values only, and the browse server's pages."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import polars as pl
import pytest

from fabrika.export.explorer import DROPPED, KEPT, REJECTED, RunExplorer
from fabrika.export.explorer_server import ExplorerServer
from tests.report.explorer_checks import status_json, version_ids


def _all_rows(ex: RunExplorer, stage: str, **kw: object) -> list[dict]:
    out, offset = [], 0
    while True:
        page = ex.page(stage, offset=offset, limit=20, **kw)  # type: ignore[arg-type]
        out += page["rows"]
        offset += 20
        if offset >= page["total"]:
            return out


def test_every_row_is_labelled_by_the_version_and_counts_equal_status(explorer_run: Path):
    ex = RunExplorer(explorer_run)
    assert ex.version == "v2"
    status = status_json(explorer_run)
    summary = ex.summary()
    for name, info in status["stages"].items():
        mine = summary["stages"][name]
        assert (mine["rows"], mine["ok"], mine["rejected"]) == (info["rows"], info["ok"], info["rejected"]), name
    for stage in ex.dataset_stages:
        rows = _all_rows(ex, stage)
        assert len(rows) == status["stages"][stage]["rows"]  # every row, paged
        kept, dropped = version_ids(explorer_run, "v2", stage), version_ids(explorer_run, "v2", stage, dropped=True)
        assert {r["id"] for r in rows if r["_group"] == KEPT} == kept
        assert all(r["id"] in dropped for r in rows if r["_group"] != KEPT)
        funnel = status["latest_funnel"]["gates"][stage]
        assert summary["stages"][stage]["groups"].get(KEPT, 0) == funnel["out"]
        for gate, n in summary["stages"][stage]["gates"].items():
            assert funnel[f"dropped_{gate}"] == n
    for stage in ex.stages():  # rows per group and gate counted from the rows equal the version's funnel
        full = ex.stage_counts(stage)
        assert (full["groups"], full["gates"]) == (summary["stages"][stage]["groups"],
                                                   summary["stages"][stage]["gates"]), stage
    samples = _all_rows(ex, "fc.samples", group=DROPPED)
    gates = {r["_gate"] for r in samples}
    assert "language.allowed" in gates and len(samples) >= 2
    lang = [r for r in samples if r["_gate"] == "language.allowed"]
    assert all(r["_threshold"] == ["ru"] for r in lang)  # the threshold of v2, not of the config
    assert all(r["_scores"]["fc_language"]["lang_detected"] != "ru" for r in lang)  # the score behind the drop


def test_scores_are_joined_onto_rows_and_scorers_are_not_rows(explorer_run: Path):
    ex = RunExplorer(explorer_run)
    assert "fc_language" not in ex.stages() and "fc.samples" in ex.stages()
    row = ex.page("fc.samples", group=KEPT, limit=1)["rows"][0]
    assert {"fc_language", "fc_dedup", "fc_length"} <= set(row["_scores"])
    assert "lang_confidence" in row["_scores"]["fc_language"]


def test_rejected_fc_dialogue_keeps_its_transcript(explorer_run: Path):
    ex = RunExplorer(explorer_run)
    rows = _all_rows(ex, "fc.dialogues", group=REJECTED)
    assert rows, "the demo run must reject a dialogue"
    for row in rows:
        dialogue = json.loads(row["dialogue"])
        assert dialogue["meta"]["rejected"] is True and len(dialogue["messages"]) >= 2
        assert row["reason"] and row["_reason"] == row["reason"].split(":")[0]


def test_version_diff_lists_what_the_refilter_removed(explorer_run: Path):
    ex = RunExplorer(explorer_run)
    for stage in ex.dataset_stages:
        v1, v2 = version_ids(explorer_run, "v1", stage), version_ids(explorer_run, "v2", stage)
        removed = {r["id"] for r in _all_rows(ex, stage, group="removed", vs="v1")}
        added = {r["id"] for r in _all_rows(ex, stage, group="added", vs="v1")}
        assert removed == v1 - v2 and added == v2 - v1
    assert ex.diff("fc.samples", "v1")["removed"] > 0  # Russian only: the English samples went


def test_search_matches_values_not_keys(explorer_run: Path):
    ex = RunExplorer(explorer_run)
    total = ex.page("fc.dialogues", limit=1)["total"]
    assert ex.page("fc.dialogues", query="n_wrong")["total"] == 0  # a column name
    assert ex.page("fc.dialogues", query='"role"')["total"] == 0  # a JSON key inside the dialogue
    wrong = ex.page("fc.dialogues", query="wrong")["total"]  # the value of a turn's flag
    assert 0 < wrong < total
    rejected = ex.page("fc.dialogues", group=REJECTED, limit=1)["rows"][0]
    word = rejected["raw_excerpt"].split()[1]
    hits = ex.page("fc.dialogues", query=word.upper(), limit=500)["rows"]
    assert rejected["id"] in {r["id"] for r in hits}


def test_browse_server_pages_rows_on_loopback(explorer_run: Path):
    server = ExplorerServer(explorer_run, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert server.server_address[0] == "127.0.0.1"

        def get(path: str) -> dict:
            with urllib.request.urlopen(server.url + path, timeout=30) as resp:
                return json.loads(resp.read())

        page = get("api/rows?stage=fc.samples&offset=50&limit=10")
        assert page["total"] == status_json(explorer_run)["stages"]["fc.samples"]["rows"]
        assert len(page["rows"]) == 10
        first = get("api/rows?stage=fc.samples&limit=60")["rows"]
        assert [r["id"] for r in first[50:60]] == [r["id"] for r in page["rows"]]
        with urllib.request.urlopen(server.url, timeout=30) as resp:
            assert b"fabrika-samples" in resp.read()
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(server.url + "api/rows?stage=fc_language", timeout=30)
        assert bad.value.code == 400
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def test_a_big_run_gets_a_sample_and_says_so(explorer_run: Path, tmp_path: Path):
    from fabrika.export.browser import BrowserLimits, collect_samples

    ex = RunExplorer(explorer_run)
    data = collect_samples(ex, BrowserLimits(max_rows=10, kept_per_stage=3, per_reason=1))
    assert data["complete"] is False and data["diffs"] == {}
    per_stage = pl.DataFrame([{"s": r["_stage"], "g": r["_group"]} for r in data["samples"]])
    kept = per_stage.filter(pl.col("g").is_in([KEPT, "ok"])).group_by("s").len()
    assert kept["len"].max() == 3
    whole = collect_samples(ex)
    assert whole["complete"] is True
    assert len(whole["samples"]) == sum(ex.index(s).frame.height for s in ex.stages())


def test_the_first_page_read_before_the_index_equals_the_indexed_page(explorer_run: Path):
    for stage in ("fc.samples", "fc.dialogues", "fc.irrelevance"):
        fresh = RunExplorer(explorer_run)
        early = fresh.page(stage, limit=25)
        assert stage not in fresh._index  # read from the first shards only
        indexed = RunExplorer(explorer_run)
        indexed.index(stage)
        assert early == indexed.page(stage, limit=25), stage


def test_browse_command_refuses_a_directory_that_is_not_a_run(tmp_path: Path):
    from typer.testing import CliRunner

    from fabrika.cli.app import app

    res = CliRunner().invoke(app, ["browse", str(tmp_path), "--port", "0"])
    assert res.exit_code == 2 and "not a run directory" in res.output
