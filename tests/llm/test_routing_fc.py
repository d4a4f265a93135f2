"""The FC agents' requests carry the episode id as routing key (so affinity keeps an episode on one server)."""

from __future__ import annotations

from tests.fc.test_dialogues import PLAN, call, run, scripts


def test_every_agent_turn_is_routed_by_its_episode() -> None:
    llm = scripts(lambda r: call(city="Тверь") if len(llm.tagged("fc.assistant")) == 1 else "В Твери +5.")
    row = run(llm, max_retries=2)
    assert row["status"] == "ok"
    for tag in ("fc.user", "fc.assistant", "fc.tool"):
        asked = llm.tagged(tag)
        assert asked and all(r.routing_key == PLAN.id for r in asked), tag
