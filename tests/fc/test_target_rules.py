"""Semantic checks of FC targets inside the episode: withheld slots in ground_truth, synonym leaks, repeated
clarifications, already-given questions, closing-answer facts and contradictions, user-turn artefacts,
spoken facts — and the FC reward and `eval fc` scoring a clarification by what was withheld."""

from __future__ import annotations

import asyncio
import json
import re

from fabrika.agents.leaks import user_facing_leaks
from fabrika.agents.visibility import EpisodeState, render_user_prompt, user_view
from fabrika.eval.fc_eval import score_case
from fabrika.generators.fc.dialogues import DialoguesConfig, DialoguesStage
from fabrika.llm.types import ChatResponse, Choice
from fabrika.rewards.fc import fc_reward
from fabrika.schemas.fc import Persona, Plan, PlanStep, ToolSpec
from fabrika.schemas.tools import Tool
from fabrika.testing import ScriptedLLM, sequence, stage_context
from tests.fc.test_dialogues import call, samples_of
from tests.fc.test_plans import CALL, TOOLS

PERSONA = Persona(id="p", lang="ru", name="Анна", description="Менеджер.", style="кратко")
SPB = {"name": "get_weather", "arguments": {"city": "Санкт-Петербург"}, "result": {"t": 5}}


def plan(steps: list[PlanStep], sample_type: str = "clarification") -> Plan:
    return Plan(id="plan-c", topic_id="t1", lang="ru", sample_type=sample_type, tier=2, persona=PERSONA,
                tools=TOOLS[:2], steps=steps)


CLARIFY = PlanStep(kind="clarification", withheld=["city"], intent="узнать погоду, не называя город",
                   user_message="Какая погода будет завтра?", final_answer="В каком городе?")
GIVE = PlanStep(kind="tool_call", intent="назвать город", user_message="В Петербурге",
                slots={"city": {"value": "Санкт-Петербург", "say": "в Петербурге"}}, rounds=[[SPB]],
                final_answer="В Петербурге +5.")


def says(req) -> str:
    """The user agent says the goal card's reference words (the last JSON block of its prompt)."""
    blocks = re.findall(r"```json\n(.*?)```", req.messages[-1]["content"], re.DOTALL)
    return json.loads(blocks[-1])["say"]


def run(p: Plan, assistant, user=says, tool=lambda r: '{"t": 5}', **cfg) -> dict:
    llm = ScriptedLLM({"fc.user": user, "fc.assistant": assistant, "fc.tool": tool})
    stage = DialoguesStage(DialoguesConfig(kind="fc.dialogues", max_injected_share=1.0, **cfg), stage_context(llm))
    [row] = asyncio.run(stage.process({"id": p.id, "status": "ok", "plan": p.model_dump_json()}))
    return row


def test_the_withheld_slot_is_in_the_ground_truth_of_a_clarification():
    row = run(plan([CLARIFY, GIVE]), sequence("В каком городе?", call(city="Санкт-Петербург"), "В Петербурге +5."))
    assert row["status"] == "ok", row["reason"]
    [clar] = [s for s in samples_of(row) if s.target_type == "clarification"]
    assert clar.ground_truth == {"calls": [], "asks": ["city"]}
    assert clar.meta["scores"]["asks_withheld"] is True and clar.meta["scores"]["asks_given"] is False


def test_a_withheld_value_said_by_a_short_form_is_a_leak():
    # the user agent says it: the episode is rejected
    row = run(plan([CLARIFY, GIVE]), sequence("В каком городе?", call(city="Санкт-Петербург"), "+5."),
              user=lambda r: "Какая погода будет завтра в Питере?")
    assert row["status"] == "rejected" and row["reason"].startswith("user_leak"), row.get("reason")
    assert "'city'" in row["reason"]
    # the plan's own words say it: the plan review sees it before any episode
    for words in ("Какая погода будет завтра в Питере?", "Погода в СПб на завтра?", "Weather in St. Petersburg?"):
        leaky = CLARIFY.model_copy(update={"user_message": words})
        issues = user_facing_leaks([leaky, GIVE], TOOLS[:2], "ru", 0)
        assert any("withheld 'city'" in i for i in issues), (words, issues)
    assert user_facing_leaks([CLARIFY, GIVE], TOOLS[:2], "ru", 0) == []


