"""Nothing the user must not say reaches the user agent's prompt (withheld values, tools, parameters, future values)."""

from __future__ import annotations

import asyncio
import json

import pytest

from fabrika.agents.leaks import PlanLeak
from fabrika.agents.visibility import EpisodeState, render_user_prompt, user_view
from fabrika.generators.fc.dialogues import DialoguesConfig, DialoguesStage
from fabrika.generators.fc.plan_checks import check_plan
from fabrika.llm.types import Choice
from fabrika.schemas.fc import ExpectedCall, Persona, Plan, PlanStep
from fabrika.testing import ScriptedLLM, stage_context
from tests.agents.test_visibility import PLAN

CALL = ExpectedCall(name="search_train_tickets", arguments={"station_code": "TVR", "carriage_class": "coupe"},
                    result={"trains": []})


def _plan(*steps: PlanStep, sample_type: str = "clarification") -> Plan:
    return PLAN.model_copy(update={"steps": list(steps), "sample_type": sample_type})


def _text(messages) -> str:
    return json.dumps(messages, ensure_ascii=False)


def test_a_withheld_enum_never_reaches_the_user_prompt():
    plan = _plan(
        PlanStep(kind="clarification", intent="Найти билеты из Твери", user_message="Найдите билеты из Твери",
                 slots={"station_code": {"value": "TVR", "say": "TVR"}}, withheld=["carriage_class"],
                 enum_phrases={"coupe": "купе"}, final_answer="Какой класс вагона?"),
        PlanStep(kind="tool_call", intent="Выбрать класс", user_message="Купе",
                 slots={"carriage_class": {"value": "coupe", "say": "coupe"}}, rounds=[[CALL]],
                 final_answer="Билетов нет."),
    )
    text = _text(render_user_prompt(user_view(EpisodeState(plan=plan, step=0))))
    assert "coupe" not in text and "купе" not in text.lower()
    assert "TVR" in text  # what the user does say still travels
    assert "station_code" not in text and "carriage_class" not in text  # values only, never argument names


def test_a_withheld_value_inside_intent_is_caught_before_the_user_sees_it():
    leaky = PlanStep(kind="clarification", intent="Найти купе из Твери, код станции TVR",
                     user_message="Найдите купе", withheld=["station_code"],
                     slots={"carriage_class": {"value": "coupe", "say": "coupe"}}, final_answer="Откуда едем?")
    answer = PlanStep(kind="tool_call", intent="Назвать станцию", user_message="TVR",
                      slots={"station_code": {"value": "TVR", "say": "TVR"}}, rounds=[[CALL]], final_answer="Нет.")
    plan = _plan(leaky, answer)
    with pytest.raises(PlanLeak, match="withheld 'station_code'"):
        render_user_prompt(user_view(EpisodeState(plan=plan, step=0)))
    problems = check_plan(plan.steps, plan.tools, "clarification", "ru")
    assert any("gives away the withheld 'station_code' ('TVR')" in p for p in problems)


def test_tool_and_parameter_names_in_user_facing_text_are_plan_problems():
    step = PlanStep(kind="tool_call", intent="Вызвать search_train_tickets", user_message="Нужен station_code TVR",
                    slots={"station_code": {"value": "TVR", "say": "TVR"},
                           "carriage_class": {"value": "coupe", "say": "coupe"}}, rounds=[[CALL]], final_answer="Нет.")
    problems = check_plan([step], PLAN.tools, "single", "ru")
    assert any("names the tool 'search_train_tickets'" in p for p in problems)
    assert any("names the parameter 'station_code'" in p for p in problems)


def _two_step_plan(first_intent: str) -> Plan:
    second_call = ExpectedCall(name="search_train_tickets", arguments={"station_code": "MSK", "carriage_class": "coupe"},
                               result={"trains": []})
    return _plan(
        PlanStep(kind="tool_call", intent=first_intent, user_message="Найдите купе из TVR",
                 slots={"station_code": {"value": "TVR", "say": "TVR"},
                        "carriage_class": {"value": "coupe", "say": "coupe"}}, rounds=[[CALL]],
                 final_answer="Билетов нет."),
        PlanStep(kind="tool_call", intent="Попробовать другую станцию", user_message="А из MSK?",
                 slots={"station_code": {"value": "MSK", "say": "MSK"}}, rounds=[[second_call]],
                 final_answer="Тоже нет."),
        sample_type="multi_turn")


