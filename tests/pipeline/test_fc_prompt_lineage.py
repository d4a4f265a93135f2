"""FC role prompts are hashed per template: editing one template makes stale exactly the stages that render it
(and, through their fingerprints, what reads them), nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fabrika.agents.prompts import CATALOGUE
from fabrika.generators.fc.prompts import CATALOGUE as FC_CATALOGUE
from fabrika.pipeline.config import PipelineConfig, inputs_of, validate_data
from fabrika.pipeline.fingerprint import stage_fingerprints, stale_stages
from fabrika.pipeline.lineage import stage_lineage
from fabrika.pipeline.registry import load_modules
from fabrika.pipeline.stage import STAGES

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

#: Which fc_demo stages render which FC template (what the stages' ``prompt_templates`` must say).
RENDERED_BY: dict[str, set[str]] = {
    "tools": {"fc.tools"},
    "planner": {"fc.plans"}, "planner_revise": {"fc.plans"}, "judge": {"fc.plans"},
    **{k: {"fc.dialogues"} for k in ("user_system", "user_turn", "role_user", "role_assistant", "empty_dialogue",
                                      "tool_system", "tool_turn")},
    "assistant_system": {"fc.dialogues", "fc.samples", "fc.irrelevance"},
    "irrelevance_answer": {"fc.irrelevance"}, "irrelevance_judge": {"fc.irrelevance"},
    "contradiction_judge": {"fc_target_judge"}, "given_judge": {"fc_target_judge"},
    "answer_judge": {"fc_answer_judge"},
}


def fc_config(tmp_path: Path) -> PipelineConfig:
    doc = yaml.safe_load((CONFIGS / "fc_demo.yaml").read_text(encoding="utf-8"))
    doc["run_dir"] = str(tmp_path / "run")
    cfg, issues = validate_data(doc, "fc_demo.yaml", CONFIGS)
    assert cfg is not None, issues
    return cfg


def manifest_of(cfg: PipelineConfig) -> dict[str, Any]:
    """A manifest as a finished run of ``cfg`` records it (every stage's fingerprint and fields)."""
    return {"stages": {name: {"config_fingerprint": fp, "config_fields": fields}
                       for name, (fp, fields) in stage_fingerprints(cfg).items()}}


def downstream(cfg: PipelineConfig, names: set[str]) -> set[str]:
    deps = {s.stage_name: set(inputs_of(s)) for s in cfg.stages}  # what a fingerprint's inputs are
    out = set(names)
    while True:
        more = {n for n, d in deps.items() if d & out} - out
        if not more:
            return out
        out |= more


def edited(template: Any) -> Any:
    return [*template, "Новый вариант системного промпта."] if isinstance(template, list) else template + " Кратко."


def test_every_fc_template_is_mapped() -> None:
    assert set(RENDERED_BY) == set(CATALOGUE.data)


@pytest.mark.parametrize("key", sorted(RENDERED_BY))
def test_editing_one_fc_template_makes_stale_exactly_its_stages(
        key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = fc_config(tmp_path)
    manifest = manifest_of(cfg)
    assert stale_stages(cfg, manifest) == {}
    monkeypatch.setitem(CATALOGUE.data[key], "en", edited(CATALOGUE.data[key]["en"]))

    stale = stale_stages(cfg, manifest)
    by_prompt = {name for name, why in stale.items() if "prompt changed" in why}
    assert by_prompt == RENDERED_BY[key]
    assert all(why["prompt changed"] == [f"agents/{key}"] for name, why in stale.items() if name in by_prompt)
    assert set(stale) == downstream(cfg, RENDERED_BY[key])  # the rest only as "upstream changed"
    assert all(set(why) == {"upstream changed"} for name, why in stale.items() if name not in by_prompt)


def test_a_judge_template_leaves_the_generators_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = fc_config(tmp_path)
    manifest = manifest_of(cfg)
    monkeypatch.setitem(CATALOGUE.data["answer_judge"], "ru", CATALOGUE.data["answer_judge"]["ru"] + " Будь строг.")
    assert set(stale_stages(cfg, manifest)) == {"fc_answer_judge"}  # was every FC stage: the module was hashed whole


#: Registered stage kinds that render each template of the FC generators' own catalogue.
FC_RENDERED_BY = {"label": {"fc.topics"}, "expand": {"fc.topics"}, "tiers": {"fc.tools_import"}}


def _prompt_digests() -> dict[str, dict[str, str]]:
    load_modules()
    return {kind: stage_lineage(cls, sim=False)["prompts"] for kind, cls in STAGES.items()}


@pytest.mark.parametrize(("catalogue", "key", "kinds"),
                         [(CATALOGUE, k, RENDERED_BY[k]) for k in ("planner", "assistant_system", "given_judge")]
                         + [(FC_CATALOGUE, k, v) for k, v in sorted(FC_RENDERED_BY.items())],
                         ids=lambda v: getattr(v, "name", None) or (v if isinstance(v, str) else None))
def test_an_edited_template_changes_the_lineage_of_its_stage_kinds_only(
        catalogue: Any, key: str, kinds: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Over every registered stage kind, not one config: the kinds (``fc_target_judge`` is ``fc.target_judge``)."""
    before = _prompt_digests()
    template = catalogue.data[key]["ru"]
    edited_template = ({**template, "user": template["user"] + " Кратко."} if isinstance(template, dict)
                       else edited(template))
    monkeypatch.setitem(catalogue.data[key], "ru", edited_template)
    after = _prompt_digests()
    changed = {kind for kind in after if after[kind] != before.get(kind)}
    assert changed == {k.replace("fc_", "fc.") for k in kinds}


def test_every_fc_generator_template_is_mapped() -> None:
    assert set(FC_RENDERED_BY) == set(FC_CATALOGUE.data)
