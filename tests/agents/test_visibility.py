"""Each role's rendered prompt holds only what its View allows (DESIGN contract 8)."""

from __future__ import annotations

import json

import pytest

from fabrika.agents.visibility import (
    AssistantHistory,
    EpisodeState,
    assistant_view,
    render_assistant_request,
    render_tool_prompt,
    render_user_prompt,
    tool_view,
    user_view,
)
from fabrika.schemas import Message, Tool, ToolCall
from fabrika.schemas.fc import ExpectedCall, Persona, Plan, PlanStep, ToolSpec

PARAMS = {
    "type": "object",
    "properties": {
        "station_code": {"type": "string", "description": "Код станции отправления"},
        "carriage_class": {"type": "string", "enum": ["coupe", "platzkart"]},
    },
    "required": ["station_code", "carriage_class"],
}
SPEC = ToolSpec(
    id="t1", topic_id="top", lang="ru",
    tool=Tool.model_validate({"function": {"name": "search_train_tickets", "description": "ПОДРОБНОЕ описание",
                                           "parameters": PARAMS}}),
    tiers=["Билеты", "Поиск билетов", "Поиск ж/д билетов", "ПОДРОБНОЕ описание"],
)
OTHER = ToolSpec(
    id="t2", topic_id="other", lang="ru",
    tool=Tool.model_validate({"function": {"name": "convert_currency", "description": "Конвертация валют",
                                           "parameters": {"type": "object", "properties": {}}}}),
    tiers=["Валюта", "Курс валют", "Конвертация валют", "Конвертация валют по курсу ЦБ на сегодня"],
)
SECRET_RESULT = {"trains": [{"number": "ПОЕЗД-777", "price": 4321}]}
PLAN = Plan(
    id="plan-1", topic_id="top", lang="ru", sample_type="single",
    persona=Persona(id="p1", lang="ru", name="Ольга", description="Бухгалтер на пенсии.", style="кратко"),
    tools=[SPEC, OTHER], tier=1,
    steps=[PlanStep(
        kind="tool_call", intent="СЕКРЕТНАЯ-ЦЕЛЬ: найти купе до Питера",
        user_message="Найдите купе из Твери",
        slots={"station_code": {"value": "TVR", "say": "из Твери"}, "carriage_class": {"value": "coupe", "say": "coupe"}},
        rounds=[[ExpectedCall(name="search_train_tickets", arguments={"station_code": "TVR", "carriage_class": "coupe"},
                              result=SECRET_RESULT)]],
        final_answer="Нашёлся поезд.",
    )],
)
CALL = ToolCall(id="c1", name="search_train_tickets", arguments={"station_code": "TVR", "carriage_class": "coupe"})
MESSAGES = (
    Message(role="user", content="Найдите купе из Твери, пожалуйста"),
    Message(role="assistant", content=None, tool_calls=[CALL], train=True, reasoning="СКРЫТОЕ-РАССУЖДЕНИЕ"),
    Message(role="tool", content=json.dumps(SECRET_RESULT, ensure_ascii=False), tool_call_id="c1",
            name="search_train_tickets"),
    Message(role="assistant", content="Есть поезд ПОЕЗД-777 за 4321 ₽.", train=True),
)
STATE = EpisodeState(plan=PLAN, messages=MESSAGES, step=0)


def _text(messages) -> str:
    return json.dumps(messages, ensure_ascii=False)


def test_user_prompt_has_no_tools_schemas_calls_or_results():
    text = _text(render_user_prompt(user_view(STATE)))
    for forbidden in ["search_train_tickets", "convert_currency", "station_code", "carriage_class", "platzkart",
                      "Код станции", "ПОДРОБНОЕ", "Поиск билетов", "4321}", "trains", "СКРЫТОЕ"]:
        assert forbidden not in text, forbidden
    # …but it does see its persona, goal, the values it must convey (never their argument names) and the dialogue.
    for needed in ["Ольга", "Бухгалтер на пенсии", "СЕКРЕТНАЯ-ЦЕЛЬ", "из Твери", "TVR", "coupe",
                   "Есть поезд ПОЕЗД-777 за 4321 ₽."]:
        assert needed in text, needed


def test_assistant_request_has_tier_tools_and_dialogue_but_no_plan():
    messages, tools = render_assistant_request(assistant_view(STATE))
    text = _text(messages) + _text(tools)
    for forbidden in ["СЕКРЕТНАЯ-ЦЕЛЬ", "Ольга", "Бухгалтер", "ПОДРОБНОЕ", "Нашёлся поезд", "СКРЫТОЕ", "plan-1"]:
        assert forbidden not in text, forbidden
    assert [t["function"]["description"] for t in tools] == ["Поиск билетов", "Курс валют"]
    assert messages[0]["role"] == "system"
    assert messages[2]["tool_calls"][0]["function"]["name"] == "search_train_tickets"
    assert "ПОЕЗД-777" in messages[3]["content"]


def test_an_episode_history_renders_what_a_fresh_view_renders_as_it_grows():
    history = AssistantHistory()
    for n in range(1, len(MESSAGES) + 1):  # an episode: messages only appended
        state = EpisodeState(plan=PLAN, messages=MESSAGES[:n], step=0)
        view = assistant_view(state, history)
        assert view == assistant_view(state)  # reasoning stripped the same way
        assert render_assistant_request(view, history) == render_assistant_request(assistant_view(state))
    # a history that changes (not an episode's) is rendered afresh from the change on
    other = (MESSAGES[0], Message(role="assistant", content="Уточните дату?", train=True, reasoning="СКРЫТОЕ"))
    state = EpisodeState(plan=PLAN, messages=other, step=0)
    messages, _ = render_assistant_request(assistant_view(state, history), history)
    assert messages == render_assistant_request(assistant_view(state))[0]
    assert "СКРЫТОЕ" not in _text(messages) and messages[-1]["content"] == "Уточните дату?"


def test_tool_prompt_has_call_schema_expected_result_but_no_user_text_or_goal():
    view = tool_view(STATE, CALL, expected_result=SECRET_RESULT)
    text = _text(render_tool_prompt(view))
    for forbidden in ["СЕКРЕТНАЯ-ЦЕЛЬ", "Найдите купе", "пожалуйста", "Ольга", "Есть поезд", "convert_currency"]:
        assert forbidden not in text, forbidden
    for needed in ["search_train_tickets", "Код станции отправления", "ПОДРОБНОЕ описание", "TVR", "ПОЕЗД-777"]:
        assert needed in text, needed
    assert len(view.earlier) == 1 and view.earlier[0][0].name == "search_train_tickets"


def test_tool_view_refuses_unknown_tool():
    with pytest.raises(ValueError, match="not in the plan's tool group"):
        tool_view(STATE, ToolCall(name="rm_rf", arguments={}))


def test_user_does_not_see_withheld_slot():
    step = PLAN.steps[0].model_copy(update={"kind": "clarification", "rounds": [], "withheld": ["station_code"],
                                     "user_message": "Найдите купе"})
    plan = PLAN.model_copy(update={"steps": [step]})
    text = _text(render_user_prompt(user_view(EpisodeState(plan=plan))))
    assert "Твери" not in text and "купе" in text


def test_english_rendering():
    plan = PLAN.model_copy(update={"lang": "en"})
    text = _text(render_user_prompt(user_view(EpisodeState(plan=plan))))
    assert "What you want in this turn" in text and "Что ты хочешь" not in text
