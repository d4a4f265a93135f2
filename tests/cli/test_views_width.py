"""`fabrika status` and the progress view at 80 and 120 columns: snapshots of the rendered text,
and no line wider than the terminal. Regenerate a snapshot after an intended change with
``FABRIKA_UPDATE_SNAPSHOTS=1 pytest tests/cli/test_views_width.py``."""

from __future__ import annotations

import io
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from fabrika.cli import views
from fabrika.pipeline.llm_wrap import LLMCounters
from fabrika.pipeline.progress import RunProgress

SNAPSHOTS = Path(__file__).parent / "snapshots"

MANIFEST: dict[str, Any] = {
    "name": "fc_import_demo", "backend": "sim", "status": "done",
    "order": ["fc.tools_import", "fc.plans", "fc.dialogues", "instruct.multi_turn_constraints", "fc.samples"],
    "stages": {
        "fc.tools_import": {"seen": 33, "rows": 33, "ok": 30, "complete": True, "seconds": 0.7,
                            "rejected": {"deprecated": 1, "invalid_name": 2},
                            "llm": {"requests": 96, "cached": 0, "prompt_tokens": 19963, "completion_tokens": 5614}},
        "fc.plans": {"seen": 30, "rows": 30, "ok": 17, "complete": True, "seconds": 1.3,
                     "rejected": {"plan_invalid": 11, "judge_rejected": 2},
                     "llm": {"requests": 111, "cached": 2, "prompt_tokens": 280000, "completion_tokens": 15175}},
        "fc.dialogues": {"seen": 17, "rows": 17, "ok": 16, "complete": True, "seconds": 0.3,
                         "rejected": {"too_many_injected": 1, "not_sampled": 4},
                         "llm": {"requests": 77, "cached": 0, "prompt_tokens": 62045, "completion_tokens": 978}},
        "instruct.multi_turn_constraints": {
            "seen": 1200, "rows": 1180, "ok": 1002, "complete": False, "seconds": 1234.5,
            "rejected": {"verifier_failed: the answer breaks constraint length.max_words": 120,
                         "wrong_language: the answer is not in 'ru'": 38, "llm_error: timeout": 20},
            "llm": {"requests": 4800, "cached": 1200, "prompt_tokens": 12_300_000, "completion_tokens": 2_100_000}},
        "fc.samples": {"seen": 16, "rows": 31, "ok": 31, "complete": True, "seconds": 0.1, "rejected": {},
                       "llm": {}},
    },
    "accounting": {
        "rows": [
            {"stage": "fc.dialogues", "tag": "fc.assistant", "model": "sim", "requests": 38, "cache_hits": 0,
             "retries": 0, "success_after_retry": 0, "failed": 0, "truncated": 0, "prompt_tokens": 51024,
             "completion_tokens": 514, "cost": None, "failures": {}},
            {"stage": "fc.plans", "tag": "fc.planner", "model": "sim", "requests": 85, "cache_hits": 0, "retries": 3,
             "success_after_retry": 3, "failed": 1, "truncated": 0, "prompt_tokens": 244127,
             "completion_tokens": 14081, "cost": None, "failures": {"timeout": 1}},
            {"stage": "fc.tools_import", "tag": "fc.tools_import.translate", "model": "sim", "requests": 32,
             "cache_hits": 0, "retries": 0, "success_after_retry": 0, "failed": 0, "truncated": 0,
             "prompt_tokens": 5540, "completion_tokens": 1660, "cost": None, "failures": {}},
        ],
        "totals": {"requests": 155, "cache_hits": 0, "retries": 3, "success_after_retry": 3, "failed": 1,
                   "truncated": 0, "prompt_tokens": 300691, "completion_tokens": 16255, "cost": None,
                   "failures": {"timeout": 1}},
    },
}


def _render(width: int, *renderables: Any) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None, legacy_windows=False)
    for r in renderables:
        console.print(r)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def _check(name: str, text: str, width: int) -> None:
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, too_wide
    path = SNAPSHOTS / name
    if os.environ.get("FABRIKA_UPDATE_SNAPSHOTS"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} changed; rerun with FABRIKA_UPDATE_SNAPSHOTS=1\n{text}"


@pytest.mark.parametrize("width", [80, 120])
def test_status_fits_the_terminal(width: int):
    text = _render(width, views.stages_table(MANIFEST, {"fc.plans": {"config": ["plans_per_topic"]}}),
                   views.versions_table({"versions": {"v1": {"rows": 31, "created_at": "2026-12-01T20:37:14Z"}},
                                         "latest_version": "v1"}),
                   views.accounting_table(MANIFEST["accounting"], "LLM accounting (last invocation)"))
    _check(f"status_{width}.txt", text, width)
    for reason in ("verifier_failed: the answer breaks constraint length.max_words=120", "too_many_injected=1"):
        assert reason.replace(" ", "") in text.replace("\n", "").replace(" ", "")  # wrapped, never cut
    assert "instruct.multi_turn_constraints" in text.replace("\n", "").replace(" ", "")


def test_the_full_table_is_kept_where_it_fits():
    text = _render(160, views.stages_table(MANIFEST))
    assert "passed over" in text and "not_sampled=4" in text  # the wide layout, one row per stage
    assert "rejected:" not in text and all(len(line) <= 160 for line in text.splitlines())


def _stats(processed: int, rejected: int = 0, tokens: int = 0):
    return SimpleNamespace(processed=processed, skipped=3, rejected=rejected, passed_over=2, internal_errors=0,
                           cache_miss=0, llm=LLMCounters(requests=processed, cached=1, errors=2,
                                                         prompt_tokens=tokens, completion_tokens=tokens // 4))


@pytest.mark.parametrize("width", [80, 120])
def test_plain_progress_lines_wrap_to_the_terminal(width: int):
    buf = io.StringIO()
    with RunProgress(plain=True, log_every=0, out=buf, width=width, expected_stages=3) as p:
        task = p.add("instruct.multi_turn_constraints", 400)
        st = p._stages[task]
        st.started, p._started = st.started - 100, p._started - 100  # injected clock: 100 s in
        p.advance(task, _stats(100, rejected=7, tokens=1_234_000))
        p.set_phase(task, "verifying", 100, 400)
        lines = p.stage_line(st) + "\n" + p.overall_line() + "\n"
    text = "".join(line.rstrip() + "\n" for line in lines.splitlines())
    # elapsed and rate depend on the clock; the layout is what the snapshot pins
    import re

    text = re.sub(r"\[\s*[\dhms]+\]", "[  T]", text)
    text = re.sub(r"\d+\.\d/s", "R/s", text)
    text = re.sub(r"ETA [\dhms]+", "ETA E", text)
    _check(f"progress_{width}.txt", text, width)
    assert "PENDING" not in text and "llm-err 2" in text and "resumed 3" in text  # nothing cut off


@pytest.mark.parametrize("width", [80, 120])
def test_live_progress_fits_the_terminal(width: int):
    out = io.StringIO()
    p = RunProgress(plain=False, width=width, expected_stages=2)
    assert p._progress is not None
    p._progress.console.file = out
    with p:
        task = p.add("instruct.multi_turn_constraints", 400)
        p.advance(task, _stats(100, rejected=7, tokens=1_234_000))
        p._push(task, force=True)
        p._progress.refresh()
        text = _render(width, p._progress.make_tasks_table(p._progress.tasks))
    assert all(len(line) <= width for line in text.splitlines()), text
    assert "instruct.multi_tu" in text and "103/400" in text and "rej 7" in text and "llm-err 2" in text
