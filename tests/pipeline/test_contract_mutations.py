"""Miswired configs and bad input files: each is caught by ``validate`` with exit 2 and one line.

Every mutation starts from a shipped config (or a small one built here) that validates,
changes one thing, and must give an error naming the stage, the column or file, and the
fix. Each passed ``validate`` before row contracts and input preflight existed (and then
failed at run time: ``KeyError: 'messages'`` on every item, an empty dataset with exit
0, a traceback). docs/STAGES.md has the same table; add a row there with a new mutation.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.pipeline.config import validate_data

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def _shipped(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONFIGS / f"{name}.yaml").read_text(encoding="utf-8"))


def _stage(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in data["stages"] if (s.get("name") or s["kind"]) == name)


def _rewire(config: str, stage: str, new_input: str) -> Callable[[Path], dict[str, Any]]:
    def build(_tmp: Path) -> dict[str, Any]:
        data = _shipped(config)
        _stage(data, stage)["input"] = new_input
        return data
    return build


def _add(config: str, extra: dict[str, Any]) -> Callable[[Path], dict[str, Any]]:
    def build(_tmp: Path) -> dict[str, Any]:
        data = _shipped(config)
        data["stages"].append(extra)
        return data
    return build


def _drop(config: str, stage: str) -> Callable[[Path], dict[str, Any]]:
    def build(_tmp: Path) -> dict[str, Any]:
        data = _shipped(config)
        data["stages"] = [s for s in data["stages"] if (s.get("name") or s["kind"]) != stage]
        return data
    return build


def _topics(corpus: bytes | None, text_field: str = "text") -> Callable[[Path], dict[str, Any]]:
    """fc.topics → fc.tools over a corpus file written into the test's directory (None: no file)."""
    def build(tmp: Path) -> dict[str, Any]:
        if corpus is not None:
            (tmp / "corpus.jsonl").write_bytes(corpus)
        return {"name": "m", "llm": {"backend": "sim"}, "dataset": {"stages": ["tools"]}, "stages": [
            {"kind": "fc.topics", "name": "topics", "corpus": [{"path": str(tmp / "corpus.jsonl"), "text_field": text_field}],
             "reduction": "pca", "clustering": "kmeans", "n_clusters": 2, "min_topic_size": 2,
             "target_size": {"ru": 4, "en": 4}},
            {"kind": "fc.tools", "name": "tools", "input": "topics"}]}
    return build


def _personas(content: str | None) -> Callable[[Path], dict[str, Any]]:
    def build(tmp: Path) -> dict[str, Any]:
        data = _shipped("fc_demo")
        if content is not None:
            (tmp / "personas_ru.jsonl").write_text(content, encoding="utf-8")
        _stage(data, "fc.plans")["personas"] = {"ru": str(tmp / "personas_ru.jsonl"),
                                                "en": "package://fc/personas_en.jsonl"}
        return data
    return build


def _query_pool(content: bytes) -> Callable[[Path], dict[str, Any]]:
    def build(tmp: Path) -> dict[str, Any]:
        data = _shipped("if_demo")
        (tmp / "queries.jsonl").write_bytes(content)
        _stage(data, "if_queries")["query_pool"] = str(tmp / "queries.jsonl")
        return data
    return build


def _benchmark(content: str) -> Callable[[Path], dict[str, Any]]:
    def build(tmp: Path) -> dict[str, Any]:
        data = _shipped("general_demo")
        (tmp / "bench.jsonl").write_text(content, encoding="utf-8")
        _stage(data, "general_prompts_decontam")["benchmarks"] = [{"path": str(tmp / "bench.jsonl")}]
        return data
    return build


CORPUS_OK = "".join(json.dumps({"text": t, "lang": "ru"}, ensure_ascii=False) + "\n"
                    for t in ("Забронировать столик в ресторане", "Узнать погоду на завтра")).encode()
PERSONA_OK = json.dumps({"name": "Анна", "description": "бухгалтер"}, ensure_ascii=False)

#: (id, build(tmp) -> config document, stage key path of the error, words the line must hold); ``@NAME.field``
#: names the stage by its name (or kind), so adding stages to a shipped config does not shift the expectation

