"""bench/fleet.py stays runnable (a tiny fleet; the real figures live in bench/RESULTS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fleet_bench_runs_end_to_end(tmp_path: Path) -> None:
    series = tmp_path / "series.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fleet.py"), "--servers", "2", "--slots", "8", "--topics", "2",
         "--plans", "2", "--time-scale", "20", "--prompts", "4", "--k", "4", "--series", str(series)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "datasets equal across configurations: True" in out
    results = json.loads(out.split("JSON ", 1)[1])
    # the pipeline has `overlap:`, so each routing runs sequential and overlapping, to the same dataset
    fc = {f"FC {r}, {mode}" for r in ("least_loaded", "affinity") for mode in ("sequential", "overlap (overlap=True)")}
    assert fc | {"samples_n1", "samples_nK"} <= set(results), sorted(results)
    for name, m in results.items():
        assert m["prefilled"] + m["cached"] == m["prompt_tokens"], name
        assert 0 < m["util_mean"] <= 1.0 + 1e-9 and 0 <= m["idle_starved"] + m["idle_misplaced"] <= 1.0 + 1e-9
    assert results["samples_nK"]["requests"] == 4 and results["samples_nK"]["sequences"] == 16
    assert results["FC affinity, sequential"]["affinity"]["home"] > 0
    assert set(json.loads(series.read_text())) == set(results)
