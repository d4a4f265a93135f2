"""``sim`` stand-ins for the topic roles (labeller, expander), and the sim's reading of its own topics.

They are deterministic functions of the request, good enough to exercise the stage end to end
without a model. They are not topic modelling quality: the labels are built from the cluster's
own keywords; an expansion composes new topics in the seed's domain from the vocabulary of
:mod:`fabrika.generators.fc.sim_topic_catalogue` — a service of the domain, a city, an
audience and a need («Ночные поезда в Казани: сравнение цен для студентов») — so the pool
grows to any ``target_size`` (millions of combinations) while staying natural text the
near-duplicate index tells apart. Rows they produce carry ``llm_backend = "sim"``.

:func:`read_topic` is the inverse the sim tool writer uses: it finds the service, the city
and the audience in a topic's words, and :func:`topic_slug` names the topic's tools after
them. The need is a function of the other three (:func:`need_of`), so a composed label names
one service for one audience in one city, and two topics share their tools exactly when they
are the same topic.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass

from fabrika.generators.fc.sim_catalogue import DOMAINS
from fabrika.generators.fc.sim_topic_catalogue import AUDIENCES, CITIES, NEEDS, SERVICES
from fabrika.llm.sim import register_sim_responder
from fabrika.llm.types import ChatRequest

DOMAIN_NAMES = sorted(SERVICES)
DRIFT = 0.2  # share of an expansion's topics drawn from any domain rather than the seed's


def _lang(request: ChatRequest) -> str:
    return request.meta.get("lang") or ("ru" if re.search(r"[а-яё]", request.messages[-1]["content"], re.I) else "en")


def label_topic(request: ChatRequest, rng: random.Random) -> str:
    lang = _lang(request)
    user = request.messages[-1]["content"]
    first = user.splitlines()[0].split(":", 1)[-1]
    words = [w.strip() for w in first.split(",") if w.strip()][:3] or (["разное"] if lang == "ru" else ["misc"])
    label = " ".join(words).capitalize()
    desc = (f"Запросы пользователей о теме «{label}», которые решаются через сервисы."
            if lang == "ru" else f"User requests about {label.lower()} that services can handle.")
    return json.dumps({"label": label, "description": desc}, ensure_ascii=False)


# ---------------------------------------------------------------------------
# composed topics

@dataclass(frozen=True)
class SimTopic:
    """One composed topic: indexes into the vocabulary (``service`` within ``domain``)."""

    lang: str
    domain: str
    service: int
    city: int
    audience: int

    @property
    def need(self) -> int:
        return need_of(self.domain, self.service, self.city, self.audience)

    def cue(self) -> str:
        """The service as a user names it: «Ночные поезда в Казани для студентов»."""
        service = SERVICES[self.domain][self.service][0 if self.lang == "ru" else 1]
        text = f"{service} {CITIES[self.lang][self.city][1]} {AUDIENCES[self.audience][0 if self.lang == 'ru' else 1]}"
        return text[:1].upper() + text[1:]

    def label(self) -> str:
        service = SERVICES[self.domain][self.service][0 if self.lang == "ru" else 1]
        audience = AUDIENCES[self.audience][0 if self.lang == "ru" else 1]
        text = f"{service} {CITIES[self.lang][self.city][1]}: {NEEDS[self.lang][self.need]} {audience}"
        return text[:1].upper() + text[1:]

    def description(self) -> str:
        service = SERVICES[self.domain][self.service][0 if self.lang == "ru" else 1]
        audience = AUDIENCES[self.audience][0 if self.lang == "ru" else 1]
        need = NEEDS[self.lang][self.need]
        return f"{need[:1].upper()}{need[1:]} — {service}, {CITIES[self.lang][self.city][0]}, {audience}."


def topic_digest(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b("\x1f".join(map(str, parts)).encode("utf-8"), digest_size=8).digest(), "big")


def need_of(domain: str, service: int, city: int, audience: int) -> int:
    """The need a composed topic of this service, city and audience is about (one per combination)."""
    return topic_digest(domain, service, city, audience) % len(NEEDS["ru"])


def topic_slug(topic: SimTopic) -> str:
    """``<service>_<city>_<audience>``: what the sim tool writer appends to its tools' names."""
    return "_".join((SERVICES[topic.domain][topic.service][2], CITIES[topic.lang][topic.city][2],
                     AUDIENCES[topic.audience][2]))


