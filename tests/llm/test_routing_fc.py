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



def test_the_user_prompt_grows_at_its_end_so_a_prefix_cache_serves_the_transcript() -> None:
    """Turn 3's user-agent prompt starts with turn 2's, transcript included; only the turn's goal comes after."""
    from fabrika.agents.visibility import EpisodeState, render_user_prompt, user_view
    from fabrika.schemas import Message

    def step(intent: str, say: str):  # noqa: ANN202
        return PLAN.steps[0].model_copy(update={"intent": intent, "user_message": say, "slots": {}, "rounds": [],
                                                "kind": "text", "final_answer": "Хорошо."})

    plan = PLAN.model_copy(update={"steps": [PLAN.steps[0], step("узнать прогноз на завтра", "А завтра?"),
                                             step("поблагодарить", "Спасибо!")]})
    dialogue = (Message(role="user", content="Какая погода в Твери?"), Message(role="assistant", content="+5."),
                Message(role="user", content="А завтра?"), Message(role="assistant", content="Тоже +5."))
    turn2 = render_user_prompt(user_view(EpisodeState(plan=plan, messages=dialogue[:2], step=1)))
    turn3 = render_user_prompt(user_view(EpisodeState(plan=plan, messages=dialogue, step=2)))
    assert turn2[0] == turn3[0]  # the persona's system prompt
    head = turn2[1]["content"].split("```json")[0]
    assert "+5." in head and turn3[1]["content"].startswith(head.rsplit("\n\n", 1)[0])
    assert turn2[1]["content"] != turn3[1]["content"]
