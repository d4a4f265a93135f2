"""Validation messages name the nested model's own keys and check FC input files before any LLM call."""

from __future__ import annotations

from pathlib import Path

import yaml

from fabrika.pipeline.config import validate_file


def _issues(tmp_path: Path, doc: dict) -> list[str]:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return [str(i) for i in validate_file(path)[1] if i.level == "error"]


def test_unknown_nested_key_lists_that_models_keys(tmp_path):
    errors = _issues(tmp_path, {"name": "x", "llm": {"backend": "sim", "temprature": 1.0},
                                "stages": [{"kind": "generic.prompts", "path": "p.jsonl"}]})
    (msg,) = [e for e in errors if "temprature" in e]
    assert "allowed: backend, model, endpoints" in msg and "temperature" in msg
    assert "run_dir" not in msg, "the top-level keys are not the allowed keys of llm:"


def test_fc_input_files_are_checked_up_front(tmp_path):
    errors = _issues(tmp_path, {"name": "x", "llm": {"backend": "sim"}, "stages": [
        {"kind": "fc.topics", "corpus": [{"path": "missing.jsonl"}], "languages": ["ru"], "target_size": {"en": 2}},
        {"kind": "fc.tools", "name": "tools2", "topics_file": "nope.jsonl"},
    ]})
    assert any("stages[0].corpus[0].path: corpus file not found" in e and "missing.jsonl" in e for e in errors)
    assert any("stages[0].target_size: no target size for language 'ru'" in e for e in errors)
    assert any("stages[1].topics_file: topics file not found" in e and "nope.jsonl" in e for e in errors)