def _find(low: str, phrases: list[str]) -> int | None:
    """Index of the longest phrase of ``phrases`` that occurs in ``low`` as whole words."""
    best: tuple[int, int] | None = None
    for i, p in enumerate(phrases):
        if re.search(rf"(?<!\w){re.escape(p.lower())}(?!\w)", low) and (best is None or len(p) > best[1]):
            best = (i, len(p))
    return None if best is None else best[0]


def read_topic(text: str, lang: str) -> SimTopic | None:
    """The composed topic ``text`` names (its service, city and audience), or ``None`` for any other text."""
    if lang not in CITIES:
        return None
    low = text.lower()
    k = 0 if lang == "ru" else 1
    services = [(d, i, s[k]) for d in DOMAIN_NAMES for i, s in enumerate(SERVICES[d])]
    hit = _find(low, [s for _, _, s in services])
    city = _find(low, [c[1] for c in CITIES[lang]])
    audience = _find(low, [a[k] for a in AUDIENCES])
    if hit is None or city is None or audience is None:
        return None
    domain, service, _ = services[hit]
    return SimTopic(lang, domain, service, city, audience)


def domain_of(text: str) -> str | None:
    """The sim domain whose keys ``text`` names most (ties: the first by name), ``None`` when it names none."""
    low = text.lower()
    scores = {name: sum(low.count(key) for key in DOMAINS[name]["keys"]) for name in DOMAIN_NAMES}
    best = max(scores.values())
    return None if best == 0 else min(n for n, v in scores.items() if v == best)


def compose(lang: str, domain: str | None, rng: random.Random, like: SimTopic | None = None) -> SimTopic:
    """A topic of ``domain`` (``None``: any domain); next to ``like`` (the seed, when it is a composed topic) it keeps
    the service half the time and draws the city and the audience anew, as an expansion of a seed stays near it."""
    if domain is None or rng.random() < DRIFT:  # now and then an adjacent domain, as a model's expansions wander
        domain = DOMAIN_NAMES[rng.randrange(len(DOMAIN_NAMES))]
    keep = like is not None and like.domain == domain and rng.random() < 0.5
    service = like.service if keep and like is not None else rng.randrange(len(SERVICES[domain]))
    return SimTopic(lang, domain, service, rng.randrange(len(CITIES[lang])), rng.randrange(len(AUDIENCES)))


def expand_topic(request: ChatRequest, rng: random.Random) -> str:
    """``fc.topics.expand``: ``n`` new topics near the seed, in its domain (the seed's words pick the domain; a seed
    that names none, such as a vague BERTopic cluster, gives no direction: its topics come from every domain), none
    repeating a topic the prompt lists as known."""
    lang = _lang(request)
    user = request.messages[-1]["content"]
    seed = user.splitlines()[0].split(":", 1)[-1].split(" — ")[0].strip()
    m = re.search(r"(\d+)", request.messages[0]["content"])
    n = int(m.group(1)) if m else 5
    try:  # the prompt's last line: «Уже есть: [...]» (a JSON list of labels)
        known = {str(k) for k in json.loads(user.rsplit("\n", 1)[-1].split(":", 1)[-1])}
    except (json.JSONDecodeError, TypeError):
        known = set()
    parent = read_topic(seed, lang)
    domain = parent.domain if parent is not None else domain_of(seed)
    topics: list[dict[str, str]] = []
    seen = set(known)
    for _ in range(4 * n):
        if len(topics) >= n:
            break
        t = compose(lang, domain, rng, parent)
        label = t.label()
        if label in seen:
            continue
        seen.add(label)
        topics.append({"label": label, "description": t.description()})
    return json.dumps({"topics": topics}, ensure_ascii=False)


register_sim_responder("fc.topics.label", label_topic)
register_sim_responder("fc.topics.expand", expand_topic)
