"""Role prompts of the FC pipeline, written natively in Russian and English.

Structured inputs go into a fenced ``json`` block so a real model reads them
easily and the ``sim`` backend can parse them back (it is a stand-in that only
sees the request, like a model would). Placeholders use ``str.format``; literal
braces are doubled.
"""

from __future__ import annotations

PROMPTS: dict[str, dict[str, str]] = {
    "role_user": {"ru": "Пользователь", "en": "User"},
    "role_assistant": {"ru": "Ассистент", "en": "Assistant"},
    "empty_dialogue": {"ru": "(диалог ещё не начат)", "en": "(the conversation has not started)"},
    "user_system": {
        "ru": "Ты играешь роль человека, который пишет ассистенту. Тебя зовут {name}. {description} "
              "Манера письма: {style}. Пиши только от своего лица, коротко и естественно, по-русски. "
              "Ты не знаешь, как устроен ассистент, и не упоминаешь никаких функций или программ.",
        "en": "You play a person writing to an assistant. Your name is {name}. {description} "
              "Writing style: {style}. Write only as yourself, briefly and naturally, in English. "
              "You do not know how the assistant works and never mention functions or programs.",
    },
    "user_turn": {
        "ru": "Твоя цель в этой реплике:\n```json\n{goal}\n```\nДиалог до сих пор:\n{transcript}\n\n"
              "Напиши следующую реплику пользователя. Упомяни все факты из `facts` своими словами и не "
              "добавляй других сведений. Ответь только текстом реплики.",
        "en": "Your goal for this turn:\n```json\n{goal}\n```\nThe conversation so far:\n{transcript}\n\n"
              "Write the user's next message. Mention every fact in `facts` in your own words and add no "
              "other details. Reply with the message text only.",
    },
    "assistant_system": {
        "ru": "Ты полезный ассистент с доступом к функциям. Вызывай функцию, когда она нужна для ответа; "
              "если не хватает обязательных данных, сначала спроси пользователя; если ни одна функция не "
              "подходит, честно скажи об этом. Отвечай по-русски.",
        "en": "You are a helpful assistant with access to functions. Call a function when the answer needs "
              "it; if a required detail is missing, ask the user first; if no function fits, say so "
              "plainly. Answer in English.",
    },
    "tool_system": {
        "ru": "Ты имитируешь работу функции. Верни только JSON-результат вызова, без пояснений.",
        "en": "You emulate a function. Return only the JSON result of the call, without explanations.",
    },
    "tool_turn": {
        "ru": "Схема функции:\n```json\n{schema}\n```\nВызов:\n```json\n{call}\n```\n"
              "Ожидаемый результат по сценарию (null — придумай правдоподобный, а при неверных "
              "аргументах верни {{\"error\": \"...\"}}):\n```json\n{expected}\n```\n"
              "Предыдущие результаты функций:\n```json\n{earlier}\n```",
        "en": "Function schema:\n```json\n{schema}\n```\nCall:\n```json\n{call}\n```\n"
              "Expected result from the script (null: invent a plausible one; for invalid arguments "
              "return {{\"error\": \"...\"}}):\n```json\n{expected}\n```\n"
              "Earlier function outputs:\n```json\n{earlier}\n```",
    },
    "tools": {
        "ru": "Придумай {n} функций (инструментов) для ассистента по теме ниже.\n```json\n{topic}\n```\n"
              "Требования: имена в snake_case, уникальные; параметры — JSON Schema (type object, "
              "properties с типами, enum где уместно, required); все описания по-русски; для каждой "
              "функции четыре описания `tiers` от очень краткого (несколько слов) до подробного "
              "(несколько предложений), каждое следующее длиннее предыдущего.\n"
              "Верни JSON: {{\"tools\": [{{\"name\": ..., \"parameters\": {{...}}, \"tiers\": [t0, t1, t2, t3]}}]}}",
        "en": "Design {n} functions (tools) for an assistant on the topic below.\n```json\n{topic}\n```\n"
              "Requirements: unique snake_case names; parameters as JSON Schema (type object, typed "
              "properties, enums where natural, required); all descriptions in English; for each function "
              "four descriptions `tiers` from very terse (a few words) to detailed (a few sentences), each "
              "longer than the previous one.\n"
              "Return JSON: {{\"tools\": [{{\"name\": ..., \"parameters\": {{...}}, \"tiers\": [t0, t1, t2, t3]}}]}}",
    },
    "planner": {
        "ru": "Составь эталонный сценарий диалога пользователя с ассистентом, у которого есть функции.\n"
              "```json\n{task}\n```\nТип сценария `sample_type`: single — один вызов; parallel — несколько "
              "вызовов в одном раунде; multi_step — несколько раундов, следующий использует результат "
              "предыдущего; multi_turn — несколько реплик пользователя; clarification — пользователь не "
              "называет обязательный параметр (`withheld`), ассистент переспрашивает, затем вызов; text — "
              "ответ без функций; irrelevance — просьба, которую не выполняет ни одна функция.\n"
              "Для каждого шага: kind, intent, user_message (точные слова пользователя), slots (параметр → "
              "слова пользователя), enum_phrases (значение enum → как его скажет человек), withheld, rounds "
              "(списки вызовов {{name, arguments, result}}), final_answer. Всё по-русски.\n"
              "Верни JSON: {{\"steps\": [...]}}",
        "en": "Write a reference script of a conversation between a user and an assistant that has functions.\n"
              "```json\n{task}\n```\nScript type `sample_type`: single — one call; parallel — several calls "
              "in one round; multi_step — several rounds, each using the previous result; multi_turn — "
              "several user turns; clarification — the user leaves out a required parameter (`withheld`), "
              "the assistant asks, then calls; text — an answer without functions; irrelevance — a request "
              "no function can serve.\nFor each step: kind, intent, user_message (the user's exact words), "
              "slots (parameter → the user's words), enum_phrases (enum value → how a person says it), "
              "withheld, rounds (lists of calls {{name, arguments, result}}), final_answer. All in English.\n"
              "Return JSON: {{\"steps\": [...]}}",
    },
    "planner_revise": {
        "ru": "Исправь сценарий по замечаниям.\nПредыдущий сценарий:\n```json\n{plan}\n```\n"
              "Замечания:\n```json\n{issues}\n```\nВерни исправленный JSON: {{\"steps\": [...]}}",
        "en": "Fix the script according to the review.\nPrevious script:\n```json\n{plan}\n```\n"
              "Issues:\n```json\n{issues}\n```\nReturn the corrected JSON: {{\"steps\": [...]}}",
    },
    "judge": {
        "ru": "Проверь сценарий: реалистичны ли реплики, соответствуют ли вызовы намерению и словам "
              "пользователя, правильны ли аргументы и результаты, соответствует ли сценарий типу.\n"
              "```json\n{task}\n```\nВерни JSON: {{\"approved\": true|false, \"issues\": [\"...\"]}}",
        "en": "Review the script: are the messages realistic, do the calls match the user's intent and "
              "words, are arguments and results right, does the script fit its type?\n"
              "```json\n{task}\n```\nReturn JSON: {{\"approved\": true|false, \"issues\": [\"...\"]}}",
    },
    "irrelevance_answer": {
        "ru": "Пользователь просит:\n```json\n{task}\n```\nНи одна из доступных функций этого не умеет. "
              "Напиши вежливый ответ ассистента по-русски: объясни, что сделать это нельзя, и, если можно, "
              "предложи, чем помочь. Только текст ответа.",
        "en": "The user asks:\n```json\n{task}\n```\nNone of the available functions can do this. Write the "
              "assistant's polite reply in English: explain it cannot be done and, if possible, offer what "
              "it can help with. Reply text only.",
    },
    "irrelevance_judge": {
        "ru": "Может ли какая-нибудь из функций выполнить просьбу пользователя?\n```json\n{task}\n```\n"
              "Верни JSON: {{\"approved\": true, если ни одна не подходит, иначе false, \"issues\": [...]}}",
        "en": "Can any of the functions serve the user's request?\n```json\n{task}\n```\n"
              "Return JSON: {{\"approved\": true if none fits, otherwise false, \"issues\": [...]}}",
    },
}


def prompt_text(key: str, lang: str) -> str:
    """The template ``key`` in ``lang`` ('ru' or 'en')."""
    try:
        by_lang = PROMPTS[key]
    except KeyError:
        raise KeyError(f"unknown prompt {key!r}; known: {sorted(PROMPTS)}") from None
    if lang not in by_lang:
        raise ValueError(f"prompt {key!r} has no language {lang!r}; use one of {sorted(by_lang)}")
    return by_lang[lang]
