"""``fc.live_calls``: generated calls executed on the user's live MCP server (the SDK's stdio server in
tests/tools_import/mcp_strict_server.py); refused calls become a score column the ``live_calls`` gate drops."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from fabrika.errors import StageConfigError
from fabrika.gates import gate_lazy
from fabrika.generators.fc.live_calls import LiveCallsConfig, LiveCallsStage, sample_calls
from fabrika.generators.fc.tools_import import MAPPING_FILE
from fabrika.testing import run_stage, stage_context

pytest.importorskip("mcp", reason="the mcp extra is not installed")
SERVER = [sys.executable, str(Path(__file__).parent / "mcp_strict_server.py")]


def _sample(sid: str, *calls: tuple[str, dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    completion = [{"role": "assistant", "content": text, "train": True,
                   "tool_calls": [{"id": f"call_{sid}_{i}", "name": n, "arguments": a}
                                  for i, (n, a) in enumerate(calls)] or None}]
    prompt = [{"role": "user", "content": "Какая погода будет в Казани?"}]
    return {"id": sid, "status": "ok", "reason": None, "prompt": json.dumps(prompt, ensure_ascii=False),
            "completion": json.dumps(completion, ensure_ascii=False)}


ROWS = [
    _sample("known", ("get_forecast", {"city": "Казань", "days": 2})),
    _sample("unknown_city", ("get_forecast", {"city": "Тверь", "days": 2})),   # schema-valid, refused
    _sample("too_far", ("get_forecast", {"city": "Москва", "days": 3}), ("get_forecast", {"city": "Москва", "days": 9})),
    _sample("missing_arg", ("book-table", {"restaurant": "Пушкин"})),          # breaks the server's own schema
    _sample("renamed", ("book_table", {"restaurant": "Пушкин", "guests": 2})),  # the export name of 'book-table'
    _sample("typo", ("get_forcast", {"city": "Казань"})),                       # no such tool
    _sample("text", text="В Казани завтра солнечно."),
]


def _run(tmp_path: Path, rows: list[dict[str, Any]], **cfg: Any) -> Any:
    mapping_dir = tmp_path / "run" / "stages" / "fc.tools_import"
    mapping_dir.mkdir(parents=True)
    (mapping_dir / MAPPING_FILE).write_text(json.dumps({"book_table": "book-table"}), encoding="utf-8")
    log = tmp_path / "calls.jsonl"
    config = LiveCallsConfig(**{"input": "fc.samples", "command": SERVER, "env": {"LIVE_CALLS_LOG": str(log)},
                                "timeout_s": 60, **cfg})

    async def go() -> Any:
        async with stage_context(rows={"fc.samples": rows}, run_dir=tmp_path / "run") as ctx:
            return await run_stage(LiveCallsStage, config, ctx, strict=False)

    return asyncio.run(go()), log


def test_the_live_server_marks_the_calls_it_refuses_and_the_gate_drops_those_samples(tmp_path: Path):
    result, log = _run(tmp_path, ROWS)
    assert not result.pending and not result.failures and len(result.ok) == len(ROWS)
    scores = {r["id"]: (r["live_calls"], r["live_rejected"]) for r in result.rows}
    assert scores == {"known": (1, 0), "unknown_city": (1, 1), "too_far": (2, 1), "missing_arg": (1, 1),
                      "renamed": (1, 0), "typo": (1, 1), "text": (None, None)}
    errors = {r["id"]: json.loads(r["live_errors"]) for r in result.rows if r["live_errors"]}
    assert "неизвестный город: Тверь" in errors["unknown_city"][0]
    assert "7 дней" in errors["too_far"][0] and errors["typo"][0].startswith("get_forcast:")
    # the calls really ran, with the server's own names put back from tool_names.json
    ran = [json.loads(line) for line in log.read_text("utf-8").splitlines()]
    assert {"name": "book-table", "arguments": {"restaurant": "Пушкин", "guests": 2}} in ran
    assert not any(c["name"] == "book_table" for c in ran)
    frame = pl.DataFrame([{k: r[k] for k in ("id", "status", "live_calls", "live_rejected")} for r in result.rows])
    kept = set(gate_lazy(frame.lazy(), {"live_calls": {"max_rejected": 0}}).collect()["id"])
    assert kept == {"known", "renamed", "text"}  # no calls: the score does not apply, kept
    assert set(gate_lazy(frame.lazy(), {"live_calls": {"max_rejected": 1}}).collect()["id"]) == set(scores)


def test_history_executes_the_prompts_calls_too():
    row = _sample("two", ("get_forecast", {"city": "Казань"}))
    prompt = json.loads(row["prompt"]) + [{"role": "assistant", "tool_calls": [
        {"id": "call_0", "name": "get_forecast", "arguments": {"city": "Тверь"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "ошибка"}]
    row["prompt"] = json.dumps(prompt, ensure_ascii=False)
    assert [c.arguments["city"] for c in sample_calls(row)] == ["Казань"]
    assert [c.arguments["city"] for c in sample_calls(row, history=True)] == ["Тверь", "Казань"]


def test_a_server_that_dies_leaves_its_items_pending_not_rejected(tmp_path: Path):
    rows = [_sample("crash", ("shutdown_now", {}))]
    result, _ = _run(tmp_path, rows)
    assert result.pending == ["crash"] and not result.rows


def test_a_server_that_cannot_start_stops_the_stage_with_the_command(tmp_path: Path):
    with pytest.raises(StageConfigError, match="no_such_server.py"):
        _run(tmp_path, ROWS[:1], **{"command": [sys.executable, str(tmp_path / "no_such_server.py")], "timeout_s": 20})


def test_validate_checks_the_stage_reads_sample_completions():
    import yaml

    from fabrika.pipeline.config import validate_data

    root = Path(__file__).parents[2] / "configs"
    data = yaml.safe_load((root / "fc_demo.yaml").read_text("utf-8"))
    data["stages"].append({"kind": "fc.live_calls", "name": "fc_live", "input": "fc.samples", "command": SERVER})
    data["filters"] = {**(data.get("filters") or {}), "live_calls": {"max_rejected": 0}}
    cfg, issues = validate_data(data, str(root / "fc_demo.yaml"), root)
    assert cfg is not None, [str(i) for i in issues]
    data["stages"][-1]["input"] = "fc.plans"  # plans have no completion
    cfg, issues = validate_data(data, str(root / "fc_demo.yaml"), root)
    assert cfg is None and any("completion" in str(i) for i in issues), [str(i) for i in issues]
