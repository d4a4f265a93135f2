"""Role prompts of the FC pipeline, written natively in Russian and English.

Structured inputs go into a fenced ``json`` block so a real model reads them
easily and the ``sim`` backend can parse them back (it is a stand-in that only
sees the request, like a model would). Placeholders use ``str.format``; literal
braces are doubled. Stages that want JSON back also send a ``response_format``
(:mod:`fabrika.generators.fc.structured`); the prompt still shows the shape, for
servers that ignore it.
"""

from __future__ import annotations

import zlib

_PLANNER_EXAMPLES_RU = """Примеры шагов (значения условные):
- single: {{"kind": "tool_call", "intent": "узнать погоду в Казани на три дня", "user_message": "Какая погода будет в Казани в ближайшие 3 дня?", "slots": {{"city": {{"value": "Казань", "say": "в Казани"}}, "days": {{"value": 3, "say": "3"}}}}, "rounds": [[{{"name": "get_forecast", "arguments": {{"city": "Казань", "days": 3}}, "result": {{"days": [-3, -5, -2], "sky": "снег"}}}}]], "final_answer": "В Казани ближайшие три дня от −5 до −2 °C, снег."}}
- parallel: один шаг, один раунд с двумя и более вызовами, которые не зависят друг от друга.
- multi_step: один шаг, несколько раундов; аргументы второго раунда берутся из результата первого (например, `order_id` из найденного заказа), для них slots не нужны.
- multi_turn: два-три шага `tool_call` или `text`; в следующем шаге пользователь может уточнить или передумать («нет, лучше на пятницу») — тогда вызов повторяется с новым значением.
- clarification: шаг 0 — {{"kind": "clarification", "withheld": ["city"], "intent": "узнать погоду, не называя город", "user_message": "Какая погода будет в ближайшие 3 дня?", "final_answer": "В каком городе?"}}, шаг 1 — {{"kind": "tool_call", "intent": "назвать город", "user_message": "В Казани", "slots": {{"city": {{"value": "Казань", "say": "в Казани"}}}}, "rounds": [...], ...}}.
- error_recovery: один шаг, первый вызов возвращает ошибку или пустой результат (`"result": {{"error": "..."}}` или `[]`), второй раунд исправляет вызов, в `final_answer` ассистент честно говорит, что получилось.
- text: {{"kind": "text", "intent": "поблагодарить", "user_message": "Спасибо, всё понятно!", "final_answer": "Рад помочь!"}}
- irrelevance: {{"kind": "irrelevance", "intent": "...", "user_message": "...", "final_answer": "Этого я сделать не могу: ..."}}"""

_PLANNER_EXAMPLES_EN = """Step examples (values are illustrative):
- single: {{"kind": "tool_call", "intent": "get the three-day forecast for Leeds", "user_message": "What's the weather in Leeds for the next 3 days?", "slots": {{"city": {{"value": "Leeds", "say": "Leeds"}}, "days": {{"value": 3, "say": "3"}}}}, "rounds": [[{{"name": "get_forecast", "arguments": {{"city": "Leeds", "days": 3}}, "result": {{"days": [7, 8, 6], "sky": "rain"}}}}]], "final_answer": "Leeds, next three days: 6 to 8 °C and rain."}}
- parallel: one step, one round with two or more independent calls.
- multi_step: one step, several rounds; second-round arguments come from the first result (e.g. an `order_id` found), they need no slots.
- multi_turn: two or three `tool_call` or `text` steps; a later step may refine or change the request ("no, make it Friday"), and the call is repeated with the new value.
- clarification: step 0 — {{"kind": "clarification", "withheld": ["city"], "intent": "ask for the weather without naming the city", "user_message": "What's the weather for the next 3 days?", "final_answer": "Which city?"}}, step 1 — {{"kind": "tool_call", "intent": "name the city", "user_message": "Leeds", "slots": {{"city": {{"value": "Leeds", "say": "Leeds"}}}}, "rounds": [...], ...}}.
- error_recovery: one step; the first call returns an error or an empty result (`"result": {{"error": "..."}}` or `[]`), the next round fixes the call, and `final_answer` says honestly what came out.
- text: {{"kind": "text", "intent": "say thanks", "user_message": "Thanks, that's clear!", "final_answer": "Glad to help!"}}
- irrelevance: {{"kind": "irrelevance", "intent": "...", "user_message": "...", "final_answer": "I can't do that: ..."}}"""

