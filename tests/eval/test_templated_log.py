"""The template-dominated synthetic log (the seed's Table 1 regime) and the samplers on it."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.eval.logs import read_logs
from fabrika.eval.metrics import SampleScorer
from fabrika.eval.sampling import run_sampler

runner = CliRunner()


@pytest.fixture(scope="module")
def log_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tlog") / "log.jsonl"
    res = runner.invoke(app, ["eval", "synth-log", str(path), "--rows", "3000", "--seed", "1", "--regime", "templated"])
    assert res.exit_code == 0, res.output
    return path


def test_templated_log_is_dominated_by_four_templates(log_path: Path):
    rows = [json.loads(x) for x in log_path.read_text(encoding="utf-8").splitlines()]
    counts = collections.Counter(r["template_id"] for r in rows)
    top4 = sum(c for _, c in counts.most_common(4))
    assert 0.88 < top4 / len(rows) < 0.96
    assert counts.most_common(1)[0][1] / len(rows) > 0.6
    assert 0.01 < counts["free"] / len(rows) < 0.06
    assert len(counts) > 10  # a long tail of rare templates stays


def test_random_sampling_is_near_duplicate_there_and_the_template_sampler_is_not(log_path: Path):
    records = read_logs(log_path)
    scorer = SampleScorer(records)
    rnd = scorer.score(run_sampler("random", records, 150, seed=0).indices)["dist"]
    tpl = scorer.score(run_sampler("template", records, 150, seed=0).indices)["dist"]
    assert rnd == pytest.approx(0.65, abs=0.05)  # the seed's regime: random Dist. about 0.65
    assert tpl > rnd + 0.15


def test_unknown_regime_is_refused(tmp_path: Path):
    res = runner.invoke(app, ["eval", "synth-log", str(tmp_path / "x.jsonl"), "--rows", "5", "--regime", "nope"])
    assert res.exit_code == 2 and "--regime" in res.output


def test_length_strata_keep_the_log_length_distribution(log_path: Path):
    from fabrika.eval.sampling import length_strata

    assert length_strata([1, 1, 2, 3, 10, 10], 3) == [0, 0, 1, 1, 2, 2]
    records = read_logs(log_path)
    scorer = SampleScorer(records)
    plain = run_sampler("template", records, 150, seed=0)
    strat = run_sampler("template", records, 150, seed=0, strata=10)
    assert len(strat.indices) == len(set(strat.indices)) == 150
    a, b = scorer.score(plain.indices), scorer.score(strat.indices)
    assert b["js_length"] < a["js_length"] / 4  # √ flattening alone skews lengths in this regime
    assert b["js_service"] < a["js_service"]
    assert b["dist"] < a["dist"]  # the price: more rows of the dominant template
    # off by default: the same selection as before the option existed
    assert run_sampler("template", records, 150, seed=0, strata=0).indices == plain.indices


def test_cli_length_strata_flags(log_path: Path, tmp_path: Path):
    res = runner.invoke(app, ["eval", "sample", str(log_path), "--budget", "40", "--length-strata", "4"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["eval", "sample", str(log_path), "--budget", "40", "--method", "random",
                              "--length-strata", "4"])
    assert res.exit_code == 2 and "--length-strata" in res.output
