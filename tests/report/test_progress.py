"""Progress a person can trust: done <= total, ETA from the stage's rate, tokens and cost, phases of
global stages, plain periodic lines when stdout is not a terminal; rejections only count rejections;
rejection rows keep a bounded excerpt of the raw answer."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.llm_wrap import LLMCounters
from fabrika.pipeline.progress import LINE_WIDTH, RunProgress
from fabrika.pipeline.runner import run_pipeline
from fabrika.pipeline.stage import RAW_EXCERPT_CHARS
from fabrika.testing import FakeOpenAIServer, ScriptedLLM
from tests.report import ux_stages

ROOT = Path(__file__).parents[2]


def _stats(processed: int, skipped: int = 0, rejected: int = 0, passed_over: int = 0, tokens: int = 0):
    return SimpleNamespace(processed=processed, skipped=skipped, rejected=rejected, passed_over=passed_over,
                           internal_errors=0, cache_miss=0,
                           llm=LLMCounters(requests=processed, prompt_tokens=tokens, completion_tokens=tokens // 4))


def test_done_never_exceeds_total_and_eta_follows_the_stage_rate():
    buf = io.StringIO()
    cost = {"rows": [{"stage": "plans", "cost": 1.25}], "totals": {"cost": 1.25}}
    with RunProgress(plain=True, log_every=0, out=buf, accounting=lambda: cost, expected_stages=2) as p:
        task = p.add("plans", 30)
        st = p._stages[task]
        st.started -= 10  # 10 s into the stage
        p.advance(task, _stats(10, tokens=4000))
        line = p.stage_line(st)
        assert " 10/30 " in line and "ETA 20s" in line and "1.0/s" in line, line  # 20 left at 1/s
        assert "tok 5.0K" in line and "$1.25" in line
        p.advance(task, _stats(33, rejected=2, passed_over=5))  # more items than counted
        line = p.stage_line(st)
        assert "33/≥33" in line and "ETA" not in line and "rej 2" in line and "passed-over 5" in line, line
        assert "stages 0/2 ended" in p.overall_line() and "$1.25" in p.overall_line()
        p.finish(task, _stats(33))
    ended = buf.getvalue().strip().splitlines()
    assert len(ended) == 1 and "33/33" in ended[0] and "done in" in ended[0]
    assert all(len(x) <= LINE_WIDTH for x in ended)


def test_plain_lines_are_written_while_a_global_stage_holds_the_loop(tmp_path: Path):
    buf = io.StringIO()
    doc = {"name": "phased", "run_dir": str(tmp_path / "run"), "llm": {"backend": "sim"},
           "plugins": ["tests.report.ux_stages"], "stages": [{"kind": "ux.phased", "seconds": 1.2}]}
    cfg, issues = validate_data(doc, "t.yaml", tmp_path)
    assert cfg is not None, issues
    from fabrika.pipeline import runner

    original = runner.RunProgress
    runner.RunProgress = lambda **kw: original(**{**kw, "plain": True, "out": buf})  # type: ignore[assignment]
    try:
        run_pipeline(cfg, resume=False, progress=True, log_every=0.2)
    finally:
        runner.RunProgress = original  # type: ignore[assignment]
    lines = buf.getvalue().splitlines()
    assert any("ux.phased" in x and "[embedding " in x for x in lines), lines
    assert any("overall" in x for x in lines)
    assert all(len(x) <= LINE_WIDTH for x in lines)


def test_rejections_keep_a_bounded_raw_excerpt_and_passed_over_rows_are_not_rejections(tmp_path: Path):
    doc = {"name": "ux", "run_dir": str(tmp_path / "run"), "llm": {"backend": "sim"},
           "plugins": ["tests.report.ux_stages"], "stages": [{"kind": "ux.parse", "n": 20}]}
    cfg, issues = validate_data(doc, "t.yaml", tmp_path)
    assert cfg is not None, issues
    result = run_pipeline(cfg, resume=False, progress=False, engine=ScriptedLLM(ux_stages.prose_answer))
    rows = ux_stages.rows_of(result, "ux.parse")
    bad = [r for r in rows if (r["reason"] or "").startswith("invalid_json")]
    passed = [r for r in rows if (r["reason"] or "").startswith("not_sampled")]
    assert len(passed) == 5 and all(r.get("raw_excerpt") is None for r in passed)
    assert bad and all(r["raw_excerpt"].startswith("<think>the user wants JSON") for r in bad)
    assert all(len(r["raw_excerpt"]) <= RAW_EXCERPT_CHARS + 20 for r in bad)
    assert any(r["raw_excerpt"].endswith(" chars]") for r in bad)  # the long answer is cut and says so
    assert all(r.get("raw_excerpt") is None for r in rows if r["status"] == "ok")
    stats = result.stats["ux.parse"]
    assert stats.rejected == len(bad) and stats.passed_over == 5


@pytest.mark.timeout(120)
def test_piped_run_prints_periodic_lines_during_a_long_stage(tmp_path: Path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "Вопрос номер {i}: как дела?"}}\n' for i in range(24)), encoding="utf-8")
    with FakeOpenAIServer(latency_ms=250) as srv:
        cfg = tmp_path / "slow.yaml"
        cfg.write_text(
            "name: slow\n"
            f"run_dir: {tmp_path / 'run'}\n"
            "max_in_flight: 2\n"
            "llm:\n  backend: openai\n  model: fake\n"
            f"  endpoints: [{{base_url: '{srv.base_url}', api_key: x}}]\n"
            "  price_per_1m: {fake: {prompt: 1.0, completion: 2.0}}\n"
            "stages:\n"
            f"  - {{kind: generic.prompts, name: prompts, path: {prompts}}}\n"
            "  - {kind: generic.complete, name: answers, input: prompts, chunk_size: 4}\n"
            "dataset: {stages: [answers]}\n", encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        started = time.monotonic()
        proc = subprocess.run(f"{sys.executable} -m fabrika.cli.app run {cfg} --log-every 0.5 | cat",
                              shell=True, capture_output=True, text=True, env=env, cwd=ROOT, timeout=110)
        took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    periodic = [x for x in out if re.match(r"\[\s*\d+s\] answers\s", x) and "done in" not in x]
    assert took > 2 and len(periodic) >= 3, proc.stdout  # 24 requests x 250 ms / 2 in flight = 3 s
    assert any("ETA" in x and "$" in x for x in periodic), periodic
    counts = [tuple(map(int, m.groups())) for x in periodic if (m := re.search(r" (\d+)/(\d+) ", x))]
    assert counts and all(d <= t for d, t in counts) and counts == sorted(counts)
    assert any(re.match(r"\[\s*\d+s\] answers\s+24/24 .*done in", x) for x in out)
    summary = out[out.index(next(x for x in out if x.startswith("run slow"))):]
    assert any(x.startswith("answers") for x in summary) and "cost $" in "\n".join(summary)
    assert all(len(x) <= 100 for x in out), [x for x in out if len(x) > 100]
    assert "━" not in proc.stdout and "┃" not in proc.stdout  # no live bars or boxes in a log


async def _racing_answer(request):  # noqa: ANN001, ANN201
    """Two concurrent calls per item whose finishing order flips with the item."""
    import asyncio

    text = request.messages[-1]["content"]
    first = text.endswith(":a")
    i = int(text.split(":")[0])
    await asyncio.sleep(0.002 if first == (i % 2 == 0) else 0.0)
    return f"answer {text}"


def test_raw_excerpt_is_the_answer_of_the_call_started_last_whatever_finishes_first(tmp_path: Path):
    import asyncio

    from fabrika.llm.types import ChatRequest
    from fabrika.pipeline.stage import Stage, StageConfig, register_stage, rejected

    @register_stage
    class TwoCalls(Stage):
        kind = "ux.two_calls"
        Config = StageConfig

        def input_rows(self):  # noqa: ANN202
            yield from ({"id": f"t{i}", "i": i} for i in range(6))

        async def process(self, row):  # noqa: ANN001, ANN202
            def req(tag: str) -> ChatRequest:
                return ChatRequest(messages=({"role": "user", "content": f"{row['i']}:{tag}"},))

            await asyncio.gather(self.ctx.llm.complete_one(req("a")), self.ctx.llm.complete_one(req("b")))
            return [rejected(row["id"], "invalid_json: nope")]

    doc = {"name": "race", "run_dir": str(tmp_path / "run"), "llm": {"backend": "sim"},
           "stages": [{"kind": "ux.two_calls"}]}
    cfg, issues = validate_data(doc, "t.yaml", tmp_path)
    assert cfg is not None, issues
    result = run_pipeline(cfg, resume=False, progress=False, engine=ScriptedLLM(_racing_answer))
    rows = ux_stages.rows_of(result, "ux.two_calls")
    assert sorted(r["raw_excerpt"] for r in rows) == sorted(f"answer {i}:b" for i in range(6))


def test_pending_items_are_shown_not_hidden() -> None:
    """Items an outage left for the next run appear on the stage line (they are neither done nor rejected)."""
    import io
    from types import SimpleNamespace

    from fabrika.pipeline.progress import RunProgress

    out = io.StringIO()
    llm = SimpleNamespace(prompt_tokens=0, completion_tokens=0, requests=4, cached=0, errors=4)
    stats = SimpleNamespace(processed=1, skipped=0, rejected=0, passed_over=0, internal_errors=0, cache_miss=0,
                            pending=3, llm=llm)
    with RunProgress(enabled=True, plain=True, log_every=0, out=out) as progress:
        task = progress.add("fc.plans", 4)
        progress.finish(task, stats)
    assert "PENDING 3" in out.getvalue()
