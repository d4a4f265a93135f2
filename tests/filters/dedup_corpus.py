"""Real-looking Russian and English prompts with the near-duplicates real data has: a word inflected
differently, punctuation and case changed, a greeting added, ё written as е, one word swapped.
Deterministic (a seeded RNG), so every test sees the same corpus."""

from __future__ import annotations

import random

RU = [
    "Напиши короткое стихотворение о зимнем лесе и первом снеге, без рифмы, в пяти строках",
    "Объясни простыми словами, как работает фотосинтез у растений и зачем им солнечный свет",
    "Составь план поездки в Казань на три дня с посещением Кремля и музеев города",
    "Переведи на английский язык письмо коллеге о переносе встречи на следующий вторник",
    "Какие документы нужны для получения загранпаспорта нового образца в МФЦ в Москве",
    "Придумай пять названий для кофейни у метро, чтобы они звучали уютно и по-домашнему",
    "Сравни электромобили и машины с бензиновым двигателем по стоимости владения за пять лет",
    "Расскажи, чем отличается ипотека с фиксированной ставкой от ипотеки с плавающей ставкой",
    "Напиши поздравление бабушке с восьмидесятилетием от имени всех внуков и правнуков",
    "Подскажи, как приготовить борщ с говядиной, чтобы он получился ярко-красным и наваристым",
    "Что почитать подростку четырнадцати лет из русской классики, кроме школьной программы",
    "Объясни разницу между списком и кортежем в Python на примере хранения координат точек",
    "Составь вежливый ответ клиенту, который жалуется на задержку доставки заказа на неделю",
    "Как подготовиться к марафону за полгода, если сейчас я бегаю только по пять километров",
    "Опиши основные причины Первой мировой войны для школьного доклада на десять минут",
    "Напиши объявление о продаже велосипеда, почти нового, с дисковыми тормозами, недорого",
    "Почему небо голубое, а закат бывает красным? Объясни ребёнку семи лет без формул",
    "Сделай чек-лист для переезда в другую квартиру: что упаковать, кого предупредить, что оплатить",
]
EN = [
    "Write a short poem about an autumn forest and the first frost, without rhyme, in five lines",
    "Explain in simple terms how photosynthesis works in plants and why they need sunlight",
    "Plan a three-day trip to Edinburgh with a visit to the castle and the old town museums",
    "Draft a polite reply to a customer who complains that their order arrived a week late",
    "Compare electric cars and petrol cars by total cost of ownership over five years",
    "What should a fourteen year old read from classic English novels beyond the school list",
    "Explain the difference between a list and a tuple in Python using point coordinates",
    "How do I prepare for a marathon in six months if I currently only run five kilometres",
    "Suggest five names for a small coffee shop near the station that sound cosy and warm",
    "Summarise the main causes of the First World War for a ten minute school presentation",
]
#: (word, another form of it) per language: the inflection a paraphrasing model produces
RU_FORMS = [("стихотворение", "стихотворения"), ("лесе", "лес"), ("поездки", "поездку"), ("коллеге", "коллегам"),
            ("документы", "документов"), ("названий", "названия"), ("машины", "машин"), ("ставкой", "ставки"),
            ("бабушке", "бабушку"), ("говядиной", "говядины"), ("подростку", "подростка"), ("списком", "списка"),
            ("клиенту", "клиента"), ("марафону", "марафон"), ("причины", "причин"), ("велосипеда", "велосипед"),
            ("ребёнку", "ребенку"), ("квартиру", "квартиры")]
EN_FORMS = [("poem", "poems"), ("works", "work"), ("visit", "visiting"), ("complains", "complained"), ("cars", "car"),
            ("novels", "novel"), ("coordinates", "coordinate"), ("run", "running"), ("names", "name"),
            ("causes", "cause")]
TOPICS_RU = ["погоду", "экзамены", "бюджет семьи", "отпуск на море", "ремонт кухни", "собаку породы корги",
             "первый день в школе", "новую работу", "переезд в Питер", "дачу под Тверью", "шахматы", "йогу"]
TOPICS_EN = ["the weather", "exams", "a family budget", "a seaside holiday", "a kitchen renovation", "a corgi",
             "the first school day", "a new job", "moving to Leeds", "a cottage garden", "chess", "yoga"]


def _variant(text: str, forms: list[tuple[str, str]], rng: random.Random, greeting: str) -> str:
    kind = rng.randrange(5)
    if kind == 0:  # a different inflection of one word
        for a, b in forms:
            if a in text:
                return text.replace(a, b, 1)
    if kind == 1:
        return text.rstrip(".!?") + "!"
    if kind == 2:
        return f"{greeting} {text[0].lower()}{text[1:]}."
    if kind == 3:
        return text.upper() if rng.random() < 0.3 else text.replace(",", "")
    return text.replace("е", "ё", 1) if "е" in text else text + "?"


def corpus(n: int, seed: int = 7) -> list[tuple[str, str]]:
    """``n`` (id, text) pairs: about a third near-duplicates of another, the rest distinct prompts."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        ru = rng.random() < 0.65
        bases, forms, topics = (RU, RU_FORMS, TOPICS_RU) if ru else (EN, EN_FORMS, TOPICS_EN)
        base = rng.choice(bases)
        topic = rng.choice(topics)
        text = f"{base}. " + (f"Учти, что речь про {topic}." if ru else f"Keep in mind it is about {topic}.")
        out.append(text)
        if rng.random() < 0.35:
            out.append(_variant(text, forms, rng, "Привет! Пожалуйста," if ru else "Hi! Please,"))
        if rng.random() < 0.03:
            out.append("")  # an empty prompt: nobody's duplicate
    rng.shuffle(out)
    return [(f"row{i:06d}", t) for i, t in enumerate(out[:n])]
