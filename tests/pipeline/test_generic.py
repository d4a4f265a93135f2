"""generic.prompts / generic.complete over a real HTTP fake server: rejections, rerun = 0 requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabrika.errors import InputError
from fabrika.generators.generic import iter_prompt_records
from fabrika.pipeline.config import PipelineConfig, validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store import RunStore
from fabrika.store.versions import scan_version
from fabrika.testing import FakeOpenAIServer

PROMPTS = ["Назови столицу России.", "Сломай меня, пожалуйста.", "Сколько дней в високосном году?", "Длинный ответ нужен."]


def config(tmp_path: Path, base_url: str) -> PipelineConfig:
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n" for p in PROMPTS),
                                      encoding="utf-8")
    doc = {
        "name": "gen",
        "run_dir": str(tmp_path / "run"),
        "llm": {"backend": "openai", "model": "fake", "endpoints": [{"base_url": base_url}],
                "max_retries": 0, "timeout_s": 5},
        "stages": [
            {"kind": "generic.prompts", "name": "prompts", "path": "p.jsonl"},
            {"kind": "generic.complete", "name": "answers", "input": "prompts", "system": "Отвечай кратко."},
        ],
        "dataset": {"stages": ["answers"]},
    }
    cfg, issues = validate_data(doc, "gen.yaml", tmp_path)
    assert cfg is not None, issues
    return cfg


def test_complete_records_answers_and_rejections_then_rerun_sends_nothing(tmp_path: Path) -> None:
    with FakeOpenAIServer() as srv:
        srv.script(match="столицу", responses=["Москва."], cycle=True)
        srv.faults(match="Сломай меня", kind="bad_request")
        srv.faults(match="Длинный ответ", kind="length")
        cfg = config(tmp_path, srv.base_url)
        first = run_pipeline(cfg, progress=False)
        served = srv.served
        assert served == 4
        raw = {r["prompt"] if r["status"] == "ok" else r["reason"].split(":")[0]: r
               for r in RunStore(first.run_dir).scan_raw("answers").collect().to_dicts()}
        assert raw["Назови столицу России."]["completion"] == "Москва."
        assert json.loads(raw["Назови столицу России."]["messages"])[0] == {"role": "system", "content": "Отвечай кратко."}
        assert first.manifest["stages"]["answers"]["rejected"] == {"llm_error": 1, "truncated": 1}
        assert {r["llm_backend"] for r in raw.values()} == {first.manifest["backend"]}
        data = scan_version(first.run_dir, "v1").collect()
        assert data.height == 2
        second = run_pipeline(cfg, progress=False)
        assert srv.served == served  # unchanged rerun: zero requests reach the server
        assert scan_version(second.run_dir, "v1").sort("id").collect().equals(data.sort("id"))


def test_prompts_file_errors_name_path_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ок"}\n\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(InputError, match=rf"{bad}:3: expected a JSON object"):
        list(iter_prompt_records(bad, "prompt"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"prompt": "  "}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"empty.jsonl:1: missing or empty 'prompt'"):
        list(iter_prompt_records(empty, "prompt"))
    with pytest.raises(InputError, match="not found"):
        list(iter_prompt_records(tmp_path / "none.jsonl", "prompt"))


def test_smoke_config_and_package_prompts_validate() -> None:
    from fabrika.pipeline.config import validate_file

    cfg, issues = validate_file(Path(__file__).parents[2] / "configs" / "smoke.yaml")
    assert cfg is not None, [str(i) for i in issues]
    assert len(list(iter_prompt_records(cfg.resolve_path(cfg.stages[0].path), "prompt"))) >= 10
