"""Rule-based InsTag-like tags: what a request asks for, in which format, about what.

InsTag tags each query with fine-grained intents by an LLM; a rule set gives
the same kind of tag set offline and deterministically. A log row that carries
its own ``tags`` (from an LLM tagging stage) is used as is.
"""

from __future__ import annotations

import re

from fabrika.eval.logs import LogRecord

# (tag, pattern) — patterns run on the lower-cased prompt; Russian stems cover inflections.
RULES: tuple[tuple[str, str], ...] = (
    ("intent:summarize", r"суммариз|кратк\w* (?:содержан|пересказ|изложи)|перескаж|резюмир|summar|tl;?dr"),
    ("intent:translate", r"перевед|переведи|перевод|translat"),
    ("intent:classify", r"классифиц|определи (?:категори|тип|тональн|класс)|к какой категори|classif|categor"),
    ("intent:extract", r"извлеки|выдели|найди в тексте|вытащи|extract|pull out"),
    ("intent:rewrite", r"перепиши|перефразир|исправь|отредактир|улучши текст|rewrite|paraphras|proofread|fix the"),
    ("intent:generate", r"напиши|сочини|составь|придумай|сгенерир|write|compose|draft|generate|create"),
    ("intent:code", r"код|функци[юяи]|скрипт|python|sql|javascript|regex|регулярн|code|function|script"),
    ("intent:math", r"посчитай|вычисли|сколько будет|реши (?:задач|уравнен)|calculate|compute|solve"),
    ("intent:explain", r"объясни|расскажи|что такое|почему|как работает|explain|what is|why|how does"),
    ("intent:advice", r"посоветуй|подскажи|как (?:лучше|мне|научиться)|рекоменд|advise|recommend|suggest|tips"),
    ("intent:compare", r"сравни|чем отлича|разниц|compare|difference|versus|\bvs\b"),
    ("intent:answer", r"ответь|ответ на (?:вопрос|письмо|отзыв)|answer|reply|respond"),
    ("intent:plan", r"план|расписан|маршрут|schedule|itinerary|plan"),
    ("format:json", r"json|в формате объекта|\{\s*\""),
    ("format:table", r"таблиц|\|\s*-{3}|table"),
    ("format:list", r"списк|список|перечисл|пункт|bullet|list"),
    ("format:short", r"кратко|коротко|в одном предложении|одним словом|briefly|one sentence|one word"),
    ("format:email", r"письм|e-?mail|email"),
    ("domain:finance", r"кредит|банк|счёт|счет|платеж|платёж|оплат|руб|налог|invoice|payment|bank|loan|tax"),
    ("domain:commerce", r"заказ|товар|доставк|магазин|корзин|order|delivery|shop|product"),
    ("domain:support", r"жалоб|обращени|клиент|поддержк|отзыв|complain|ticket|customer|support|review"),
    ("domain:travel", r"поезд|билет|отел|гостиниц|рейс|путешеств|train|ticket|hotel|flight|travel"),
    ("domain:health", r"врач|клиник|лекарств|здоров|симптом|doctor|clinic|health|symptom"),
    ("domain:legal", r"договор|закон|юрид|суд|contract|law|legal|court"),
    ("domain:tech", r"сервер|ошибк|баг|api|база данных|deploy|server|error|bug|database"),
    ("domain:education", r"урок|студент|школ|экзамен|учеб|lesson|student|school|exam"),
    ("domain:hr", r"ваканси|резюме|собеседован|сотрудник|vacancy|resume|interview|employee"),
    ("domain:food", r"рецепт|приготов|блюд|recipe|cook|dish"),
)
_COMPILED = tuple((tag, re.compile(p)) for tag, p in RULES)
_CYRILLIC = re.compile(r"[а-яё]")


def rule_tags(text: str) -> tuple[str, ...]:
    """The rule-set tags of one prompt, plus its script (``lang:ru`` / ``lang:en``)."""
    low = text.lower()
    tags = [tag for tag, rx in _COMPILED if rx.search(low)]
    tags.append("lang:ru" if _CYRILLIC.search(low) else "lang:en")
    return tuple(tags)


def record_tags(rec: LogRecord) -> tuple[str, ...]:
    """The row's own tags when it has them (an LLM tagging stage), else the rule-set tags."""
    return rec.tags if rec.tags is not None else rule_tags(rec.text)
