"""The eval directory: resume after a cut line, one process at a time, faults retried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.errors import ConfigError, StoreError
from fabrika.eval.answers import strip_reasoning
from fabrika.eval.runstore import ResultStore, make_llm_config
from tests.eval.conftest import llm_flags
from tests.eval.test_calibrate import make_rows, responder, write

runner = CliRunner()


def test_a_line_cut_by_a_crash_is_dropped_and_asked_again(tmp_path: Path):
    store = ResultStore(tmp_path, {"kind": "x"})
    store.append([{"id": "a", "v": 1}, {"id": "b", "v": 2}])
    store.close()
    with (tmp_path / "results.jsonl").open("a", encoding="utf-8") as fh:
        fh.write('{"id": "c", "v"')  # the process died mid-write
    again = ResultStore(tmp_path, {"kind": "x"})
    assert set(again.done) == {"a", "b"}
    again.append([{"id": "c", "v": 3}])
    again.close()
    lines = (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["a", "b", "c"]


def test_corruption_in_the_middle_is_an_error_not_a_silent_drop(tmp_path: Path):
    (tmp_path / "settings.json").write_text('{"kind": "x"}', encoding="utf-8")
    (tmp_path / "results.jsonl").write_text('{"id": "a"}\ngarbage\n{"id": "b"}\n{"id": "c"}\n', encoding="utf-8")
    with pytest.raises(StoreError, match="corrupt"):
        ResultStore(tmp_path, {"kind": "x"})


def test_second_process_on_the_same_directory_is_refused(tmp_path: Path):
    first = ResultStore(tmp_path, {"kind": "x"})
    with pytest.raises(StoreError, match="in use"):
        ResultStore(tmp_path, {"kind": "x"})
    first.close()
    ResultStore(tmp_path, {"kind": "x"}).close()


def test_settings_mismatch_is_refused(tmp_path: Path):
    ResultStore(tmp_path, {"kind": "x", "model": "a"}).close()
    with pytest.raises(ConfigError, match="model"):
        ResultStore(tmp_path, {"kind": "x", "model": "b"})


def test_llm_config_errors_name_the_flag(tmp_path: Path):
    with pytest.raises(ConfigError, match="--base-url"):
        make_llm_config(base_url=None, model="m")
    with pytest.raises(ConfigError, match="http"):
        make_llm_config(base_url="localhost:8000", model="m")


def test_injected_server_faults_are_retried_and_change_nothing(server, tmp_path: Path):
    server.script(tag="eval.judge", responder=responder)
    labels, _ = write(tmp_path, make_rows(30, "x"))
    clean = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(tmp_path / "clean"), *llm_flags(server)])
    assert clean.exit_code == 0, clean.output
    server.faults(rate=0.3, kinds=["rate_limit", "server"], seed=2)
    fast = tmp_path / "llm.yaml"
    fast.write_text("llm: {backend: openai, endpoints: [{base_url: 'http://127.0.0.1:1/v1'}], backoff_initial_s: 0.01,"
                    " backoff_jitter_s: 0.0, max_retries: 8}\n", encoding="utf-8")
    faulty = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(tmp_path / "faulty"),
                                 "--llm-config", str(fast), "--base-url", server.base_url, "--model", "judge-model"])
    assert faulty.exit_code == 0, faulty.output
    a = json.loads((tmp_path / "clean" / "report.json").read_text(encoding="utf-8"))
    b = json.loads((tmp_path / "faulty" / "report.json").read_text(encoding="utf-8"))
    assert a["per_group"] == b["per_group"] and sum(server.app.fault_counts.values()) > 0


@pytest.mark.parametrize("text,want", [
    ("<think>раз, два</think>\nответ", "ответ"),
    ("рассуждение без начала</think>ответ", "ответ"),
    ("<think>оборвалось на полуслове", ""),
    ("просто ответ", "просто ответ"),
    (None, ""),
])
def test_strip_reasoning(text, want):
    assert strip_reasoning(text) == want


def test_a_scorer_error_leaves_the_item_pending_not_the_run_lost(server, tmp_path: Path):
    import asyncio

    from fabrika.eval.runstore import run_items
    from fabrika.llm import ChatRequest

    server.script(tag="t", responder=lambda req: req["messages"][0]["content"])
    store = ResultStore(tmp_path, {"kind": "x"})
    items = [{"id": f"i{k}", "q": f"q{k}"} for k in range(4)]

    def finish(item, resps):
        if item["id"] == "i2":
            raise KeyError("boom")
        return {"answer": resps[0].text}

    llm = make_llm_config(base_url=server.base_url, model="m")
    out = asyncio.run(run_items(store, llm, items, lambda it: [ChatRequest(messages=({"role": "user", "content": it["q"]},),
                                                                          tag="t")], finish))
    assert out.finished == 3 and [f["id"] for f in out.failed] == ["i2"] and "internal_error" in out.failed[0]["reason"]
    assert set(store.done) == {"i0", "i1", "i3"} and store.done["i3"]["answer"] == "q3"
    store.close()
