"""General chat renders no prompt template of fabrika's own: the teacher sends the pool's messages, and the
only text it adds, ``general.teacher.system``, is config (in the fingerprint), so no catalogue is needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.fingerprint import stage_fingerprints, stale_stages
from fabrika.pipeline.lineage import stage_lineage
from fabrika.pipeline.registry import load_modules
from fabrika.pipeline.stage import STAGES

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_general_stages_hash_no_prompt_templates() -> None:
    load_modules()
    kinds = sorted(k for k in STAGES if k.startswith("general."))
    assert {"general.prompts", "general.teacher", "general.rm", "general.samples", "general.grpo"} <= set(kinds)
    for kind in kinds:
        assert stage_lineage(STAGES[kind], sim=False)["prompts"] == {}, kind


def _config(system: str | None, tmp_path: Path) -> Any:
    doc = yaml.safe_load((CONFIGS / "general_demo.yaml").read_text(encoding="utf-8"))
    doc["run_dir"] = str(tmp_path / "run")
    for stage in doc["stages"]:
        if stage["kind"] == "general.teacher":
            stage["system"] = system
    cfg, issues = validate_data(doc, "general_demo.yaml", CONFIGS)
    assert cfg is not None, issues
    return cfg


def test_the_teacher_system_text_is_config_and_redoes_the_teacher(tmp_path: Path) -> None:
    before = _config(None, tmp_path)
    manifest = {"stages": {n: {"config_fingerprint": fp, "config_fields": f}
                           for n, (fp, f) in stage_fingerprints(before).items()}}
    after = _config("Отвечай кратко и по-русски.", tmp_path)
    stale = stale_stages(after, manifest)
    assert stale["general_teacher"] == {"config changed": ["system"]}
    assert "general_prompts" not in stale and all(set(why) == {"upstream changed"}
                                                  for name, why in stale.items() if name != "general_teacher")
