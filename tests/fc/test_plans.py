"""fc.plans: deterministic sampling, rule checks, planner ↔ judge rounds, rejected plans recorded."""

from __future__ import annotations

import asyncio
import json

from fabrika.generators.fc.plan_checks import check_plan, parse_steps
from fabrika.generators.fc.plans import PlansConfig, PlansStage
from fabrika.schemas import Tool
from fabrika.schemas.fc import ToolSpec
from fabrika.testing import ScriptedLLM, sequence, stage_context


def spec(topic: str, name: str) -> ToolSpec:
    params = {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "Город"},
        "days": {"type": "integer", "description": "Дней", "default": 1},
        "units": {"type": "string", "enum": ["c", "f"], "description": "Шкала"}}}
    return ToolSpec(id=f"tool-{topic}-{name}", topic_id=topic, lang="ru",
                    tool=Tool.model_validate({"function": {"name": name, "description": "Погода подробно", "parameters": params}}),
                    tiers=["Погода", "Погода в городе", "Погода в городе сейчас", "Погода подробно по городу"])


TOOLS = [spec("t1", "get_weather"), spec("t1", "get_forecast"), spec("t2", "get_rates"), spec("t3", "get_news")]
DATED = ToolSpec(id="tool-t1-dated", topic_id="t1", lang="ru", tiers=["Дата", "Дата дня", "Дата дня недели", "Дата дня недели и месяца"],
                 tool=Tool.model_validate({"function": {"name": "get_dated", "parameters": {
                     "type": "object", "required": ["day"],
                     "properties": {"day": {"type": "string", "format": "date", "description": "День"}}}}}))
ROWS = {"fc.tools_dedup": [{"id": t.id, "status": "ok", "spec": t.model_dump_json()} for t in TOOLS]}
CALL = {"name": "get_weather", "arguments": {"city": "Тверь"}, "result": {"t": 5}}


def single_step(**over):
    step = {"kind": "tool_call", "intent": "Узнать погоду", "user_message": "Какая погода в Твери?",
            "slots": {"city": "в Твери"}, "rounds": [[CALL]], "final_answer": "В Твери +5."}
    return {"steps": [{**step, **over}]}


def make_stage(llm, **cfg) -> PlansStage:
    config = PlansConfig(kind="fc.plans", input="fc.tools_dedup", plans_per_topic=3, **cfg)
    return PlansStage(config, stage_context(llm, rows=ROWS, seed=3))


def test_items_and_sampling_are_deterministic():
    a, b = make_stage(None), make_stage(None)
    items = list(a.input_rows())
    assert len(items) == 9 and items == list(b.input_rows())
    for item in items:
        ta, ga, pa, tier_a = a.sample_setup(item)
        tb, gb, pb, tier_b = b.sample_setup(item)
        assert (ta, [t.id for t in ga], pa.id, tier_a) == (tb, [t.id for t in gb], pb.id, tier_b)
        own = {t.id for t in TOOLS if t.topic_id == item["topic_id"]}
        if ta == "irrelevance":
            assert not own & {t.id for t in ga}, "irrelevance groups must not hold the topic's tools"
        else:
            assert own <= {t.id for t in ga}


def test_rule_checks_name_the_problem():
    group = TOOLS[:2] + [DATED]
    steps, problems = parse_steps(single_step())
    assert problems == [] and check_plan(steps, group, "single", "ru") == []
    cases = {
        "unknown_tool": single_step(rounds=[[{**CALL, "name": "rm_rf"}]]),
        "'city' is a required property": single_step(rounds=[[{**CALL, "arguments": {"days": 2}}]]),
        "is not one of": single_step(rounds=[[{**CALL, "arguments": {"city": "Тверь", "units": "k"}}]]),
        "has no slot": single_step(rounds=[[{**CALL, "arguments": {"city": "Тверь", "units": "c"}}]]),
        "starts with a preposition": single_step(rounds=[[{**CALL, "arguments": {"city": "в Твери"}}]],
                                                 slots={"city": {"value": "в Твери", "say": "в Твери"}}),
        "'Твери' is not in the nominative": single_step(rounds=[[{**CALL, "arguments": {"city": "Твери"}}]],
                                                        slots={"city": {"value": "Твери", "say": "в Твери"}}),
        "slots.city.value 'Твери' differs": single_step(slots={"city": {"value": "Твери", "say": "в Твери"}}),
        "is not a 'date'": single_step(rounds=[[{**CALL, "name": "get_dated", "arguments": {"day": "14 марта"}}]],
                                       slots={"day": {"value": "14 марта", "say": "14 марта"}}),
        "is not in 'ru'": single_step(user_message="What is the weather?"),
        "parallel plans have one round": single_step(),
    }
    for needle, plan in cases.items():
        steps, _ = parse_steps(plan)
        problems = check_plan(steps, group, "parallel" if needle.startswith("parallel") else "single", "ru")
        assert any(needle in p for p in problems), (needle, problems)
    assert parse_steps({"steps": [{"kind": "tool_call", "intent": "x"}]})[1]  # a call step without calls


