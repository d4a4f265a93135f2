"""`fabrika estimate`: a pilot on the configured backend extrapolates requests, tokens, rows, time and yield
as a point and a range per stage; on small sim runs the full run's figures fall inside the ranges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.estimate import (
    FULL_SHARE,
    MIN_PILOT_ITEMS,
    Pilot,
    cut_stages,
    full_stages,
    run_estimate,
    stage_pools,
    stage_seconds,
    wall_seconds,
)
from fabrika.pipeline.estimate_model import inside
from fabrika.pipeline.runner import run_pipeline

ROOT = Path(__file__).parents[2]
DEMO = ROOT / "configs" / "fc_demo.yaml"


def test_estimate_of_the_fc_demo_holds_the_full_run_in_its_ranges(tmp_path: Path):
    # 12 of its 60 plans, a count: a 20% pilot is floored at ceil(64*60/124) = 31 plans, past FULL_SHARE (in full)
    res = CliRunner().invoke(app, ["estimate", str(DEMO), "--pilot", "12", "--set", f"run_dir={tmp_path / 'est'}",
                                   "--json", str(tmp_path / "estimate.json"), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "SIM BACKEND" in res.output and "assumptions:" in res.output
    doc = json.loads((tmp_path / "estimate.json").read_text("utf-8"))
    # fc.tools feeds the pool-wide fc.tools_dedup: it runs in full, and the pilot cuts fc.plans
    assert doc["sim"] is True and doc["pilot"]["cut_stages"] == ["fc.plans"]
    assert doc["stages"]["fc.tools"]["exact"] and doc["stages"]["fc.tools_dedup"]["exact"]
    topics = doc["pilot"]["full_inputs"]["fc.plans"]
    # 12 plans, sampled per sample type in proportion (at least one of each type: a few more than 12)
    assert 12 <= doc["stages"]["fc.plans"]["pilot_items"] < 12 + len(doc["pilot"]["strata"]["fc.plans"]) < topics
    assert "estimate 1/3: stages above the cut run in full: fc.tools, fc.tools_dedup" in res.output  # progress
    assert f"estimate 2/3: pilot of fc.plans (12/{topics} items, " in res.output
    data = yaml.safe_load(DEMO.read_text("utf-8"))
    data["run_dir"] = str(tmp_path / "full")
    cfg, issues = validate_data(data, str(DEMO), DEMO.parent)
    assert cfg is not None, issues
    full = run_pipeline(cfg, resume=False, progress=False)
    measured = sum(s.llm.requests for s in full.stats.values())
    total = doc["total"]
    assert inside(measured, total["range"]["requests"]), (total["range"]["requests"], measured)
    assert abs(total["requests"] - measured) <= 0.25 * measured, (total["requests"], measured)
    assert inside(full.version.rows, total["range"]["dataset_rows"]), (total["range"]["dataset_rows"], full.version.rows)
    assert abs(total["dataset_rows"] - full.version.rows) <= 0.25 * full.version.rows
    for name in ("fc.plans", "fc.dialogues", "fc.samples"):  # per stage, too
        est, real = doc["stages"][name], full.stats[name]
        assert inside(real.llm.requests, est["range"]["requests"]), (name, est["range"]["requests"], real.llm.requests)
        assert inside(real.rows_written, est["range"]["rows"]), (name, est["range"]["rows"], real.rows_written)
        assert est["range"]["rows"]["low"] < est["rows"] < est["range"]["rows"]["high"]  # extrapolated: a real range
    pilot_requests = sum(s["pilot_requests"] for s in doc["stages"].values())
    assert pilot_requests < 0.7 * measured  # the pilot was smaller than the run
    # fc.irrelevance draws 30% of its eligible samples: its pilot drew them all, and the estimate weighs them back
    # (at 30% its 11 pilot dialogues drew none, and the estimate said 0 requests and 0 rows with no spread)
    assert doc["pilot"]["oversampled"] == {"fc.irrelevance": {"field": "share", "share": 0.3, "pilot_share": 1.0}}
    est, real = doc["stages"]["fc.irrelevance"], full.stats["fc.irrelevance"]
    assert est["requests"] > 0 and est["range"]["requests"]["high"] > est["requests"]
    assert inside(real.llm.requests, est["range"]["requests"]), (est["range"]["requests"], real.llm.requests)
    assert inside(real.rows_written, est["range"]["rows"]), (est["range"]["rows"], real.rows_written)
    assert any("weighed back by share / pilot share" in a for a in doc["assumptions"])


def test_a_fixed_number_of_calls_over_the_first_seeds_is_counted_not_scaled(tmp_path: Path):
    """if.expand spreads ceil(target / per_request) calls over its seeds, the first ones first: a 20% pilot
    holds all of them, so scaling by items was 5x off; the estimate counts them without the LLM (12 of the 62 seeds:
    a 20% pilot is floored at 32 of them and runs them in full)."""
    data = {"name": "expand", "seed": 3, "llm": {"backend": "sim"}, "run_dir": str(tmp_path / "full"),
            "stages": [{"kind": "if.expand", "name": "if_expand", "library_seeds": True, "target_count": 60,
                        "candidates_per_request": 10}],
            "dataset": {"stages": ["if_expand"]}}
    cfg, issues = validate_data(data, "expand.yaml", tmp_path)
    assert cfg is not None, issues
    est = run_estimate(cfg, Pilot.parse("12"), tmp_path / "pilot", "expand").as_dict()  # 0.2 of 62: floored, in full
    full = run_pipeline(cfg, resume=False, progress=False)
    stage, real = est["stages"]["if_expand"], full.stats["if_expand"]
    assert est["pilot"]["dry_counted"] == ["if_expand"]
    assert stage["pilot_items"] < stage["items"] == real.seen  # a pilot of the seeds
    assert stage["requests"] == real.llm.requests == 6  # counted, not 5 x 6
    assert inside(real.rows_written, stage["range"]["rows"]), (stage["range"]["rows"], real.rows_written)
    assert abs(stage["rows"] - real.rows_written) <= 0.25 * real.rows_written
    assert inside(full.version.rows, est["total"]["range"]["dataset_rows"])


def test_stages_that_make_their_own_items_are_not_scaled_by_their_input(tmp_path: Path):
    """generic.prompts is cut; a stage that ran in full on exact inputs is exact (no range)."""
    cfg, issues = validate_data(yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text("utf-8"))
                                | {"run_dir": str(tmp_path / "full")}, str(ROOT / "configs" / "smoke.yaml"),
                                ROOT / "configs")
    assert cfg is not None, issues
    lines: list[str] = []
    est = run_estimate(cfg, Pilot.parse("50"), tmp_path / "pilot", "smoke", note=lines.append).as_dict()
    assert [line.split(":")[0] for line in lines] == ["estimate 2/3", "estimate 3/3"]
    answers = est["stages"]["answers"]
    assert answers["exact"] and answers["range"]["requests"] == {"point": 12.0, "low": 12.0, "high": 12.0}
    full = run_pipeline(cfg, resume=False, progress=False)
    assert answers["requests"] == full.stats["answers"].llm.requests
    assert est["total"]["dataset_rows"] == full.version.rows


def test_pilot_parsing_and_bad_values():
    assert Pilot.parse("0.2").size(1000) == 200 and Pilot.parse("50").size(10) == 10 and Pilot.parse(3).size(10) == 3
    # a fraction is floored at ceil(64 N / (N + 64)): 40 of 100, 9 of 10, all of 3; a count is taken as given
    assert Pilot.parse("0.2").size(100) == 40 and Pilot.parse("0.2").size(10) == 9 and Pilot.parse("0.2").size(3) == 3
    assert Pilot.parse("0.01").size(5) == MIN_PILOT_ITEMS
    for bad in ("0", "-1", "1.5", "abc"):
        with pytest.raises(ValueError):
            Pilot.parse(bad)
    res = CliRunner().invoke(app, ["estimate", str(DEMO), "--pilot", "1.5"])
    assert res.exit_code == 2 and "--pilot" in res.output


def test_cut_is_below_global_sources():
    cfg, _ = validate_data(yaml.safe_load((ROOT / "configs" / "fc_ru_300k.yaml").read_text("utf-8")),
                           str(ROOT / "configs" / "fc_ru_300k.yaml"), ROOT / "configs")
    assert cfg is not None
    # fc.topics is global: it runs in full; fc.tools feeds the pool-wide fc.tools_dedup, so it runs in full too
    assert full_stages(cfg) == {"fc.tools"} and cut_stages(cfg) == ["fc.plans"]
    cfg, _ = validate_data(yaml.safe_load((ROOT / "configs" / "if_demo.yaml").read_text("utf-8")),
                           str(ROOT / "configs" / "if_demo.yaml"), ROOT / "configs")
    assert cfg is not None  # if.expand feeds if.dedup; the adversarial dialogues have no pool below them
    assert full_stages(cfg) == {"if_expand"} and cut_stages(cfg) == ["if_verifiers", "if_dialogues"]


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



def test_the_pilot_runs_in_one_process_whatever_llm_workers_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The pilot's sampling and per-item counters live in this process: every pipeline run of an estimate
    of an ``llm_workers: 2`` config runs with one process (worker subprocesses would run unsampled stages)."""
    import fabrika.pipeline.runner as runner

    seen: list[int] = []
    real = runner.arun_pipeline

    async def spy(config, *args, **kwargs):
        seen.append(config.llm_workers)
        return await real(config, *args, **kwargs)

    monkeypatch.setattr(runner, "arun_pipeline", spy)
    orders: list[tuple[int, bool]] = []

    async def spy_order(config, *args, **kwargs):
        orders.append((config.max_parallel_stages, config.overlap))
        return await spy(config, *args, **kwargs)

    monkeypatch.setattr(runner, "arun_pipeline", spy_order)
    doc = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text("utf-8")) | {"run_dir": str(tmp_path / "r"),
                                                                                   "llm_workers": 2}
    cfg, issues = validate_data(doc, str(ROOT / "configs" / "smoke.yaml"), ROOT / "configs")
    assert cfg is not None and cfg.llm_workers == 2, issues
    est = run_estimate(cfg, Pilot.parse("50"), tmp_path / "pilot", "smoke").as_dict()
    assert seen and set(seen) == {1}
    # one stage at a time and no overlap, so that each stage's seconds are its own
    assert set(orders) == {(1, False)}
    # ... but the total is laid out as the real run schedules them, beside their sum
    total = est["total"]
    assert total["schedule"]["max_parallel_stages"] == cfg.max_parallel_stages
    assert set(total["schedule"]["stages"]) == set(est["stages"])
    assert total["seconds"] <= total["seconds_sum"] + 0.01
    for b in ("point", "low", "high"):  # the schedule never takes longer than the stages one after another
        assert total["range"]["seconds"][b] <= total["range"]["seconds_sum"][b], b
    assert total["range"]["seconds"]["low"] <= total["range"]["seconds"]["point"] <= total["range"]["seconds"]["high"]


