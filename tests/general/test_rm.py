"""general.rm: the teacher's answers scored by the same RM machinery as rm.teacher_scores (scorer class, resource,
rm_id); a served RM over /pooling where a refused request (4xx) is a counted failure, never a number."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fabrika.filters.teacher_rm import TeacherScoresConfig
from fabrika.generators.general.rm import GeneralRMConfig, GeneralRMStage, RMEndpoint
from fabrika.testing import stage_context

PROMPT = [{"role": "user", "content": "Опишите кота."}]
ANSWERS = [{"index": 0, "text": "Кот спит на диване.", "usable": True, "length": 19},
           {"index": 1, "text": "Кот уже", "usable": False, "problem": "truncated", "length": None},
           {"index": 2, "text": "Кот ест рыбу и мурлычет.", "usable": True, "length": 24}]
ROW = {"id": "gt-1", "prompt": json.dumps(PROMPT, ensure_ascii=False),
       "teacher_answers": json.dumps(ANSWERS, ensure_ascii=False)}


def test_exactly_one_scorer() -> None:
    with pytest.raises(ValueError, match="exactly one of rm, endpoint, sim"):
        GeneralRMConfig()
    with pytest.raises(ValueError, match="rm.teacher_scores needs exactly one of rm, endpoint, sim"):
        TeacherScoresConfig()
    with pytest.raises(ValueError, match="exactly one"):
        GeneralRMConfig(sim=True, endpoint=RMEndpoint(base_url="http://127.0.0.1:1", model="rm"))


@pytest.mark.train
async def test_local_rm_scores_match_the_reward_rm_and_rm_teacher_scores(tmp_path: Path) -> None:
    from fabrika.filters.teacher_rm import TeacherScoresConfig, TeacherScoresStage
    from fabrika.rewards.general import SequenceClassifierRM, rm_identity
    from fabrika.train.tiny import save_tiny

    rm_dir = save_tiny(tmp_path / "rm", seed=5, num_labels=1)
    from fabrika.rewards.rm_service import get_reward_model

    stage = GeneralRMStage(GeneralRMConfig(rm=rm_dir), stage_context())
    await stage.setup()
    other = TeacherScoresStage(TeacherScoresConfig(rm=rm_dir), stage_context())
    await other.setup()
    assert stage.rm is other.rm is get_reward_model(rm_dir)  # one RM per process, shared by every stage
    (row,) = await stage.process(dict(ROW))
    direct = SequenceClassifierRM(rm_dir)([PROMPT] * 2, [[{"role": "assistant", "content": a["text"]}]
                                                         for a in (ANSWERS[0], ANSWERS[2])])
    aligned = json.loads(row["answer_rm_scores"])
    assert aligned[1] is None and aligned[0] == pytest.approx(direct[0], abs=1e-5)
    assert aligned[2] == pytest.approx(direct[1], abs=1e-5)
    assert row["rm_id"] == rm_identity(rm_dir) and row["teacher_rm_k"] == 2 and row["teacher_rm_failed"] == 1
    assert row["teacher_rm_mean"] == pytest.approx(sum(direct) / 2, abs=1e-5)


async def test_served_rm_over_pooling_and_a_failed_request_is_not_a_score() -> None:
    from aiohttp import web

    seen: list[dict] = []

    async def pooling(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        answer = body["messages"][-1]["content"]
        if "рыбу" in answer:  # refused (too long, say): a verdict on this answer; a 5xx leaves the item pending
            return web.Response(status=400, text="too long")
        return web.json_response({"data": [{"index": 0, "data": [0.75]}]})

    app = web.Application()
    app.router.add_post("/pooling", pooling)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        endpoint = RMEndpoint(base_url=f"http://127.0.0.1:{port}", model="ru-rm", timeout_s=5, max_retries=0)
        stage = GeneralRMStage(GeneralRMConfig(endpoint=endpoint), stage_context())
        await stage.setup()
        (row,) = await stage.process(dict(ROW))
    finally:
        await runner.cleanup()
    assert [b["model"] for b in seen] == ["ru-rm", "ru-rm"]
    assert sorted(b["messages"][-1]["content"] for b in seen) == ["Кот ест рыбу и мурлычет.", "Кот спит на диване."]
    assert all(b["messages"][:-1] == PROMPT and b["messages"][-1]["role"] == "assistant" for b in seen)
    assert json.loads(row["answer_rm_scores"]) == [0.75, None, None]
    assert row["teacher_rm_k"] == 1 and row["teacher_rm_failed"] == 2 and row["teacher_rm_mean"] == 0.75
    assert row["rm_id"] == f"ru-rm@http://127.0.0.1:{port}"
    assert not math.isnan(row["teacher_rm_mean"])
