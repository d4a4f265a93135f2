"""The pilot samples each kind of item in proportion (``Stage.pilot_stratum``) and weighs it back; a fractional
pilot is floored at ceil(64 N / (N + 64)) items. A plain stride over the input order misses a kind that sits
at the wrong positions (``fc_demo``: a 12-plan stride held 1 of the run's 11 ``multi_turn`` plans, and every
stage below it read 0.66-0.78x)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl
import pytest
import yaml

from fabrika.generators.instruct.verifiers import VerifiersStage
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.estimate import Pilot, allocate, coarsen, pilot_floor, run_estimate, stratified_sample, stratum_weights, stride_sample
from fabrika.pipeline.estimate_model import Moments, fit_line
from fabrika.pipeline.runner import run_pipeline
from fabrika.store import RunStore

ROOT = Path(__file__).parents[2]
DEMO = ROOT / "configs" / "fc_demo.yaml"


def _config(run_dir: Path):
    data = yaml.safe_load(DEMO.read_text("utf-8")) | {"run_dir": str(run_dir)}
    cfg, issues = validate_data(data, str(DEMO), DEMO.parent)
    assert cfg is not None, issues
    return cfg


def _types(run_dir: Path) -> Counter[str]:
    lf = RunStore(run_dir).scan_raw("fc.plans")
    assert lf is not None
    return Counter(lf.select(pl.col("sample_type")).collect()["sample_type"].to_list())


def test_a_pilot_of_fc_demo_holds_each_plan_type_in_its_share_and_its_points_are_right(tmp_path: Path):
    """12 of fc_demo's 60 plans (a count: a 20% pilot would be floored to 31 and run in full). The pilot's plan
    types are the run's in proportion, and the stages below the cut get points within ±25% of the run's."""
    cfg = _config(tmp_path / "full")
    est = run_estimate(cfg, Pilot.parse("12"), tmp_path / "pilot", "fc_demo").as_dict()
    full = run_pipeline(cfg, resume=False, progress=False)
    real, piloted = _types(tmp_path / "full"), _types(tmp_path / "pilot")
    n_full, n_pilot = sum(real.values()), sum(piloted.values())
    assert n_full == 60 and n_pilot < n_full
    for kind, count in real.items():  # every type is there, none more than one plan off its share
        assert piloted[kind] >= 1, (kind, piloted)
        assert abs(piloted[kind] - count * n_pilot / n_full) <= 1.0, (kind, piloted, real)
    # the kind the hook says before the run is the type the stage gives the plan
    assert {k: c["items"] for k, c in est["pilot"]["strata"]["fc.plans"].items()} == dict(real)
    # the multi_turn plans make the most samples: a plain stride drew 1 of 11 (a share of 1/12 against 11/60)
    assert piloted["multi_turn"] / n_pilot >= 0.8 * real["multi_turn"] / n_full, (piloted, real)
    rows = {name: s.rows_written for name, s in full.stats.items()}
    for name in ("fc.samples", "fc_answer_judge", "fc_target_judge", "fc_language", "fc_dedup", "fc_length"):
        point = est["stages"][name]["rows"]
        assert abs(point - rows[name]) <= 0.25 * rows[name], (name, point, rows[name])
    assert full.version is not None
    assert abs(est["total"]["dataset_rows"] - full.version.rows) <= 0.25 * full.version.rows


def test_a_fractional_pilot_of_a_small_input_is_its_full_run(tmp_path: Path):
    """60 plans: the floor (31) is past the FULL_SHARE cut-off, so the pilot runs them all and is exact."""
    cfg = _config(tmp_path / "full")
    est = run_estimate(cfg, Pilot.parse("0.2"), tmp_path / "pilot", "fc_demo").as_dict()
    assert est["pilot"]["run_in_full"] == ["fc.plans"]
    assert est["stages"]["fc.plans"]["pilot_items"] == 60 and est["stages"]["fc.plans"]["exact"]
    assert any("a small input's pilot is its full run" in a for a in est["assumptions"])


def _mixed(n: int = 60, every: int = 5) -> tuple[list[str], dict[str, str]]:
    """``n`` ids, every ``every``-th of kind ``b`` (at the positions a stride of ``n / every`` never picks)."""
    ids = [f"i{k:03d}" for k in range(n)]
    return ids, {i: ("b" if k % every == 0 else "a") for k, i in enumerate(ids)}


def test_a_plain_stride_misses_a_kind_the_stratified_sample_holds_in_proportion():
    ids, kinds = _mixed()
    plain = stride_sample(ids, 12)
    assert not any(kinds[i] == "b" for i in plain)  # positions 2, 7, 12, ...: none of the b items
    picked = stratified_sample(ids, kinds, 12)
    assert Counter(kinds[i] for i in picked) == {"a": 10, "b": 2}  # 48/60 and 12/60 of 12
    # the weighted mean of a per-item figure is the input's mean (b items make 5, a items 1)
    value = {i: 5.0 if kinds[i] == "b" else 1.0 for i in ids}
    w = stratum_weights(ids, kinds, picked)
    assert sum(value[i] * w[i] for i in picked) / len(picked) == pytest.approx(sum(value.values()) / len(ids))
    assert len(set(w.values())) == 2  # 10/12 against 48/60: weighed back
    exact = stratified_sample(ids, kinds, 10)  # 8 + 2: the input's shares exactly, nothing to weigh back
    assert Counter(kinds[i] for i in exact) == {"a": 8, "b": 2}
    assert set(stratum_weights(ids, kinds, exact).values()) == {1.0}


def test_allocation_gives_every_kind_one_and_weights_bring_oversampled_kinds_back():
    assert allocate({"a": 90, "b": 9, "c": 1}, 10) == {"a": 9, "b": 1, "c": 1}  # c rounds to 0: it still gets one
    assert allocate({"a": 5, "b": 3}, 20) == {"a": 5, "b": 3}
    assert sum(allocate({"a": 37, "b": 23, "c": 11, "d": 29}, 20).values()) == 20
    ids = [f"a{k}" for k in range(90)] + [f"b{k}" for k in range(9)] + ["c0"]
    kinds = {i: i[0] for i in ids}
    picked = stratified_sample(ids, kinds, 10)
    w = stratum_weights(ids, kinds, picked)
    value = {i: {"a": 1.0, "b": 3.0, "c": 20.0}[i[0]] for i in ids}  # the one c item is 11 % of the pilot, 1 % of all
    mean = Moments.of([value[i] * w[i] for i in picked], len(picked)).mean
    assert mean == pytest.approx(sum(value.values()) / len(ids))
    plain = sum(value[i] for i in picked) / len(picked)
    assert abs(plain - mean) > 1.0  # unweighted, the oversampled kind would pull the mean far off


def test_weighted_fit_matches_replicated_points():
    xs, ys = [1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 7.0, 8.0]
    fit = fit_line(xs, ys, [1.0, 2.0, 1.0, 1.0])
    rep = fit_line([1.0, 2.0, 2.0, 3.0, 4.0], [2.0, 3.0, 3.0, 7.0, 8.0])
    assert (fit.a, fit.b) == pytest.approx((rep.a, rep.b))
    plain = fit_line(xs, ys)
    assert (fit_line(xs, ys, [1.0] * 4).a, fit_line(xs, ys, [1.0] * 4).resid_var) == pytest.approx((plain.a, plain.resid_var))


def test_the_floor_is_a_sample_of_64_corrected_for_a_small_input():
    assert [pilot_floor(n) for n in (0, 1, 5, 10, 60, 300, 1500, 150_000)] == [0, 1, 5, 9, 31, 53, 62, 64]
    assert Pilot.parse("0.2").size(150_000) == 30_000  # the fraction when it is larger


def test_a_verifier_s_kind_is_its_constraint_s_source_and_family():
    stage = VerifiersStage.__new__(VerifiersStage)
    assert stage.pilot_stratum({"id": "c1", "source": "llm", "family": "length"}) == "llm/length"
    assert stage.pilot_stratum({"id": "c2", "source": "library", "family": "case"}) == "library/case"


def test_kinds_too_many_for_the_pilot_are_cut_to_their_parent():
    kinds = {f"c{k}": f"library/f{k % 9}" for k in range(62)} | {f"l{k}": "llm/None" for k in range(29)}
    assert set(coarsen(kinds, 12).values()) == {"library", "llm"}  # 10 kinds > 12 / 2: by source
    assert coarsen(kinds, 40) == kinds  # 10 kinds <= 20: each family its own kind
    plans = {f"p{k}": t for k, t in enumerate(["single", "text", "multi_turn"] * 4)}
    assert coarsen(plans, 2) == plans  # nothing coarser to fall back to
