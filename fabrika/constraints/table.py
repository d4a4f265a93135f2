"""The library's conflict table (see :mod:`fabrika.constraints.conflicts` for the mechanism).

Kept in one place so a reviewer can read every incompatibility at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabrika.constraints.conflicts import EXCLUSIVE, add_pairs, add_param_rule, forbid_chars, forbid_text, verbatim_texts
from fabrika.constraints.russian import first_person_words, missing_yo, other_tense_verbs, ty_words, vy_words

JSON = "ru.format.json"
# Whole-layout constraints: each fixes how the response is laid out.
LAYOUT = [
    "ru.format.bullets_exact",
    "ru.format.numbered_list",
    "ru.format.sections",
    "ru.format.markdown_table",
    "ru.format.headers",
    "ru.format.two_responses",
    "ru.russian.acrostic_lines",
    "ru.russian.haiku",
]

EXCLUSIVE.add("ru.repeat.copy_only")  # the response is fixed text: nothing else can be asked

add_pairs(
    JSON,
    LAYOUT
    + [
        "ru.format.title",
        "ru.format.highlights",
        "ru.format.postscript",
        "ru.format.placeholders",
        "ru.format.wrapped_guillemets",
        "ru.length.paragraphs_exact",
        "ru.length.paragraphs_min",
        "ru.keywords.paragraph_first_word",
        "ru.startend.start_phrase",
        "ru.startend.end_phrase",
        "ru.startend.ends_with_question",
        "ru.startend.last_word",
        "ru.repeat.request_first",
        "ru.russian.acrostic_sentences",
        "ru.russian.guillemets",
        "ru.russian.syllables_line_max",
        "ru.language.ru_then_en",
        "ru.punct.no_commas",
        "ru.case.all_uppercase",
        "ru.case.sentence_capitalized",
    ],
)
# Layouts exclude each other.
for i, a in enumerate(LAYOUT):
    add_pairs(a, LAYOUT[i + 1 :])
add_pairs("ru.format.no_markdown", ["ru.format.highlights", "ru.format.headers", "ru.format.markdown_table"])
add_pairs("ru.format.no_markdown", ["ru.format.two_responses", "ru.format.bullets_exact"])  # both use '*'/'-' marks
add_pairs(
    "ru.format.wrapped_guillemets",
    LAYOUT
    + ["ru.startend.start_phrase", "ru.startend.end_phrase", "ru.startend.ends_with_question"]
    + ["ru.repeat.request_first", "ru.format.postscript", "ru.russian.acrostic_sentences", "ru.format.title"],
)
add_pairs("ru.format.postscript", ["ru.startend.end_phrase", "ru.startend.last_word", "ru.startend.ends_with_question"])
add_pairs("ru.format.postscript", ["ru.russian.acrostic_lines", "ru.russian.haiku", "ru.russian.acrostic_sentences"])
add_pairs("ru.format.two_responses", ["ru.length.sentences_exact", "ru.russian.acrostic_sentences"])

add_pairs("ru.case.all_lowercase", ["ru.case.all_uppercase", "ru.case.capital_words_min"])
add_pairs("ru.case.all_lowercase", ["ru.case.sentence_capitalized", "ru.russian.address_vy"])
add_pairs("ru.case.all_uppercase", ["ru.case.capital_words_max"])
add_pairs("ru.russian.yo_everywhere", ["ru.russian.yo_nowhere"])
add_pairs("ru.russian.address_vy", ["ru.russian.address_ty"])
add_pairs("ru.russian.past_tense", ["ru.russian.present_tense", "ru.russian.future_tense"])
add_pairs("ru.russian.present_tense", ["ru.russian.future_tense"])
add_pairs("ru.russian.acrostic_lines", ["ru.russian.acrostic_sentences", "ru.russian.syllables_line_max"])
add_pairs("ru.russian.acrostic_lines", ["ru.length.paragraphs_exact", "ru.length.paragraphs_min"])
add_pairs("ru.russian.acrostic_lines", ["ru.format.title", "ru.startend.start_phrase", "ru.repeat.request_first"])
add_pairs("ru.russian.acrostic_lines", ["ru.keywords.paragraph_first_word", "ru.language.ru_then_en"])
add_pairs("ru.russian.acrostic_sentences", ["ru.startend.start_phrase"])  # sentence counts: see bounds.py
add_pairs("ru.russian.acrostic_sentences", ["ru.repeat.request_first", "ru.keywords.paragraph_first_word"])
add_pairs("ru.russian.acrostic_sentences", ["ru.language.ru_then_en", "ru.repeat.phrase_n"])
add_pairs(
    "ru.russian.haiku",
    [
        "ru.length.words_min",
        "ru.length.sentences_min",
        "ru.length.paragraphs_exact",
        "ru.length.paragraphs_min",
        "ru.format.title",
        "ru.startend.start_phrase",
        "ru.startend.end_phrase",
        "ru.repeat.request_first",
        "ru.repeat.phrase_n",
        "ru.keywords.paragraph_first_word",
        "ru.language.ru_then_en",
    ],
)
# haiku vs short lines and a closing question vs an end phrase: see the parameter rules below
add_pairs("ru.startend.ends_with_question", ["ru.punct.no_question", "ru.startend.last_word"])
add_pairs("ru.startend.end_phrase", ["ru.startend.last_word"])
add_pairs("ru.startend.start_phrase", ["ru.repeat.request_first", "ru.keywords.paragraph_first_word"])
add_pairs("ru.russian.numbers_in_words", ["ru.format.numbered_list", "ru.format.sections"])
add_pairs("ru.russian.no_latin", ["ru.language.ru_then_en", "ru.format.json"])
add_pairs("ru.language.ru_then_en", ["ru.language.response_lang", "ru.length.paragraphs_exact"])
add_pairs("ru.language.ru_then_en", ["ru.russian.address_vy", "ru.russian.address_ty", "ru.russian.yo_everywhere"])
add_pairs("ru.language.ru_then_en", ["ru.case.capital_words_max", "ru.russian.no_first_person"])
add_pairs("ru.language.ru_then_en", ["ru.russian.past_tense", "ru.russian.present_tense", "ru.russian.future_tense"])
add_pairs("ru.repeat.request_first", ["ru.keywords.paragraph_first_word"])
# The request is repeated verbatim, capital first letter included.
add_pairs("ru.repeat.request_first", ["ru.case.all_lowercase", "ru.case.all_uppercase"])
# Section headings («Раздел 1») are sentences of their own, starting with the marker's letter.
add_pairs("ru.russian.acrostic_sentences", ["ru.format.sections"])

# Words and forms banned anywhere, against text other constraints require verbatim
# («Давайте разберёмся.»: a 1st-person verb and a «вы» imperative; «Остались вопросы?»: past tense).
forbid_text("ru.russian.no_first_person", lambda s, p: bool(first_person_words(s)))
forbid_text("ru.russian.address_ty", lambda s, p: bool(vy_words(s)))
forbid_text("ru.russian.address_vy", lambda s, p: bool(ty_words(s)))
forbid_text("ru.russian.past_tense", lambda s, p: bool(other_tense_verbs(s, "past")))
forbid_text("ru.russian.present_tense", lambda s, p: bool(other_tense_verbs(s, "pres")))
forbid_text("ru.russian.future_tense", lambda s, p: bool(other_tense_verbs(s, "futr")))
forbid_text("ru.russian.yo_everywhere", lambda s, p: bool(missing_yo(s)))

# Character bans against other constraints' parameters («P.S.» and no Latin; «Итак,» and no commas).
forbid_chars("ru.keywords.lipogram", lambda p: p["letter"].lower())
forbid_chars("ru.russian.yo_nowhere", lambda p: "ё")
forbid_chars("ru.russian.no_latin", lambda p: "LATIN")
forbid_chars("ru.punct.no_commas", lambda p: ",")
forbid_chars("ru.punct.no_exclamation", lambda p: "!")
forbid_chars("ru.punct.no_question", lambda p: "?")
forbid_chars("ru.punct.no_dash", lambda p: "—–")
forbid_chars("ru.russian.numbers_in_words", lambda p: "0123456789")

# Constraints that only make sense for an answer in Russian.
_RUSSIAN_ONLY_FAMILIES = {"russian", "keywords", "startend", "repeat"}


def _foreign_answer(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """An answer required in another language cannot satisfy Russian-text constraints."""
    if a != "ru.language.response_lang" or pa["lang"] == "ru":
        return False
    if b == "ru.russian.no_latin":
        return pa["lang"] not in ("uk", "kk")
    return b.split(".")[1] in _RUSSIAN_ONLY_FAMILIES and b != "ru.russian.no_latin"


def _frequency_vs_lipogram(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """«use letter X at least n times» against «never use letter X»."""
    return a == "ru.keywords.letter_frequency" and b == "ru.keywords.lipogram" and pa["letter"] == pb["letter"]


def _letter_cap_vs_verbatim(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """«letter X at most n times» against verbatim text that already holds more X (× its repeats)."""
    if a != "ru.keywords.letter_frequency" or pa["relation"] == "at_least":
        return False
    repeats = pb.get("n", 1) if b == "ru.repeat.phrase_n" else 1
    count = sum(s.lower().count(pa["letter"].lower()) for s in verbatim_texts(pb)) * repeats
    return count > pa["n"]


def _last_paragraph_word_vs_english(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """A Russian first word for the last paragraph, which ru_then_en wants in English."""
    return a == "ru.keywords.paragraph_first_word" and b == "ru.language.ru_then_en" and pa["nth"] == pa["n"]


def _haiku_vs_short_lines(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """A haiku's middle line has 7 syllables: lines of at most n < 7 syllables cannot hold it."""
    return a == "ru.russian.haiku" and b == "ru.russian.syllables_line_max" and pb["n"] < 7


def _question_vs_end_phrase(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """Ending with a question and with a fixed phrase agree only if the phrase is a question."""
    return a == "ru.startend.ends_with_question" and b == "ru.startend.end_phrase" and "?" not in pb["phrase"][-3:]


for _rule in (
    _foreign_answer,
    _frequency_vs_lipogram,
    _letter_cap_vs_verbatim,
    _last_paragraph_word_vs_english,
    _haiku_vs_short_lines,
    _question_vs_end_phrase,
):
    add_param_rule(_rule)