def _episode(plan: Plan) -> tuple[dict, ScriptedLLM]:
    def user(req):  # a user agent that repeats its intent: whatever the goal card holds reaches the assistant
        goal = json.loads(req.messages[-1]["content"].split("```json")[1].split("```")[0])
        return goal["intent"] + ", пожалуйста, подскажите побыстрее: " + " ".join(f["value"] for f in goal["facts"])

    def assistant(req):
        said = " ".join(m.get("content") or "" for m in req.messages if m["role"] == "user")
        code = "MSK" if "MSK" in said.split("TVR")[-1] else "TVR"
        if req.messages[-1]["role"] == "tool":
            return "Билетов нет."
        return Choice(content=None, finish_reason="tool_calls", tool_calls=({"id": "a", "name": "search_train_tickets",
                      "arguments": json.dumps({"station_code": code, "carriage_class": "coupe"})},))

    llm = ScriptedLLM({"fc.user": user, "fc.assistant": assistant, "fc.tool": lambda r: '{"trains": []}'})
    stage = DialoguesStage(DialoguesConfig(kind="fc.dialogues", max_injected_share=1.0), stage_context(llm))
    [row] = asyncio.run(stage.process({"id": plan.id, "status": "ok", "plan": plan.model_dump_json()}))
    return row, llm


def test_future_steps_planned_arguments_never_reach_the_assistant_early():
    row, llm = _episode(_two_step_plan("Найти купе из TVR, а потом из MSK"))
    first_step = [r for r in llm.tagged("fc.assistant") if _text(r.messages).count('"role": "user"') == 1]
    assert all("MSK" not in _text(r.messages) for r in first_step)
    assert row["status"] == "rejected" and row["reason"].startswith("plan_leak: steps[0].intent already says 'MSK'")
    # the clean plan runs, and MSK first appears in the assistant's view at step 1
    row, llm = _episode(_two_step_plan("Найти купе из TVR"))
    assert row["status"] == "ok", row["reason"]
    first_step = [r for r in llm.tagged("fc.assistant") if _text(r.messages).count('"role": "user"') == 1]
    assert first_step and all("MSK" not in _text(r.messages) for r in first_step)
    assert any("MSK" in _text(r.messages) for r in llm.tagged("fc.assistant"))


def test_an_inflected_withheld_value_and_a_persona_that_says_it_are_caught():
    leaky = PlanStep(kind="clarification", intent="Узнать, есть ли купе из Твери", user_message="Есть купе?",
                     withheld=["station_code"], slots={"carriage_class": {"value": "coupe", "say": "coupe"}},
                     final_answer="Откуда едем?")
    answer = PlanStep(kind="tool_call", intent="Назвать город", user_message="Тверь",
                      slots={"station_code": {"value": "Тверь", "say": "Тверь"}},
                      rounds=[[CALL.model_copy(update={"arguments": {"station_code": "Тверь", "carriage_class": "coupe"}})]],
                      final_answer="Нет.")
    plan = _plan(leaky, answer)
    problems = check_plan(plan.steps, plan.tools, "clarification", "ru")
    assert any("gives away the withheld 'station_code' ('Тверь')" in p for p in problems)  # «из Твери» in intent
    clean = leaky.model_copy(update={"intent": "Узнать, есть ли купе"})
    tver = Persona(id="p", lang="ru", name="Ира", description="Живёт в Твери, работает в школе.", style="кратко")
    problems = check_plan([clean, answer], plan.tools, "clarification", "ru", persona=tver)
    assert problems and all("persona" in p for p in problems)
    with pytest.raises(PlanLeak, match="persona"):
        user_view(EpisodeState(plan=_plan(clean, answer).model_copy(update={"persona": tver}), step=0))
    assert check_plan([clean, answer], plan.tools, "clarification", "ru") == []


def test_a_withheld_count_said_in_words_with_its_noun_is_a_leak():
    from fabrika.agents.leaks import said_value

    assert said_value("Нам нужно пять билетов.", "5 билетов на поезд")
    assert said_value("We need three tickets.", "3 train tickets")
    assert said_value("Столик на две персоны.", "на 2 персоны")
    assert not said_value("Нужно два билета.", "5 билетов на поезд")  # another number
    assert not said_value("Продлите на 5 дней.", "5 билетов на поезд")  # the same number, another noun
