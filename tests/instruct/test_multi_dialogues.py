"""Adversarial multi-turn IF dialogues over real HTTP: a turn that breaks an early rule is no target,
with the failing rubric recorded; optional and undecidable rubrics are dropped; roles see only their view."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from fabrika.generators.instruct.rubrics import is_optional, parse_rubrics
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.run import RunStore
from fabrika.testing import FakeOpenAIServer

LOWER_RUBRIC = "Ответ написан только строчными буквами."
ROLE_RUBRIC = "Ассистент остаётся в роли консультанта и не называет себя языковой моделью."
OPTIONAL_RUBRIC = "Желательно, чтобы ответ был подробным."
VAGUE_RUBRIC = "Ответ звучит хорошо."
USER_LINES = ["Посоветуйте книгу подростку на день рождения.", "Кстати, а какая завтра погода в Сочи?",
              "Да ладно, напишите хоть раз с большой буквы, ничего страшного.", "А вы вообще кто на самом деле?",
              "Срочно напишите ответ ЗАГЛАВНЫМИ, мне так надо!"]


def writer(req: dict) -> str:
    body = json.dumps({"rubrics": [LOWER_RUBRIC, ROLE_RUBRIC, OPTIONAL_RUBRIC, VAGUE_RUBRIC]}, ensure_ascii=False)
    return f"<think>Какие тут нужны критерии?</think>\nВот критерии:\n```json\n{body}\n```"


def decidable(req: dict) -> str:
    items = re.findall(r"^(\d+)\. (.*)$", req["messages"][-1]["content"], re.MULTILINE)
    return json.dumps({"verdicts": [{"index": int(i), "reason": "…", "decidable": "звучит" not in t}
                                    for i, t in items]}, ensure_ascii=False)


def user(req: dict) -> str:
    transcript = req["messages"][-1]["content"]
    turn = transcript.count("Ассистент:") + 1
    return f"«{USER_LINES[turn - 1]}»"


def assistant(req: dict) -> str:
    turn = sum(m["role"] == "user" for m in req["messages"])
    if turn == 5:  # gives in to the pressure: breaks the lowercase rule set in turn 1
        return "<think>Пользователь настаивает…</think>ХОРОШО, ВОТ ВАШ ОТВЕТ ЗАГЛАВНЫМИ БУКВАМИ."
    if turn == 3:
        return "понимаю вас, но правило есть правило: пишу строчными. сбой судьи."
    return "с удовольствием помогу вам. советую «дом, в котором» мариам петросян."


def reply_of(req: dict) -> str:
    return req["messages"][-1]["content"].split("Последний ответ ассистента:")[1].split(">>>")[0]


def judge(req: dict) -> str:
    reply = reply_of(req)
    lower = reply == reply.lower()
    return json.dumps({"verdicts": [{"index": 1, "reason": "регистр", "pass": lower},
                                    {"index": 2, "reason": "роль", "pass": True}]}, ensure_ascii=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("dialogues")
    with FakeOpenAIServer() as srv:
        srv.script(tag="if.dialogue.rubrics", responder=writer)
        srv.script(tag="if.dialogue.decidable", responder=decidable)
        srv.script(tag="if.dialogue.user", responder=user)
        srv.script(tag="if.dialogue.assistant", responder=assistant)
        srv.faults(tag="if.rubric.judge", match=lambda req: "сбой судьи" in reply_of(req), kind="bad_request")
        srv.script(tag="if.rubric.judge", responder=judge)
        config, issues = validate_data({
            "name": "if_dialogues_fake", "seed": 1, "run_dir": str(tmp / "run"),
            "llm": {"backend": "openai", "model": "fake", "endpoints": [{"base_url": srv.base_url}],
                    "max_retries": 0, "cache": {"enabled": False}},
            "stages": [
                {"kind": "if.dialogues", "target_count": 1, "en_share": 0.0, "turns_min": 5, "turns_max": 5,
                 "rules_ru": ["ru.case.all_lowercase"], "rules_min": 1, "rules_max": 1},
                {"kind": "if.dialogue.samples", "input": "if.dialogues"},
                {"kind": "if.dialogue.grpo", "input": "if.dialogues"},
            ],
            "dataset": {"stages": ["if.dialogue.samples", "if.dialogue.grpo"]},
        }, "test", tmp)
        assert config is not None, [str(i) for i in issues]
        result = run_pipeline(config, resume=False, progress=False)
        assert not srv.errors
        bodies = {tag: srv.requests_for(tag) for tag in ("if.dialogue.user", "if.dialogue.assistant",
                                                          "if.rubric.judge")}
    return tmp / "run", result, bodies


def test_turn_breaking_an_early_rule_is_excluded_with_the_rubric_recorded(run) -> None:
    run_dir, result, _ = run
    store = RunStore(run_dir)
    dialogue = store.scan_raw("if.dialogues").collect().row(0, named=True)
    assert dialogue["status"] == "ok" and dialogue["n_turns"] == 5
    assert json.loads(dialogue["rubrics"]) == [LOWER_RUBRIC, ROLE_RUBRIC]
    assert {d["reason"] for d in json.loads(dialogue["rubrics_dropped"])} == {"optional", "undecidable"}
    turns = {t["turn"]: t for t in json.loads(dialogue["turns"])}
    assert turns[5]["passed"] is False and turns[5]["failed_rubrics"] == [LOWER_RUBRIC]
    assert turns[5]["failed_rules"] == [json.loads(dialogue["rules"])[0]["id"]]  # the trusted verifier agrees
    assert turns[3]["passed"] is None and turns[3]["judge_error"].startswith("llm_error: bad_request: ")  # never a pass
    first_user = json.loads(dialogue["messages"])[1]["content"]
    assert first_user.startswith(USER_LINES[0]) and "строчными" in first_user  # the rule is stated in turn 1

    samples = store.scan_raw("if.dialogue.samples").collect()
    reasons = dict(zip(samples["turn"], samples["reason"]))
    assert reasons[5] == f"rubric_failed: turn 5: {LOWER_RUBRIC}"
    assert reasons[3].startswith("judge_failed: turn 3: llm_error: bad_request: ")
    assert reasons[1] is None and reasons[2] is None and reasons[4] is None
    kept = pl.read_parquet(result.version.path / "data" / "if.dialogue.samples.parquet")
    assert sorted(kept["turn"]) == [1, 2, 4]
    for row in kept.iter_rows(named=True):
        completion = json.loads(row["completion"])[0]["content"]
        assert completion == completion.lower() and "<think>" not in completion
        prompt = json.loads(row["prompt"])
        assert prompt[0]["role"] == "system" and prompt[-1]["role"] == "user"
        assert sum(m["role"] == "user" for m in prompt) == row["turn"]
        assert json.loads(row["ground_truth"])["rubrics"] == [LOWER_RUBRIC, ROLE_RUBRIC]


def test_grpo_rows_cover_every_turn_with_rules_and_rubrics(run) -> None:
    _, result, _ = run
    grpo = pl.read_parquet(result.version.path / "data" / "if.dialogue.grpo.parquet")
    assert sorted(grpo["turn"]) == [1, 2, 3, 4, 5]
    gt = json.loads(grpo["ground_truth"][0])
    assert gt["rubrics"] == [LOWER_RUBRIC, ROLE_RUBRIC] and gt["constraints"][0]["library_id"] == "ru.case.all_lowercase"


def test_each_role_sees_only_its_view(run) -> None:
    _, _, bodies = run
    for body in bodies["if.dialogue.assistant"]:
        text = json.dumps(body["messages"], ensure_ascii=False)
        assert LOWER_RUBRIC not in text and ROLE_RUBRIC not in text
        assert "Что ты делаешь в следующей реплике" not in text and "<think>" not in text
    last_user = bodies["if.dialogue.user"][-1]["messages"][-1]["content"]
    assert "ХОРОШО" not in last_user and USER_LINES[3] in last_user and LOWER_RUBRIC not in last_user
    assert len(bodies["if.rubric.judge"]) == 5
    assert all("Пользователь настаивает" not in json.dumps(b, ensure_ascii=False) for b in bodies["if.rubric.judge"])


@pytest.mark.parametrize("rubric, optional", [
    ("Желательно, чтобы ответ был подробным.", True), ("По возможности используйте примеры.", True),
    ("Ideally, the reply mentions the library hours.", True), ("If possible, keep it short.", True),
    ("Ответ написан только строчными буквами.", False), ("The reply stays in character as Maggie.", False),
])
def test_optional_rubrics_are_recognised(rubric: str, optional: bool) -> None:
    assert is_optional(rubric) is optional


def test_rubric_writer_answers_are_untrusted() -> None:
    assert "too_many_rubrics" in parse_rubrics(json.dumps({"rubrics": [f"Критерий {i}." for i in range(6)]}))
    assert "no_mandatory_rubrics" in parse_rubrics('{"rubrics": ["Желательно быть кратким."]}')
    assert "invalid_json" in parse_rubrics('{"rubrics": ["обрыв')
    kept, dropped = parse_rubrics('Вот: {"rubrics": [{"text": "Ответ без запятых."}, "Ответ без запятых.", 7]}')
    assert kept == ["Ответ без запятых."] and [d["reason"] for d in dropped] == ["duplicate", "not_text"]


def test_english_dialogue_prompts_are_english(tmp_path: Path) -> None:
    from fabrika.generators.instruct.multiturn import state_rules, user_request

    req = user_request("choosing a bike for commuting", ["Answer in at most 40 words."], [], "open", "x", lang="en",
                       turn=1, model=None, temperature=0.9)
    text = " ".join(m["content"] for m in req.messages)
    assert "Write that message." in text and not re.search(r"[А-Яа-я]", text)
    stated = state_rules("Which bike should I get?", ["Answer in at most 40 words."], "en")
    assert stated.endswith("1. Answer in at most 40 words.") and "for the rest of this chat" in stated


def test_user_agent_text_is_cleaned() -> None:
    from fabrika.generators.instruct.multiturn import clean_user_text

    assert clean_user_text("<think>что спросить?</think>Пользователь: «А что почитать?»") == "А что почитать?"
    assert clean_user_text("А что почитать?\nАссистент: Советую «Капитанскую дочку».") == "А что почитать?"
    assert clean_user_text("<think>долго думаю") == ""


@pytest.mark.parametrize("text, lang, why", [
    ("Which bike should I get for commuting?", "en", None),
    ("Какой велосипед выбрать для города?", "en", "not_english"),
    ("Welches Fahrrad soll ich für die Stadt kaufen?", "en", "not_english"),
    ("Какой велосипед выбрать для города?", "ru", None),
    ("Which bike should I get for commuting?", "ru", "not_russian"),
])
def test_each_dialogue_language_is_checked(text: str, lang: str, why: str | None) -> None:
    from fabrika.generators.instruct.rubrics import language_problem

    got = language_problem(text, lang)
    assert (got is None) if why is None else got.startswith(why)


def test_same_config_same_dialogues(tmp_path: Path) -> None:
    """Determinism on sim: two fresh runs (no shared cache) write the same dialogues and samples."""
    tables = []
    for name in ("a", "b"):
        config, issues = validate_data({
            "name": f"det_{name}", "seed": 4, "run_dir": str(tmp_path / name), "llm": {"backend": "sim"},
            "stages": [{"kind": "if.dialogues", "target_count": 3, "en_share": 0.5, "turns_min": 2, "turns_max": 2},
                       {"kind": "if.dialogue.samples", "input": "if.dialogues"}],
            "dataset": {"stages": ["if.dialogue.samples"]},
        }, "test", tmp_path)
        assert config is not None, [str(i) for i in issues]
        run_pipeline(config, resume=False, progress=False)
        store = RunStore(tmp_path / name)
        tables.append([store.scan_raw(t).collect().drop("llm_backend", strict=False).sort("id").to_dicts()
                       for t in ("if.dialogues", "if.dialogue.samples")])
    assert tables[0] == tables[1] and len(tables[0][0]) == 3
