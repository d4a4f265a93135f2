"""Topic-specific tools of the offline sim: the catalogue's tools, named and described for one composed topic.

The sim tool writer (:func:`fabrika.generators.fc.sim_responders.tools_responder`) gives a
topic that :func:`fabrika.generators.fc.topics_sim.read_topic` recognises — a service for an
audience in a city («Ночные поезда в Казани: … для студентов») — its domain's catalogue tools
under the topic's own names (``search_trains_night_kazan_students``), with the topic in their
descriptions and a topic-dependent choice of optional parameters. So ``fc.tools_dedup``
(name + parameter signature) keeps the tools of distinct topics apart and merges only the
tools of the same service, audience and city. Any other topic keeps the catalogue's names.

A variant behaves as its catalogue tool everywhere in the sim (the same request phrasing,
arguments and results: :func:`tool_spec`). Two variants of one domain in one tool list are
told apart the way people tell services apart: the sim user names the service
(:func:`cue_sentence`, «Мне нужен сервис «Ночные поезда в Казани для студентов».») whenever
another service of that domain is on the list, and the sim assistant and judges then pass
over that domain's tools of other services (:func:`said_topics`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from fabrika.generators.fc.sim_catalogue import DOMAINS
from fabrika.generators.fc.sim_phrases import TOOLS
from fabrika.generators.fc.sim_topic_catalogue import AUDIENCES, CITIES, SERVICES
from fabrika.generators.fc.topics_sim import SimTopic, read_topic, topic_digest, topic_slug

_BASE_DOMAIN = {t["name"]: d for d, v in DOMAINS.items() for t in v["tools"]}
_BASES = sorted(TOOLS, key=len, reverse=True)  # longest first: a base that is another's prefix never shadows it
_SERVICE_SLUGS = {d: {s[2]: i for i, s in enumerate(v)} for d, v in SERVICES.items()}
_CITY_SLUGS = {lang: {c[2]: i for i, c in enumerate(v)} for lang, v in CITIES.items()}
_AUDIENCE_SLUGS = {a[2]: i for i, a in enumerate(AUDIENCES)}
_CUE = {"ru": ("Мне нужен сервис «{}».", re.compile(r"сервис «([^»]+)»", re.IGNORECASE)),
        "en": ("I mean the “{}” service.", re.compile(r"the “([^”]+)” service", re.IGNORECASE))}


@lru_cache(maxsize=4096)
def _split(name: str) -> tuple[str, SimTopic | None] | None:
    if name in TOOLS:
        return name, None
    for base in _BASES:
        if not name.startswith(base + "_"):
            continue
        parts = name[len(base) + 1:].split("_")
        domain = _BASE_DOMAIN[base]
        if len(parts) != 3 or parts[0] not in _SERVICE_SLUGS[domain] or parts[2] not in _AUDIENCE_SLUGS:
            continue
        lang = next((lg for lg, slugs in _CITY_SLUGS.items() if parts[1] in slugs), None)
        if lang is None:
            continue
        return base, SimTopic(lang, domain, _SERVICE_SLUGS[domain][parts[0]], _CITY_SLUGS[lang][parts[1]],
                              _AUDIENCE_SLUGS[parts[2]])
    return None


def tool_spec(name: str) -> dict[str, Any] | None:
    """The catalogue entry behind a tool name: the catalogue's own name, or a variant ``<name>_<topic slug>``."""
    hit = _split(name)
    return None if hit is None else TOOLS[hit[0]]


def variant_topic(name: str) -> SimTopic | None:
    """The composed topic a variant tool was written for (``None`` for a catalogue name or anyone else's tool)."""
    hit = _split(name)
    return None if hit is None else hit[1]


def variant_tools(topic: SimTopic, specs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], list[str]]]:
    """(name, catalogue entry, parameters kept) of each tool of ``topic``: every required parameter, and each
    optional one unless the topic's hash leaves it out (one in three)."""
    slug = topic_slug(topic)
    out = []
    for spec in specs:
        params = [p for p in spec["params"]
                  if p in spec["required"] or topic_digest(slug, spec["name"], p) % 3 != 0]
        out.append((f"{spec['name']}_{slug}", spec, params))
    return out


def cue_sentence(topic: SimTopic) -> str:
    """How the user names the service: «Мне нужен сервис «Ночные поезда в Казани для студентов».»"""
    return _CUE[topic.lang][0].format(topic.cue())


def said_topics(text: str, lang: str) -> list[SimTopic]:
    """The services the user's words name with :func:`cue_sentence`."""
    if lang not in _CUE:
        return []
    return [t for t in (read_topic(c, lang) for c in _CUE[lang][1].findall(text)) if t is not None]


def passed_over(fn_name: str, said: list[SimTopic]) -> bool:
    """Whether the user, having named ``said``, means another service than this tool's (same domain, other topic)."""
    topic = variant_topic(fn_name)
    return topic is not None and topic not in said and any(s.domain == topic.domain for s in said)


def cues_needed(names: list[str], group: list[str]) -> list[str]:
    """The cue sentences a request for tools ``names`` needs, given the tool list ``group``: a variant's service is
    named when the list holds a tool of another service of its domain."""
    topics = {n: variant_topic(n) for n in group}
    out: list[str] = []
    for name in names:
        t = topics.get(name) or variant_topic(name)
        if t is None:
            continue
        if any(o is not None and o != t and o.domain == t.domain for o in topics.values()):
            s = cue_sentence(t)
            if s not in out:
                out.append(s)
    return out
