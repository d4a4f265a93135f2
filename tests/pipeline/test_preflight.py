"""Input preflight: where a stage's files sit in its config, and what reading a file's head finds."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict

from fabrika.pipeline.preflight import HEAD_RECORDS, InputFile, check_file, locate, preflight


class _Entry(BaseModel):
    path: str
    text_field: str = "text"


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = "x"
    corpus: list[_Entry] = []
    personas: dict[str, str] = {}
    pool: str | None = None


class _Person(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str


def test_locate_walks_lists_mappings_and_plain_keys() -> None:
    cfg = _Cfg(corpus=[_Entry(path="a.jsonl"), _Entry(path="b.jsonl")], personas={"ru": "p.jsonl"})
    assert [(k, v) for k, v, _ in locate(cfg, InputFile("corpus[].path", "c"))] == [
        ("corpus[0].path", "a.jsonl"), ("corpus[1].path", "b.jsonl")]
    assert [(k, v) for k, v, _ in locate(cfg, InputFile("personas.*", "p"))] == [("personas.ru", "p.jsonl")]
    assert [(k, v) for k, v, _ in locate(cfg, InputFile("pool", "q"))] == [("pool", None)]


def test_the_field_a_config_key_names_is_required(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"body": "текст"}, ensure_ascii=False) + "\n", encoding="utf-8")
    spec = InputFile("corpus[].path", "corpus", field_keys=("text_field",), fix="set text_field")
    problem = check_file(path, spec, _Entry(path=str(path)))
    assert problem == f"{path}:1: corpus record has no non-empty string field 'text' (its keys: body); set text_field"
    assert check_file(path, spec, _Entry(path=str(path), text_field="body")) is None


def test_only_the_head_is_read(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    good = [json.dumps({"text": f"вопрос {i}"}, ensure_ascii=False) for i in range(HEAD_RECORDS)]
    path.write_text("\n".join([*good, "{broken"]) + "\n", encoding="utf-8")
    assert check_file(path, InputFile("pool", "pool", fields=("text",))) is None
    path.write_text("\n".join([*good[:3], "{broken"]) + "\n", encoding="utf-8")
    assert "q.jsonl:4: invalid JSON" in (check_file(path, InputFile("pool", "pool", fields=("text",))) or "")


def test_parquet_and_model_records(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pl.DataFrame({"name": ["Анна"]}).write_parquet(path)
    assert check_file(path, InputFile("personas.*", "personas", model=_Person)) is None
    pl.DataFrame({"nom": ["Анна"]}).write_parquet(path)
    problem = check_file(path, InputFile("personas.*", "personas", model=_Person)) or ""
    assert "p.parquet: row 1: personas record is not a _Person" in problem


def test_documents_and_directories(tmp_path: Path) -> None:
    doc = InputFile("pool", "tools file", format="document")
    assert "not found" in (check_file(tmp_path / "none.yaml", doc) or "")
    (tmp_path / "t.yaml").write_text("  \n", encoding="utf-8")
    assert "is empty" in (check_file(tmp_path / "t.yaml", doc) or "")
    (tmp_path / "t.yaml").write_text("tools: []\n", encoding="utf-8")
    assert check_file(tmp_path / "t.yaml", doc) is None
    directory = InputFile("rm", "reward model directory", format="directory")
    assert check_file(tmp_path, directory) is None and "not found" in (check_file(tmp_path / "m", directory) or "")


def test_the_default_path_is_checked_when_the_key_is_unset(tmp_path: Path) -> None:
    class Pipe:
        def resolve_path(self, value: str) -> Path:
            return tmp_path / value

    spec = InputFile("pool", "query pool", fields=("text",), default=str(tmp_path / "missing.jsonl"))
    (problem,) = preflight(_Cfg(), (spec,), Pipe())
    assert problem[0] == "pool" and "missing.jsonl: query pool not found" in problem[1]
    (tmp_path / "ok.jsonl").write_text('{"text": "да"}\n', encoding="utf-8")
    assert preflight(_Cfg(pool="ok.jsonl"), (spec,), Pipe()) == []
