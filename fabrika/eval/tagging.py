"""An LLM tagging stage for the tag-diversity baseline: InsTag-like fine-grained tags per request.

InsTag asks a model for open-ended tags naming the intents and skills a query
needs; the tags are normalised (lower case, single spaces, deduplicated) so
spelling variants of one tag count once. The output is the log with a ``tags``
list on every row the tagger answered; a row whose answer could not be read
keeps no ``tags`` (the sampler then uses the rule set for it) and is counted.
"""

from __future__ import annotations

import re
from typing import Any

from fabrika.eval.answers import json_schema_format, parse_object
from fabrika.llm import ChatRequest, ChatResponse

TAG_TAG = "eval.tag"
MAX_TAGS = 8

SYSTEM = ("Ты размечаешь запросы пользователей к ИИ-ассистенту. Для запроса назови от 1 до 8 коротких тегов: "
          "что пользователь просит сделать (намерение), какие умения для этого нужны, предметная область и "
          "требуемый формат ответа. Теги — по-русски, в нижнем регистре, 1–3 слова каждый. Верни только JSON.")


def tag_requests(row: dict[str, Any]) -> list[ChatRequest]:
    schema = {"type": "object", "additionalProperties": False, "required": ["tags"],
              "properties": {"tags": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                                      "maxItems": MAX_TAGS}}}
    text = f"## Запрос\n{row['text'].strip()}\n\nВерни JSON: {{\"tags\": [\"тег\", …]}}."
    return [ChatRequest(messages=({"role": "system", "content": SYSTEM}, {"role": "user", "content": text}),
                        temperature=0.0, response_format=json_schema_format("instag_tags", schema), tag=TAG_TAG)]


def normalize_tag(tag: str) -> str:
    return re.sub(r"\s+", " ", tag.strip().strip("#\"'«».,;").lower())


def parse_tags(text: str | None) -> tuple[list[str] | None, str | None]:
    obj = parse_object(text, required=("tags",))
    if isinstance(obj, str):
        return None, obj
    raw = obj["tags"]
    if not isinstance(raw, list):
        return None, f"tags_not_a_list: {type(raw).__name__}"
    tags: list[str] = []
    for t in raw:
        if isinstance(t, str) and normalize_tag(t) and normalize_tag(t) not in tags:
            tags.append(normalize_tag(t))
    if not tags:
        return None, "no_tags"
    return tags[:MAX_TAGS], None


def finish_tags(row: dict[str, Any], resps: list[ChatResponse]) -> dict[str, Any]:
    tags, reason = parse_tags(resps[0].text)
    return {"tags": tags, "rejected": reason}
