"""The throughput bench stays runnable (a tiny run; the real numbers live in bench/RESULTS.md)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "llm_throughput.py"


def test_bench_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("fabrika_llm_throughput_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "rows.json"
    bench.main(["--requests", "40", "--concurrency", "8", "--latency-ms", "0",
                "--clients", "fabrika", "raw-aiohttp", "openai-aiohttp", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [r["client"] for r in rows] == ["fabrika", "raw-aiohttp", "openai-aiohttp"]
    assert all(r["ok"] == 40 and r["rps"] > 0 for r in rows)
    assert "x raw-aiohttp" in capsys.readouterr().out
