"""Every pipeline config shipped in configs/ validates (no stale keys, files or stage kinds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabrika.pipeline.config import validate_file

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_there_are_configs():
    assert {p.name for p in CONFIGS} >= {"demo.yaml", "fc_ru_300k.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_validates(path):
    config, issues = validate_file(path)
    errors = [str(i) for i in issues if i.level == "error"]
    assert not errors, errors
    assert config is not None and config.stages


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_lists_no_builtin_plugins(path):
    _, issues = validate_file(path)
    assert not [str(i) for i in issues if i.path.startswith("plugins")]  # fabrika's stage modules always load