def _timed(cfg, seconds: dict[str, float]) -> dict[str, dict]:
    return {s.stage_name: {"range": {"seconds": {b: seconds.get(s.stage_name, 1.0) * f
                                                 for b, f in (("point", 1.0), ("low", 0.5), ("high", 2.0))}}}
            for s in cfg.stages}


def test_the_wall_time_overlaps_the_sandbox_stage_with_the_independent_branch(tmp_path: Path):
    """if_demo on sim: the if.dialogues branch depends on nothing else, so it runs beside the constraint
    chain. if_consistency runs its checks in sandbox workers (its own core), so on two cores its 10 s are
    hidden behind the in-process dialogue stages, which share one core with every other in-process stage;
    on one core, or with max_parallel_stages 1, the wall time is the sum."""
    cfg = _config("if_demo", tmp_path / "r")
    dialogue = [s.stage_name for s in cfg.stages if s.stage_name.startswith("if_dialogue")]
    stages = _timed(cfg, {"if_consistency": 10.0} | {n: 20.0 for n in dialogue})
    total = sum(e["range"]["seconds"]["point"] for e in stages.values())
    pools = stage_pools(cfg, sim=True)
    assert pools["if_consistency"] == "workers" and pools["if_dialogues"] == pools["if_backtranslation"] == "driver"
    walls, plan = wall_seconds(cfg, stages, sim=True, cores=2)
    assert walls["point"] == pytest.approx(total - 10.0)  # the driver's work, never idle
    assert walls["low"] == pytest.approx((total - 10.0) * 0.5) and walls["high"] == pytest.approx((total - 10.0) * 2)
    assert plan["stages"]["if_dialogues"]["start"] == plan["stages"]["if_expand"]["start"] == 0.0
    assert plan["stages"]["if_backtranslation"]["start"] == plan["stages"]["if_consistency"]["end"]
    assert wall_seconds(cfg, stages, sim=True, cores=1)[0]["point"] == pytest.approx(total)
    one = cfg.model_copy(update={"max_parallel_stages": 1})
    assert wall_seconds(one, stages, sim=True, cores=2)[0]["point"] == pytest.approx(total)
    # on an endpoint the LLM stages wait rather than compute: the branches' longest path, far below the sum
    assert wall_seconds(cfg, stages, sim=False, cores=2)[0]["point"] < total - 10.0


