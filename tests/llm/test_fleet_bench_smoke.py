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
        # a lower bound that a real schedule beats would be no bound; the steady window lies inside the run
        assert m["ideal_s"] <= m["lower_bound_s"] <= m["makespan_s"] + 1e-6, name
        assert 0 <= m["steady_from_s"] <= m["steady_to_s"] <= m["makespan_s"] + 1e-6, name
    assert results["samples_nK"]["requests"] == 4 and results["samples_nK"]["sequences"] == 16
    assert results["FC affinity, sequential"]["affinity"]["home"] > 0
    assert set(json.loads(series.read_text())) == set(results)


def _bench():  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location("fleet_bench", ROOT / "bench" / "fleet.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_critical_path_and_workload_window_from_a_server_log() -> None:
    """Per plan: sequential requests add up, requests sent while another of the plan runs (parallel tool
    answers) count once; the head is the longest fc.tools request; the steady part ends when the last
    episode sends its first request, not where utilisation happens to fall."""
    fleet = _bench()
    log = [  # key, tag, arrival, start, done
        ["", "fc.tools", 0.0, 0.0, 5.0], ["", "fc.tools", 0.0, 1.0, 4.0],
        ["p1", "fc.planner", 6.0, 6.0, 9.0], ["p1", "fc.judge", 9.0, 9.5, 10.5],  # plan part 3 + 1
        ["p1", "fc.user", 20.0, 20.0, 21.0],
        ["p1", "fc.tool", 21.0, 21.0, 23.0], ["p1", "fc.tool", 21.1, 21.1, 22.0],  # parallel: 2 s, not 2.9 s
        ["p1", "fc.assistant", 23.0, 23.0, 24.0],
        ["p2", "fc.planner", 6.0, 6.0, 12.0], ["p2", "fc.user", 30.0, 30.0, 30.5],
    ]
    b = fleet.critical_path(log, work=40.0, slots=4)
    assert abs(b["head_s"] - 5.0) < 1e-9
    assert abs(b["longest_chain_s"] - (3 + 1 + 1 + 2 + 1)) < 1e-9  # p1: 8 s; p2: 6.5 s
    assert abs(b["chain_s"] - 13.0) < 1e-9
    assert abs(b["stages_s"] - (5 + 6 + 4)) < 1e-9  # the longest plan part (p2) + the longest episode part (p1)
    assert abs(b["work_s"] - (5 + (40 - 8) / 4)) < 1e-9
    demand = [0.0] * 8 + [4.0] * 30  # per second from 0: the fleet first holds 4 requests at 8 s
    assert fleet.workload_window(log, demand, slots=4, first=0, b=1.0) == (8.0, 30.0)
