"""Distractor topics are drawn without scanning the whole pool per plan."""

from __future__ import annotations

import random

from fabrika.generators.fc.plans import _sample_other_topics


def test_distinct_topics_never_the_own_one():
    pool = [f"t{i}" for i in range(50)]
    for seed in range(200):
        picked = _sample_other_topics(random.Random(seed), pool, "t7", 4)
        assert len(picked) == 4 == len(set(picked)) and "t7" not in picked


def test_small_pools_give_what_exists():
    assert _sample_other_topics(random.Random(0), ["a", "b"], "a", 5) == ["b"]
    assert _sample_other_topics(random.Random(0), ["a"], "a", 3) == []
    assert sorted(_sample_other_topics(random.Random(0), ["x", "y"], "z", 5)) == ["x", "y"]


def test_deterministic_for_a_seed():
    pool = [f"t{i}" for i in range(1000)]
    assert _sample_other_topics(random.Random(5), pool, "t1", 3) == _sample_other_topics(random.Random(5), pool, "t1", 3)


def test_exclusions_are_never_drawn():
    pool = [f"t{i}" for i in range(6)]
    for seed in range(50):
        picked = _sample_other_topics(random.Random(seed), pool, "t0", 10, exclude=("t1", "t2"))
        assert sorted(picked) == ["t3", "t4", "t5"]


def test_every_group_holds_a_tool_of_the_most_similar_topic():
    from fabrika.testing import stage_context

    from fabrika.generators.fc.plans import PlansConfig, PlansStage
    from fabrika.schemas import Tool
    from fabrika.schemas.fc import ToolSpec

    def spec(topic: str, name: str, words: str) -> ToolSpec:
        return ToolSpec(id=f"tool-{topic}-{name}", topic_id=topic, lang="ru",
                        tool=Tool.model_validate({"function": {"name": name, "parameters": {"type": "object",
                                                                                             "properties": {}}}}),
                        tiers=["а", f"{words} кратко", f"{words} подробнее", f"{words} подробно и длинно"])

    tools = [spec("t-hotel", "book_hotel_room", "бронирование номера в гостинице отель"),
             spec("t-hostel", "book_hostel_bed", "бронирование места в хостеле гостинице отель")]
    tools += [spec(f"t-other{i}", f"other_tool_{i}", f"совсем другое занятие номер {i} {'x' * i}") for i in range(8)]
    rows = {"fc.tools_dedup": [{"id": t.id, "status": "ok", "spec": t.model_dump_json()} for t in tools]}
    stage = PlansStage(PlansConfig(kind="fc.plans", input="fc.tools_dedup", plans_per_topic=4, distractors=2,
                                   similar_distractors=1), stage_context(None, rows=rows, seed=1))
    for item in stage.input_rows():
        if item["topic_id"] == "t-hotel":
            _, group, _, _ = stage.sample_setup(item)
            assert "book_hostel_bed" in {t.name for t in group}
