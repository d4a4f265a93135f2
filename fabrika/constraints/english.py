"""English instruction templates (``render(params, lang="en")``) for every library constraint.

The answer stays whatever the verifier checks — for Russian-specific constraints
(ё, «ёлочки», Cyrillic only) the English instruction asks for a Russian answer.
Slots: ``{n:word}`` renders «1 word» / «5 words»; derived slots end in ``_en``.
"""

from __future__ import annotations

import dataclasses

from fabrika.constraints.base import SeedConstraint

EN: dict[str, tuple[str, ...]] = {
    "ru.format.json": ("Format your entire answer as valid JSON; you may wrap it in a ```json block.",),
    "ru.format.bullets_exact": ("Your answer must contain exactly {n:bullet point} (lines starting with \"- \" or \"* \").",),
    "ru.format.numbered_list": ("Format your answer as a numbered list of exactly {n:item} (1., 2., ...).",),
    "ru.format.sections": (
        "Split your answer into {n:section}. Start each section on a new line with \"{marker} X\", where X is the "
        "section number, e.g. \"{marker} 1\".",
    ),
    "ru.format.title": ("Give your answer a title wrapped in double angle brackets, such as <<Title>>.",),
    "ru.format.placeholders": ("Include at least {n:placeholder} in square brackets, such as [address] or [name].",),
    "ru.format.highlights": ("Highlight at least {n:part} of your answer with markdown, e.g. *important point*.",),
    "ru.format.postscript": ("At the end of your answer, add a postscript on its own line starting with \"{marker}\".",),
    "ru.format.two_responses": ("Give two different answers, separated by a line of six asterisks: ******",),
    "ru.format.no_markdown": ("Do not use any markdown: no asterisks, hashes, backticks or tables.",),
    "ru.format.markdown_table": ("Present your answer as a markdown table with a header row and exactly {n:data row}.",),
    "ru.format.headers": ("Use exactly {n:markdown heading} (lines starting with #).",),
    "ru.format.wrapped_guillemets": ("Wrap your entire answer in Russian guillemets: «...».",),
    "ru.keywords.include": ("Answer in Russian and use {kw_en} (any grammatical form).",),
    "ru.keywords.exclude": ("Answer in Russian and do not use {kw_en} in any form.",),
    "ru.keywords.frequency": ("Answer in Russian; the word «{keyword}» (any form) must appear {rel_en} {n:time}.",),
    "ru.keywords.letter_frequency": ("Answer in Russian; the letter «{letter}» must appear {rel_en} {n:time}.",),
    "ru.keywords.lipogram": ("Answer in Russian without using the letter «{letter}» even once.",),
    "ru.keywords.paragraph_first_word": (
        "Answer in Russian in exactly {n:paragraph} separated by blank lines; paragraph {nth} must start with the "
        "word «{word}» (any form).",
    ),
    "ru.length.words_max": ("Answer in at most {n:word}.",),
    "ru.length.words_min": ("Answer in at least {n:word}.",),
    "ru.length.words_range": ("Your answer must be between {lo} and {hi} words long.",),
    "ru.length.sentences_max": ("Answer in at most {n:sentence}.",),
    "ru.length.sentences_min": ("Answer in at least {n:sentence}.",),
    "ru.length.sentences_exact": ("Answer in exactly {n:sentence}.",),
    "ru.length.paragraphs_exact": ("Your answer must have exactly {n:paragraph}, separated by blank lines.",),
    "ru.length.paragraphs_min": ("Your answer must have at least {n:paragraph}, separated by blank lines.",),
    "ru.length.chars_max": ("Keep your answer within {n:character}, spaces included.",),
    "ru.russian.yo_everywhere": ("Answer in Russian and always write «ё» where it belongs (ещё, её, зелёный), never «е».",),
    "ru.russian.yo_nowhere": ("Answer in Russian without the letter «ё»: write «е» instead.",),
    "ru.russian.no_latin": ("Answer in Russian using no Latin letters at all, even for names and terms.",),
    "ru.russian.guillemets": ("Answer in Russian and quote only with guillemets «...», never with \"...\" or “...”.",),
    "ru.russian.numbers_in_words": ("Write every number in words, not digits.",),
    "ru.russian.address_vy": ("Answer in Russian, addressing the reader formally as «Вы», capitalised (Вы, Вас, Ваш).",),
    "ru.russian.address_ty": ("Answer in Russian, addressing the reader informally as «ты».",),
    "ru.russian.acrostic_lines": (
        "Answer in Russian in {n:line} whose first letters, top to bottom, spell the word «{word}».",
    ),
    "ru.russian.acrostic_sentences": ("Answer in Russian in {n:sentence} whose first letters spell «{word}».",),
    "ru.russian.syllables_line_max": ("Answer in Russian in short lines of at most {n:syllable} each.",),
    "ru.russian.haiku": ("Answer in Russian as a haiku: exactly three lines of 5, 7 and 5 syllables.",),
    "ru.russian.past_tense": ("Answer in Russian with every verb in the past tense.",),
    "ru.russian.present_tense": ("Answer in Russian with every verb in the present tense.",),
    "ru.russian.future_tense": ("Answer in Russian with every verb in the future tense.",),
    "ru.russian.no_first_person": ("Answer in Russian impersonally: no «я», «мы», «мой», «наш» or first-person verbs.",),
    "ru.startend.start_phrase": ("Start your answer with exactly the phrase «{phrase}»",),
    "ru.startend.end_phrase": ("End your answer with exactly the phrase «{phrase}» and write nothing after it.",),
    "ru.startend.ends_with_question": ("End your answer with a question to the reader.",),
    "ru.startend.last_word": ("Answer in Russian; the last word must be «{word}» (any form).",),
    "ru.case.all_lowercase": ("Write your entire answer in lowercase letters only.",),
    "ru.case.all_uppercase": ("Write your entire answer in capital letters only.",),
    "ru.case.capital_words_max": ("Write at most {n:word} entirely in capitals (abbreviations such as РФ do not count).",),
    "ru.case.capital_words_min": ("Write at least {n:word} entirely in capitals for emphasis (abbreviations do not count).",),
    "ru.case.sentence_capitalized": ("Start every sentence with a capital letter.",),
    "ru.punct.no_commas": ("Do not use a single comma in your answer.",),
    "ru.punct.no_exclamation": ("Do not use exclamation marks.",),
    "ru.punct.no_question": ("Do not use question marks.",),
    "ru.punct.no_semicolon": ("Do not use semicolons.",),
    "ru.punct.no_dash": ("Do not use dashes (neither «—» nor «–»).",),
    "ru.repeat.request_first": ("First repeat the request word for word, then answer it. The request: «{request}»",),
    "ru.repeat.phrase_n": ("Repeat the phrase «{phrase}» exactly {n:time} in your answer, unchanged.",),
    "ru.repeat.copy_only": ("Just copy the following text word for word and add nothing: «{request}»",),
    "ru.language.response_lang": ("Answer only in {lang_name_en}.",),
    "ru.language.ru_then_en": ("Answer first in Russian, then, after a blank line, give the same answer in English.",),
}


def apply_english(registry: dict[str, SeedConstraint]) -> None:
    """Attach :data:`EN` templates; every library constraint must have one."""
    missing = sorted(set(registry) - set(EN))
    if missing:
        raise KeyError(f"constraints without English templates: {missing}")
    for cid, c in registry.items():
        registry[cid] = dataclasses.replace(c, templates_en=EN[cid])
