"""The sim's composed topic pool: diverse and deterministic at any target size, with topic-specific tools that
``fc.tools_dedup`` keeps apart for distinct topics and merges for the same one, and a sim world that tells two
services of one domain apart when both are on a tool list."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

from fabrika.agents.prompts import prompt_text
from fabrika.generators.fc import topics_sim as ts
from fabrika.generators.fc.common import parse_tool, signature
from fabrika.generators.fc.sim_responders import (
    assistant_responder,
    irrelevance_responder,
    planner_responder,
    tools_responder,
)
from fabrika.generators.fc.sim_topic_catalogue import AUDIENCES, CITIES, NEEDS, SERVICES
from fabrika.generators.fc.sim_variants import tool_spec, variant_topic
from fabrika.generators.fc.topics import TopicsConfig, TopicsStage
from fabrika.generators.fc.topics_text import NearDuplicateIndex, language_ok
from fabrika.llm.config import LLMConfig
from fabrika.llm.factory import build_engine
from fabrika.llm.types import ChatRequest
from fabrika.testing import stage_context


def test_each_service_names_its_own_domain_and_nothing_else_names_one():
    for domain, services in SERVICES.items():
        for ru, en, slug in services:
            assert ts.domain_of(ru) == domain and ts.domain_of(en) == domain, (ru, en)
            assert slug.isalpha() and slug.islower()
    for lang in ("ru", "en"):
        k = 0 if lang == "ru" else 1
        others = NEEDS[lang] + [a[k] for a in AUDIENCES] + [c[1] for c in CITIES[lang]]
        assert [t for t in others if ts.domain_of(t) is not None] == []
        # no phrase of a slot hides inside another's, so each reads back as itself
        assert [ts._find(c[1].lower(), [x[1] for x in CITIES[lang]]) for c in CITIES[lang]] == list(range(len(CITIES[lang])))
        assert [ts._find(a[k].lower(), [x[k] for x in AUDIENCES]) for a in AUDIENCES] == list(range(len(AUDIENCES)))
        assert len({c[2] for c in CITIES[lang]}) == len(CITIES[lang]) and len({a[2] for a in AUDIENCES}) == len(AUDIENCES)


def test_composed_topics_read_back_and_fit_the_stage_checks():
    rng = random.Random(3)
    for lang in ("ru", "en"):
        for domain in ts.DOMAIN_NAMES:
            for _ in range(30):
                t = ts.compose(lang, domain, rng)
                label, desc = t.label(), t.description()
                assert ts.read_topic(label, lang) == t and ts.read_topic(t.cue(), lang) == t
                assert len(label) <= 120 and language_ok(f"{label} {desc}", lang)
    assert ts.read_topic("Железнодорожные билеты", "ru") is None  # a hand-written topic is not a composed one


async def _expand(stage: TopicsStage, lang: str, seeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r async for chunk in stage._expand(lang, seeds) for r in chunk]


def test_expansion_reaches_a_large_target_with_distinct_topics_and_is_deterministic(tmp_path: Path):
    """From two seeds (as BERTopic over a small corpus gives) the pool grows to the target; the shipped demo corpus
    used to stop near 60 topics whatever the target."""
    seeds = {"ru": [{"id": "s1", "label": "Поезд билет вокзал", "description": "Запросы о поездах."},
                    {"id": "s2", "label": "Погода прогноз", "description": "Запросы о погоде."}],
             "en": [{"id": "s1", "label": "Cinema film", "description": "Requests about films."}]}
    targets = {"ru": 400, "en": 150}
    cfg = TopicsConfig(target_size=targets)
    runs = []
    for name in ("a", "b"):
        stage = TopicsStage(cfg, stage_context(build_engine(LLMConfig(backend="sim")), seed=7, run_dir=tmp_path / name,
                                               stage="fc.topics"))
        runs.append({lang: asyncio.run(_expand(stage, lang, s)) for lang, s in seeds.items()})
    assert runs[0] == runs[1]
    for lang, target in targets.items():
        pool = [r for r in runs[0][lang] if r["status"] == "ok"]
        assert len(pool) == target - len(seeds[lang])
        assert all(ts.read_topic(r["topic"], lang) is not None for r in pool)
        index = NearDuplicateIndex(lang, threshold=0.6)
        assert all(index.add_if_new(r["id"], r["topic"], r["description"]) is None for r in pool)
        domain = {s["id"]: ts.domain_of(s["label"]) for s in seeds[lang]}
        domain.update({r["id"]: ts.read_topic(r["topic"], lang).domain for r in pool})  # type: ignore[union-attr]
        near = sum(domain[r["id"]] == domain[r["parent_id"]] for r in pool)
        assert near >= 0.7 * len(pool)  # an expansion mostly stays in its seed's domain, now and then drifts
    assert {d for r in runs[0]["ru"] if r["status"] == "ok"
            for d in [ts.read_topic(r["topic"], "ru").domain]} == set(ts.DOMAIN_NAMES)  # type: ignore[union-attr]


def _tools(topic: str, lang: str = "ru", n: int = 4) -> list[dict[str, Any]]:
    body = json.dumps({"topic": topic, "description": topic, "keywords": [], "lang": lang}, ensure_ascii=False)
    req = ChatRequest(messages=({"role": "user", "content": prompt_text("tools", lang).format(n=n, topic=body)},),
                      tag="fc.tools")
    return json.loads(tools_responder(req, random.Random(0)))["tools"]


def _signatures(tools: list[dict[str, Any]], topic_id: str, lang: str = "ru") -> set[str]:
    out = set()
    for raw in tools:
        spec, reason = parse_tool(raw, topic_id=topic_id, lang=lang)
        assert reason is None, reason
        assert spec is not None
        out.add(signature(spec.tool))
    return out


def test_distinct_topics_get_distinct_tools_and_the_same_topic_the_same_tools():
    a = ts.SimTopic("ru", "trains", 0, 2, 0)  # night trains, Kazan, students
    b = ts.SimTopic("ru", "trains", 0, 3, 0)  # the same service and audience in Samara
    c = ts.SimTopic("en", "trains", 0, 1, 0)
    sig_a = _signatures(_tools(a.label()), "t1")
    assert sig_a == _signatures(_tools(a.label()), "t2")  # the same topic again: dedup merges it
    assert not sig_a & _signatures(_tools(b.label()), "t3")
    assert not sig_a & _signatures(_tools(c.label(), "en"), "t4", "en")
    names = [t["name"] for t in _tools(a.label())]
    assert names == ["search_trains_night_kazan_students", "buy_train_tickets_night_kazan_students",
                     "refund_ticket_night_kazan_students"]
    assert all(tool_spec(n) is not None and variant_topic(n) == a for n in names)
    assert variant_topic("search_trains_v2") is None and tool_spec("search_trains_v2") is None
    # a hand-written topic keeps the catalogue's tools (configs/fc_demo.yaml's dataset does not move)
    assert [t["name"] for t in _tools("Железнодорожные билеты", n=3)] == ["search_trains", "buy_train_tickets",
                                                                          "refund_ticket"]
    longest = max((ts.SimTopic(lg, d, i, j, k) for lg in ("ru", "en") for d in SERVICES for i in range(len(SERVICES[d]))
                   for j in range(len(CITIES[lg])) for k in range(len(AUDIENCES))),
                  key=lambda t: len(ts.topic_slug(t)))
    assert all(len(t["name"]) <= 64 for t in _tools(longest.label(), longest.lang))


def _fn(tool: dict[str, Any]) -> dict[str, Any]:
    return {"name": tool["name"], "description": tool["tiers"][0], "parameters": tool["parameters"]}


def _plan(tools: list[dict[str, Any]], kind: str, seed: int, unavailable: list[str] | None = None) -> list[dict]:
    task = {"sample_type": kind, "lang": "ru", "persona": {"name": "Анна"},
            "tools": [{**_fn(t), "tiers": t["tiers"]} for t in tools]}
    if unavailable is not None:
        task["unavailable"] = unavailable
    content = "Составь план.\n```json\n" + json.dumps(task, ensure_ascii=False) + "\n```"
    req = ChatRequest(messages=({"role": "user", "content": content},), tag="fc.planner")
    return json.loads(planner_responder(req, random.Random(seed)))["steps"]


def test_the_user_names_the_service_and_the_assistant_calls_that_services_tool():
    """Two services of one domain on one list: the plan's request names its service, and the sim assistant calls the
    tool of that service (not the other's, which the same words would otherwise fit equally)."""
    a, b = ts.SimTopic("ru", "weather", 0, 2, 0), ts.SimTopic("ru", "weather", 1, 5, 3)
    group = _tools(a.label()) + _tools(b.label())
    for seed in range(12):
        step = _plan(group, "single", seed)[0]
        call = step["rounds"][0][0]
        meant = variant_topic(call["name"])
        assert f"сервис «{meant.cue()}»" in step["user_message"]  # type: ignore[union-attr]
        req = ChatRequest(messages=({"role": "user", "content": step["user_message"]},), tag="fc.assistant",
                          tools=tuple({"type": "function", "function": _fn(t)} for t in group))
        got = assistant_responder(req, random.Random(seed))
        assert [c["name"] for c in got.tool_calls or ()] == [call["name"]]
    alone = _plan(_tools(a.label()), "single", 0)[0]  # one service of the domain on the list: nothing to name
    assert "сервис «" not in alone["user_message"]


def test_a_request_for_another_service_of_the_domain_is_irrelevant_to_the_visible_tool():
    """An irrelevance plan asks for the topic's own service; a visible tool of another service of the same domain
    does not serve it, and the sim judge says so."""
    a, b = ts.SimTopic("ru", "trains", 0, 2, 0), ts.SimTopic("ru", "trains", 1, 5, 3)
    own, visible = _tools(a.label()), _tools(b.label())
    step = _plan(visible, "irrelevance", 1, unavailable=[t["tiers"][1] for t in own])[0]
    assert f"сервис «{a.cue()}»" in step["user_message"]
    task = {"conversation": [{"role": "user", "content": step["user_message"]}], "tools": [_fn(t) for t in visible]}
    req = ChatRequest(messages=({"role": "user", "content": "```json\n" + json.dumps(task, ensure_ascii=False)
                                 + "\n```"},), tag="fc.irrelevance.judge")
    verdict = json.loads(str(irrelevance_responder(req, random.Random(0))))
    assert verdict["any_tool_fits"] is False
    task["tools"] = [_fn(t) for t in own]  # the own service's tools do fit
    req = ChatRequest(messages=({"role": "user", "content": "```json\n" + json.dumps(task, ensure_ascii=False)
                                 + "\n```"},), tag="fc.irrelevance.judge")
    assert json.loads(str(irrelevance_responder(req, random.Random(0))))["any_tool_fits"] is True


def test_a_vague_seed_expands_into_every_domain_a_named_one_stays_in_its_own():
    """A BERTopic cluster that names no domain («Пять десять вечер») gives the expander no direction: its topics
    come from all domains (the 300K config's corpus clusters into two such seeds, which used to pin the whole
    pool to two domains); a seed that names one keeps most of its topics there."""
    from fabrika.generators.fc.topics_prompts import expand_messages

    def answer(label: str, seed: int) -> list[str]:
        req = ChatRequest(messages=expand_messages("ru", label, "Запросы пользователей.", [], 8), tag="fc.topics.expand",
                          meta={"lang": "ru"})
        return [t["label"] for t in json.loads(ts.expand_topic(req, random.Random(seed)))["topics"]]

    vague = {ts.read_topic(label, "ru").domain for s in range(5) for label in answer("Пять десять вечер", s)}  # type: ignore[union-attr]
    assert len(vague) >= 6
    named = [ts.read_topic(label, "ru").domain for s in range(5) for label in answer("Прогноз погоды", s)]  # type: ignore[union-attr]
    assert named.count("weather") >= 0.6 * len(named) and len(named) == 40
