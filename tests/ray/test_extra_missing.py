"""Without the ``ray`` extra, ``executor: ray`` stops at validate with one line naming it (ray hidden here);
the ``ray:`` section's own checks."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.pipeline.config import validate_file
from tests.ray.ifconfig import small_if_document, write_config

FIX = "pip install 'fabrika[ray]'"


@pytest.fixture
def no_ray(monkeypatch):
    """``import ray`` raises ImportError, as on a machine without the extra."""
    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)


def test_validate_names_the_extra(no_ray, tmp_path):
    path = write_config(tmp_path / "c.yaml", small_if_document(tmp_path / "run", "ray"))
    config, issues = validate_file(path)
    errors = [i for i in issues if i.level == "error"]
    assert config is None and len(errors) == 1
    assert errors[0].path == "executor" and FIX in errors[0].message


def test_cli_validate_and_run_flag_exit_2_with_one_line(no_ray, tmp_path):
    runner = CliRunner()
    ray_cfg = write_config(tmp_path / "ray.yaml", small_if_document(tmp_path / "run", "ray"))
    local_cfg = write_config(tmp_path / "local.yaml", small_if_document(tmp_path / "run2", "local"))
    for args in (["validate", str(ray_cfg)], ["run", str(local_cfg), "--executor", "ray", "--no-progress"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = [ln for ln in result.output.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln]
        assert len(errors) == 1 and FIX in errors[0], result.output
    assert not (tmp_path / "run2").exists()  # nothing written


def test_the_local_executor_never_needs_ray(no_ray, tmp_path):
    path = write_config(tmp_path / "c.yaml", small_if_document(tmp_path / "run", "local"))
    config, issues = validate_file(path)
    assert config is not None and config.executor == "local"
    assert not [i for i in issues if i.level == "error"]


def test_ray_driver_stages_must_name_stages_of_the_pipeline(tmp_path):
    doc = small_if_document(tmp_path / "run", "local", driver_stages=["if.samples", "if_queries", "if.nope"])
    config, issues = validate_file(write_config(tmp_path / "c.yaml", doc))
    errors = [i for i in issues if i.level == "error"]
    assert config is None and [e.path for e in errors] == ["ray.driver_stages[2]"]
    assert "'if.nope' is no stage name or kind" in errors[0].message