PROMPTS: dict[str, dict[str, str]] = {
    "role_user": {"ru": "Пользователь", "en": "User"},
    "role_assistant": {"ru": "Ассистент", "en": "Assistant"},
    "empty_dialogue": {"ru": "(разговор ещё не начался)", "en": "(the conversation has not started)"},
    "user_system": {
        "ru": "Ты играешь роль человека, который пишет ассистенту. Тебя зовут {name}. {description} "
              "Манера письма: {style}. Пиши от первого лица, коротко и естественно, по-русски. "
              "Ты ничего не знаешь о том, как устроен ассистент, и не упоминаешь ни функций, ни программ.",
        "en": "You play a person writing to an assistant. Your name is {name}. {description} "
              "Writing style: {style}. Write in the first person, briefly and naturally, in English. "
              "You know nothing about how the assistant works and never mention functions or programs.",
    },
    "user_turn": {
        # the transcript comes first: it only grows from turn to turn, so the server's prefix cache
        # serves it again; the goal, which changes every turn, comes after it
        "ru": "Разговор на данный момент:\n{transcript}\n\nЧто ты хочешь в этой реплике:\n```json\n{goal}\n```\n"
              "Напиши следующую реплику пользователя. Передай все сведения из `facts` и ничего сверх них. "
              "Если у сведения `verbatim` = true (вариант из списка, номер, код, дата, адрес почты), "
              "напиши `value` в точности как есть. Остальное скажи своими словами, как сказал бы живой "
              "человек: слова можно склонять («в Казань», «для Петровой»), но не заменяй их другими; "
              "списки и составные сведения перечисли обычной фразой, никогда не вставляй JSON, скобки и "
              "кавычки. Не подписывай реплику («Пользователь:»), не бери её в кавычки и ничего не пиши о "
              "задании. Ответь только текстом реплики.",
        "en": "The conversation so far:\n{transcript}\n\nWhat you want in this turn:\n```json\n{goal}\n```\n"
              "Write the user's next message. Convey every item in `facts` and nothing beyond them. When an "
              "item has `verbatim` = true (an option from a list, a number, a code, a date, an e-mail "
              "address), write its `value` exactly as given. Say the rest in your own words, as a real person "
              "would, without replacing the values with others; say lists and compound details in a plain "
              "sentence, never paste JSON, brackets or quotes. Do not label the message (\"User:\"), do not "
              "wrap it in quotes and do not comment on the task. Reply with the message text only.",
    },
    "tool_system": {
        "ru": "Ты изображаешь работу функции. Верни только JSON-результат вызова, без пояснений.",
        "en": "You emulate a function. Return only the JSON result of the call, without explanations.",
    },
    "tool_turn": {
        "ru": "Схема функции:\n```json\n{schema}\n```\nВызов:\n```json\n{call}\n```\n"
              "Результат, который задан сценарием (null — сценарий его не задаёт):\n```json\n{expected}\n```\n"
              "Результаты предыдущих вызовов:\n```json\n{earlier}\n```\n"
              "Если результат задан, верни именно его (те же ключи и значения). Если не задан, ответь так, "
              "как ответил бы настоящий сервис на эти аргументы: правдоподобный результат, а если аргументы "
              "не могут быть верными (нет такого города, неверный формат) — {{\"error\": \"...\"}}.",
        "en": "Function schema:\n```json\n{schema}\n```\nCall:\n```json\n{call}\n```\n"
              "Result fixed by the script (null: the script does not fix one):\n```json\n{expected}\n```\n"
              "Earlier call results:\n```json\n{earlier}\n```\n"
              "If the result is fixed, return exactly it (same keys and values). If not, answer as a real "
              "service would for these arguments: a plausible result, or {{\"error\": \"...\"}} when the "
              "arguments cannot be right (no such city, wrong format).",
    },
    "tools": {
        "ru": "Придумай функции (инструменты) для ассистента по теме ниже, всего функций: {n}.\n"
              "```json\n{topic}\n```\n"
              "Требования:\n"
              "- имена в snake_case на английском, без повторов;\n"
              "- параметры — JSON Schema (type: object, properties с типами, required). Делай их такими, как "
              "в настоящих API: перечисления (enum) там, где выбор ограничен; форматы (`\"format\": \"date\"` "
              "для дат, `\"email\"` для почты); числа с границами (minimum, maximum); значения по умолчанию "
              "(default) для необязательных параметров; хотя бы у одной функции — вложенный объект или "
              "массив объектов (например, список позиций заказа);\n"
              "- все описания — по-русски;\n"
              "- у каждой функции четыре описания `tiers`: от очень краткого (несколько слов) до подробного "
              "(несколько предложений), каждое следующее длиннее предыдущего.\n"
              "Верни JSON: {{\"tools\": [{{\"name\": \"...\", \"parameters\": {{...}}, \"tiers\": "
              "[\"...\", \"...\", \"...\", \"...\"]}}]}}",
        "en": "Design functions (tools) for an assistant on the topic below, {n} in total.\n"
              "```json\n{topic}\n```\n"
              "Requirements:\n"
              "- unique snake_case names;\n"
              "- parameters as JSON Schema (type: object, typed properties, required), shaped like real APIs: "
              "enums where the choice is closed; formats (`\"format\": \"date\"` for dates, `\"email\"` for "
              "e-mail); numbers with bounds (minimum, maximum); defaults for optional parameters; at least one "
              "function with a nested object or an array of objects (for example, the items of an order);\n"
              "- all descriptions in English;\n"
              "- for each function four descriptions `tiers`, from very terse (a few words) to detailed (a few "
              "sentences), each longer than the previous one.\n"
              "Return JSON: {{\"tools\": [{{\"name\": \"...\", \"parameters\": {{...}}, \"tiers\": "
              "[\"...\", \"...\", \"...\", \"...\"]}}]}}",
    },
    "planner": {
        # the task comes last: the instructions before it are the same for every plan, so a server's
        # prefix cache serves them to every planner request (about 850 tokens each)
        "ru": "Составь эталонный сценарий разговора пользователя с ассистентом, у которого есть функции. "
              "Задание — в конце.\n"
              "Тип сценария (`sample_type`): single — один вызов; parallel — несколько независимых вызовов в "
              "одном раунде; multi_step — несколько раундов, следующий использует результат предыдущего; "
              "multi_turn — несколько реплик пользователя; clarification — пользователь не называет "
              "обязательный параметр, ассистент переспрашивает, затем вызывает; error_recovery — вызов "
              "возвращает ошибку или пустой результат, ассистент исправляется; text — ответ без функций; "
              "irrelevance — просьба, которую не выполняет ни одна из функций.\n"
              "Шаг — одна реплика пользователя и ответ ассистента. Поля шага: `kind` — одно из tool_call, "
              "clarification, text, irrelevance; `intent` — чего хочет пользователь; `user_message` — "
              "пример его реплики; `slots` — для каждого аргумента, который называет пользователь, объект "
              "{{\"value\": значение ровно как в вызове, \"say\": как это скажет человек}}; `withheld` — "
              "аргументы, которые пользователь пока не называет (только в шаге clarification); `rounds` — "
              "раунды вызовов, каждый — список {{\"name\", \"arguments\", \"result\"}}; `final_answer` — "
              "ответ ассистента в конце шага, согласованный с результатами.\n"
              "Правила значений: в `arguments` и `slots.value` — каноническая форма: именительный падеж "
              "(«Казань», а не «в Казани»), даты в ISO (2025-03-14), значения enum — ровно как в схеме. "
              "Варианты enum, коды, номера, даты и адреса почты пользователь называет дословно, поэтому их "
              "`say` совпадает с `value`. В `intent`, `user_message` и `say` не должно быть ни названий "
              "функций, ни имён параметров, ни значений из `withheld`, ни значений, которые понадобятся "
              "только в следующих шагах.\n"
              + _PLANNER_EXAMPLES_RU +
              "\nВсе тексты — по-русски. Верни JSON: {{\"steps\": [...]}}\n"
              "Задание:\n```json\n{task}\n```",
        "en": "Write a reference script of a conversation between a user and an assistant that has functions. "
              "The task is at the end.\n"
              "Script type (`sample_type`): single — one call; parallel — several independent calls in one "
              "round; multi_step — several rounds, each using the previous result; multi_turn — several user "
              "turns; clarification — the user leaves out a required parameter, the assistant asks, then "
              "calls; error_recovery — a call returns an error or an empty result and the assistant recovers; "
              "text — an answer without functions; irrelevance — a request none of the functions can serve.\n"
              "A step is one user turn and the assistant's answer. Step fields: `kind` — one of tool_call, "
              "clarification, text, irrelevance; `intent` — what the user wants; `user_message` — an example "
              "wording; `slots` — for each argument the user names, {{\"value\": exactly as in the call, "
              "\"say\": how a person says it}}; `withheld` — arguments the user does not name yet (clarification "
              "steps only); `rounds` — call rounds, each a list of {{\"name\", \"arguments\", \"result\"}}; "
              "`final_answer` — the assistant's reply ending the step, consistent with the results.\n"
              "Value rules: `arguments` and `slots.value` hold the canonical form (ISO dates such as "
              "2025-03-14, enum values exactly as in the schema). Enum options, codes, numbers, dates and "
              "e-mail addresses are said verbatim, so their `say` equals `value`. `intent`, `user_message` and "
              "`say` never contain function names, parameter names, withheld values or values needed only in "
              "later steps.\n"
              + _PLANNER_EXAMPLES_EN +
              "\nAll texts in English. Return JSON: {{\"steps\": [...]}}\n"
              "Task:\n```json\n{task}\n```",
    },
    "planner_revise": {
        "ru": "Замечания к сценарию выше:\n```json\n{issues}\n```\n"
              "Исправь сценарий так, чтобы учесть все замечания, и верни его целиком: {{\"steps\": [...]}}",
        "en": "Review of the script above:\n```json\n{issues}\n```\n"
              "Fix the script so that every issue is addressed and return it whole: {{\"steps\": [...]}}",
    },
    "judge": {
        "ru": "Проверь сценарий разговора. Естественно ли звучат реплики пользователя? Соответствуют ли "
              "вызовы его намерению и словам? Верны ли аргументы (каноническая форма, ничего не выдумано) и "
              "правдоподобны ли результаты? Согласован ли `final_answer` с результатами? Подходит ли сценарий "
              "под свой тип?\n```json\n{task}\n```\n"
              "Перечисли все найденные проблемы, а не только первую. Верни JSON: {{\"approved\": true, если "
              "проблем нет, иначе false, \"issues\": [\"...\"]}}",
        "en": "Review the conversation script. Do the user's messages sound natural? Do the calls match the "
              "user's intent and words? Are the arguments right (canonical form, nothing invented) and the "
              "results plausible? Is `final_answer` consistent with the results? Does the script fit its type?\n"
              "```json\n{task}\n```\nList every problem you find, not only the first. Return JSON: "
              "{{\"approved\": true if there are no problems, otherwise false, \"issues\": [\"...\"]}}",
    },
    "irrelevance_answer": {
        "ru": "Вот разговор пользователя с ассистентом и функции, которые у ассистента есть:\n"
              "```json\n{task}\n```\nНи одна из этих функций не может выполнить последнюю просьбу "
              "пользователя. Напиши ответ ассистента по-русски: вежливо объясни, что сделать это сейчас "
              "нельзя, и, если получится, предложи, чем можешь помочь. Не обещай вызвать функцию. Только "
              "текст ответа.",
        "en": "Here is the conversation between the user and the assistant, and the functions the assistant "
              "has:\n```json\n{task}\n```\nNone of these functions can serve the user's last request. Write "
              "the assistant's reply in English: explain politely that it cannot be done now and, if possible, "
              "offer what it can help with. Do not promise to call a function. Reply text only.",
    },
    "irrelevance_judge": {
        "ru": "Вот разговор и функции ассистента:\n```json\n{task}\n```\n"
              "Может ли какая-нибудь из этих функций выполнить последнюю просьбу пользователя (с учётом "
              "всего разговора)? Верни JSON: {{\"any_tool_fits\": true или false, \"fitting_tools\": "
              "[имена подходящих функций], \"issues\": [\"почему\"]}}",
        "en": "Here is the conversation and the assistant's functions:\n```json\n{task}\n```\n"
              "Can any of these functions serve the user's last request (given the whole conversation)? "
              "Return JSON: {{\"any_tool_fits\": true or false, \"fitting_tools\": [names of the functions "
              "that fit], \"issues\": [\"why\"]}}",
    },
    "contradiction_judge": {
        "ru": "Вот разговор, последний результат функции и ответ ассистента, который завершает разговор:\n"
              "```json\n{task}\n```\nПротиворечит ли ответ последнему результату функции? Противоречие — это, "
              "например, «ничего не найдено», когда результат не пустой; «готово» или «успешно» после ошибки; "
              "статус, число или имя, отличные от тех, что в результате. Верни JSON: {{\"contradicts\": true, "
              "если ответ противоречит результату (это ошибка), false, если не противоречит, \"evidence\": "
              "\"какие слова ответа противоречат какому полю результата\"}}",
        "en": "Here is the conversation, the last function result and the assistant's closing answer:\n"
              "```json\n{task}\n```\nDoes the answer contradict the last function result? A contradiction is, "
              "for example, \"nothing was found\" when the result is not empty; \"done\" or \"success\" after an "
              "error; a status, number or name different from the result's. Return JSON: {{\"contradicts\": "
              "true if the answer contradicts the result (a mistake), false if it does not, \"evidence\": \"which "
              "words of the answer contradict which field of the result\"}}",
    },
    "given_judge": {
        "ru": "Вот разговор, параметры функций ассистента и вопрос, который ассистент задаёт пользователю:\n"
              "```json\n{task}\n```\nСпрашивает ли ассистент о том, что пользователь или функция уже сообщили "
              "раньше в разговоре — любыми словами: синонимом, сокращением, разговорной формой («в Питере» — "
              "Санкт-Петербург, «в Нижнем» — Нижний Новгород, «МСК»), латиницей, словами вместо цифр? Верни JSON: "
              "{{\"already_given\": true, если это уже сообщено и вопрос лишний (это ошибка), false, если этих "
              "сведений в разговоре нет, \"slot\": \"о каком параметре вопрос\", \"where\": \"где это уже "
              "сказано\"}}",
        "en": "Here is the conversation, the parameters of the assistant's functions and the question the "
              "assistant asks the user:\n```json\n{task}\n```\nDoes the assistant ask for something the user or a "
              "function already gave earlier in the conversation, in any wording: a synonym, a short form, a "
              "nickname (\"NYC\", \"SF\"), another script, a number in words? Return JSON: {{\"already_given\": "
              "true if it was already given and the question is unnecessary (a mistake), false if the "
              "conversation lacks it, \"slot\": \"the parameter the question is about\", \"where\": \"where it "
              "was given\"}}",
    },
    "answer_judge": {
        "ru": "Вот разговор, результаты функций и ответ ассистента, который его завершает:\n"
              "```json\n{task}\n```\nСогласован ли ответ с результатами функций: нет ли в нём чисел, имён и "
              "фактов, которых нет в результатах или которые им противоречат, и отвечает ли он на просьбу "
              "пользователя? Верни JSON: {{\"score\": от 0 (противоречит) до 10 (полностью согласован), "
              "\"issues\": [\"...\"]}}",
        "en": "Here is the conversation, the function results and the assistant's closing answer:\n"
              "```json\n{task}\n```\nIs the answer consistent with the function results — no numbers, names "
              "or facts that the results lack or contradict — and does it answer the user's request? Return "
              "JSON: {{\"score\": from 0 (contradicts) to 10 (fully consistent), \"issues\": [\"...\"]}}",
    },
}