def _config(name: str, run_dir: Path):
    path = ROOT / "configs" / f"{name}.yaml"
    cfg, issues = validate_data(yaml.safe_load(path.read_text("utf-8")) | {"run_dir": str(run_dir)}, str(path),
                                ROOT / "configs")
    assert cfg is not None, issues
    return cfg


def test_a_cut_stage_whose_pilot_would_be_most_of_it_runs_in_full(tmp_path: Path):
    """fc_import_demo imports 11 tools: a 20% pilot is 5 of them (the minimum), and the 5 tools' yields
    predicted 3.4x the dataset rows. A pilot of at least FULL_SHARE of the input runs the input in full, so
    the whole estimate is exact and equals the run."""
    cfg = _config("fc_import_demo", tmp_path / "full")
    lines: list[str] = []
    est = run_estimate(cfg, Pilot.parse("0.2"), tmp_path / "pilot", "fc_import_demo", note=lines.append).as_dict()
    n = est["pilot"]["full_inputs"]["fc.tools_import"]
    assert Pilot.parse("0.2").size(n) >= FULL_SHARE * n  # what the rule is for
    assert est["pilot"]["run_in_full"] == ["fc.tools_import"]
    assert any(f"fc.tools_import ({n}/{n} items, in full" in line for line in lines), lines
    assert all(e["exact"] for e in est["stages"].values())
    full = run_pipeline(cfg, resume=False, progress=False)
    assert est["total"]["requests"] == sum(s.llm.requests for s in full.stats.values())
    assert est["total"]["dataset_rows"] == full.version.rows
    assert est["total"]["range"]["dataset_rows"]["low"] == est["total"]["range"]["dataset_rows"]["high"]
    # a large input is still sampled
    assert Pilot.parse("0.2").size(1000) < FULL_SHARE * 1000


