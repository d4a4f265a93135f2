"""`fabrika stages` documents every stage kind from its pydantic model; `validate` warns about a
scale config pointing at the demo corpus or at localhost."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.cli.stages_cmd import model_fields, stage_kinds, type_name
from fabrika.pipeline.config import validate_data

ROOT = Path(__file__).parents[2]


def test_stages_lists_every_kind_and_one_kind_in_full():
    res = CliRunner().invoke(app, ["stages"])
    assert res.exit_code == 0, res.output
    kinds = stage_kinds()
    assert {"fc.plans", "fc.tools_import", "if.expand", "filter.dedup", "generic.prompts"} <= set(kinds)
    for kind in kinds:
        assert kind in res.output
    res = CliRunner().invoke(app, ["stages", "fc.plans"])
    assert res.exit_code == 0
    fields = {f["name"]: f for f in model_fields(kinds["fc.plans"].Config)}
    for name, f in fields.items():  # the command prints what the model says
        assert name in res.output and (not f["description"] or f["description"].split()[0] in res.output)
    assert fields["plans_per_topic"]["type"] == "int" and fields["plans_per_topic"]["default"] == "4"
    assert CliRunner().invoke(app, ["stages", "fc.nope"]).exit_code == 2


def test_nested_fields_and_readable_types():
    fields = {f["name"]: f for f in model_fields(stage_kinds()["fc.tools_import"].Config)}
    assert fields["sources"]["type"] == "list[ToolSourceConfig]" and fields["sources"]["default"] == "required"
    assert fields["sources[].command"]["type"] == "list[str] | None"
    assert fields["kind"]["type"] == "Literal['fc.tools_import']"
    assert type_name(int) == "int"


def _doc(name: str, corpus: str, base_url: str, target: int) -> dict:
    return {"name": name, "llm": {"backend": "openai", "model": "m", "endpoints": [{"base_url": base_url}]},
            "stages": [{"kind": "fc.topics", "corpus": [{"path": corpus}], "languages": ["ru"],
                        "target_size": {"ru": target}}]}


def _warnings(doc: dict, tmp_path: Path) -> list[str]:
    cfg, issues = validate_data(doc, str(tmp_path / "c.yaml"), tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    return [str(i) for i in issues if i.level == "warning" and ("corpus" in i.path or "endpoints" in i.path)]


def test_validate_warns_about_demo_corpus_and_localhost_at_scale(tmp_path: Path):
    warned = _warnings(_doc("fc_ru_300k", "package://topics/corpus_demo.jsonl", "http://localhost:8000/v1", 24000),
                       tmp_path)
    assert any("corpus[0].path" in w and "demo corpus (142 texts)" in w for w in warned), warned
    assert any("endpoints[0].base_url" in w and "localhost" in w for w in warned), warned
    small = tmp_path / "mine.jsonl"
    small.write_text("".join(f'{{"text": "текст {i}"}}\n' for i in range(50)), encoding="utf-8")
    warned = _warnings(_doc("fc_ru_300k", str(small), "http://gpu-1:8000/v1", 5000), tmp_path)
    assert len(warned) == 1 and "50 texts for 5000 topics" in warned[0]
    # a small demo run or a run on a real host warns about nothing
    assert not _warnings(_doc("fc_demo", "package://topics/corpus_demo.jsonl", "http://127.0.0.1:8000/v1", 200),
                         tmp_path)
    big = tmp_path / "big.jsonl"
    big.write_text("".join(f'{{"text": "текст {i}"}}\n' for i in range(6000)), encoding="utf-8")
    assert not _warnings(_doc("fc_ru_5k", str(big), "http://gpu-1:8000/v1", 5000), tmp_path)


def test_shipped_300k_config_gets_both_warnings():
    res = CliRunner().invoke(app, ["validate", str(ROOT / "configs" / "fc_ru_300k.yaml")])
    assert res.exit_code == 0 and "demo corpus" in res.output and "localhost" in res.output, res.output
    data = yaml.safe_load((ROOT / "configs" / "fc_ru_300k.yaml").read_text("utf-8"))
    assert data["name"] == "fc_ru_300k"
