"""The FC pipeline over real HTTP: FakeOpenAIServer scripted per role, the real engine and runner.

The assistant errs twice (unknown tool, broken arguments) and then recovers: the
wrong turns are in later prompts and never completions; the recovery is a target.
Broken tool-writer answers (invalid JSON, wrong language) become recorded
rejections and the run goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas import Sample, from_row
from fabrika.store.run import RunStore
from fabrika.testing import FakeOpenAIServer

PARAMS = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string", "description": "Город"}}}
GOOD_TOOLS = {"tools": [{"name": "get_weather", "parameters": PARAMS,
                         "tiers": ["Погода", "Погода в городе", "Погода в городе сейчас", "Погода в городе сейчас и завтра"]}]}
EN_TOOLS = {"tools": [{"name": "get_news", "parameters": {"type": "object", "properties": {}},
                       "tiers": ["News", "Latest news", "Latest news today", "Latest news today by topic"]}]}
PLAN = {"steps": [{"kind": "tool_call", "intent": "Узнать погоду в Твери", "user_message": "Какая погода в Твери?",
                   "slots": {"city": "в Твери"}, "final_answer": "В Твери +5.",
                   "rounds": [[{"name": "get_weather", "arguments": {"city": "Тверь"}, "result": {"t": 5}}]]}]}
TOPICS = [
    {"id": "t-good", "topic": "Погода", "description": "Прогноз погоды", "keywords": ["погода"], "lang": "ru"},
    {"id": "t-json", "topic": "СЛОМАННАЯ тема", "description": "Ответ не JSON", "keywords": [], "lang": "ru"},
    {"id": "t-lang", "topic": "АНГЛИЙСКАЯ тема", "description": "Ответ по-английски", "keywords": [], "lang": "ru"},
]


def tools_answer(req: dict) -> str:
    prompt = req["messages"][0]["content"]
    if "СЛОМАННАЯ" in prompt:
        return "Извините, вот инструменты: {name: get_weather"
    return json.dumps(EN_TOOLS if "АНГЛИЙСКАЯ" in prompt else GOOD_TOOLS, ensure_ascii=False)


def test_assistant_errs_twice_then_recovers_over_http(tmp_path: Path):
    topics = tmp_path / "topics.jsonl"
    topics.write_text("\n".join(json.dumps(t, ensure_ascii=False) for t in TOPICS), encoding="utf-8")
    with FakeOpenAIServer() as srv:
        srv.script(tag="fc.tools", responder=tools_answer)
        srv.script(tag="fc.planner", responses=[json.dumps(PLAN, ensure_ascii=False)], cycle=True)
        srv.script(tag="fc.judge", responses=['{"approved": true, "issues": []}'], cycle=True)
        srv.script(tag="fc.user", responses=["Подскажите, какая погода в Твери?"], cycle=True)
        srv.script(tag="fc.tool", responses=['{"t": 5, "sky": "ясно"}'], cycle=True)
        srv.script(tag="fc.assistant", responses=[
            {"tool_calls": [{"name": "get_wether", "arguments": {"city": "Тверь"}}]},
            {"tool_calls": [{"name": "get_weather", "arguments": '{"city": 7}'}]},
            {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Тверь"}}]},
            "В Твери сейчас +5 и ясно.",
        ])
        config, issues = validate_data({
            "name": "fc_fake", "seed": 1, "run_dir": str(tmp_path / "run"),
            "llm": {"backend": "openai", "model": "fake", "endpoints": [{"base_url": srv.base_url}],
                    "max_retries": 0, "cache": {"enabled": False}},
            "stages": [
                {"kind": "fc.tools", "topics_file": str(topics), "tools_per_topic": 1},
                {"kind": "fc.tools_dedup", "input": "fc.tools"},
                {"kind": "fc.plans", "input": "fc.tools_dedup", "plans_per_topic": 1, "distractors": 0,
                 "sample_types": {"single": 1.0}},
                {"kind": "fc.dialogues", "input": "fc.plans", "max_retries": 2},
                {"kind": "fc.samples", "input": "fc.dialogues"},
            ],
            "dataset": {"stages": ["fc.samples"]},
        }, "test", tmp_path)
        assert config is not None, [str(i) for i in issues]
        run_pipeline(config, resume=False, progress=False)
        requests = srv.requests

    store = RunStore(tmp_path / "run")
    tools = store.scan_raw("fc.tools").collect()
    reasons = dict(zip(tools["topic_id"], tools["reason"]))
    assert reasons["t-good"] is None
    assert reasons["t-json"].startswith("invalid_json") and reasons["t-lang"].startswith("wrong_language")

    dialogue = json.loads(store.scan_raw("fc.dialogues").collect()["dialogue"][0])
    flags = [(m["role"], m["flag"], m["train"]) for m in dialogue["messages"]]
    assert flags[1:6] == [("assistant", "wrong", False), ("tool", "validator_error", False),
                          ("assistant", "wrong", False), ("tool", "validator_error", False),
                          ("assistant", "recovered", True)]

    samples = [from_row(Sample, r) for r in store.scan_raw("fc.samples").collect().iter_rows(named=True)]
    assert sorted(s.target_type for s in samples) == ["text", "tool_call"]
    for s in samples:
        assert s.completion[0].train and s.completion[0].flag not in ("wrong", "injected")
        assert sum(m.flag == "wrong" for m in s.prompt) == 2  # both mistakes stay in every later prompt
    call_sample = next(s for s in samples if s.target_type == "tool_call")
    assert call_sample.completion[0].tool_calls[0].arguments == {"city": "Тверь"}

    # what crossed the wire respects each role's view
    for req in requests:
        text = json.dumps(req["messages"], ensure_ascii=False)
        if "Напиши следующую реплику пользователя" in text:  # user agent
            assert "get_weather" not in text and "Город" not in text and '"t": 5' not in text
        if "Ты имитируешь работу функции" in text:  # tool agent
            assert "Подскажите" not in text and "Узнать погоду в Твери" not in text
        if req.get("tools"):  # assistant agent
            assert "Узнать погоду в Твери" not in text and "В Твери +5." not in text
