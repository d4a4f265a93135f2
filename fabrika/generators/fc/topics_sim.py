"""``sim`` stand-ins for the topic roles (labeller, expander).

They are deterministic functions of the request, good enough to exercise the
stage end to end without a model. They are not topic modelling quality: the
labels are built from the cluster's own keywords, the expansions from a fixed
list of actions applied to the seed's first word. Rows they produce carry ``llm_backend = "sim"``.
"""

from __future__ import annotations

import json
import random
import re

from fabrika.llm.sim import register_sim_responder
from fabrika.llm.types import ChatRequest

_ACTIONS = {
    "ru": ["сравнение тарифов", "отмена заказа", "история платежей", "уведомления об изменениях", "подбор вариантов",
           "оплата счетов", "жалобы и возвраты", "настройка расписания", "поиск ближайших точек", "бонусная программа",
           "семейный доступ", "экспорт отчёта", "проверка статуса", "продление подписки", "смена тарифа",
           "напоминания о сроках", "оценка стоимости", "запись на приём", "обратная связь", "лимиты и ограничения"],
    "en": ["plan comparison", "order cancellation", "payment history", "change alerts", "option search",
           "bill payment", "complaints and refunds", "schedule setup", "nearest locations", "loyalty points",
           "family sharing", "report export", "status check", "subscription renewal", "plan change",
           "deadline reminders", "cost estimate", "appointment booking", "feedback", "limits and quotas"],
}


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


def expand_topic(request: ChatRequest, rng: random.Random) -> str:
    lang = _lang(request)
    user = request.messages[-1]["content"]
    seed = user.splitlines()[0].split(":", 1)[-1].split(" — ")[0].strip()
    m = re.search(r"(\d+)", request.messages[0]["content"])
    n = int(m.group(1)) if m else 5
    actions = rng.sample(_ACTIONS[lang], k=min(n, len(_ACTIONS[lang])))
    subject = seed.split()[0].lower() if seed else ("сервис" if lang == "ru" else "service")
    topics = []
    for a in actions:
        label = f"{a.capitalize()}: {subject}"
        desc = (f"Пользователю нужна помощь сервиса: {label.lower()}." if lang == "ru"
                else f"The user needs a service for: {label.lower()}.")
        topics.append({"label": label, "description": desc})
    return json.dumps({"topics": topics}, ensure_ascii=False)


register_sim_responder("fc.topics.label", label_topic)
register_sim_responder("fc.topics.expand", expand_topic)
