"""`fabrika estimate`: a pilot on the configured backend extrapolates requests, tokens, time and yield;
on the FC demo (sim) the estimated request count is within 25% of a full run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.estimate import Pilot, cut_stages, stage_seconds
from fabrika.pipeline.runner import run_pipeline

ROOT = Path(__file__).parents[2]
DEMO = ROOT / "configs" / "fc_demo.yaml"


def test_estimate_of_the_fc_demo_is_within_25_percent_of_a_full_run(tmp_path: Path):
    res = CliRunner().invoke(app, ["estimate", str(DEMO), "--pilot", "0.2", "--set", f"run_dir={tmp_path / 'est'}",
                                   "--json", str(tmp_path / "estimate.json")])
    assert res.exit_code == 0, res.output
    assert "SIM BACKEND" in res.output and "assumptions:" in res.output
    doc = json.loads((tmp_path / "estimate.json").read_text("utf-8"))
    assert doc["sim"] is True and doc["pilot"]["cut_stages"] == ["fc.tools"]
    assert doc["stages"]["fc.tools"]["pilot_items"] == 2 and doc["pilot"]["full_inputs"] == {"fc.tools": 10}
    data = yaml.safe_load(DEMO.read_text("utf-8"))
    data["run_dir"] = str(tmp_path / "full")
    cfg, issues = validate_data(data, str(DEMO), DEMO.parent)
    assert cfg is not None, issues
    full = run_pipeline(cfg, resume=False, progress=False)
    measured = sum(s.llm.requests for s in full.stats.values())
    estimated = doc["total"]["requests"]
    assert abs(estimated - measured) <= 0.25 * measured, (estimated, measured)
    for name in ("fc.plans", "fc.dialogues"):  # per stage, too
        got, want = doc["stages"][name]["requests"], full.stats[name].llm.requests
        assert abs(got - want) <= 0.3 * want, (name, got, want)
    rows = full.version.rows
    assert abs(doc["total"]["dataset_rows"] - rows) <= 0.3 * rows, (doc["total"]["dataset_rows"], rows)
    pilot_requests = sum(s["pilot_requests"] for s in doc["stages"].values())
    assert pilot_requests < 0.4 * measured  # the pilot was small


def test_pilot_parsing_and_bad_values():
    assert Pilot.parse("0.2").size(10) == 2 and Pilot.parse("50").size(10) == 10 and Pilot.parse(3).size(10) == 3
    for bad in ("0", "-1", "1.5", "abc"):
        with pytest.raises(ValueError):
            Pilot.parse(bad)
    res = CliRunner().invoke(app, ["estimate", str(DEMO), "--pilot", "1.5"])
    assert res.exit_code == 2 and "--pilot" in res.output


def test_cut_is_below_global_sources():
    cfg, _ = validate_data(yaml.safe_load((ROOT / "configs" / "fc_ru_300k.yaml").read_text("utf-8")),
                           str(ROOT / "configs" / "fc_ru_300k.yaml"), ROOT / "configs")
    assert cfg is not None
    assert cut_stages(cfg) == ["fc.tools"]  # fc.topics is global: it runs in full, fc.tools is cut


def test_time_model_bounds_by_items_in_flight_and_by_endpoint_capacity():
    # 1000 items x 4 sequential calls of 0.5 s; 100 items at once -> 10 waves x 2 s = 20 s
    assert stage_seconds(1000, 4000, 0.5, 10, 40, 100, None, 2.0, False) == pytest.approx(20.0)
    # the endpoints take only 20 calls at once: 4000 x 0.5 / 20 = 100 s is the bound
    assert stage_seconds(1000, 4000, 0.5, 10, 40, 100, 20, 2.0, False) == pytest.approx(100.0)
    # a global stage scales its pilot time
    assert stage_seconds(1000, 0, 0.0, 100, 0, 100, None, 3.0, True) == pytest.approx(30.0)


def test_estimate_never_empties_a_directory_it_did_not_make(tmp_path: Path):
    precious = tmp_path / "real_run"
    precious.mkdir()
    (precious / "manifest.json").write_text("{}", encoding="utf-8")
    res = CliRunner().invoke(app, ["estimate", str(DEMO), "--pilot", "0.2", "--work-dir", str(precious)])
    assert res.exit_code == 2 and "not an estimate's scratch directory" in res.output
    assert (precious / "manifest.json").read_text("utf-8") == "{}"
