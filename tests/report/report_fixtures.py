"""A real FC demo run (sim backend) to report on: dialogues with wrong/recovered turns, rejections."""

from __future__ import annotations

from pathlib import Path

import yaml

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline

DEMO = Path(__file__).parents[2] / "configs" / "fc_demo.yaml"


def run_fc_demo(run_dir: Path, plans_per_topic: int = 3) -> Path:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["run_dir"] = str(run_dir)
    for stage in data["stages"]:
        if stage["kind"] == "fc.plans":
            stage["plans_per_topic"] = plans_per_topic
    config, issues = validate_data(data, str(DEMO), DEMO.parent)
    assert config is not None, [str(i) for i in issues]
    run_pipeline(config, resume=False, progress=False)
    return run_dir
