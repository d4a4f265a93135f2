"""`fabrika refilter` input errors: unknown --base, an existing --name, an empty difficulty band — exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.pipeline.config import load_config
from fabrika.pipeline.runner import run_pipeline

DOC = """
name: r
seed: 0
run_dir: {run}
llm: {{backend: sim, model: sim}}
stages:
  - {{kind: generic.prompts, name: prompts, path: prompts.jsonl}}
  - {{kind: generic.complete, name: answers, input: prompts}}
  - {{kind: filter.length, name: length, input: answers}}
filters:
  {filters}
dataset:
  stages: [answers]
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("refilter")
    (root / "prompts.jsonl").write_text("".join(json.dumps({"prompt": f"Вопрос номер {i}?"}, ensure_ascii=False)
                                                + "\n" for i in range(4)), "utf-8")
    (root / "p.yaml").write_text(DOC.format(run=root / "run", filters="length: {max_tokens: 4096}"), "utf-8")
    return run_pipeline(load_config(root / "p.yaml"), progress=False).run_dir


def _refilter(*args: str) -> object:
    return CliRunner().invoke(app, ["refilter", *args])


def test_unknown_base_is_exit_2(run: Path) -> None:
    result = _refilter(str(run), "--base", "v9")
    assert result.exit_code == 2 and "--from-base 'v9': no such version; versions: v1" in result.output
    assert not (run / "versions" / "v2").exists()


def test_existing_name_needs_overwrite(run: Path) -> None:
    before = (run / "versions" / "v1" / "thresholds.json").read_text("utf-8")
    result = _refilter(str(run), "--name", "v1", "--set", "filters.length.max_tokens=10")
    assert result.exit_code == 2 and "version 'v1' exists" in result.output and "--overwrite" in result.output
    assert (run / "versions" / "v1" / "thresholds.json").read_text("utf-8") == before  # untouched
    again = _refilter(str(run), "--name", "v1", "--set", "filters.length.max_tokens=10", "--overwrite")
    assert again.exit_code == 0, again.output
    assert json.loads((run / "versions" / "v1" / "thresholds.json").read_text("utf-8"))["length"]["max_tokens"] == 10


@pytest.mark.parametrize("sets", [["filters.difficulty.min_pass_rate_exclusive=0.9", "filters.difficulty.max_pass_rate=0.2"],
                                  ["filters.difficulty.min_pass_rate_exclusive=0.5", "filters.difficulty.max_pass_rate=0.5"]])
def test_inverted_or_empty_band_is_exit_2(run: Path, sets: list[str]) -> None:
    args = [a for s in sets for a in ("--set", s)]
    result = _refilter(str(run), *args)
    assert result.exit_code == 2 and "empty or inverted" in result.output


def test_inverted_band_in_the_config_fails_validation(tmp_path: Path) -> None:
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "привет"}\n', "utf-8")
    (tmp_path / "p.yaml").write_text(DOC.format(run=tmp_path / "run", filters=(
        "difficulty: {min_pass_rate_exclusive: 0.8, max_pass_rate: 0.2}")), "utf-8")
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "p.yaml")])
    assert result.exit_code == 2 and "empty or inverted" in result.output
    assert not (tmp_path / "run").exists()