MUTATIONS: list[tuple[str, Callable[[Path], dict[str, Any]], str, tuple[str, ...]]] = [
    ("if.responses fed from if.expand", _rewire("if_demo", "if_responses", "if_expand"),
     "@if_responses.input", ("if.responses 'if_responses'", "'messages'", "'if_expand' (if.expand)", "if.queries")),
    ("if.samples fed from the prompts, not the responses", _rewire("if_demo", "if_samples", "if_queries"),
     "@if_samples.input", ("'response'", "'if_queries' (if.queries)", "if.responses")),
    ("if.grpo fed from the responses (no verifiers)", _rewire("if_demo", "if_grpo", "if_responses"),
     "@if_grpo.input", ("'verifiers'", "list[RunnableVerifier]", "if.queries")),
    ("if.multi.samples fed from the prompts", _rewire("if_demo", "if_multi_samples", "if_multi_prompts"),
     "@if_multi_samples.input", ("'response'", "if.multi.responses")),
    ("if.dialogue.samples fed from multi prompts", _rewire("if_demo", "if_dialogue_samples", "if_multi_prompts"),
     "@if_dialogue_samples.input", ("'turns'", "if.dialogues")),
    ("a scorer on the wrong table: if.consistency over the constraints", _add(
        "if_demo", {"kind": "if.consistency", "name": "extra_consistency", "input": "if_dedup"}),
     "@extra_consistency.input", ("if.consistency 'extra_consistency'", "'verifiers'", "if.verifiers")),
    ("a scorer on the wrong table: filter.length over prompt rows", _add(
        "if_demo", {"kind": "filter.length", "name": "queries_length", "input": "if_queries"}),
     "@queries_length.input", ("filter.length 'queries_length'", "'prompt'", "'if_queries' (if.queries)")),
    ("general.samples without its general.rm scorer", _drop("general_demo", "general_rm"),
     "@general_samples.input", ("general.samples", "'answer_rm_scores'", "general.rm")),
    ("fc.dialogues fed from the tools", _rewire("fc_demo", "fc.dialogues", "fc.tools_dedup"),
     "@fc.dialogues.input", ("'plan'", "(Plan)", "fc.plans")),
    ("fc.samples fed from the plans", _rewire("fc_demo", "fc.samples", "fc.plans"),
     "@fc.samples.input", ("'dialogue'", "fc.dialogues")),
    ("a column of the wrong type: generic.complete over chat prompts", _add(
        "general_demo", {"kind": "generic.complete", "name": "answers", "input": "general_prompts"}),
     "@answers.input", ("'prompt' as str", "writes it as list[Message]")),
    ("empty topic corpus", _topics(b""), "stages[0].corpus[0].path", ("corpus.jsonl", "topic corpus is empty")),
    ("binary topic corpus", _topics(b"\x00\x01PK\x03\x04" * 50), "stages[0].corpus[0].path",
     ("corpus.jsonl", "binary")),
    ("corpus without the text field", _topics(CORPUS_OK, text_field="body"), "stages[0].corpus[0].path",
     ("corpus.jsonl:1", "'body'", "text_field")),
    ("missing personas file", _personas(None), "stages[2].personas.ru", ("personas_ru.jsonl", "not found")),
    ("personas file with a wrong field", _personas('{"nom": "Анна"}\n'), "stages[2].personas.ru",
     ("personas_ru.jsonl:1", "not a Persona")),
    ("empty personas file", _personas("\n"), "stages[2].personas.ru", ("personas_ru.jsonl", "empty")),
    ("query pool with a wrong field name", _query_pool(b'{"question": "\xd0\x9a\xd0\xb0\xd0\xba?"}\n'),
     "stages[5].query_pool", ("queries.jsonl:1", "'text'", "question")),
    ("query pool that is not UTF-8", _query_pool(b'{"text": "\xff\xfe\xfa"}\n' * 3), "stages[5].query_pool",
     ("queries.jsonl", "UTF-8")),
    ("benchmark file with a wrong field name", _benchmark('{"question": "2+2?"}\n'),
     "stages[3].benchmarks[0].path", ("bench.jsonl:1", "'prompt'")),
]


@pytest.mark.parametrize(("build", "where", "words"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_validate_catches_the_mutation(tmp_path: Path, build: Callable[[Path], dict[str, Any]], where: str,
                                       words: tuple[str, ...]) -> None:
    data = build(tmp_path)
    if where.startswith("@"):
        name, field = where[1:].rsplit(".", 1)
        index = next(n for n, s in enumerate(data["stages"]) if (s.get("name") or s["kind"]) == name)
        where = f"stages[{index}].{field}"
    config, issues = validate_data(data, "m.yaml", CONFIGS)
    errors = [i for i in issues if i.level == "error"]
    assert config is None and errors, "the mutation validated"
    lines = [str(i) for i in errors]
    hit = [i for i in errors if i.path == where]
    assert len(hit) == 1, f"expected one error at {where}, got: {lines}"
    line = str(hit[0])
    assert "\n" not in line
    for word in words:
        assert word in line, f"{word!r} missing from: {line}"


@pytest.mark.parametrize("name", ["if_demo", "fc_demo", "general_demo", "demo", "smoke", "fc_import_demo"])
def test_the_shipped_configs_keep_their_contracts(name: str) -> None:
    config, issues = validate_data(_shipped(name), f"{name}.yaml", CONFIGS)
    assert config is not None, [str(i) for i in issues if i.level == "error"]


def test_the_cli_exits_2_with_the_one_line(tmp_path: Path) -> None:
    data = copy.deepcopy(_shipped("if_demo"))
    _stage(data, "if_responses")["input"] = "if_expand"
    for s in data["stages"]:
        if "seed_files" in s:
            s["seed_files"] = [str(CONFIGS / p) for p in s["seed_files"]]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if "error" in ln]
    assert len(lines) == 1 and "stages[6].input" in lines[0] and "'messages'" in lines[0], result.output


def test_run_refuses_before_writing_anything(tmp_path: Path) -> None:
    build = _topics(b"")
    path = tmp_path / "empty.yaml"
    data = build(tmp_path)
    data["run_dir"] = str(tmp_path / "run")
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(path), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "topic corpus is empty" in result.output
    assert not (tmp_path / "run").exists()