ASSISTANT_SYSTEMS: dict[str, tuple[str, ...]] = {
    "ru": (
        "Ты полезный ассистент с доступом к функциям. Вызывай функцию, когда без неё не ответить; если не "
        "хватает обязательных данных, сначала спроси пользователя; если ни одна функция не подходит, честно "
        "скажи об этом. Отвечай по-русски.",
        "Ты — ассистент службы поддержки. Пользуйся доступными инструментами, чтобы помочь клиенту. Не "
        "додумывай недостающие сведения: уточни их у клиента. Отвечай вежливо и по-русски.",
        "Ты помогаешь пользователю решать практические задачи. Если для ответа нужны данные, получи их "
        "вызовом подходящей функции. Когда функции не хватает сведений, задай один короткий уточняющий "
        "вопрос. Пиши по-русски, кратко.",
        "Ты цифровой помощник. Инструменты описаны ниже; используй их, только когда они действительно нужны. "
        "Если просьбу нельзя выполнить имеющимися инструментами, так и скажи и предложи, чем можешь помочь. "
        "Язык общения — русский.",
        "Ты вежливый и точный ассистент. Аргументы функций бери только из слов пользователя и результатов "
        "предыдущих вызовов, ничего не выдумывай. Если чего-то не хватает, спроси. Отвечай на русском языке.",
        "Ты — ассистент в приложении. Отвечай коротко и по делу, по-русски. Для действий и поиска сведений "
        "вызывай функции; если вызов вернул ошибку, объясни пользователю, что случилось, и попробуй "
        "исправить запрос.",
    ),
    "en": (
        "You are a helpful assistant with access to functions. Call a function when the answer needs it; if "
        "a required detail is missing, ask the user first; if no function fits, say so plainly. Answer in "
        "English.",
        "You are a customer-support assistant. Use the available tools to help the customer. Do not guess "
        "missing details; ask for them. Be polite and answer in English.",
        "You help the user with practical tasks. When the answer needs data, get it by calling a suitable "
        "function. When a function lacks information, ask one short clarifying question. Write in English, "
        "briefly.",
        "You are a digital helper. Use the tools below only when they are really needed. If the request "
        "cannot be served with them, say so and offer what you can help with. Answer in English.",
    ),
}


def prompt_text(key: str, lang: str) -> str:
    """The template ``key`` in ``lang`` ('ru' or 'en')."""
    if key == "assistant_system":
        return assistant_system(lang)
    try:
        by_lang = PROMPTS[key]
    except KeyError:
        raise KeyError(f"unknown prompt {key!r}; known: {sorted(PROMPTS)}") from None
    if lang not in by_lang:
        raise ValueError(f"prompt {key!r} has no language {lang!r}; use one of {sorted(by_lang)}")
    return by_lang[lang]


def assistant_system(lang: str, key: str | None = None) -> str:
    """One of the shipped assistant system prompts, chosen by a stable hash of ``key`` (the plan id).

    ``key=None`` gives the first (the default one).
    """
    try:
        variants = ASSISTANT_SYSTEMS[lang]
    except KeyError:
        raise ValueError(f"no assistant system prompt for language {lang!r}; use one of "
                         f"{sorted(ASSISTANT_SYSTEMS)}") from None
    return variants[0] if key is None else variants[zlib.crc32(key.encode("utf-8")) % len(variants)]
