"""The pipeline document: every violation reported with file and key path, before any LLM call."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fabrika.errors import ConfigError
from fabrika.pipeline.config import execution_order, load_config, validate_file


def write(tmp_path: Path, doc: dict | str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def base(**over: object) -> dict:
    doc = {
        "name": "t",
        "llm": {"backend": "sim"},
        "stages": [
            {"kind": "test.count", "n": 5},
            {"kind": "test.ask", "input": "test.count"},
            {"kind": "test.score", "name": "judge", "input": "test.ask"},
        ],
        "dataset": {"stages": ["test.ask"]},
    }
    doc.update(over)
    return doc


def errors(path: Path) -> list[str]:
    _, issues = validate_file(path)
    return [str(i) for i in issues if i.level == "error"]


def test_valid_config_loads_with_typed_stage_configs(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, base()))
    assert [s.stage_name for s in cfg.stages] == ["test.count", "test.ask", "judge"]
    assert type(cfg.stages[0]).__name__ == "CountConfig" and cfg.stages[0].n == 5
    assert cfg.resolved_run_dir == Path("runs/t")
    assert cfg.model_dump()["stages"][0]["n"] == 5  # subclass fields survive serialisation


def test_every_violation_is_reported_with_key_path_and_file(tmp_path: Path) -> None:
    doc = base(bogus=1, seed="x")
    doc["stages"] = [
        {"kind": "test.count", "n": "many", "colour": "red"},
        {"kind": "test.nope"},
        {"kind": "test.ask", "input": "ghost"},
        {"kind": "test.ask", "input": "test.count"},
    ]
    doc["dataset"] = {"stages": ["missing"]}
    doc["filters"] = {"testscore": {"min_score": 3}, "unknown_gate": {}}
    path = write(tmp_path, doc)
    errs = errors(path)
    text = "\n".join(errs)
    assert all(e.startswith(f"{path}: error: ") for e in errs)
    for needle in [
        "stages[0].n: Input should be a valid integer",
        "stages[0].colour: unknown key; allowed: kind, name, input",
        "stages[1].kind: unknown stage kind 'test.nope'; known: ",
        "stages[2].input: unknown input stage 'ghost'",
        "stages[3].name: duplicate stage name 'test.ask' (also stages[2])",
        "bogus: unknown key; allowed: name, seed",
        "seed: Input should be a valid integer",
        "dataset.stages[0]: unknown stage 'missing'",
        "error: filters.testscore.min_score: Input should be less than or equal to 1",
        "error: filters.unknown_gate: unknown gate group",
    ]:
        assert needle in text, needle
    with pytest.raises(ConfigError):
        load_config(path)


def test_cycle_is_reported(tmp_path: Path) -> None:
    doc = base()
    doc["stages"] = [
        {"kind": "test.ask", "name": "a", "input": "b"},
        {"kind": "test.ask", "name": "b", "input": "a"},
    ]
    doc["dataset"] = {"stages": ["a"]}
    assert any("stages: stages form a cycle through: a, b" in e for e in errors(write(tmp_path, doc)))


def test_missing_and_malformed_input_files(tmp_path: Path) -> None:
    doc = base()
    doc["stages"] = [
        {"kind": "generic.prompts", "name": "p", "path": "nope.jsonl"},
        {"kind": "generic.prompts", "name": "q", "path": "bad.jsonl"},
        {"kind": "generic.complete", "input": "p"},
    ]
    doc["dataset"] = {"stages": ["generic.complete"]}
    (tmp_path / "bad.jsonl").write_text('{"prompt": "да"}\n{oops\n', encoding="utf-8")
    text = "\n".join(errors(write(tmp_path, doc)))
    assert f"stages[0].path: input file not found: {tmp_path / 'nope.jsonl'}" in text
    assert f"stages[1].path: {tmp_path / 'bad.jsonl'}:2: invalid JSON" in text


def test_yaml_syntax_and_missing_file(tmp_path: Path) -> None:
    assert "line 3: invalid YAML" in errors(write(tmp_path, "name: x\nstages: [\n  - a: b: c\n"))[0]
    assert errors(tmp_path / "absent.yaml") == [f"{tmp_path / 'absent.yaml'}: error: (file): config file not found"]


def test_warnings_do_not_block(tmp_path: Path) -> None:
    doc = base()
    doc["stages"].append({"kind": "test.count", "name": "orphan", "n": 1})
    cfg, issues = validate_file(write(tmp_path, doc))
    assert cfg is not None
    assert [i.path for i in issues if i.level == "warning"] == ["stages[3]"]


def test_plugins_names_only_modules_the_registry_does_not_load(tmp_path: Path) -> None:
    cfg, issues = validate_file(write(tmp_path, base(plugins=["fabrika.generators.instruct"])))
    assert cfg is not None  # an old config that still lists a built-in module keeps working...
    assert [(i.level, i.path) for i in issues] == [("warning", "plugins[0]")]  # ...and is told to drop the line
    assert "always loaded" in issues[0].message and "remove the line" in issues[0].message
    cfg, issues = validate_file(write(tmp_path, base(plugins=["no_such_module_xyz"])))
    assert cfg is None and [(i.level, i.path) for i in issues] == [("error", "plugins[0]")]


def test_annotating_stage_rules(tmp_path: Path) -> None:
    doc = base()
    doc["dataset"] = {"stages": ["judge"]}
    doc["stages"][2]["input"] = ["test.ask", "test.count"]
    text = "\n".join(errors(write(tmp_path, doc)))
    assert "stages[2].input: annotating stage 'judge' must have exactly one input stage" in text
    assert "dataset.stages[0]: 'judge' is an annotating stage" in text


def test_consumers_run_after_annotators(tmp_path: Path) -> None:
    doc = base()
    doc["stages"] = [
        {"kind": "test.count", "n": 3},
        {"kind": "test.ask", "name": "consumer", "input": "test.count"},
        {"kind": "test.score", "name": "s2", "input": "test.count"},
        {"kind": "test.score", "name": "s1", "input": "test.count"},
    ]
    doc["dataset"] = {"stages": ["consumer"]}
    order = [s.stage_name for s in execution_order(load_config(write(tmp_path, doc)))]
    assert order == ["test.count", "s2", "s1", "consumer"]


def test_nested_path_fields_are_checked(tmp_path: Path) -> None:
    from pydantic import BaseModel, Field

    from fabrika.pipeline.config import check_paths, validate
    from fabrika.pipeline.stage import StageConfig

    class Source(BaseModel):
        path: Path = Field(description="a file")

    class Nested(StageConfig):
        sources: list[Source] = Field(default_factory=list, description="files")
        extra: Path | None = Field(default=None, description="optional file")

    (tmp_path / "here.txt").write_text("x", encoding="utf-8")
    cfg = Nested(kind="k", sources=[Source(path=Path("here.txt")), Source(path=Path("gone.txt"))])

    class Resolver:
        def resolve_path(self, p: Path) -> Path:
            return tmp_path / p

    assert check_paths(cfg, Resolver()) == [("sources[1].path", f"input file not found: {tmp_path / 'gone.txt'}")]
    assert [i.level for i in validate(tmp_path / "absent.yaml")] == ["error"]


def test_config_hash_ignores_placement_and_concurrency(tmp_path: Path) -> None:
    from fabrika.pipeline.config import config_hash

    a = load_config(write(tmp_path, base(), "a.yaml"))
    doc = base(run_dir=str(tmp_path / "elsewhere"), max_in_flight=3)
    doc["stages"][1]["chunk_size"] = 7
    b = load_config(write(tmp_path, doc, "b.yaml"))
    assert config_hash(a) == config_hash(b)
    doc["stages"][0]["n"] = 6
    assert config_hash(load_config(write(tmp_path, doc, "c.yaml"))) != config_hash(a)


def test_set_overrides_apply_before_validation(tmp_path: Path) -> None:
    path = write(tmp_path, base())
    cfg = load_config(path, ["seed=3", "stages.test.count.n=9", "stages.judge.chunk_size=2", "filters.testscore.max_i=4",
                             "llm.sim.latency_ms=0"])
    assert cfg.seed == 3 and cfg.stages[0].n == 9 and cfg.stages[2].chunk_size == 2
    assert cfg.filters["testscore"]["max_i"] == 4
    _, issues = validate_file(path, ["stages.ghost.n=1"])
    assert [str(i) for i in issues] == [f"{path}: error: --set: --set 'stages.ghost.n=1': no stage named 'ghost'…; "
                                        "stages: test.count, test.ask, judge"]
    assert load_config(path, ["stages.0.n=4"]).stages[0].n == 4
    _, issues = validate_file(path, ["stages.judge.colour=red"])
    assert any("stages[2].colour: unknown key" in str(i) for i in issues)
    _, issues = validate_file(path, ["seed"])
    assert "expected KEY=VALUE" in str(issues[0])


def test_export_section_is_validated_with_file_and_key_path(tmp_path: Path) -> None:
    path = write(tmp_path, base(export={"kind": "dpo", "formatt": "hf", "mix": {"size": 0},
                                        "validate_rows": -1}))
    got = errors(path)
    assert f"{path}: error: export.kind: Input should be 'sft' or 'grpo' (got 'dpo')" in got
    assert any(e.startswith(f"{path}: error: export.formatt: unknown key; allowed: kind, format") for e in got)
    assert any(e.startswith(f"{path}: error: export.mix.size: ") for e in got)
    assert any(e.startswith(f"{path}: error: export.validate_rows: ") for e in got)
    with pytest.raises(ConfigError, match="export.kind"):
        load_config(path)
    good = write(tmp_path, base(export={"kind": "grpo", "format": "jsonl", "mix": {"size": 10, "seed": 1}}), "ok.yaml")
    assert errors(good) == [] and load_config(good).export["kind"] == "grpo"