def test_planner_revises_after_rule_problem_and_judge_issue():
    planner = sequence("не json вовсе", json.dumps(single_step(rounds=[[{**CALL, "name": "nope"}]])),
                       json.dumps(single_step(), ensure_ascii=False))
    judge = sequence('{"approved": false, "issues": ["слишком сухо"]}', '{"approved": true, "issues": []}')
    llm = ScriptedLLM({"fc.planner": planner, "fc.judge": judge})
    stage = make_stage(llm, sample_types={"single": 1.0}, max_rounds=4)
    item = next(i for i in stage.input_rows() if i["topic_id"] == "t1")
    [row] = asyncio.run(stage.process(item))
    assert row["status"] == "ok" and row["n_rounds"] == 4
    plan = json.loads(row["plan"])
    rounds = plan["rounds"]
    assert rounds[0]["problems"][0].startswith("invalid_json") and rounds[0]["verdict"] is None
    assert "unknown_tool" in rounds[1]["problems"][0]
    assert rounds[2]["verdict"] == {"approved": False, "issues": ["слишком сухо"]}
    assert rounds[3]["verdict"]["approved"] is True
    revise = llm.tagged("fc.planner")[3].messages[-1]["content"]
    assert "слишком сухо" in revise  # the judge's issue reached the planner
    for req in llm.tagged("fc.planner")[1:]:  # each revision carries the task and the last plan once, no growth
        assert len(req.messages) == 3 and json.dumps(req.messages, ensure_ascii=False).count('"rounds"') <= 2
        assert req.response_format["json_schema"]["name"] == "fc_plan"
    assert len(llm.tagged("fc.judge")) == 2  # rule failures never reach the judge
    assert llm.tagged("fc.judge")[0].response_format["json_schema"]["name"] == "fc_judge"


def test_never_approved_plan_is_a_recorded_rejection():
    llm = ScriptedLLM({"fc.planner": lambda r: json.dumps(single_step(), ensure_ascii=False),
                       "fc.judge": lambda r: '{"approved": false, "issues": ["нереалистично"]}'})
    stage = make_stage(llm, sample_types={"single": 1.0}, max_rounds=2)
    [row] = asyncio.run(stage.process(next(iter(stage.input_rows()))))
    assert row["status"] == "rejected" and row["reason"] == "judge_rejected: нереалистично"
    assert len(json.loads(row["rounds"])) == 2


def test_planner_rounds_and_judge_are_routed_by_the_plan_id():
    """Revision rounds repeat the task prompt: with the plan id as routing key they meet its KV on one server."""
    planner = sequence("не json вовсе", json.dumps(single_step(), ensure_ascii=False))
    judge = sequence('{"approved": false, "issues": ["сухо"]}', '{"approved": true, "issues": []}')
    llm = ScriptedLLM({"fc.planner": planner, "fc.judge": judge})
    stage = make_stage(llm, sample_types={"single": 1.0}, max_rounds=4)
    item = next(i for i in stage.input_rows() if i["topic_id"] == "t1")
    [row] = asyncio.run(stage.process(item))
    assert row["status"] == "ok"
    asked = llm.tagged("fc.planner") + llm.tagged("fc.judge")
    assert len(asked) >= 4 and {r.routing_key for r in asked} == {item["id"]}
    # the revision starts with the first round's prompt (the prefix a server can serve from its cache)
    first = llm.tagged("fc.planner")[0].messages[0]
    assert all(r.messages[0] == first for r in llm.tagged("fc.planner"))


def test_planner_prompts_of_different_plans_share_their_instructions():
    """The per-plan task is the prompt's tail: every planner request starts with the same ~3,400 characters."""
    llm = ScriptedLLM({"fc.planner": lambda r: json.dumps(single_step(), ensure_ascii=False),
                       "fc.judge": lambda r: '{"approved": true, "issues": []}'})
    stage = make_stage(llm, sample_types={"single": 1.0})
    items = list(stage.input_rows())[:3]
    for item in items:
        asyncio.run(stage.process(item))
    firsts = [r.messages[0]["content"] for r in llm.tagged("fc.planner")]
    common = firsts[0]
    for text in firsts[1:]:
        while not text.startswith(common):
            common = common[:-1]
    assert len(set(firsts)) == 3 and len(common) > 3000
