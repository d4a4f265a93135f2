"""The stage contract: the kind is declared once (on the stage) and becomes the config's kind field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, ValidationError

from fabrika.generators.generic import CompleteConfig, CompleteStage
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.registry import load_modules
from fabrika.pipeline.stage import STAGES, Row, Stage, StageConfig, ok, register_stage


def test_every_registered_config_has_its_stage_kind_as_default_and_only_value() -> None:
    assert load_modules() == []
    for kind, cls in STAGES.items():
        field = cls.Config.model_fields["kind"]
        assert field.default == kind, cls.__qualname__
        with pytest.raises(ValidationError, match="Input should be"):
            cls.Config.model_validate({"kind": kind + ".other"})


def test_a_config_built_in_code_needs_no_kind_and_keeps_its_fields() -> None:
    cfg = CompleteConfig(name="answers", input="prompts")
    assert cfg.kind == "generic.complete" and cfg.stage_name == "answers" and cfg.max_tokens == 512
    assert CompleteStage.Config is CompleteConfig  # taken from Stage[CompleteConfig], not restated


def test_the_config_type_argument_becomes_config_and_a_stage_without_one_gets_its_own() -> None:
    class _OptsConfig(StageConfig):
        width: int = Field(default=3, description="A field of the test stage.")

    @register_stage
    class _Typed(Stage[_OptsConfig]):
        kind = "test.contract.typed"

        async def process(self, row: Row) -> list[Row]:
            return [ok(row["id"], width=self.config.width)]

    @register_stage
    class _Bare(Stage):
        kind = "test.contract.bare"

    try:
        assert _Typed.Config is _OptsConfig and _OptsConfig().kind == "test.contract.typed"
        assert _Bare.Config is not StageConfig and issubclass(_Bare.Config, StageConfig)
        assert _Bare.Config().kind == "test.contract.bare"
        assert StageConfig.model_fields["kind"].is_required()  # the shared base is never bound to a kind
    finally:
        STAGES.pop("test.contract.typed", None)
        STAGES.pop("test.contract.bare", None)


def test_one_config_class_cannot_serve_two_kinds() -> None:
    class _SharedConfig(StageConfig):
        pass

    @register_stage
    class _First(Stage[_SharedConfig]):
        kind = "test.contract.first"

    try:
        with pytest.raises(TypeError, match="already the config of stage kind 'test.contract.first'"):
            @register_stage
            class _Second(Stage[_SharedConfig]):
                kind = "test.contract.second"
        assert "test.contract.second" not in STAGES
    finally:
        STAGES.pop("test.contract.first", None)


def test_a_config_that_restates_a_different_kind_is_refused() -> None:
    class _StaleConfig(StageConfig):
        kind: str = "test.contract.old"

    with pytest.raises(TypeError, match="declare the kind once, on the stage"):
        @register_stage
        class _Renamed(Stage[_StaleConfig]):
            kind = "test.contract.new"
    assert "test.contract.new" not in STAGES


def test_validate_still_names_unknown_kinds_and_bad_fields(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text('{"prompt": "Привет"}\n', encoding="utf-8")
    data = {"llm": {"backend": "sim"},
            "stages": [{"kind": "generic.prompts", "name": "prompts", "path": "p.jsonl"},
                       {"kind": "generic.complet", "name": "typo", "input": "prompts"},
                       {"kind": "generic.complete", "name": "answers", "input": "prompts", "max_tokens": 0}]}
    config, issues = validate_data(data, "p.yaml", tmp_path)
    messages = [f"{i.path}: {i.message}" for i in issues if i.level == "error"]
    assert config is None
    assert any("stages[1].kind" in m and "unknown stage kind 'generic.complet'" in m and "generic.complete" in m
               for m in messages), messages
    assert any("stages[2].max_tokens" in m for m in messages), messages


def test_a_generated_config_pickles_like_a_declared_one() -> None:
    import pickle

    from tests.pipeline.pipeline_stages import AskStage

    cfg = AskStage.Config(name="ask", input="src")
    back = pickle.loads(pickle.dumps(cfg))
    assert type(back) is AskStage.Config and back == cfg and back.kind == "test.ask"
