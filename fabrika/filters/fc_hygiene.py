"""User-turn hygiene: artefacts a user agent leaves that no person writes.

A simulated user turn is context in every later training prompt, so it must read
like a person's message. :func:`user_turn_issues` flags

* ``role_label`` — the turn opens with a speaker label («Пользователь: …», "User:");
* ``meta_remark`` — a remark about the instructions or the card («(В реплике переданы
  все сведения из facts.)», "as instructed", «согласно заданию»);
* ``wrapping_quotes`` — the whole turn is wrapped in quotes;
* ``pasted_json`` — a JSON object or array, code fence or markup pasted into the turn;
* ``wrong_script`` — an English phrase (three words or more) inside a Russian turn (or
  Russian in an English one); identifiers, e-mails, codes and brand names are not
  language, and a turn wholly in the other language is the language check's verdict.

Pure function; :mod:`fabrika.generators.fc.dialogues` re-asks the user agent once on
an issue and then rejects the episode with the issue as the reason.
"""

from __future__ import annotations

import json
import re

__all__ = ["user_turn_issues"]

_LABEL = r"(?:пользователь|клиент|user|customer|human|человек|ассистент|assistant)"
_ROLE = re.compile(rf"^\s*(?:\*\*)?\s*(?:[\[(]\s*{_LABEL}\s*[\])]|{_LABEL}\s*(?:\*\*)?\s*[:：—]|{_LABEL}\s+-\s)",
                   re.IGNORECASE)
_META = re.compile(
    r"(facts|verbatim|goal card|карточк\w+ цели|\bintent\b|сведени\w+ из|передал\w* все|переданы все|"
    r"согласно (?:заданию|инструкци\w+|сценари\w+)|по (?:заданию|сценарию|инструкции)|как (?:указано|требуется) в "
    r"(?:задании|инструкции)|реплик\w+ пользователя|\bas instructed\b|per the instructions|according to the "
    r"(?:task|instructions|script)|all (?:the )?facts|the user's (?:message|turn)|in character|"
    r"\((?:note|примечание|прим\.)[^)]*\))", re.IGNORECASE)
_QUOTES = (("«", "»"), ('"', '"'), ("“", "”"), ("„", "“"), ("'", "'"), ("`", "`"))
_JSON_START = re.compile(r"[\[{]\s*[\"'\[{\d-]")
_MARKUP = re.compile(r"```|</?[a-z_]+>|<\|[a-z_]+\|>|^\s*#{1,6}\s|\*\*[^*]+\*\*", re.IGNORECASE | re.MULTILINE)
_IDENT = re.compile(r"\S+@\S+|https?://\S+|\b(?=\w*\d)[\w.-]+\b|\b[A-Z]{2,}\b")
_LAT_WORD = re.compile(r"\b[A-Za-z][a-z']+\b")
_CYR_WORD = re.compile(r"\b[А-Яа-яЁё]+\b")


def _has_json(text: str) -> bool:
    for m in _JSON_START.finditer(text):
        start = m.start()
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            continue
        if isinstance(value, (dict, list)) and value:
            return True
    return False


def _english_run(text: str) -> bool:
    """Three or more Latin words in a row (a phrase, not a brand name)."""
    clean = _IDENT.sub(" ", text)
    run = 0
    for tok in re.findall(r"[A-Za-zА-Яа-яЁё']+", clean):
        run = run + 1 if re.fullmatch(r"[A-Za-z']+", tok) else 0
        if run >= 3:
            return True
    return False


def _russian_run(text: str) -> bool:
    run = 0
    for tok in re.findall(r"[A-Za-zА-Яа-яЁё']+", text):
        run = run + 1 if re.fullmatch(r"[А-Яа-яЁё]+", tok) else 0
        if run >= 3:
            return True
    return False


def user_turn_issues(text: str, lang: str) -> list[str]:
    """The hygiene issues of one user turn (empty list: it reads like a person's message)."""
    issues: list[str] = []
    body = text.strip()
    if _ROLE.match(body):
        issues.append("role_label")
    if _META.search(body):
        issues.append("meta_remark")
    for a, b in _QUOTES:
        if len(body) > 2 and body.startswith(a) and body.endswith(b) and body[1:-1].count(a) == body[1:-1].count(b) \
                and (a != b or body.count(a) == 2):
            issues.append("wrapping_quotes")
            break
        # half of a wrapping pair: a quote that opens or closes the turn and is never matched
        if a == b and body.count(a) % 2 == 1 and (body.startswith(a) or body.endswith(a)):
            issues.append("wrapping_quotes")
            break
        if a != b and (body.startswith(a) or body.endswith(b)) and body.count(a) != body.count(b):
            issues.append("wrapping_quotes")
            break
    if _has_json(body) or _MARKUP.search(body):
        issues.append("pasted_json")
    # a phrase in the other language inside a turn (a turn wholly in the other one is a language verdict)
    if lang == "ru" and len(_CYR_WORD.findall(body)) >= 2 and _english_run(body):
        issues.append("wrong_script")
    elif lang == "en" and len(_LAT_WORD.findall(body)) >= 2 and _russian_run(body):
        issues.append("wrong_script")
    return issues
