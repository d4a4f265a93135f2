"""Text views the scorers read."""

from __future__ import annotations

import json

from fabrika.filters.language import score_rows
from fabrika.filters.text import row_text


def _row(lang: str, args: dict, content: str | None = None, user: str = "") -> dict:
    completion = [{"role": "assistant", "content": content,
                   "tool_calls": [{"name": "book_train_ticket", "arguments": args}]}]
    prompt = [{"role": "user", "content": user}]
    return {"id": "r1", "lang": lang, "completion": json.dumps(completion, ensure_ascii=False),
            "prompt": json.dumps(prompt, ensure_ascii=False)}


def test_completion_values_keep_argument_values_not_identifiers():
    row = _row("ru", {"from_city": "Санкт-Петербург", "to_city": "Нижний Новгород", "seats": 2,
                      "passenger": {"full_name": "Анна Сергеевна Петрова"}})
    text = row_text(row, "completion_values")
    assert "book_train_ticket" not in text and "from_city" not in text and "full_name" not in text
    assert "Нижний Новгород" in text and "Анна Сергеевна Петрова" in text
    # the identifier-heavy view still exists for dedup/decontam
    assert "book_train_ticket" in row_text(row, "completion")


def test_a_russian_tool_call_is_detected_as_russian():
    """A call is scored on the user turn it answers (its arguments are no language evidence)."""
    row = _row("ru", {"from_city": "Санкт-Петербург", "to_city": "Нижний Новгород", "date": "в пятницу вечером"},
               user="Купи мне билет из Петербурга в Нижний Новгород на пятницу, на вечер")
    (scored,) = score_rows([row], languages=("ru", "en"))
    assert scored["lang_detected"] == "ru" and scored["lang_matches"] is True
    english = _row("ru", {"from_city": "Санкт-Петербург", "date": "в пятницу"},
                   user="Buy me a ticket from Saint Petersburg next Friday evening please")
    (scored,) = score_rows([english], languages=("ru", "en"))
    assert scored["lang_matches"] is False
