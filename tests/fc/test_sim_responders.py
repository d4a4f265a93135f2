"""The sim stand-ins produce valid, language-correct content from the request alone."""

from __future__ import annotations

import json
import random

from fabrika.agents.prompts import prompt_text
from fabrika.generators.fc.common import parse_tool
from fabrika.generators.fc.sim_responders import assistant_responder, tools_responder
from fabrika.llm.sim import find_sim_responder
from fabrika.llm.types import ChatRequest


def tools_request(lang: str, topic: str) -> ChatRequest:
    body = json.dumps({"topic": topic, "description": topic, "keywords": [topic.split()[0]], "lang": lang},
                      ensure_ascii=False)
    return ChatRequest(messages=({"role": "user", "content": prompt_text("tools", lang).format(n=3, topic=body)},),
                       tag="fc.tools")


def test_sim_tools_are_valid_in_both_languages():
    for lang, topic in [("ru", "Запись к врачу"), ("en", "Flight bookings")]:
        raw = json.loads(tools_responder(tools_request(lang, topic), random.Random(1)))["tools"]
        assert len(raw) == 3
        for t in raw:
            spec, reason = parse_tool(t, topic_id="t", lang=lang)
            assert reason is None, reason


def test_sim_assistant_fills_arguments_from_the_users_words_and_errs_on_demand():
    """The user asks in Russian («Запишите меня, пожалуйста, на приём к терапевту на 14 марта на имя Анны
    Петровой»); the assistant reads the canonical values back (nominative name, ISO date, enum literal)."""
    from fabrika.generators.fc import sim_phrases

    raw = json.loads(tools_responder(tools_request("ru", "Запись к врачу"), random.Random(2)))["tools"]
    book = next(t for t in raw if t["name"] == "book_appointment")
    fn = {"name": book["name"], "description": book["tiers"][2], "parameters": book["parameters"]}
    values = {"specialty": "терапевт", "date": "2025-03-14", "time": "12:30", "patient_name": "Анна Петрова"}
    words = sim_phrases.sentence(sim_phrases.request(sim_phrases.TOOLS["book_appointment"], values, "ru"))
    assert words == "Запишите меня, пожалуйста, на приём к терапевту на 14 марта на 12:30 на имя Анны Петровой."
    messages = ({"role": "system", "content": "Ты ассистент"}, {"role": "user", "content": words})
    good = assistant_responder(ChatRequest(messages=messages, tools=({"type": "function", "function": fn},),
                                           tag="fc.assistant", meta={"sim_error_rate": 0.0}), random.Random(0))
    assert [(c["name"], json.loads(c["arguments"])) for c in good.tool_calls] == [(fn["name"], values)]
    wrong = [assistant_responder(ChatRequest(messages=messages, tools=({"type": "function", "function": fn},),
                                             tag="fc.assistant", meta={"sim_error_rate": 1.0}), random.Random(s))
             for s in range(6)]
    assert all((c.tool_calls[0]["name"], json.loads(c.tool_calls[0]["arguments"])) != (fn["name"], values) for c in wrong)


def test_responders_are_registered_with_the_sim_backend():
    import fabrika.generators.fc.sim_responders  # noqa: F401

    for tag in ["fc.tools", "fc.planner", "fc.judge", "fc.user", "fc.tool", "fc.assistant", "fc.irrelevance.judge"]:
        assert find_sim_responder(tag) is not None, tag
    assert find_sim_responder("fc.tools").__name__ == "tools_responder"
    assert find_sim_responder("fc.tool").__name__ == "tool_responder"


def test_sim_plans_include_corrections_late_clarifications_and_error_recovery():
    from fabrika.agents.prompts import prompt_text
    from fabrika.generators.fc.plan_checks import check_plan, parse_steps
    from fabrika.generators.fc.sim_responders import planner_responder
    from fabrika.schemas.fc import ToolSpec

    raw = json.loads(tools_responder(tools_request("ru", "Запись к врачу"), random.Random(4)))["tools"]
    specs = [parse_tool(t, topic_id="t", lang="ru")[0] for t in raw]
    assert all(isinstance(s, ToolSpec) for s in specs)
    tools = [{**s.tool.to_openai()["function"], "tiers": s.tiers} for s in specs]
    seen: set[str] = set()
    failed = 0
    for seed in range(40):
        for kind in ("multi_turn", "error_recovery"):
            task = json.dumps({"sample_type": kind, "lang": "ru", "tools": tools}, ensure_ascii=False)
            req = ChatRequest(messages=({"role": "user", "content": prompt_text("planner", "ru").format(task=task)},),
                              tag="fc.planner")
            steps, problems = parse_steps(json.loads(planner_responder(req, random.Random(seed))))
            assert steps is not None, problems
            if check_plan(steps, specs, kind, "ru"):  # e.g. an e-mail-heavy line fails the language rule: revised
                failed += 1
                continue
            kinds = [s.kind for s in steps]
            if kind == "error_recovery":
                seen.add("error")
            elif "clarification" in kinds[1:]:
                seen.add("late_clarification")
            elif [c.name for c in steps[0].calls()] == [c.name for c in steps[1].calls()]:
                seen.add("correction")
    assert seen == {"error", "late_clarification", "correction"} and failed <= 16


def test_sim_planner_long_turns_pass_the_rule_checks():
    """``meta["sim_turns"]`` (the fleet bench's long-episode workload) makes multi_turn plans of that many turns,
    each a two-round call chain, that the rule checks accept as they are (no revision rounds forced)."""
    from fabrika.generators.fc.plan_checks import check_plan, parse_steps
    from fabrika.generators.fc.plans import load_personas
    from fabrika.generators.fc.sim_responders import planner_responder

    for lang, topics in [("ru", ("Доставка продуктов", "Ремонт техники")), ("en", ("Car rentals", "Hotel rooms"))]:
        persona = load_personas(f"package://fc/personas_{lang}.jsonl")[0]
        for seed in range(25):
            specs = []
            for i, name in enumerate(topics):
                raw = json.loads(tools_responder(tools_request(lang, name), random.Random(seed * 7 + i)))["tools"]
                specs += [parse_tool(t, topic_id=f"t{i}", lang=lang)[0] for t in raw]
            task = {"sample_type": "multi_turn", "lang": lang, "persona": persona.model_dump(exclude={"id"}),
                    "tools": [{**s.tool.to_openai()["function"], "tiers": s.tiers} for s in specs]}
            content = prompt_text("planner", lang).format(task=json.dumps(task, ensure_ascii=False, indent=1))
            request = ChatRequest(messages=({"role": "user", "content": content},), tag="fc.planner",
                                  meta={"sim_turns": 5})
            steps, problems = parse_steps(json.loads(planner_responder(request, random.Random(seed))))
            assert steps is not None, problems
            assert len(steps) == 5 and all(len(s.rounds) == 2 for s in steps)
            assert check_plan(steps, specs, "multi_turn", lang, persona) == [], (lang, seed)
            # without the knob the planner's own short multi_turn plans are unchanged (2-3 steps)
            plain = ChatRequest(messages=request.messages, tag="fc.planner")
            assert len(json.loads(planner_responder(plain, random.Random(seed)))["steps"]) in (2, 3)