def test_a_clarification_asked_again_is_never_trained():
    again = PlanStep(kind="clarification", withheld=["city"], intent="не назвать город снова",
                     user_message="Просто скажите, что завтра с погодой", final_answer="В каком городе?")
    row = run(plan([CLARIFY, again, GIVE]),
              sequence("В каком городе?", "Уточните, пожалуйста, город?", call(city="Санкт-Петербург"), "+5."))
    assert row["status"] == "ok" and row["n_repeat"] == 1
    msgs = json.loads(row["dialogue"])["messages"]
    assert [(m["flag"], m["train"]) for m in msgs if m["role"] == "assistant"][:2] == [(None, True), ("repeat", False)]
    assert [s.target_type for s in samples_of(row)].count("clarification") == 1


def test_a_question_for_what_the_user_already_gave_is_scored():
    single = PlanStep(kind="tool_call", intent="узнать погоду", user_message="Какая погода в Питере?",
                      slots={"city": {"value": "Санкт-Петербург", "say": "в Питере"}}, rounds=[[SPB]],
                      final_answer="+5.")
    row = run(plan([single], "single"), sequence(call(city="Санкт-Петербург"), "+5. А в каком городе вы живёте?"))
    [text] = [s for s in samples_of(row) if s.target_type == "text"]
    assert text.meta["scores"]["asks_given"] is True
    assert "already gave" in text.meta["scores"]["target_issues"]


def test_closing_answers_with_invented_facts_or_a_contradiction_are_scored():
    single = PlanStep(kind="tool_call", intent="узнать погоду", user_message="Погода в Твери?",
                      slots={"city": "в Твери"}, rounds=[[CALL]], final_answer="В Твери +5.")
    scores = {}
    for answer in ("В Твери сейчас +5.", "В Твери сейчас +7.", "К сожалению, ничего не нашлось.",
                   "В Твери +5, синоптик Петров обещает солнце."):
        row = run(plan([single], "single"), sequence(call(), answer))
        [text] = [s for s in samples_of(row) if s.target_type == "text"]
        scores[answer] = text.meta["scores"]
    assert scores["В Твери сейчас +5."]["unsupported_facts"] == 0 and not scores["В Твери сейчас +5."]["contradiction_rule"]
    assert scores["В Твери сейчас +7."]["unsupported_facts"] == 1 and scores["В Твери сейчас +7."]["unsupported_numbers"] == 1
    assert scores["К сожалению, ничего не нашлось."]["contradiction_rule"] is True
    assert scores["В Твери +5, синоптик Петров обещает солнце."]["unsupported_facts"] == 1


def test_a_user_turn_with_an_artefact_is_asked_again_then_rejected():
    single = PlanStep(kind="tool_call", intent="узнать погоду", user_message="Погода в Твери?",
                      slots={"city": "в Твери"}, rounds=[[CALL]], final_answer="В Твери +5.")
    p = plan([single], "single")
    row = run(p, sequence(call(), "В Твери +5."), user=sequence("Пользователь: Погода в Твери?", "Погода в Твери?"))
    assert row["status"] == "ok" and row["n_user_retries"] == 1
    assert json.loads(row["dialogue"])["messages"][0]["content"] == "Погода в Твери?"
    for bad in ("Пользователь: Погода в Твери?", "«Погода в Твери?»", "Погода в Твери? (В реплике переданы все сведения из facts.)",
                'Погода {"city": "Тверь"}'):
        row = run(p, sequence(call(), "В Твери +5."), user=lambda r, bad=bad: bad)
        assert row["status"] == "rejected" and row["reason"].startswith("user_hygiene"), (bad, row.get("reason"))


