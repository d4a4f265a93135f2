"""The row-contract checker on small pipelines of stages declared here, and the column helpers."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from fabrika.pipeline import registry
from fabrika.pipeline.columns import Column, Contract, compatible, default_contract, model_columns
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.stage import STAGES, Row, Stage, StageConfig, ok, register_stage
from fabrika.schemas import Message, Sample


class _Base(Stage[Any]):
    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"])]


@register_stage
class _Source(_Base):
    kind = "test.contract.source"
    reads = ()
    writes = (Column("text", str), Column("messages", list[Message]))


@register_stage
class _Reader(_Base):
    kind = "test.contract.reader"
    reads = (Column("messages", list[Message]), Column("maybe", str, required=False))
    writes = (Column("answer", str),)


@register_stage
class _Scorer(_Base):
    kind = "test.contract.scorer"
    annotates: ClassVar[bool] = True
    reads = (Column("text", str),)
    writes = (Column("score", float), Column("text", str))


@register_stage
class _NeedsScore(_Base):
    kind = "test.contract.needs_score"
    reads = (Column("score", float),)
    writes = ()


@register_stage
class _NeedsRenamed(_Base):
    kind = "test.contract.needs_renamed"
    reads = (Column("text__s", str), Column("status__s", str))
    writes = ()


class _TextReaderConfig(StageConfig):
    field: str = "text"


@register_stage
class _ConfigReader(Stage[_TextReaderConfig]):
    kind = "test.contract.config_reader"
    writes = ()

    @classmethod
    def contract(cls, config: _TextReaderConfig) -> Contract:
        return Contract(reads=(Column(config.field, int),), writes=cls.writes)

    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"])]


@register_stage
class _Undeclared(_Base):
    kind = "test.contract.undeclared"


@register_stage
class _Carrier(_Base):
    kind = "test.contract.carrier"
    reads = ()
    writes = (Column("extra", int),)

    @classmethod
    def contract(cls, config: Any) -> Contract:
        return Contract(reads=cls.reads, writes=cls.writes, carries=True)


def _errors(*stages: dict[str, Any]) -> list[str]:
    data = {"name": "t", "llm": {"backend": "sim"}, "stages": list(stages), "dataset": {"stages": []}}
    _, issues = validate_data(data, "t.yaml", __import__("pathlib").Path("."))
    return [f"{i.path}: {i.message}" for i in issues if i.level == "error"]


SRC = {"kind": "test.contract.source", "name": "src"}


def test_a_wired_pipeline_passes_and_a_missing_column_is_one_line() -> None:
    assert _errors(SRC, {"kind": "test.contract.reader", "name": "r", "input": "src"}) == []
    errors = _errors(SRC, {"kind": "test.contract.reader", "name": "r", "input": "src"},
                     {"kind": "test.contract.reader", "name": "r2", "input": "r"})
    assert len(errors) == 1
    assert errors[0].startswith("stages[2].input: test.contract.reader 'r2' reads column 'messages' (list[Message]) "
                                "but its input 'r' (test.contract.reader) does not provide it; written by: ")
    assert "test.contract.source" in errors[0] and "if.queries" in errors[0]


def test_a_scorer_adds_its_columns_to_the_table_it_scores_for_later_readers() -> None:
    assert _errors(SRC, {"kind": "test.contract.scorer", "name": "s", "input": "src"},
                   {"kind": "test.contract.needs_score", "name": "n", "input": "src"}) == []
    errors = _errors(SRC, {"kind": "test.contract.needs_score", "name": "n", "input": "src"})
    assert len(errors) == 1 and "'score'" in errors[0] and "test.contract.scorer (scorer)" in errors[0]


def test_a_scorer_sees_only_the_scorers_listed_before_it() -> None:
    score_reader = {"kind": "test.contract.scorer", "name": "late", "input": "src"}
    need = {"kind": "test.contract.needs_score", "name": "n", "input": "src"}
    assert _errors(SRC, {"kind": "test.contract.scorer", "name": "s", "input": "src"}, score_reader, need) == []


def test_taken_names_and_the_scorers_status_get_the_scorer_suffix() -> None:
    # 'text' is taken by the scored table, so the scorer's 'text' is joined as 'text__s' (as the store does)
    assert _errors(SRC, {"kind": "test.contract.scorer", "name": "s", "input": "src"},
                   {"kind": "test.contract.needs_renamed", "name": "n", "input": "src"}) == []


def test_a_contract_can_depend_on_the_config_and_types_are_compared() -> None:
    errors = _errors(SRC, {"kind": "test.contract.config_reader", "name": "c", "input": "src"})
    assert errors == ["stages[1].input: test.contract.config_reader 'c' reads column 'text' as int but 'src' "
                      "writes it as str (input 'src', test.contract.source)"]
    errors = _errors(SRC, {"kind": "test.contract.config_reader", "name": "c", "input": "src", "field": "nope"})
    assert len(errors) == 1 and "'nope'" in errors[0] and "no known stage kind" in errors[0]


def test_undeclared_stages_are_not_checked_nor_their_readers() -> None:
    assert _errors({"kind": "test.contract.undeclared", "name": "u"},
                   {"kind": "test.contract.reader", "name": "r", "input": "u"}) == []


def test_a_carrying_stage_passes_its_input_columns_on() -> None:
    assert _errors(SRC, {"kind": "test.contract.carrier", "name": "c", "input": "src"},
                   {"kind": "test.contract.reader", "name": "r", "input": "c"}) == []


def test_every_fabrika_stage_declares_its_contract() -> None:
    registry.load_modules()
    ours = {k: c for k, c in STAGES.items() if c.__module__.startswith("fabrika.")}
    assert len(ours) >= 38
    undeclared = [k for k, c in ours.items() if not default_contract(c).declared]
    assert undeclared == []
    sources = [k for k, c in ours.items() if default_contract(c).reads == ()]
    assert "fc.topics" in sources and "if.expand" in sources


@pytest.mark.parametrize(("reader", "writer", "expected"), [
    (str, str, True), (float, int, True), (int, float, False), (str, list[Message], False),
    (list[Message], str, False), (list[Message] | str, str, True), (list[Any], list[Message], True),
    (dict[str, Any], Sample, False), (Any, int, True), (list[Message], list[dict[str, Any]], True),
])
def test_compatible(reader: Any, writer: Any, expected: bool) -> None:
    assert compatible(reader, writer) is expected


def test_column_read_parses_and_validates_json_columns() -> None:
    col = Column("messages", list[Message])
    row = {"messages": json.dumps([{"role": "user", "content": "привет"}], ensure_ascii=False)}
    (msg,) = col.read(row)
    assert isinstance(msg, Message) and msg.content == "привет"
    assert col.read({"messages": None}, default=[]) == [] and col.read({"messages": "null"}) is None
    with pytest.raises(ValidationError):
        col.read({"messages": '[{"role": "robot"}]'})
    assert col.json and not Column("n", int).json


def test_model_columns_follow_to_row() -> None:
    cols = {c.name: c for c in model_columns(Sample)}
    assert "id" not in cols and cols["prompt"].json and cols["prompt"].required
    assert not cols["ground_truth"].required and cols["lang"].type is str


def test_row_models_decode_json_columns_and_ignore_the_rest() -> None:
    from fabrika.schemas.instruct import IFPromptRow

    row = {"id": "p1", "messages": '[{"role": "user", "content": "Привет"}]', "constraints": None,
           "library_constraints": '[["ru.punct.no_commas", {}]]', "verifiers": "", "other": 3}
    p = IFPromptRow.of(row)
    assert p.messages == [{"role": "user", "content": "Привет"}] and p.constraints == [] and p.verifiers == []
    assert p.library_constraints == [("ru.punct.no_commas", {})] and not hasattr(p, "other")
    with pytest.raises(ValidationError):
        IFPromptRow.of({"id": "p2"})  # messages is required
    with pytest.raises(ValidationError):
        IFPromptRow.of({"id": "p3", "messages": "[]", "verifiers": '[{"code": "x"}]'})  # not a RunnableVerifier


def test_the_stages_command_shows_what_a_stage_reads_and_writes() -> None:
    from typer.testing import CliRunner

    from fabrika.cli.app import app

    result = CliRunner().invoke(app, ["stages", "if.responses"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("reads" in ln and "messages" in ln and "list[Message]" in ln and "yes" in ln for ln in lines)
    assert any("writes" in ln and "if_library_pass" in ln and "bool" in ln for ln in lines)
    result = CliRunner().invoke(app, ["stages", "fc.topics"], env={"COLUMNS": "200"})
    assert any("file" in ln and "corpus[].path" in ln for ln in result.output.splitlines()), result.output
