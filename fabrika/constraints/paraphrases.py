"""Extra Russian phrasings of instructions, so generated prompts do not all read alike.

Appended to each constraint's own templates at import (:func:`apply_paraphrases`);
the same slots and agreement rules apply (see :mod:`fabrika.constraints.base`).
"""

from __future__ import annotations

import dataclasses

from fabrika.constraints.base import SeedConstraint

EXTRA_RU: dict[str, tuple[str, ...]] = {
    "ru.format.numbered_list": ("Ответ — нумерованный список: ровно {n:пункт}, пронумерованных 1., 2. и так далее.",),
    "ru.format.sections": ("В ответе должно быть {n:раздел}; заголовок каждого — «{marker} 1», «{marker} 2» и т. д.",),
    "ru.format.title": ("Озаглавьте ответ; заголовок заключите в << и >>.",),
    "ru.format.placeholders": ("Оставьте в тексте хотя бы {n:поле:accs} для подстановки в квадратных скобках, вроде [дата].",),
    "ru.format.highlights": ("Отметьте markdown-выделением (*так*) как минимум {n:фрагмент:accs} текста.",),
    "ru.format.two_responses": ("Предложите два непохожих ответа; между ними поставьте строку ******",),
    "ru.format.no_markdown": ("Пишите простым текстом, без какой-либо markdown-разметки.",),
    "ru.format.markdown_table": ("Оформите ответ таблицей markdown: заголовок и ровно {n} под ним.",),
    "ru.format.headers": ("Структурируйте ответ заголовками markdown (#): их должно быть ровно {n}.",),
    "ru.format.wrapped_guillemets": ("Весь ответ целиком поставьте в «ёлочки»: он должен начинаться с « и заканчиваться ».",),
    "ru.keywords.paragraph_first_word": (
        "Напишите ровно {n:абзац}, отделяя их пустой строкой. Абзац № {nth} начните словом «{word}» "
        "(форма слова может быть любой).",
    ),
    "ru.length.paragraphs_min": ("Разбейте ответ хотя бы на {n:абзац:accs}; между абзацами — пустая строка.",),
    "ru.russian.yo_everywhere": ("Соблюдайте букву «ё»: пишите «ещё», «всё-таки», «идёт», а не «еще», «все-таки», «идет».",),
    "ru.russian.yo_nowhere": ("Букву «ё» в ответе не употребляйте, заменяйте её на «е».",),
    "ru.russian.no_latin": ("В ответе не должно быть ни одной латинской буквы — только кириллица, цифры и знаки препинания.",),
    "ru.russian.guillemets": ("Для цитат и названий используйте русские кавычки «ёлочки»; другие виды кавычек запрещены.",),
    "ru.russian.numbers_in_words": ("Не используйте цифры: любые числа записывайте прописью.",),
    "ru.russian.address_vy": ("Пишите в вежливой форме: обращайтесь к собеседнику на «Вы» с прописной буквы.",),
    "ru.russian.address_ty": ("Общайтесь неформально: обращайтесь к собеседнику на «ты».",),
    "ru.russian.acrostic_lines": ("Сделайте ответ акростихом: {n:строка}, первые буквы которых дают слово «{word}».",),
    "ru.russian.acrostic_sentences": ("Первые буквы предложений ответа должны по порядку образовывать слово «{word}».",),
    "ru.russian.syllables_line_max": ("Ни одна строка ответа не должна быть длиннее {n:слог:gent}.",),
    "ru.russian.haiku": ("Ответьте хокку: три строки, в первой 5 слогов, во второй 7, в третьей 5.",),
    "ru.russian.past_tense": ("Ведите рассказ в прошедшем времени: ни одного глагола в настоящем или будущем.",),
    "ru.russian.present_tense": ("Пишите только в настоящем времени: никаких глаголов в прошедшем или будущем.",),
    "ru.russian.future_tense": ("Опишите всё в будущем времени: каждый глагол должен стоять в будущем.",),
    "ru.russian.no_first_person": ("Не пишите от первого лица — ни в единственном, ни во множественном числе.",),
    "ru.startend.end_phrase": ("Последние слова ответа должны быть в точности такими: «{phrase}»",),
    "ru.startend.ends_with_question": ("Последнее предложение ответа должно быть вопросом.",),
    "ru.startend.last_word": ("Завершите ответ словом «{word}» в любой форме.",),
    "ru.case.all_lowercase": ("Не используйте заглавных букв вообще — весь текст строчными.",),
    "ru.case.all_uppercase": ("Ответ должен быть полностью набран прописными буквами.",),
    "ru.case.capital_words_max": ("{rule}; сокращения вроде РФ или СССР можно.",),
    "ru.case.capital_words_min": ("Напишите КАПСОМ хотя бы {n:слово:accs}, чтобы подчеркнуть главное (аббревиатуры не в счёт).",),
    "ru.case.sentence_capitalized": ("Начинайте каждое предложение с прописной буквы.",),
    "ru.punct.no_commas": ("Обойдитесь в ответе без запятых.",),
    "ru.punct.no_exclamation": ("В ответе не должно быть восклицательных знаков.",),
    "ru.punct.no_question": ("Обойдитесь без вопросительных знаков.",),
    "ru.punct.no_semicolon": ("В ответе не должно быть точки с запятой.",),
    "ru.punct.no_dash": ("Обойдитесь без тире; дефис внутри слов (кто-то, северо-запад) допустим.",),
    "ru.repeat.request_first": ("Перед ответом дословно повторите мой запрос. Вот он: «{request}»",),
    "ru.repeat.phrase_n": ("Фраза «{phrase}» должна встретиться в ответе ровно {n:раз}, без изменений.",),
    "ru.repeat.copy_only": ("Ваш ответ — это точная копия следующего текста, без каких-либо добавлений: «{request}»",),
    "ru.language.ru_then_en": ("Ответьте на русском, потом через пустую строку повторите тот же ответ по-английски.",),
}


def apply_paraphrases(registry: dict[str, SeedConstraint]) -> None:
    """Append :data:`EXTRA_RU` to the templates of each named constraint."""
    unknown = sorted(set(EXTRA_RU) - set(registry))
    if unknown:
        raise KeyError(f"paraphrases for unknown constraints: {unknown}")
    for cid, extra in EXTRA_RU.items():
        registry[cid] = dataclasses.replace(registry[cid], templates=registry[cid].templates + extra)