ORDER = ToolSpec(id="tool-t1-order", topic_id="t1", lang="ru",
                 tiers=["Заказ", "Заказ еды", "Заказ еды домой", "Заказ еды домой с доставкой"],
                 tool=Tool.model_validate({"function": {"name": "place_order", "parameters": {
                     "type": "object", "required": ["items"], "properties": {"items": {
                         "type": "array", "description": "Позиции", "items": {"type": "object", "properties": {
                             "product": {"type": "string"}, "qty": {"type": "integer"}}}}}}}}))


def test_list_and_object_facts_reach_the_user_in_words_not_json():
    items = [{"product": "молоко", "qty": 2}, {"product": "хлеб", "qty": 1}]
    step = PlanStep(kind="tool_call", intent="заказать продукты", user_message="Закажите молоко и хлеб",
                    slots={"items": {"value": items, "say": ""}},
                    rounds=[[{"name": "place_order", "arguments": {"items": items}, "result": {"ok": True}}]])
    p = Plan(id="plan-o", topic_id="t1", lang="ru", sample_type="single", tier=2, persona=PERSONA, tools=[ORDER],
             steps=[step])
    prompt = json.dumps(render_user_prompt(user_view(EpisodeState(plan=p))), ensure_ascii=False)
    assert "молоко — 2 и хлеб — 1" in prompt
    assert '\\"product\\"' not in prompt and "символ в символ" not in prompt
    [fact] = user_view(EpisodeState(plan=p)).goal.facts
    assert fact.verbatim is False


TOOLS_OPENAI = [t.tool.to_openai() for t in TOOLS[:1]] + [{"type": "function", "function": {
    "name": "book", "parameters": {"type": "object", "required": ["date"],
                                   "properties": {"date": {"type": "string", "description": "Дата поездки"}}}}}]


def test_the_reward_scores_a_clarification_by_the_withheld_slot():
    gt = json.dumps({"calls": [], "asks": ["city"]})
    rewards = fc_reward(prompts=[None] * 2, completions=["В каком городе?", "А на какую дату?"],
                        ground_truth=[gt, gt], target_type=["clarification"] * 2, tools=[TOOLS_OPENAI] * 2)
    assert rewards == [1.0, 0.0]


def test_eval_fc_scores_a_clarification_by_the_withheld_slot():
    item = {"category": "clarification", "names": {"get_weather": "get_weather", "book": "book"},
            "tools": TOOLS_OPENAI, "expected": None, "asks": ["city"]}

    def resp(text: str) -> ChatResponse:
        return ChatResponse(choices=(Choice(content=text),))

    assert score_case(item, resp("В каком городе?"))["correct"] is True
    assert score_case(item, resp("А на какую дату?"))["correct"] is False
    assert score_case({**item, "asks": None}, resp("А на какую дату?"))["correct"] is True  # no asks: any text


def test_a_question_the_tool_result_already_answered_is_scored():
    single = PlanStep(kind="tool_call", intent="узнать погоду", user_message="Погода в Твери?",
                      slots={"city": "в Твери"}, rounds=[[{**CALL, "result": {"t": 5, "units": "c"}}]],
                      final_answer="В Твери +5.")
    row = run(plan([single], "single"), sequence(call(), "В Твери +5. В какой шкале показать?"),
              tool=lambda r: '{"t": 5, "units": "c"}')
    [text] = [s for s in samples_of(row) if s.target_type == "text"]
    assert text.meta["scores"]["asks_given"] is True  # the result already carries `units`
    row = run(plan([single], "single"), sequence(call(), "В Твери +5. Хотите прогноз на завтра?"),
              tool=lambda r: '{"t": 5, "units": "c"}')
    [text] = [s for s in samples_of(row) if s.target_type == "text"]
    assert not text.meta["scores"].get("asks_given")  # an offer, not a question for a slot