def test_a_gate_s_share_measured_on_few_items_widens_the_range_below_it(tmp_path: Path):
    """general_demo: the teacher reads the prompts that pass the language/dedup/decontamination gates; the
    pilot measured that share on 10 of 50 prompts (8 of 10, the run has 46 of 50). The share's own error
    is carried into the teacher's range, which then holds the run's 46 (the old 35-45 did not)."""
    cfg = _config("general_demo", tmp_path / "full")
    est = run_estimate(cfg, Pilot.parse("10"), tmp_path / "pilot", "general_demo").as_dict()  # a 20% pilot: in full
    full = run_pipeline(cfg, resume=False, progress=False)
    teacher = est["stages"]["general_teacher"]
    rng = teacher["range"]["items"]
    assert not teacher["exact"] and rng["high"] - rng["point"] > 0.12 * rng["point"] + 1  # more than the margin
    assert inside(full.stats["general_teacher"].llm.requests, teacher["range"]["requests"])
    total = est["total"]
    assert inside(sum(s.llm.requests for s in full.stats.values()), total["range"]["requests"])
    assert inside(full.version.rows, total["range"]["dataset_rows"]), (total["range"]["dataset_rows"],
                                                                       full.version.rows)
    for name, e in est["stages"].items():  # time: a fixed part, never more than the stage's pilot seconds
        assert 0.0 <= e["fixed_seconds"] <= e["seconds"] + 1e-9, name


def test_what_the_run_pays_before_the_pilot_s_invocation_is_in_the_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Building the engine and counting the cut stage's input happen before the pilot's invocation, and they load
    what a run's first stage loads lazily (a morphology dictionary, a stage's modules): the pilot's stages then
    never pay it while the run does (general_demo: ~0.5 s of a 2 s run, its time point was 0.71x). That phase
    is in the estimate's overhead. (A lower bound only: the box's load can make the phase longer, never shorter.)"""
    import time

    import fabrika.pipeline.estimate as estimate

    slow_start = 0.3
    build = estimate.build_engine_for

    def slow_build(*args, **kwargs):
        engine = build(*args, **kwargs)
        time.sleep(slow_start)  # a slow engine start, paid outside every invocation
        return engine

    monkeypatch.setattr(estimate, "build_engine_for", slow_build)
    cfg = _config("fc_import_demo", tmp_path / "full")
    est = run_estimate(cfg, Pilot.parse("0.2"), tmp_path / "pilot", "fc_import_demo").as_dict()
    assert est["pilot"]["prepare_seconds"] >= slow_start
    assert est["pilot"]["overhead_seconds"] >= est["pilot"]["prepare_seconds"]
    stage_seconds_sum = sum(float(e.get("seconds") or 0.0) for e in est["stages"].values())
    assert est["total"]["seconds_sum"] >= stage_seconds_sum + slow_start - 0.01
