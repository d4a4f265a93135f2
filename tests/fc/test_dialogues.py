"""fc.dialogues + fc.samples with scripted agents: wrong turns, recovery, injection, rejections."""

from __future__ import annotations

import asyncio
import json

from fabrika.generators.fc.dialogues import DialoguesConfig, DialoguesStage
from fabrika.generators.fc.samples import SamplesConfig, SamplesStage
from fabrika.llm.types import Choice
from fabrika.schemas import Sample, from_row
from fabrika.schemas.fc import Persona, Plan, PlanStep
from fabrika.testing import ScriptedLLM, sequence, stage_context
from tests.fc.test_plans import CALL, TOOLS

PLAN = Plan(
    id="plan-x", topic_id="t1", lang="ru", sample_type="single", tier=2,
    persona=Persona(id="p", lang="ru", name="Анна", description="Менеджер.", style="кратко"),
    tools=TOOLS[:2],
    steps=[PlanStep(kind="tool_call", intent="СЕКРЕТ: узнать погоду", user_message="Погода в Твери?",
                    slots={"city": "в Твери"}, rounds=[[CALL]], final_answer="В Твери +5.")],
)
ROW = {"id": PLAN.id, "status": "ok", "plan": PLAN.model_dump_json()}


def call(name="get_weather", **args):
    args = args or {"city": "Тверь"}
    return Choice(content=None, finish_reason="tool_calls",
                  tool_calls=({"id": "x", "name": name, "arguments": json.dumps(args, ensure_ascii=False)},))


def run(llm, **cfg) -> dict:
    stage = DialoguesStage(DialoguesConfig(kind="fc.dialogues", **cfg), stage_context(llm))
    [row] = asyncio.run(stage.process(ROW))
    return row


def scripts(assistant, user=lambda r: "Какая погода в Твери?", tool=lambda r: '{"t": 5}'):
    return ScriptedLLM({"fc.user": user, "fc.assistant": assistant, "fc.tool": tool})


def samples_of(row) -> list[Sample]:
    out = asyncio.run(SamplesStage(SamplesConfig(kind="fc.samples"), stage_context(None)).process(row))
    return [from_row(Sample, r) for r in out]


def test_two_wrong_turns_then_recovery():
    llm = scripts(sequence(call("get_wether"), call(city=7), call(city="Тверь", days=1), "В Твери сейчас +5."))
    row = run(llm, max_retries=2)
    assert row["status"] == "ok" and (row["n_wrong"], row["n_injected"], row["n_targets"]) == (2, 0, 2)
    msgs = json.loads(row["dialogue"])["messages"]
    assert [(m["role"], m["flag"], m["train"]) for m in msgs] == [
        ("user", None, False), ("assistant", "wrong", False), ("tool", "validator_error", False),
        ("assistant", "wrong", False), ("tool", "validator_error", False),
        ("assistant", "recovered", True), ("tool", None, False), ("assistant", None, True)]
    assert "unknown tool 'get_wether'" in msgs[2]["content"] and "city" in msgs[4]["content"]
    # the assistant saw its own mistakes and the validator's words when it retried
    retry = llm.tagged("fc.assistant")[2]
    assert "unknown tool" in json.dumps(retry.messages, ensure_ascii=False)
    samples = samples_of(row)
    assert [s.target_type for s in samples] == ["tool_call", "text"]
    for s in samples:
        assert [m.train for m in s.completion] == [True] and s.completion[0].flag not in ("wrong", "injected")
        assert s.ground_truth is not None and s.meta["episode_id"] == row["id"]
    flags = [m.flag for m in samples[0].prompt]
    assert flags.count("wrong") == 2 and samples[0].prompt[0].role == "system"
    assert samples[0].ground_truth == {"calls": [{"name": "get_weather", "arguments": {"city": "Тверь"}}]}
    assert [t.function.description for t in samples[0].tools] == ["Погода в городе сейчас"] * 2  # tier 2


def test_wrong_but_valid_call_gets_a_realistic_tool_reply():
    llm = scripts(sequence(call(city="Омск"), call(), "Готово."))
    row = run(llm, max_injected_share=1.0)
    msgs = json.loads(row["dialogue"])["messages"]
    assert msgs[1]["flag"] == "wrong" and msgs[2]["flag"] is None and msgs[2]["role"] == "tool"
    tool_prompts = [r.messages[1]["content"] for r in llm.tagged("fc.tool")]
    assert "```json\nnull\n```" in tool_prompts[0]  # no plan result for a wrong call
    assert '```json\n{\n "t": 5\n}\n```' in tool_prompts[1]  # the matched call gets the plan's result
    for p in tool_prompts:
        assert "СЕКРЕТ" not in p and "Погода в Твери?" not in p


