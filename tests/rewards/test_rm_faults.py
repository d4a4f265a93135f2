"""A served reward model that fails, through the failure taxonomy: transient faults (timeouts, resets, 5xx, 429,
garbled or cut bodies) are retried and then leave the item pending — never a NaN score, never a row; a refused
request or a non-finite score is a verdict on that answer (unscored, counted); a wrong API or model name stops
the stage (configuration). Driven by a loopback double that injects tagged faults (tests/rewards/rm_double.py),
through the scorer, the GRPO rewards and a whole pipeline run up to the exported dataset."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from fabrika.errors import ConfigError
from fabrika.pipeline import execute
from fabrika.pipeline.taxonomy import classify
from fabrika.rewards.rm_service import (
    RMAnswerError,
    RMEndpoint,
    RMSpec,
    RMUnavailable,
    get_reward_model,
    reset_reward_models,
)
from tests.rewards.rm_double import TRANSIENT, RMDouble, true_score

ROOT = Path(__file__).resolve().parents[2]
PROMPT = [{"role": "user", "content": "Опишите кота."}]
#: the client's timeout is generous (a loaded CI box must not time a healthy answer out); the double's
#: ``timeout`` fault answers only after it
CLIENT_TIMEOUT, SLOW = 2.0, 2.6
ANSWERS = ["Кот спит на диване.", "Кот ест рыбу.", "Кот мурлычет громко.", "Кот гуляет сам по себе."]


@pytest.fixture(autouse=True)
def _fresh_service() -> Iterator[None]:
    reset_reward_models()
    yield
    reset_reward_models()


def _rm(double: RMDouble, api: str = "pooling", retries: int = 2) -> Any:
    return get_reward_model(RMSpec(endpoint=RMEndpoint(base_url=double.url, model="ru-rm", api=api, timeout_s=CLIENT_TIMEOUT,
                                                       max_retries=retries, retry_wait_s=0)))


@pytest.mark.parametrize("kind", TRANSIENT)
def test_a_flaky_transient_fault_is_retried_to_the_true_score(kind: str) -> None:
    with RMDouble(rate=1.0, kinds=[kind], down_share=0.0, flaky_attempts=1, timeout_delay=SLOW) as double:
        scores = _rm(double)([PROMPT] * 2, ANSWERS[:2])
    assert scores == [true_score(a) for a in ANSWERS[:2]]
    assert double.counts() == {kind: 2}  # one injected fault per answer, each answered on the retry


# the timeout path is the same urllib call for every API: one API is enough there (each costs real seconds)
@pytest.mark.parametrize(("kind", "api"), [(k, a) for k in TRANSIENT for a in ("pooling", "rerank", "predict")
                                           if k != "timeout" or a == "pooling"])
def test_an_rm_that_keeps_failing_raises_a_transient_error_not_nan(kind: str, api: str) -> None:
    with RMDouble(rate=1.0, kinds=[kind], down_share=1.0, timeout_delay=SLOW) as double:
        with pytest.raises(RMUnavailable, match="failed 3 times") as err:
            _rm(double, api)([PROMPT], ANSWERS[:1])
    assert double.counts() == {kind: 3}  # 1 try + 2 retries, then the item is given back
    failure = classify(err.value)
    assert failure.kind == "transient"


@pytest.mark.parametrize("api", ["pooling", "rerank", "predict"])
@pytest.mark.parametrize("kind", ["http_400", "nan"])
def test_a_refused_request_or_non_finite_score_is_an_unscored_answer(kind: str, api: str) -> None:
    with RMDouble(rate=1.0, kinds=[kind]) as double:
        scores = _rm(double, api)([PROMPT], ANSWERS[:1])
    assert len(scores) == 1 and math.isnan(scores[0])  # the verdict marker, never stored (see the stages below)
    assert double.counts() == {kind: 1}  # a verdict is not retried


@pytest.mark.parametrize("kind", ["shape", "http_404"])
def test_a_wrong_api_or_model_stops_the_stage_as_configuration(kind: str) -> None:
    with RMDouble(rate=1.0, kinds=[kind]) as double:
        with pytest.raises(RMAnswerError, match="endpoint") as err:
            _rm(double)([PROMPT], ANSWERS[:1])
    assert classify(err.value).kind == "config"


async def test_rm_stages_store_no_nan_and_leave_a_down_item_pending() -> None:
    from fabrika.filters.teacher_rm import summarise
    from fabrika.generators.general.rm import GeneralRMConfig, GeneralRMStage
    from fabrika.testing import stage_context

    answers = [{"index": i, "text": a, "usable": True, "length": len(a)} for i, a in enumerate(ANSWERS)]
    row = {"id": "gt-1", "prompt": json.dumps(PROMPT, ensure_ascii=False),
           "teacher_answers": json.dumps(answers, ensure_ascii=False)}
    with RMDouble(seed=1, rate=1.0, kinds=["http_400", "nan", "http_503"], down_share=1.0) as double:
        plan = {a: double.plan(a) for a in ANSWERS}
        endpoint = RMEndpoint(base_url=double.url, model="ru-rm", timeout_s=CLIENT_TIMEOUT, max_retries=1, retry_wait_s=0)
        stage = GeneralRMStage(GeneralRMConfig(endpoint=endpoint), stage_context())
        await stage.setup()
        assert {k for k, _ in plan.values()} == {"http_400", "nan", "http_503"}  # the seed draws every kind
        with pytest.raises(RMUnavailable):  # an answer the RM is down for: the item raises (pending), no row
            await stage.process(dict(row))
        double.heal()
        (out,) = await stage.process(dict(row))
    aligned = json.loads(out["answer_rm_scores"])
    verdicts = [a for a in ANSWERS if plan[a][0] in ("http_400", "nan")]
    assert verdicts, plan  # the seed draws at least one verdict
    assert aligned == [None if a in verdicts else true_score(a) for a in ANSWERS]
    assert out["teacher_rm_failed"] == len(verdicts) and out["teacher_rm_k"] == len(ANSWERS) - len(verdicts)
    assert math.isfinite(out["teacher_rm_mean"]) and "NaN" not in out["teacher_rm_scores"]
    assert summarise([math.nan, math.nan], 0, "x")["teacher_rm_mean"] is None  # nothing scored: α null, not NaN


def test_grpo_rewards_never_return_nan_under_a_faulty_rm() -> None:
    from fabrika.rewards.general import make_general_reward
    from fabrika.rewards.instruct import IFRewardConfig, score_if

    completions = [[{"role": "assistant", "content": f"{a} {'Мяу. ' * i}".strip()}] for i, a in enumerate(ANSWERS * 5)]
    texts = [c[0]["content"] for c in completions]
    n = len(completions)
    with RMDouble(seed=11, rate=0.6, kinds=["http_400", "nan", "reset", "http_503"], down_share=0.0) as double:
        plan = [double.plan(t)[0] for t in texts]
        assert {"http_400", "nan", "reset", "http_503"} <= set(plan)  # every kind drawn at least once
        rm = _rm(double)
        reward = make_general_reward(rm)
        rewards = reward([PROMPT] * n, completions, ref_length=[40.0] * n)
        assert all(math.isfinite(r) for r in rewards)
        unscored = [i for i, k in enumerate(plan) if k in ("http_400", "nan")]
        floor = min(r for i, r in enumerate(rewards) if i not in unscored) - 1.0
        assert all(rewards[i] == floor for i in unscored)  # scored like a missing answer, below every answer
        with pytest.raises(ConfigError, match="the RM gave no score S"):  # the IF correction refuses, never NaN
            score_if([PROMPT] * n, completions, IFRewardConfig(), rm_scorer=rm,
                     constraints=[[{"id": "ru.punct.no_commas", "params": {}}]] * n, teacher_rm_mean=[0.0] * n)
    with RMDouble(seed=11, rate=1.0, kinds=["http_503"], down_share=1.0) as down:
        with pytest.raises(RMUnavailable):  # a reward step with the RM down stops; it does not invent rewards
            make_general_reward(_rm(down))([PROMPT], completions[:1], ref_length=[40.0])


def _general_config(url: str, run_dir: Path) -> Any:
    from fabrika.pipeline.config import load_config

    config = load_config(ROOT / "configs" / "general_demo.yaml")
    endpoint = RMEndpoint(base_url=url, model="ru-rm", timeout_s=CLIENT_TIMEOUT, max_retries=1, retry_wait_s=0)
    stages = [s.model_copy(update={"sim": False, "endpoint": endpoint}) if s.kind == "general.rm" else s
              for s in config.stages]
    return config.model_copy(update={"stages": stages, "run_dir": run_dir})


def test_a_pipeline_under_a_faulty_rm_leaves_items_pending_and_exports_no_nan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    from fabrika.export.source import open_version
    from fabrika.export.writer import ExportConfig, export
    from fabrika.pipeline.runner import run_pipeline

    async def no_wait(seconds: float) -> None:
        return None

    monkeypatch.setattr(execute, "transient_wait", no_wait)
    with RMDouble(seed=5, rate=0.25, kinds=[*TRANSIENT, "http_400", "nan"], down_share=0.4,
                  timeout_delay=SLOW) as double:
        first = run_pipeline(_general_config(double.url, tmp_path / "run"), progress=False)
        teacher = pl.read_parquet(sorted((first.run_dir / "stages" / "general_teacher").glob("*.parquet")))
        usable = {r["id"]: [a["text"] for a in json.loads(r["teacher_answers"]) if a["usable"]]
                  for r in teacher.filter(pl.col("status") == "ok").iter_rows(named=True)}
        down = {i for i, texts in usable.items() if any(double.plan(t) == (k, True) for t in texts for k in TRANSIENT)}
        assert down and len(down) < len(usable)  # the seed takes some items down and not others
        counts = double.counts()
        assert {"timeout", "reset", "http_503", "garbled", "cut", "http_400", "nan"} <= set(counts), counts

        rm_rows = pl.read_parquet(sorted((first.run_dir / "stages" / "general_rm").glob("*.parquet")))
        # every item the RM was down for stays pending: no row at all (neither ok nor rejected)
        assert set(rm_rows["id"]) == set(usable) - down
        assert first.stats["general_rm"].pending == len(down) and not first.complete
        assert first.version is None  # an unfinished run materialises no dataset
        assert rm_rows["teacher_rm_mean"].is_nan().sum() == 0
        assert all("NaN" not in s for s in rm_rows["answer_rm_scores"]) and all(
            "NaN" not in s for s in rm_rows["teacher_rm_scores"])
        # flaky faults were retried to the true score; verdicts are unscored answers
        for r in rm_rows.iter_rows(named=True):
            scores = json.loads(r["answer_rm_scores"])
            answers = json.loads(teacher.filter(pl.col("id") == r["id"])["teacher_answers"].item())
            for a, s in zip(answers, scores, strict=True):
                if a["usable"]:
                    assert s == (None if double.plan(a["text"])[0] in ("http_400", "nan") else true_score(a["text"]))

        double.heal()  # the outage ends: the next run asks again for exactly the pending items
        second = run_pipeline(_general_config(double.url, tmp_path / "run"), progress=False)
    assert second.complete and second.stats["general_rm"].pending == 0
    assert second.stats["general_rm"].processed == len(down)
    out = export(open_version(second.run_dir, None, ["general_grpo"]),
                 ExportConfig(kind="grpo", out=tmp_path / "grpo", validate_rows=0))
    ds = datasets.load_from_disk(str(tmp_path / "grpo"))
    assert out.rows == ds.num_rows > 0
    floats = [c for c, f in ds.features.items() if getattr(f, "dtype", "") in ("float32", "float64")]
    assert "teacher_rm_mean" in floats
    for column in floats:
        assert all(v is None or math.isfinite(v) for v in ds[column]), column


async def test_rm_teacher_scores_leaves_an_item_pending_when_the_rm_is_down() -> None:
    from fabrika.filters.teacher_rm import TeacherScoresConfig, TeacherScoresStage
    from fabrika.testing import ScriptedLLM, stage_context

    row = {"id": "q-1", "messages": json.dumps(PROMPT, ensure_ascii=False)}
    teacher = ScriptedLLM(lambda request: f"Кот спит, ответ {request.sample_index}.")
    with RMDouble(rate=1.0, kinds=["http_503"], down_share=1.0) as double:
        endpoint = RMEndpoint(base_url=double.url, model="ru-rm", timeout_s=CLIENT_TIMEOUT, max_retries=1, retry_wait_s=0)
        stage = TeacherScoresStage(TeacherScoresConfig(endpoint=endpoint, k=2), stage_context(teacher))
        await stage.setup()
        with pytest.raises(RMUnavailable) as err:  # the sim teacher answers; the RM does not: no row, no NaN α
            await stage.process(dict(row))
        assert classify(err.value, stage, row).kind == "transient"
        double.heal()
        (out,) = await stage.process(dict(row))
    assert out["teacher_rm_k"] == 2 and math.isfinite(out["teacher_rm_mean"]) and out["teacher_rm_failed"] == 0
