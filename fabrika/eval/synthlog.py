"""A realistic synthetic request log, for showing the samplers where the truth is known.

What it imitates: a company's LLM gateway. Services (support replies, order
summaries, contract review, SQL help…) send templated prompts with their
variables filled in — names, order ids, dates, sums, e-mails, URLs, pasted
texts, code, JSON payloads, markdown tables. Services and templates follow a
Zipf law (a few services make most of the traffic, a long tail of rare ones),
each service mostly calls one of several models, and a chat front end sends
free-form requests. Prompts are Russian and English.

Run: ``python -m fabrika.eval.synthlog OUT.jsonl --rows 20000 --seed 0``
(or ``fabrika eval synth-log``). Every row carries the ground truth a sampler
never sees: ``template_id``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path
from typing import Callable

MODELS = ("qwen3-32b", "qwen3-8b", "gpt-oss-120b", "t-pro-2.0")

NAMES_RU = ("Иван Петров", "Мария Смирнова", "Алексей Кузнецов", "Ольга Соколова", "Дмитрий Попов", "Анна Лебедева",
            "Сергей Новиков", "Екатерина Морозова", "Павел Волков", "Наталья Зайцева", "Артём Павлов", "Юлия Семёнова")
NAMES_RU_DAT = ("Ивану Петрову", "Марии Смирновой", "Алексею Кузнецову", "Ольге Соколовой", "Дмитрию Попову",
                "Анне Лебедевой", "Сергею Новикову", "Екатерине Морозовой", "Павлу Волкову", "Наталье Зайцевой",
                "Артёму Павлову", "Юлии Семёновой")
NAMES_EN = ("John Carter", "Emily Clark", "Michael Brown", "Sarah Lee", "David Wilson", "Laura Adams", "James Hall")
CITIES = ("Москва", "Санкт-Петербург", "Казань", "Новосибирск", "Екатеринбург", "Самара", "Краснодар", "Пермь")
PRODUCTS = ("кофемашина", "беспроводные наушники", "детское автокресло", "робот-пылесос", "зимняя куртка",
            "электросамокат", "набор кастрюль", "ноутбук", "смарт-часы", "палатка на четверых")
MONTHS_RU = ("января", "февраля", "марта", "апреля", "мая", "июня", "июля", "августа", "сентября", "октября",
             "ноября", "декабря")
SENTENCES_RU = (
    "Курьер опоздал на два часа и не предупредил о задержке.", "Упаковка была повреждена, но товар цел.",
    "Прошу вернуть деньги на карту, с которой я платил.", "Менеджер долго не отвечал на мои сообщения в чате.",
    "В приложении не получается применить промокод при оформлении.", "Качество сборки хорошее, но инструкция только на английском.",
    "Мы планируем расширить склад во втором квартале и нанять ещё десять человек.", "Продажи в регионах выросли, особенно в Поволжье.",
    "Поставщик сорвал сроки отгрузки, из-за чего часть заказов задержалась.", "Клиенты жалуются на долгую загрузку страницы оплаты.",
    "На совещании решили перенести релиз на следующую неделю.", "Бюджет на рекламу сократили, акцент сместили на удержание.",
    "Арендатор обязуется вносить плату не позднее пятого числа каждого месяца.", "Договор может быть расторгнут по соглашению сторон.",
    "Стороны несут ответственность за неисполнение обязательств в соответствии с законодательством.",
    "Пациенту рекомендован приём препарата после еды в течение десяти дней.", "Температура держится третий день, кашель усилился.",
    "Сервер перестал отвечать после обновления библиотеки.", "В логах видно множество ошибок подключения к базе данных.",
    "Новая версия интерфейса понравилась большинству пользователей.", "Отчёт нужно подготовить к пятнице и согласовать с юристами.",
)
SENTENCES_EN = (
    "The package arrived two days late and the box was damaged.", "I was charged twice for the same order.",
    "Our quarterly revenue grew by eight percent, driven by the new subscription plan.",
    "The deployment failed because the migration script timed out.", "Customers ask for a dark mode in the mobile app.",
    "The tenant shall pay the rent no later than the fifth day of each month.",
    "The meeting was moved to Thursday because the client could not attend.",
    "Support tickets about login problems doubled after the last release.",
)
CODE = (
    "def total(items):\n    s = 0\n    for i in items:\n        s += i.price * i.qty\n    return s",
    "SELECT user_id, COUNT(*) FROM orders WHERE created_at > NOW() - INTERVAL '7 days' GROUP BY user_id;",
    "const res = await fetch(url);\nconst data = res.json();\nconsole.log(data.items.length);",
    "for (int i = 0; i <= n; i++) {\n  sum += a[i];\n}",
    "import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df.groupby('region').sum())",
)
CONTEXTS_RU = ("", "", "", "Я студент, ", "У меня двое детей, ", "Работаю бухгалтером, ", "Живу в Казани, ",
               "Только начинаю разбираться, ", "Мне 45 лет, ", "Пишу из офиса, ", "Мы с женой спорим, ")
SUFFIXES_RU = ("", "", " Спасибо!", " Объясни попроще.", " Можно по пунктам?", " Коротко, пожалуйста.",
               " Заранее благодарю.", " Жду ответа.")
FREE_EN = (
    "How do I negotiate a higher salary?", "What is the difference between a virus and bacteria?",
    "Give me a weekly workout plan for a beginner.", "Why is the sky blue?", "How does compound interest work?",
    "What should I see in Istanbul in three days?", "How can I improve my English pronunciation?",
    "Explain quantum entanglement like I'm five.", "Is it better to rent or buy an apartment?",
    "How do I stop procrastinating?", "What are good habits for remote work?", "How do vaccines work?",
    "Suggest a name for a coffee shop near a university.", "How to prepare for a system design interview?",
    "What is the capital of Australia and why not Sydney?", "How do I fix a leaking tap?",
)
TOPICS_RU = ("ипотека", "инфляция", "блокчейн", "чёрные дыры", "иммунитет", "выгорание на работе", "налоговый вычет",
             "электромобили", "интервальное голодание", "машинное обучение", "самозанятость", "пассивный доход",
             "вечная мерзлота", "квантовый компьютер", "ОСАГО", "медитация", "английские времена", "облачные хранилища",
             "дефицит витамина D", "биржевые фонды", "тайм-менеджмент", "сон младенца", "аренда квартиры", "глобальное потепление",
             "импрессионизм", "декретный отпуск", "солнечные панели", "кибербезопасность", "дача зимой", "собеседование")
FRAMES_RU = ("Что такое {}?", "Объясни простыми словами, что такое {}.", "Какие плюсы и минусы у темы «{}»?",
             "С чего начать, если хочу разобраться в теме: {}?", "Какие мифы существуют про {}?",
             "Посоветуй книги или курсы про {}.", "Почему все сейчас говорят про {}?", "Как {} влияет на обычную жизнь?")
CONTEXTS_EN = ("", "", "Quick question: ", "I'm a student. ", "My boss asked me this. ", "Hi! ")


def _date(rng: random.Random) -> str:
    d, m, y = rng.randint(1, 28), rng.randint(1, 12), rng.choice((2024, 2025))
    return rng.choice((f"{d:02d}.{m:02d}.{y}", f"{y}-{m:02d}-{d:02d}", f"{d} {MONTHS_RU[m - 1]} {y}"))


def _text(rng: random.Random, pool: tuple[str, ...], lo: int = 2, hi: int = 5) -> str:
    return " ".join(rng.sample(pool, rng.randint(lo, min(hi, len(pool)))))


def _sum(rng: random.Random) -> str:
    return f"{rng.randint(3, 900) * 100:,}".replace(",", " ")


def _order(rng: random.Random) -> str:
    return f"{rng.choice(('ORD', 'ЗК', 'A'))}-{rng.randint(10000, 99999)}"


def _email(rng: random.Random) -> str:
    return f"{rng.choice(('ivan', 'm.smirnova', 'support', 'olga.s', 'client'))}{rng.randint(1, 999)}@" \
           f"{rng.choice(('mail.ru', 'yandex.ru', 'gmail.com', 'corp.example'))}"


def _table(rng: random.Random) -> str:
    rows = "\n".join(f"| {p} | {rng.randint(1, 9)} | {_sum(rng)} |" for p in rng.sample(PRODUCTS, rng.randint(2, 4)))
    return "| Товар | Кол-во | Цена |\n|---|---|---|\n" + rows


Template = Callable[[random.Random], str]

# service -> (task_type, [templates]); the order within a service is its Zipf rank.
SERVICES: dict[str, tuple[str, list[Template]]] = {
    "support-replies": ("generation", [
        lambda r: f"Ты — оператор службы поддержки интернет-магазина. Клиент: {rng_name(r)}\nЗаказ: {_order(r)}\n"
                  f"Обращение клиента:\n\n{_text(r, SENTENCES_RU)}\n\nНапиши вежливый ответ клиенту, не более 5 предложений.",
        lambda r: f"Составь ответ на жалобу по заказу {_order(r)} от {_date(r)}.\nКлиент: {rng_name(r)}\nТекст жалобы: "
                  f"«{_text(r, SENTENCES_RU, 1, 3)}»\nИзвинись и предложи компенсацию {r.randint(5, 30)}%.",
        lambda r: f"Reply to the customer email below in a friendly tone.\n\nCustomer: {r.choice(NAMES_EN)}\n"
                  f"Email: {_text(r, SENTENCES_EN, 1, 3)}",
    ]),
    "order-summary": ("summarization", [
        lambda r: f"Кратко перескажи историю заказа {_order(r)} для менеджера. Дата оформления: {_date(r)}\n"
                  f"Сумма: {_sum(r)} руб.\nСобытия:\n\n{_text(r, SENTENCES_RU, 3, 6)}",
        lambda r: f"Сделай сводку по заказам за {_date(r)} в виде списка:\n\n{_table(r)}",
    ]),
    "review-classifier": ("classification", [
        lambda r: f"Определи тональность отзыва о товаре «{r.choice(PRODUCTS)}»: позитивная, негативная или "
                  f"нейтральная. Ответь одним словом.\nОтзыв: {_text(r, SENTENCES_RU, 1, 3)}",
        lambda r: f"Классифицируй обращение по категориям: доставка, оплата, возврат, качество, другое. Верни JSON "
                  f"вида {{\"category\": ...}}.\nОбращение: {_text(r, SENTENCES_RU, 1, 2)}",
    ]),
    "doc-translate": ("translation", [
        lambda r: f"Переведи на английский язык, сохранив деловой стиль:\n\n{_text(r, SENTENCES_RU, 2, 4)}",
        lambda r: f"Translate into Russian:\n\n{_text(r, SENTENCES_EN, 2, 4)}",
    ]),
    "sql-helper": ("code", [
        lambda r: f"Объясни, что делает этот запрос, и предложи, как его ускорить:\n```sql\n{CODE[1]}\n```\n"
                  f"Таблица orders содержит {r.randint(1, 90)} млн строк.",
        lambda r: f"Найди ошибку в коде и исправь её:\n```\n{r.choice(CODE)}\n```",
    ]),
    "contract-review": ("extraction", [
        lambda r: f"Извлеки из фрагмента договора стороны, сроки и суммы. Верни JSON.\nДоговор № {r.randint(100, 9999)}"
                  f"/{r.choice(('А', 'Б', 'К'))} от {_date(r)}\n\n{_text(r, SENTENCES_RU[12:15], 2, 3)} "
                  f"Сумма договора: {_sum(r)} руб.",
    ]),
    "hr-vacancy": ("generation", [
        lambda r: f"Напиши текст вакансии. Должность: {r.choice(('аналитик данных', 'бухгалтер', 'курьер', 'Python-разработчик'))}\n"
                  f"Город: {r.choice(CITIES)}\nЗарплата: от {_sum(r)} руб.\nОпыт: {_years(r.randint(1, 6))}",
    ]),
    "incident-bot": ("summarization", [
        lambda r: f"Summarize the incident for the on-call channel. Incident ID: {r.randbytes(4).hex()}\n"
                  f"Started: {_date(r)} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}\nLogs:\n```\n"
                  f"ERROR db timeout after {r.randint(1, 60)}s\nWARN retry {r.randint(1, 9)}\n```",
        lambda r: f"Составь отчёт об инциденте для руководства по данным мониторинга {r.choice(('https://grafana.corp/d/', 'https://status.corp/i/'))}"
                  f"{r.randint(100, 999)}: {_text(r, SENTENCES_RU[17:19], 1, 2)}",
    ]),
    "email-drafts": ("generation", [
        lambda r: f"Напиши письмо коллеге — {r.choice(NAMES_RU_DAT)} ({_email(r)}) — с просьбой прислать отчёт до {_date(r)}.",
    ]),
    "med-triage": ("classification", [
        lambda r: f"Определи срочность обращения пациента (экстренно / срочно / планово). Возраст: {r.randint(1, 90)}\n"
                  f"Жалобы: {_text(r, SENTENCES_RU[15:17], 1, 2)}",
    ]),
    "meeting-notes": ("summarization", [
        lambda r: f"Составь протокол встречи от {_date(r)} по расшифровке ниже, выдели решения и ответственных.\n\n"
                  f"{_text(r, SENTENCES_RU[6:12], 3, 5)}",
    ]),
    "faq-bot": ("open_qa", [
        lambda r: f"Ответь на вопрос клиента, используя базу знаний. Вопрос: как вернуть товар «{r.choice(PRODUCTS)}», "
                  f"купленный в городе {r.choice(CITIES)}?",
    ]),
    "ad-copy": ("generation", [
        lambda r: f"Придумай три рекламных слогана для товара «{r.choice(PRODUCTS)}» со скидкой {r.randint(5, 50)}%.",
    ]),
    "data-qa": ("code", [
        lambda r: f"Write a pandas snippet that answers: which region had the highest sales in {r.choice(('Q1', 'Q2', 'Q3'))} "
                  f"{r.choice((2024, 2025))}? The file is at https://data.corp/{r.randint(1, 99)}/sales.csv",
    ]),
    "legal-qa": ("open_qa", [
        lambda r: f"Можно ли расторгнуть договор аренды досрочно, если арендодатель не сделал ремонт за {_n(r.randint(1, 12), 'месяц')}?",
    ]),
    "travel-planner": ("generation", [
        lambda r: f"Составь маршрут поездки в город {r.choice(CITIES)} на {_n(r.randint(2, 7), 'день')} с бюджетом {_sum(r)} руб.",
    ]),
}


def rng_name(rng: random.Random) -> str:
    return rng.choice(NAMES_RU)


def _n(n: int, noun: str) -> str:
    """«5 дней», «3 месяца» — the noun agreed with the number."""
    from fabrika.textutil.morph import agree

    return f"{n} {agree(noun, n)}"


def _years(n: int) -> str:
    """«1 год», «3 года», «5 лет» (pymorphy3 gives «годов» for the counting form)."""
    tail = n % 100
    word = "лет" if 11 <= tail <= 14 or n % 10 in (0, 5, 6, 7, 8, 9) else ("год" if n % 10 == 1 else "года")
    return f"{n} {word}"


def _zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (k ** s) for k in range(1, n + 1)]


def _free_form(rng: random.Random, queries_ru: list[str]) -> str:
    if rng.random() < 0.7:
        q = rng.choice(queries_ru) if rng.random() < 0.4 else rng.choice(FRAMES_RU).format(rng.choice(TOPICS_RU))
        ctx = rng.choice(CONTEXTS_RU)
        q = (ctx + q[0].lower() + q[1:]) if ctx else q
        return q + rng.choice(SUFFIXES_RU)
    return rng.choice(CONTEXTS_EN) + rng.choice(FREE_EN)


def _queries_ru() -> list[str]:
    text = (Path(__file__).parent.parent / "data" / "instruct" / "queries_ru.jsonl").read_text(encoding="utf-8")
    return [json.loads(line)["text"] for line in text.splitlines() if line.strip()]


def generate(rows: int = 20_000, seed: int = 0, free_share: float = 0.25):
    """Yield ``rows`` log rows (dicts); deterministic for ``seed``."""
    rng = random.Random(seed)
    services = list(SERVICES)
    service_w = _zipf_weights(len(services), 1.1)
    home_model = {s: MODELS[i % len(MODELS)] for i, s in enumerate(services)}
    queries = _queries_ru()
    for n in range(rows):
        if rng.random() < free_share:
            model = rng.choices(MODELS, weights=(4, 3, 2, 1))[0]
            yield {"id": f"r{n:06d}", "prompt": _free_form(rng, queries), "model": model, "service": "chat",
                   "task_type": "open_qa", "template_id": "free"}
            continue
        service = rng.choices(services, weights=service_w)[0]
        task_type, templates = SERVICES[service]
        t = rng.choices(range(len(templates)), weights=_zipf_weights(len(templates), 1.5))[0]
        model = home_model[service] if rng.random() < 0.85 else rng.choice(MODELS)
        yield {"id": f"r{n:06d}", "prompt": templates[t](rng), "model": model, "service": service,
               "task_type": task_type, "template_id": f"{service}/{t}"}


# -- the template-dominated regime -------------------------------------------------------
# A production gateway whose traffic is a few high-volume services: a long fixed instruction
# with one or two short slots. Two calls of one template then differ by a few words, so a
# uniform draw is mostly near-duplicates (the seed's Table 1 regime: random Dist. about 0.65).
REVIEW_INSTR = (
    "Ты — модуль модерации отзывов маркетплейса. Прочитай отзыв покупателя и определи его тональность. "
    "Допустимые ответы: позитивная, негативная, нейтральная. Не объясняй решение, не добавляй ничего, кроме "
    "одного слова. Если отзыв не о товаре, а о доставке или продавце, всё равно оцени общую тональность. "
    "Отзывы с нецензурной лексикой помечай как негативные.")
SUPPORT_INSTR = (
    "Ты — оператор службы поддержки интернет-магазина. Сформируй короткий вежливый ответ клиенту о статусе его "
    "заказа: поблагодари за обращение, назови номер заказа, сообщи, что заказ передан в доставку, и предложи "
    "написать снова, если возникнут вопросы. Не обещай точных сроков и не упоминай внутренние системы.")
STATUS_INSTR = (
    "Извлеки из сообщения курьерской службы номер заказа и дату доставки. Верни строго JSON вида "
    "{\"order_id\": строка, \"date\": \"ГГГГ-ММ-ДД\"} без пояснений. Если даты нет, поставь null.")
INTENT_INSTR = (
    "Classify the user's message into one intent: order_status, refund, complaint, product_question, other. "
    "Answer with the intent name only.")
SHORT_REVIEWS = (
    "Всё отлично, спасибо!", "Пришло быстро, товар хороший.", "Не понравилось, вернул.", "Нормально за свои деньги.",
    "Качество так себе.", "Супер, рекомендую.", "Сломалось через неделю.", "Как на фото.", "Размер не подошёл.",
    "Доставка долгая, товар ок.", "Лучше, чем ожидал.", "Брак, продавец не отвечает.", "Хорошая цена.",
    "Упаковка мятая.", "Всем доволен.", "Запах неприятный.", "Работает, но шумит.", "Отличный подарок.")
SHORT_EN = ("Where is my order?", "I want my money back.", "The item is broken.", "Does it come in blue?",
            "Thanks, all good.", "My parcel is late.", "Is this waterproof?", "Cancel my order please.")

# (service, task_type, share of the whole log, template)
DOMINANT: tuple[tuple[str, str, float, Template], ...] = (
    ("review-moderation", "classification", 0.66,
     lambda r: f"{REVIEW_INSTR}\n\nОтзыв: {r.choice(SHORT_REVIEWS)}"),
    ("order-status-replies", "generation", 0.16,
     lambda r: f"{SUPPORT_INSTR}\n\nКлиент: {rng_name(r)}. Заказ: {_order(r)}."),
    ("courier-extract", "extraction", 0.06,
     lambda r: f"{STATUS_INSTR}\n\nСообщение: Заказ {_order(r)} будет доставлен {_date(r)}."),
    ("intent-router", "classification", 0.04,
     lambda r: f"{INTENT_INSTR}\n\nMessage: {r.choice(SHORT_EN)}"),
)
#: the rest: 5 % the gateway log's services (its long tail), 3 % free-form chat
TEMPLATED_FREE_SHARE = 0.03


def generate_templated(rows: int = 20_000, seed: int = 0):
    """Yield a template-dominated log: 92 % of rows from four templates (see :data:`DOMINANT`)."""
    rng = random.Random(seed)
    queries = _queries_ru()
    services = list(SERVICES)
    service_w = _zipf_weights(len(services), 1.1)
    shares = [d[2] for d in DOMINANT]
    tail_share = 1.0 - sum(shares) - TEMPLATED_FREE_SHARE
    for n in range(rows):
        u = rng.random()
        if u < TEMPLATED_FREE_SHARE:
            yield {"id": f"r{n:06d}", "prompt": _free_form(rng, queries), "model": rng.choice(MODELS[:2]),
                   "service": "chat", "task_type": "open_qa", "template_id": "free"}
            continue
        if u < TEMPLATED_FREE_SHARE + tail_share:
            service = rng.choices(services, weights=service_w)[0]
            task_type, templates = SERVICES[service]
            t = rng.choices(range(len(templates)), weights=_zipf_weights(len(templates), 1.5))[0]
            yield {"id": f"r{n:06d}", "prompt": templates[t](rng), "model": rng.choice(MODELS), "service": service,
                   "task_type": task_type, "template_id": f"{service}/{t}"}
            continue
        k = rng.choices(range(len(DOMINANT)), weights=shares)[0]
        service, task_type, _, template = DOMINANT[k]
        model = MODELS[k % 2] if rng.random() < 0.9 else rng.choice(MODELS)
        yield {"id": f"r{n:06d}", "prompt": template(rng), "model": model, "service": service,
               "task_type": task_type, "template_id": f"{service}/0"}


REGIMES = {"gateway": generate, "templated": generate_templated}


def write(path: Path, rows: int = 20_000, seed: int = 0, regime: str = "gateway") -> int:
    """Write the log atomically (temp file + rename); returns the row count.

    ``regime``: ``gateway`` (many services, rich variable content, 25 % free chat) or
    ``templated`` (92 % of the traffic from four templates with short slots).
    """
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {sorted(REGIMES)}, got {regime!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for row in REGIMES[regime](rows, seed):
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    os.replace(tmp, path)
    return count


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--regime", choices=sorted(REGIMES), default="gateway")
    args = ap.parse_args(argv)
    print(f"{write(args.out, args.rows, args.seed, args.regime)} rows -> {args.out}")


if __name__ == "__main__":  # pragma: no cover
    main()