def test_a_wrong_call_the_tool_answered_is_never_followed_by_a_trained_repeat():
    """«г. Тверь» answered successfully, then «Тверь»: the second call stays context, never a target."""
    llm = scripts(sequence(call(city="г. Тверь"), call(), "В Твери +5."))
    row = run(llm, max_injected_share=1.0)
    msgs = json.loads(row["dialogue"])["messages"]
    assert [(m["role"], m["flag"], m["train"]) for m in msgs] == [
        ("user", None, False), ("assistant", "wrong", False), ("tool", None, False),
        ("assistant", "repeat", False), ("tool", None, False), ("assistant", None, True)]
    assert [s.target_type for s in samples_of(row)] == ["text"]
    assert row["n_repeat"] == 1
    # by default a repeated step counts like an injected one
    assert run(scripts(sequence(call(city="г. Тверь"), call(), "В Твери +5.")))["reason"].startswith(
        "too_many_injected")


def test_a_wrong_call_answered_with_an_error_is_followed_by_a_trained_recovery():
    def tool(req):
        called = req.messages[1]["content"].split("```json")[2]  # the call block
        return '{"error": "город не найден"}' if "г. Тверь" in called else '{"t": 5}'
    row = run(scripts(sequence(call(city="г. Тверь"), call(), "В Твери +5."), tool=tool))
    msgs = json.loads(row["dialogue"])["messages"]
    assert [(m["flag"], m["train"]) for m in msgs if m["role"] == "assistant"] == [
        ("wrong", False), ("recovered", True), (None, True)]


def test_tool_answer_must_keep_the_planned_result_or_the_episode_is_rejected():
    answers = sequence('{"t": 7}', '{"t": 5, "wind": 3}')
    row = run(scripts(sequence(call(), "В Твери +5."), tool=answers))
    assert row["status"] == "ok" and row["n_tool_retries"] == 1
    row = run(scripts(sequence(call(), "В Твери +5."), tool=lambda r: '{"t": 7}'))
    assert row["status"] == "rejected" and row["reason"] == "tool_result_mismatch: get_weather: result.t: expected 5, got 7"
    transcript = json.loads(row["dialogue"])  # kept for the run explorer: the turns up to the rejection
    assert transcript["meta"]["rejected"] is True
    assert [m["role"] for m in transcript["messages"]] == ["user", "assistant"]
    assert transcript["messages"][1]["tool_calls"][0]["name"] == "get_weather"  # the call whose reply broke the plan


def test_reference_injected_after_retries_then_share_rejects():
    llm = scripts(sequence(call("nope"), call("nope"), "Готово, +5."))
    row = run(llm, max_retries=1, max_injected_share=0.5)
    assert row["status"] == "ok" and row["n_injected"] == 1
    msgs = json.loads(row["dialogue"])["messages"]
    injected = [m for m in msgs if m["flag"] == "injected"]
    assert len(injected) == 1 and not injected[0]["train"]
    assert injected[0]["tool_calls"][0]["name"] == "get_weather"
    assert all(s.completion[0].flag != "injected" for s in samples_of(row))
    llm = scripts(sequence(call("nope"), call("nope"), "Готово, +5."))
    row = run(llm, max_retries=1, max_injected_share=0.3)
    assert row["status"] == "rejected" and row["reason"].startswith("too_many_injected")
    flags = [m["flag"] for m in json.loads(row["dialogue"])["messages"]]
    assert "injected" in flags and "wrong" in flags  # the rejected episode's transcript, injected turn included


def test_text_when_call_expected_gets_the_user_again():
    llm = scripts(sequence("Уточните город?", call(), "Готово."))
    row = run(llm)
    roles = [(m["role"], m["flag"]) for m in json.loads(row["dialogue"])["messages"]]
    assert roles[:3] == [("user", None), ("assistant", "wrong"), ("user", None)]


def test_bad_agent_answers_are_recorded_rejections():
    cases = [
        (scripts(sequence(call(), "ok"), user=lambda r: "What is the weather like?"), "user_wrong_language"),
        (scripts(sequence(call(), "ok"), user=lambda r: "вызови get_weather"), "user_leak"),
        (scripts(sequence(call(), "ok"), tool=lambda r: "результат: ну такое"), "tool_invalid_json"),
        (scripts(sequence(call(), "ok"), user=lambda r: ""), "user_empty"),
    ]
    for llm, reason in cases:
        row = run(llm)
        assert row["status"] == "rejected" and row["reason"].startswith(reason), (reason, row["reason"])


def test_hermes_text_calls_are_understood():
    hermes = '<tool_call>{"name": "get_weather", "arguments": {"city": "Тверь"}}</tool_call>'
    row = run(scripts(sequence(hermes, "В Твери +5.")))
    assert row["status"] == "ok" and row["n_wrong"] == 0
