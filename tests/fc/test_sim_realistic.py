"""The realistic sim profile does what its docstring says (so the pipeline is tested against those shapes)."""

from __future__ import annotations

import json
import random

from fabrika.generators.fc import sim_realistic as real
from fabrika.generators.fc import sim_responders
from fabrika.generators.fc.plan_checks import parse_steps
from fabrika.llm.types import ChatRequest
from fabrika.textutil.answers import extract_json, is_failure

# importing the profile registers it for every sim request of this process (pytest imports every test
# module before running any): these tests call its responders directly, so the rest of the suite gets
# the basic profile back
sim_responders.register_fc_sim_responders()

def test_inflection_round_trips_for_cities_and_names():
    for value in ("Казань", "Тверь", "Москва", "Нижний Новгород", "Петрова"):
        for case in ("gent", "datv", "loct"):
            said = real.inflect_phrase(value, case)
            assert real.canonical_words(f"в {said}") == value, (value, case, said)
    assert real.canonical_words("премиум", keep=frozenset({"премиум"})) == "премиум"


def _user_request(goal: dict) -> ChatRequest:
    body = f"Что ты хочешь в этой реплике:\n```json\n{json.dumps(goal, ensure_ascii=False)}\n```\n"
    return ChatRequest(messages=({"role": "system", "content": "Ты играешь роль человека"},
                                 {"role": "user", "content": body}), tag="fc.user")


def test_the_user_inflects_free_text_and_keeps_verbatim_values():
    goal = {"intent": "x", "say": "найти — доставка: город — Казань, номер заказа — A1024",
            "facts": [{"value": "Казань", "say": "Казань", "verbatim": False},
                      {"value": "A1024", "say": "A1024", "verbatim": True}]}
    texts = [real.user_responder(_user_request(goal), random.Random(s)).content or "" for s in range(200)]
    answers = [t.split("</think>")[-1] for t in texts if not t.startswith("<think>") or "</think>" in t]
    inflected = [t for t in answers if any(f in t for f in ("Казани", "Казанью"))]
    assert len(inflected) > 0.7 * len(answers)
    assert sum("A1024" in t for t in answers) > 0.9 * len(answers)  # a few slip, as people's do
    assert any("a1024" in t for t in answers)
    assert any(t.startswith("<think>") and "</think>" not in t for t in texts)  # some are cut off mid-thought


def test_json_answers_arrive_dressed_and_some_truncated():
    req = ChatRequest(messages=({"role": "user", "content": "Проверь сценарий"},), tag="fc.judge")
    outs = [real.RESPONDERS["fc.judge"](req, random.Random(s)) for s in range(300)]
    texts = [o.content or "" for o in outs]
    assert sum("<think>" in t for t in texts) > 100 and sum("```json" in t for t in texts) > 100
    cut = [o for o in outs if o.finish_reason == "length"]
    assert 0 < len(cut) < 30
    for o in outs:
        if o.finish_reason != "length":
            value = extract_json(o.content, expect=dict)
            assert not is_failure(value) and "approved" in value, o.content


def test_every_plan_slip_is_reported_at_once():
    steps, problems = parse_steps({"steps": [{"kind": "nope", "intent": "a"}, {"kind": "text"}]})
    assert steps is None and len(problems) >= 2 and any(p.startswith("steps[1]") for p in problems)


def test_switching_profiles_never_reuses_the_other_profiles_cached_answers():
    """The sim cache scope names the responder: a run dir made with one profile misses under the other."""
    from fabrika.llm.sim import SimBackend

    request = ChatRequest(messages=({"role": "user", "content": "Привет"},), tag="fc.user")
    backend = SimBackend(seed=3)
    basic_scope = backend.cache_scope(request)
    real.use_realistic_profile()
    try:
        realistic_scope = backend.cache_scope(request)
    finally:
        sim_responders.register_fc_sim_responders()
    assert realistic_scope != basic_scope and "sim_realistic" in realistic_scope
    assert backend.cache_scope(request) == basic_scope  # stable for one profile


def test_the_user_never_inflects_a_value_the_sim_already_said_grammatically():
    """The natural sim says «в Екатеринбурге», «в Нижний Новгород», «фильма «Холоп»»: nothing is left to inflect."""
    goal = {"intent": "x", "say": "Мне нужно посмотреть сеансы фильма «Холоп» в Екатеринбурге, а затем купить "
                                  "билет в Нижний Новгород.",
            "facts": [{"value": "Холоп", "say": "«Холоп»", "verbatim": False},
                      {"value": "Екатеринбург", "say": "в Екатеринбурге", "verbatim": False},
                      {"value": "Нижний Новгород", "say": "в Нижний Новгород", "verbatim": False}]}
    texts = [real.user_responder(_user_request(goal), random.Random(s)).content or "" for s in range(100)]
    answers = [t.split("</think>")[-1] for t in texts if not t.startswith("<think>") or "</think>" in t]
    assert answers and all("«Холоп» в Екатеринбурге" in t and "в Нижний Новгород" in t for t in answers), answers[:3]
    assert not [t for t in answers if "Здравствуйте! Здравствуйте!" in t or "., " in t]
