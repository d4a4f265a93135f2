"""Language scoring of FC samples: calls are scored on what the user said, never on argument values."""

from __future__ import annotations

import json

import polars as pl

from fabrika.filters.language import LanguageGate, _language, score_languages, score_rows

CYRILLIC_SET = ["ru", "en", "uk", "be", "bg"]


def _call_row(i: int, users: list[str], args: dict, lang: str = "ru") -> dict:
    prompt = [{"role": "system", "content": "Ты полезный ассистент."}]
    for u in users:
        prompt += [{"role": "user", "content": u}, {"role": "assistant", "content": "Хорошо, уточню."}]
    prompt = prompt[:-1]
    completion = [{"role": "assistant", "content": None,
                   "tool_calls": [{"id": "c1", "type": "function",
                                   "function": {"name": "find_tickets", "arguments": args}}]}]
    return {"id": f"s{i}", "lang": lang, "target_type": "tool_call",
            "prompt": json.dumps(prompt, ensure_ascii=False), "completion": json.dumps(completion, ensure_ascii=False)}


def _kept(scores: list[dict], gate: LanguageGate) -> list[bool]:
    df = pl.DataFrame(scores, schema={"id": pl.Utf8, "lang_detected": pl.Utf8, "lang_confidence": pl.Float64,
                                      "homoglyph_share": pl.Float64, "lang_matches": pl.Boolean})
    keep = pl.lit(True)
    for pred in _language(gate):
        expr = pred.expr.fill_null(True) if pred.keep_null else pred.expr
        keep = keep & expr
    return df.select(keep.alias("k"))["k"].to_list()


def test_a_call_is_scored_on_the_users_words_not_its_arguments():
    rows = [_call_row(0, ["Найди, пожалуйста, два билета на поезд до Казани на четырнадцатое марта"],
                      {"count": 2, "date": "2025-03-14"}),
            _call_row(1, ["Какая погода будет завтра в Казани? Хочу понять, брать ли зонт"], {"city": "Казань"})]
    scores = score_rows(rows, "auto", CYRILLIC_SET)
    assert [s["lang_detected"] for s in scores] == ["ru", "ru"]
    # the old view (argument values only) had nothing or the wrong language to go on
    old = score_rows(rows, "completion_values", CYRILLIC_SET)
    assert old[0]["lang_detected"] is None and old[1]["lang_detected"] != "ru" or old[1]["lang_confidence"] < 0.9


def test_english_user_turns_in_a_ru_episode_are_still_dropped():
    row = _call_row(0, ["Find me two train tickets to Kazan for the fourteenth of March, please"], {"city": "Казань"})
    (score,) = score_rows([row], "auto", CYRILLIC_SET)
    assert score["lang_detected"] == "en" and score["lang_matches"] is False
    assert _kept([score], LanguageGate(allowed=["ru"])) == [False]


def test_too_few_letters_is_null_and_null_passes():
    (score,) = score_languages(["№ 12-45, 2025-03-14"], CYRILLIC_SET)
    assert score["lang_detected"] is None and score["lang_confidence"] is None
    assert _kept([{"id": "x", **score, "lang_matches": None}], LanguageGate(allowed=["ru"], min_confidence=0.5)) == [True]


def test_min_confidence_is_inert_for_ru_en_and_separates_within_cyrillic():
    texts = ["Покажи заказ A1024", "Привіт, знайди квиток", "hello как дела", "Москва, завтра"]
    two = score_languages(texts, ["ru", "en"], min_letters=1)
    assert all(s["lang_confidence"] == 1.0 for s in two)  # script alone decides between ru and en
    many = score_languages(texts, CYRILLIC_SET, min_letters=1)
    assert all(s["lang_confidence"] < 0.95 for s in many if s["lang_detected"] == "ru")
