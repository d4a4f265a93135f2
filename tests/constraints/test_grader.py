"""Verdicts a careful human grader would give, input class by input class.

Each row is (constraint, params, response, the grader's verdict). The classes are
the ways real completions differ from textbook text: invisible characters, stress
marks, look-alike letters and punctuation, dialogue and abbreviations, RFC-strict
JSON, markdown that is arithmetic, short Russian answers.
"""

from __future__ import annotations

import unicodedata

import pytest

from fabrika.constraints import REGISTRY

Q = "ru.startend.ends_with_question"
CAP = "ru.case.sentence_capitalized"
BAN = "ru.keywords.exclude"
INC = "ru.keywords.include"
NFD = lambda s: unicodedata.normalize("NFD", s)  # noqa: E731


def _rows(cid: str, params: dict, yes: list[str], no: list[str]) -> list[tuple[str, dict, str, bool]]:
    return [(cid, params, t, True) for t in yes] + [(cid, params, t, False) for t in no]


CLASSES: dict[str, list[tuple[str, dict, str, bool]]] = {
    "questions: ?!, ?.., inside quotes, before emoji": _rows(
        Q,
        {},
        [
            "Вы это серьёзно?!",
            "Неужели?..",
            "А вы как думаете?!.",
            "Он спросил: «А вы придёте?»",
            "«Что дальше?»",
            "Как вам такая идея? 😊",
            "Как вам такая идея?😊🙂",
            "Как вам идея? 👍🏻",  # emoji with a skin-tone modifier
            "Что скажете？",  # fullwidth
            "Что скажете❓",
            "(Что скажете?)",
            "**Что скажете?**",
            "Что скажете?\u200b",
            "Итак, что выберете?\n\n",
        ],
        ["Что скажете? Жду ответа.", "Вот и всё!", "Он спросил: «Придёте?» Я кивнул.", "Как вам идея 😊", "Вопрос?\nНет."],
    ),
    "sentence counts with ?! and ?..": _rows("ru.length.sentences_exact", {"n": 3}, [
        "Как дела?! Всё хорошо. А у вас?..",
        "Он спросил: «Ты придёшь?» Я кивнул. Потом ушёл.",
        "Как вам идея? 😊 Мне нравится. Пишите!",
        "Привет. как дела? Хорошо.",  # a lower-case start does not glue two sentences
    ], ["Как дела?! Всё хорошо.", "Т. е. всё. И т. д. и т. п."]),
    "capitalisation after dialogue dashes, ellipses, abbreviations": _rows(
        CAP,
        {},
        [
            "— Привет! — сказал он. — Как дела?",
            "«Привет!» — сказал он. Потом ушёл.",
            "— Ты придёшь? — спросила она.",
            "Я подумал… и решил остаться.",
            "Я подумал... и решил остаться.",
            "Площадь квартиры 50 кв. м, это немало.",
            "Пришло 20 чел. на встречу.",
            "Это слово англ. происхождения.",
            "Ср. с предыдущим примером.",
            "В 1999 г. он уехал в Казань.",
            "Население 500 тыс. человек.",
            "Цена 10 млн руб. в год.",
            "См. табл. 3 и рис. 2 ниже.",
            "Книги, журналы и т. д. лежат на полке.",
            "Он живёт на ул. Ленина, им. Пушкина названа школа.",
            "2024 год был удачным. Всё получилось.",
            "А. С. Пушкин родился в Москве.",
        ],
        ["Привет. как дела?", "Ой! как больно.", "Всё хорошо? да.", "г. Москва — столица.", "— привет, — сказал он."],
    ),
    "banned words evaded by stress marks, soft hyphens, zero-width spaces, particles": _rows(
        BAN,
        {"keywords": ["книга"]},
        ["Здесь о журналах.", "Книжный шкаф пуст."],
        [
            "Возьмите кни\u0301гу.",
            "Возьмите кни\u00adгу.",
            "Возьмите кни\u200bгу.",
            "Возьмите \u2060книгу\ufeff.",
            "Книгу-то я прочитал.",
            "Книга-таки нашлась.",
            "Возьми книжку-ка. Нет, книгу-ка.",
            "Возьмите КНИГУ.",
            "Возьмите книгу\u0306.",  # a breve typed on «у»
            "Возьмите книгў.",  # Belarusian «ў» in a Russian word
            "Возьмите кнiгу.",  # Latin «i»
        ],
    ),
    "ё and е are one letter for keywords": _rows(BAN, {"keywords": ["елка"]}, ["Сосна и пихта."], ["Зелёная ёлка.", "Зеленая елка."])
    + _rows(INC, {"keywords": ["еще"]}, ["Дайте ещё чаю.", "Дайте еще чаю."], ["Дайте чаю."]),
    "particles do not hide a required word; dictionary words stay themselves": _rows(
        INC, {"keywords": ["город"]}, ["Город-то большой.", "Город-таки вырос."], ["Горожане рады.", "Городок-то маленький."]
    )
    + _rows(BAN, {"keywords": ["кто"]}, ["Кто-то пришёл."], ["Кто пришёл?"]),
    "dash variants": _rows(
        "ru.punct.no_dash",
        {},
        ["Кто-то пришёл.", "Запустите с флагом --help.", "Северо\u2011запад."],
        [
            "Москва -- столица России.",
            "-- Да, -- ответил он.",
            "Москва\u2012столица.",
            "Москва \u2012 столица.",
            "Москва \u2015 столица.",
            "Москва \u2e3a столица.",
            "Москва \ufe58 столица.",
            "Москва \u2212 столица.",
            "Цены 10–20 рублей.",
        ],
    ),
    "punctuation look-alikes": _rows("ru.punct.no_exclamation", {}, ["Всё хорошо."], ["Ура！", "Ура‼", "Ура❗", "¡Ура"])
    + _rows("ru.punct.no_question", {}, ["Всё хорошо."], ["Правда？", "Как⁇", "Что❓", "Правда⁈"])
    + _rows("ru.punct.no_commas", {}, ["Да и нет."], ["Да‚ конечно.", "Да，конечно.", "Да、конечно.", "Да﹐ конечно."])
    + _rows("ru.punct.no_semicolon", {}, ["Да: нет."], ["Да；нет.", "Да\u037e нет.", "Да⁏ нет."]),
    "fullwidth and mathematical Latin letters": _rows(
        "ru.russian.no_latin", {}, ["Язык программирования Питон.", "Дом № 5."],
        ["Язык Ｐｙｔｈｏｎ.", "Язык 𝐏𝐲𝐭𝐡𝐨𝐧.", "Язык 𝔓𝔶𝔱𝔥𝔬𝔫.", "Компания Ⓐ.", "Язык ℂ."]
    )
    + _rows("ru.case.all_lowercase", {}, ["всё хорошо."], ["всё 𝐇орошо.", "всё Ｈорошо."])
    + _rows("ru.russian.numbers_in_words", {}, ["Пять стульев."], ["５ стульев.", "𝟓 стульев.", "Глава ①."]),
    "JSON per RFC 8259": _rows(
        "ru.format.json",
        {},
        ['{"a": 1}', '\ufeff{"a": 1}', '{"a": "NaN", "b": "Infinity"}', '[1e400]', '"строка"', "null", '{"a": "кни\u200bга"}'],
        [
            '{"a": NaN}',
            '{"a": Infinity}',
            '{"a": -Infinity}',
            "NaN",
            '[1, 2, NaN]',
            '\u00a0{"a": 1}',  # a no-break space is not JSON whitespace
            '{"a": 1}\u200b',
            '\uff5b"a": 1\uff5d',  # fullwidth braces look like braces but are not JSON
            '{"a": 01}',
            "{'a': 1}",
            '{"a": 1} {"b": 2}',
        ],
    ),
    "emphasis is CommonMark, not arithmetic": _rows(
        "ru.format.highlights",
        {"n": 1},
        ["Это *важно*.", "Это **важно**!", "Это _важно_.", "***Очень*** важно."],
        ["Считаем: 2 * 3 * 4 = 24.", "Считаем: 2*3*4 = 24.", "Код `*x*` не выделение.", "Звёздочка * одна.", "** **"],
    )
    + _rows("ru.format.highlights", {"n": 2}, ["*Раз* и *два*, а 2 * 3 * 4 = 24."], ["*Раз*, а 2 * 3 * 4 = 24."]),
    "six stars, not seven": _rows(
        "ru.format.two_responses",
        {},
        ["Первый.\n******\nВторой.", "Первый.\n  ******  \nВторой.", "Первый.\r\n******\r\nВторой."],
        ["Первый.\n*******\nВторой.", "Первый.\n********\nВторой.", "Первый.*******Второй.", "Первый.\n* * * * * *\nВторой."],
    ),
    "the conditional guillemets instruction": _rows(
        "ru.russian.guillemets",
        {},
        ["Без кавычек вообще.", "Роман «Война и мир».", "Цитата: «да»."],
        ['Роман "Война и мир".', "Роман “Война и мир”.", "Роман ＂Война и мир＂.", "Роман »Война и мир«.", "Роман «Война и мир."],
    ),
    "one word each: Т.е., и/или, 1 000 000": _rows(
        "ru.length.words_max",
        {"n": 3},
        [
            "Т.е. всё ясно.",
            "Т. е. всё ясно.",
            "Чай и/или кофе.",
            "Скорость 60 км/ч.",
            "Стоит 1 000 000 рублей.",
            "Стоит 1\u00a0000\u00a0000 рублей.",
            "Стоит 1\u2009000\u2009000 рублей.",
            "Стоит 1\u202f000\u202f000 рублей.",
            "Стоит 1 000 000,50 рублей.",
            "Приехал О’Нил вчера.",
            "Кни\u00adга лежит здесь.",  # a soft hyphen does not split a word
            "Встреча в 15:00.",
            "Счёт 2:1 сегодня.",
            "Пишите: ivan.petrov@mail.ru",
            "Сайт https://example.com/a?b=1 открыт.",
        ],
        ["А. С. Пушкин родился.", "Чай и / или кофе.", "В 2020 100 человек пришли.", "Раз два три четыре."],
    ),
    "short Russian answers": _rows(
        "ru.language.response_lang",
        {"lang": "ru"},
        ["Да.", "Нет.", "Да", "Не знаю.", "Так.", "Спасибо, нет."],
        ["Здравей, как си?", "Това е добре.", "Дякую.", "Yes.", "Дa."],  # «Дa.» has a Latin «a»
    ),
    "no-break spaces and invisible characters inside required phrases": _rows(
        "ru.startend.start_phrase", {"phrase": "Коротко говоря,"}, ["Коротко\u00a0говоря, всё просто.", "Ко\u00adротко говоря, да."],
        ["Короче говоря, да.", "Коротко говоря всё просто."]
    )
    + _rows("ru.startend.end_phrase", {"phrase": "На этом всё."}, ["Вот ответ. На\u00a0этом всё.", "Вот. На этом\u200b всё."], ["Вот ответ."])
    + _rows("ru.startend.end_phrase", {"phrase": "Удачи!"}, ["Всем удачи!", "Удачи！"], ["Всем неудачи!"])
    + _rows("ru.startend.start_phrase", {"phrase": "Итак,"}, ["Итак, начнём."], ["Итакой, начнём."])
    + _rows("ru.startend.start_phrase", {"phrase": "Давайте разберёмся."}, ["Давайте разберемся. Всё просто."], ["Давайте разбираться."])
    # a spaced hyphen or an en dash is how the dash is typed (no_dash counts them as dashes too)
    + _rows("ru.repeat.phrase_n", {"phrase": "Век живи — век учись", "n": 2},
            ["Век живи – век учись. И ещё: век живи - век учись."], ["Век живи, век учись. Век живи — век учись."]),
    "lists with «–» bullets": _rows(
        "ru.format.bullets_exact", {"n": 3}, ["– Хлеб\n– Молоко\n– Яйца", "+ Хлеб\n+ Молоко\n+ Яйца"], ["— Хлеб\n— Молоко\n— Яйца"]
    )
    + _rows("ru.punct.no_dash", {}, ["- Хлеб\n- Молоко"], ["– Хлеб\n– Молоко"]),
    "CRLF and Unicode paragraph separators": _rows(
        "ru.length.paragraphs_exact", {"n": 2}, ["Первый.\r\n\r\nВторой.", "Первый.\u2029Второй."], ["Первый.\r\nВторой."]
    )
    + _rows("ru.russian.haiku", {}, ["Старый пруд молчит.\r\nЛягушка прыгнула в пруд.\r\nЗвонкий всплеск воды."], []),
    "stress marks and decomposed letters in letter counts": _rows(
        "ru.keywords.letter_frequency", {"letter": "о", "n": 4, "relation": "exactly"}, ["Мо\u0301ре, о\u0301зеро, по\u0301ле."], ["Море, озеро."]
    )
    + _rows("ru.keywords.lipogram", {"letter": "й"}, ["Тихо."], [NFD("Мой дом."), "Мои\u0306 дом."])
    + _rows("ru.russian.yo_nowhere", {}, ["Еще."], [NFD("Ещё."), "Еще\u0308."]),
    "Latin look-alikes inside Cyrillic words": _rows(INC, {"keywords": ["программа"]}, ["Новая программа."], ["Новая прoграмма."])
    + _rows(BAN, {"keywords": ["программа"]}, ["Новый код."], ["Новая прoграмма.", "Новая прогрaммa-то."])
    + _rows(INC, {"keywords": ["книга"]}, ["Возьмите книгу-то."], ["Возьмите книгў.", "Возьмите кнiгу."]),
    "emoticons after a question": _rows(Q, {}, ["Как дела?)))", "Ну как? :)", "Что думаете? :-)", "Придёте? ;)", "Как вам? xD"], ["Отлично :)", "Хорошо)))"]),
    "lower-case list items that continue a sentence": _rows(
        CAP,
        {},
        ["Купите:\n- хлеб;\n- молоко.", "Нужно взять:\n1. паспорт,\n2. билет.", "Список.\n- Хлеб.\n- Молоко."],
        ["Список.\n- хлеб.\n- молоко.", "Купите хлеб.\n- молоко."],
    ),
    "abbreviations in capitals are not shouting": _rows(
        "ru.case.capital_words_max",
        {"n": 0},
        ["Данные NASA.", "Справка из МФЦ и ФНС.", "Вирус COVID-19 изучают.", "Стандарт ГОСТ и API."],
        ["Это ОЧЕНЬ важно.", "СРОЧНО читайте.", "Пишите ПРАВИЛЬНО."],
    ),
    "numbers in words: Roman numerals and vulgar fractions are numbers": _rows(
        "ru.russian.numbers_in_words", {}, ["Двадцатый век.", "Я и ты."], ["В XIX веке.", "Глава IV.", "Добавьте ½ стакана.", "Глава Ⅻ."]
    ),
    "GFM tables: outer pipes optional, ragged rows rejected": _rows(
        "ru.format.markdown_table",
        {"n": 2},
        ["Город | Река\n--- | ---\nКазань | Волга\nОмск | Иртыш", "| Город | Река |\n|:---|---:|\n| Казань | Волга |\n| Омск | Иртыш |"],
        ["| Город | Река |\n|---|---|\n| Казань |\n| Омск | Иртыш | Обь |", "| Город | Река |\n| Казань | Волга |\n| Омск | Иртыш |"],
    ),
    "headings inside code blocks do not count": _rows(
        "ru.format.headers", {"n": 2}, ["# Итоги\n```\n# комментарий\n```\n## Вывод"], ["# Итоги\n# комментарий\n## Вывод", "#Итоги\n## Вывод"]
    ),
    "postscript marker spacing and case": _rows(
        "ru.format.postscript", {"marker": "P.S."}, ["Текст.\nP. S. Привет.", "Текст.\np.s. привет.", "Текст.\nＰ.Ｓ. Привет."], ["Текст.\nPS привет.", "P.S. Привет."]
    ),
    "two answers that differ only in case or spacing are one answer": _rows(
        "ru.format.two_responses", {}, ["Да.\n******\nНет."], ["Да.\n******\nда.", "Да  конечно.\n******\nДа конечно."]
    ),
    "asterisk and bracket look-alikes": _rows("ru.format.no_markdown", {}, ["Просто текст."], ["Это ∗важно∗.", "Это ＊важно＊."])
    + _rows("ru.format.title", {}, ["<<Заголовок>>\nТекст."], ["≪\n≫ Текст."]),
    "list numbering and heading marks are not words": _rows(
        "ru.length.words_max", {"n": 3}, ["1. Хлеб\n2. Молоко\n3. Яйца", "## Итоги\nВсё хорошо."], ["Хлеб, молоко, яйца, сыр."]
    ),
    "a horizontal rule is not a paragraph": _rows(
        "ru.length.paragraphs_exact", {"n": 2}, ["Первый абзац.\n\n---\n\nВторой абзац.", "Первый.\n\n***\n\nВторой."], ["Один.\n\n---"]
    ),
    "links and task boxes are not placeholders": _rows(
        "ru.format.placeholders", {"n": 1}, ["Пишите по адресу [адрес].", "- [x] сделано, осталось [имя]"],
        ["См. [документацию](https://ya.ru).", "- [x] сделано\n- [ ] нет"],
    ),
    "links and block quotes are markdown": _rows(
        "ru.format.no_markdown", {}, ["Адрес: ya.ru, скобки [так] можно."], ["См. [сайт](https://ya.ru).", "> Цитата из книги."]
    ),
    "parameters from an LLM are normalised too": _rows("ru.keywords.lipogram", {"letter": NFD("ё")}, ["Елка."], ["Ёлка."])
    + _rows(INC, {"keywords": ["кни\u00adга"]}, ["Вот книга."], ["Вот журнал."])
    + _rows("ru.startend.start_phrase", {"phrase": "Коротко\u00a0говоря,"}, ["Коротко говоря, да."], ["Короче, да."]),
}

ROWS = [(name, *row) for name, rows in CLASSES.items() for row in rows]


@pytest.mark.parametrize(("klass", "cid", "params", "text", "verdict"), ROWS, ids=[f"{r[0][:30]}-{i}" for i, r in enumerate(ROWS)])
def test_verdict_agrees_with_a_careful_grader(klass: str, cid: str, params: dict, text: str, verdict: bool) -> None:
    assert REGISTRY[cid].verify(text, params) is verdict, f"{klass}: {cid} {params} on {text!r} should be {verdict}"
