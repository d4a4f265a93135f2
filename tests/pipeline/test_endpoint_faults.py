"""Endpoint faults that are not verdicts, through ``fabrika run`` against the fake OpenAI server.

* a 200 answer with ``content: null`` (``finish_reason: stop``, no tool calls) is retried, then the
  item stays pending (exit 3); nothing is cached or written for it, so once the server is fixed the
  rerun asks again and gives the dataset an uninterrupted run gives;
* a server that accepts connections and never answers costs one ``llm.timeout_s``: the first wave's
  timeouts mark it hung, the stage stops feeding items and the run exits 3 with the pending count
  (before: every item's ``max_retries`` attempts and the breaker's probes each waited the timeout,
  ~16 minutes at the default 120 s).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import yaml
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.store import RunStore
from fabrika.store.versions import scan_version
from fabrika.testing import FakeOpenAIServer

runner = CliRunner()


def write(tmp_path: Path, base_url: str, run: str, n: int, **llm: Any) -> Path:
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": f"Вопрос {i}: сколько будет {i} плюс {i}?"},
                                                         ensure_ascii=False) + "\n" for i in range(n)),
                                      encoding="utf-8")
    doc = {
        "name": "endpoint_faults",
        "run_dir": str(tmp_path / run),
        "max_in_flight": 4,
        "llm": {"backend": "openai", "model": "fake", "endpoints": [{"base_url": base_url}], **llm},
        "stages": [
            {"kind": "generic.prompts", "name": "prompts", "path": "p.jsonl"},
            {"kind": "generic.complete", "name": "answers", "input": "prompts", "tag": "t.answers", "chunk_size": 4},
            {"kind": "generic.complete", "name": "judge", "input": "answers", "prompt_field": "completion",
             "tag": "t.judge", "max_tokens": 64, "chunk_size": 4},
        ],
        "dataset": {"stages": ["judge"]},
    }
    path = tmp_path / f"{run}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def run(path: Path) -> Any:
    return runner.invoke(app, ["run", str(path), "--no-progress"])


def stage_rows(run_dir: Path, stage: str) -> pl.DataFrame:
    lf = RunStore(run_dir).scan_raw(stage)
    return pl.DataFrame() if lf is None else lf.collect()


def test_content_null_is_retried_then_pending_and_asked_again_after_the_fix(tmp_path: Path) -> None:
    broken = {"on": True}

    def answers(req: dict[str, Any]) -> Any:
        return {"content": None, "finish_reason": "stop"} if broken["on"] else f"Ответ: {len(req['messages'])}"

    with FakeOpenAIServer() as srv:
        srv.script(tag="t.answers", responder=answers)
        fast = {"max_retries": 1, "backoff_initial_s": 0.01, "backoff_max_s": 0.02, "backoff_jitter_s": 0.0}
        cfg = write(tmp_path, srv.base_url, "run", 6, **fast)
        first = run(cfg)
        assert first.exit_code == 3, first.output
        assert "6 item(s) pending" in first.output and "empty answer" in first.output
        assert len(srv.requests_for("t.answers")) == 12  # each asked twice (one retry), then pending
        assert stage_rows(tmp_path / "run", "answers").is_empty()  # no empty_answer verdict was stored
        broken["on"] = False  # the server is fixed
        second = run(cfg)
        assert second.exit_code == 0, second.output
        assert len(srv.requests_for("t.answers")) == 18  # asked again: nothing was cached for them
        clean = run(write(tmp_path, srv.base_url, "clean", 6, **fast))
        assert clean.exit_code == 0, clean.output
    got = scan_version(tmp_path / "run", "v1").sort("id").collect()
    assert len(got) == 6 and got.equals(scan_version(tmp_path / "clean", "v1").sort("id").collect())


def test_a_hung_endpoint_ends_the_run_after_one_timeout_with_exit_3(tmp_path: Path) -> None:
    """Default retries and breaker; only ``timeout_s`` is scaled down (120 s -> 0.3 s)."""
    with FakeOpenAIServer(hang_s=30) as srv:
        srv.faults(kind="hang")  # GET /models answers (the probe passes); every chat request hangs
        result = run(write(tmp_path, srv.base_url, "run", 40, timeout_s=0.3))
        served = srv.served
    assert result.exit_code == 3, result.output
    assert "stage answers: 4 item(s) pending" in result.output and "hung" in result.output
    assert "stages not run because answers stopped: judge" in result.output
    # one wave of max_in_flight first attempts reached the server: no retry, no probe, no further item
    # waited another timeout (each costs timeout_s: at the default 120 s the run ends after ~2 minutes)
    assert served == 4
    assert stage_rows(tmp_path / "run", "answers").is_empty()
