"""The run under the faults a real fleet has, through the real HTTP client against the fake server.

Outage mid-stage, a changed sampling parameter, a sim run followed by a real backend, a key in the config.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import polars as pl
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.pipeline.config import PipelineConfig, validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store import RunStore
from fabrika.store.versions import scan_version
from fabrika.testing import FakeOpenAIServer

N = 60
runner = CliRunner()


def write_prompts(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text(
        "".join(json.dumps({"prompt": f"Вопрос {i}: сколько будет {i} плюс {i}?"}, ensure_ascii=False) + "\n"
                for i in range(N)), encoding="utf-8")


def doc(tmp_path: Path, base_url: str | None, run: str = "run", **llm: Any) -> dict[str, Any]:
    write_prompts(tmp_path)
    if base_url is None:
        llm_cfg: dict[str, Any] = {"backend": "sim"}
    else:
        llm_cfg = {"backend": "openai", "model": "fake", "endpoints": [{"base_url": base_url}],
                   "max_retries": 1, "backoff_initial_s": 0.01, "backoff_max_s": 0.02, "backoff_jitter_s": 0.0,
                   "timeout_s": 3, "connect_timeout_s": 0.5, "breaker": {"failure_threshold": 3, "cooldown_s": 0.05}}
    llm_cfg.update(llm)
    return {
        "name": "faults",
        "run_dir": str(tmp_path / run),
        "max_in_flight": 8,
        "llm": llm_cfg,
        "stages": [
            {"kind": "generic.prompts", "name": "prompts", "path": "p.jsonl"},
            {"kind": "generic.complete", "name": "answers", "input": "prompts", "tag": "t.answers", "chunk_size": 16},
            {"kind": "generic.complete", "name": "judge", "input": "answers", "prompt_field": "completion",
             "tag": "t.judge", "max_tokens": 64, "chunk_size": 16},
        ],
        "dataset": {"stages": ["judge"]},
    }


def config(tmp_path: Path, data: dict[str, Any]) -> PipelineConfig:
    cfg, issues = validate_data(data, "faults.yaml", tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    return cfg


def write_yaml(tmp_path: Path, data: dict[str, Any], name: str = "faults.yaml") -> Path:
    import yaml

    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def rows(run_dir: Path, stage: str) -> pl.DataFrame:
    lf = RunStore(run_dir).scan_raw(stage)
    return pl.DataFrame() if lf is None else lf.collect()


def test_outage_mid_stage_ends_non_zero_and_the_rerun_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    srv = FakeOpenAIServer(latency_ms=20).start()
    try:
        data = doc(tmp_path, srv.base_url)
        path = write_yaml(tmp_path, data)

        def kill_after(n: int) -> None:
            deadline = time.monotonic() + 30
            while srv.served < n and time.monotonic() < deadline:
                time.sleep(0.002)
            srv.stop()

        killer = threading.Thread(target=kill_after, args=(25,))
        killer.start()
        first = runner.invoke(app, ["run", str(path), "--no-progress"])
        killer.join()
        assert first.exit_code == 3, first.output
        line = first.stderr.strip().splitlines()[-1]
        assert "run did not finish" in line and "stage answers:" in line and "pending" in line
        assert "connection" in line or "circuit open" in line or "connect" in line
        assert f"rerun `fabrika run {path}`" in line
        run_dir = tmp_path / "run"
        answers = rows(run_dir, "answers")
        assert 0 < answers.height < N
        assert not answers.filter(pl.col("reason").str.starts_with("llm_error")).height  # nothing retryable rejected
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["status"] == "incomplete" and manifest["stages"]["answers"]["pending"] > 0
        assert not (run_dir / "versions").exists() or not list((run_dir / "versions").iterdir())

        srv.start()  # the same port: the server came back
        second = runner.invoke(app, ["run", str(path), "--no-progress"])
        assert second.exit_code == 0, second.output
        after = rows(run_dir, "answers")
        assert after.height == N and after["id"].n_unique() == N
        assert not after.filter(pl.col("status") != "ok").height

        reference = config(tmp_path, doc(tmp_path, srv.base_url, run="reference"))
        ref = run_pipeline(reference, progress=False)
        assert ref.complete
        got = scan_version(run_dir, "v1").collect().drop("input_id").sort("id")
        want = scan_version(tmp_path / "reference", "v1").collect().drop("input_id").sort("id")
        assert got.height == N and got.equals(want)
    finally:
        srv.stop()


def test_changing_one_stage_max_tokens_re_asks_exactly_that_stage(tmp_path: Path) -> None:
    with FakeOpenAIServer() as srv:
        data = doc(tmp_path, srv.base_url)
        first = run_pipeline(config(tmp_path, data), progress=False)
        assert first.complete and srv.served == 2 * N
        again = run_pipeline(config(tmp_path, data), progress=False)  # nothing changed: nothing asked
        assert again.complete and srv.served == 2 * N

        data["stages"][2]["max_tokens"] = 32
        before = len(srv.app.request_tags)
        third = run_pipeline(config(tmp_path, data), progress=False)  # a plain rerun, no flags
        assert third.complete
        tags = srv.app.request_tags[before:]
        assert len(tags) == N and set(tags) == {"t.judge"}
        assert {r["max_tokens"] for r in srv.requests[before:]} == {32}
        assert third.stats["judge"].reprocessed == ["max_tokens"]
        assert third.stats["answers"].reprocessed == [] and third.stats["answers"].skipped == N
        judged = rows(tmp_path / "run", "judge")
        assert judged.height == N and judged["id"].n_unique() == N  # redone, not appended


def test_sim_answers_are_never_served_to_the_openai_backend(tmp_path: Path) -> None:
    sim = run_pipeline(config(tmp_path, doc(tmp_path, None)), progress=False)
    assert sim.complete
    assert set(rows(tmp_path / "run", "answers")["llm_backend"]) == {"sim"}
    with FakeOpenAIServer() as srv:
        real = run_pipeline(config(tmp_path, doc(tmp_path, srv.base_url)), progress=False)
        assert real.complete
        assert srv.served == 2 * N  # every request asked the server: 0 sim answers reused from the cache
        assert real.stats["answers"].llm.cached == 0
    for stage in ("answers", "judge"):
        got = rows(tmp_path / "run", stage)
        assert got.height == N and set(got["llm_backend"]) == {"openai"}
        assert not got.filter(pl.col("completion").str.contains(r"\[sim\]")).height


def test_wrong_model_leaves_items_pending_with_the_fix_and_no_rejections(tmp_path: Path) -> None:
    with FakeOpenAIServer(models=["fake"]) as srv:
        data = doc(tmp_path, srv.base_url, model="Qwen/Qwen3-8B", probe=False)  # past the probe on purpose
        result = run_pipeline(config(tmp_path, data), progress=False)
        assert not result.complete and result.version is None
        assert "check llm.model" in result.problems[0] and "model_not_found" in result.problems[0]
        assert rows(tmp_path / "run", "answers").height == 0  # pending, not rejected forever
        assert result.stats["answers"].stopped_early  # it did not send every item to a server that says 404
        assert srv.served < N


def test_secrets_never_reach_the_run_dir(tmp_path: Path) -> None:
    secret = "sk-live-SECRET-9f8e7d"
    with FakeOpenAIServer() as srv:
        data = doc(tmp_path, srv.base_url)
        data["llm"]["endpoints"][0]["api_key"] = secret
        result = run_pipeline(config(tmp_path, data), progress=False)
        assert result.complete
    status = runner.invoke(app, ["status", str(tmp_path / "run"), "--json"])
    assert status.exit_code == 0 and secret not in status.output
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert len(files) > 5
    for p in files:
        assert secret.encode() not in p.read_bytes(), p
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["config"]["llm"]["endpoints"][0]["api_key"] == "***"


def test_a_stage_that_rejects_everything_is_reported_loudly(tmp_path: Path) -> None:
    with FakeOpenAIServer() as srv:
        srv.faults(kind="bad_request")  # the item's fault (terminal): rejections, not pending
        result = run_pipeline(config(tmp_path, doc(tmp_path, srv.base_url)), progress=False)
    answers = rows(tmp_path / "run", "answers")
    assert 50 <= answers.height < N  # the stage stopped once 50 items had all failed
    assert set(answers["status"]) == {"rejected"}
    assert set(answers["reason"].str.split(":").list.first()) == {"llm_error"}
    assert any(f"all {answers.height} item(s)" in w and "llm_error" in w for w in result.warnings)
    assert not result.complete and "100% of items failed" in result.problems[0]
    assert result.stats["answers"].stopped_early and "judge" not in result.stats
    assert result.version is None


def test_a_server_dying_late_in_a_long_stage_stops_it_within_a_window(tmp_path: Path) -> None:
    many = 400
    (tmp_path / "many.jsonl").write_text("".join(json.dumps({"prompt": f"Пункт {i}"}, ensure_ascii=False) + "\n"
                                                 for i in range(many)), encoding="utf-8")
    srv = FakeOpenAIServer().start()
    try:
        data = doc(tmp_path, srv.base_url)
        data["stages"] = [{"kind": "generic.prompts", "name": "prompts", "path": "many.jsonl"},
                          {"kind": "generic.complete", "name": "answers", "input": "prompts", "tag": "t.answers"}]
        data["dataset"] = {"stages": ["answers"]}

        def kill_after(n: int) -> None:
            deadline = time.monotonic() + 30
            while srv.served < n and time.monotonic() < deadline:
                time.sleep(0.001)
            srv.stop()

        killer = threading.Thread(target=kill_after, args=(300,))
        killer.start()
        result = run_pipeline(config(tmp_path, data), progress=False)
        killer.join()
    finally:
        srv.stop()
    st = result.stats["answers"]
    assert st.stopped_early and not result.complete
    assert st.processed >= 290
    # cumulatively 20 % would need ~75 failures after 300 successes; the window of 50 stops at ~11
    assert st.pending < 40 and st.seen < many


def test_allow_partial_materialises_what_finished_and_still_exits_3(tmp_path: Path) -> None:
    with FakeOpenAIServer() as srv:
        srv.faults(match="Вопрос 7:", kind="overloaded")  # one item's server keeps answering 503
        path = write_yaml(tmp_path, doc(tmp_path, srv.base_url))
        plain = runner.invoke(app, ["run", str(path), "--no-progress"])
        assert plain.exit_code == 3 and "stage answers: 1 item(s) pending" in plain.stderr
        assert "HTTP 503" in plain.stderr and not (tmp_path / "run" / "versions" / "v1").exists()
        partial = runner.invoke(app, ["run", str(path), "--no-progress", "--allow-partial"])
        assert partial.exit_code == 3 and "partial dataset (--allow-partial)" in partial.stdout
        assert scan_version(tmp_path / "run", "v1").collect().height == N - 1
