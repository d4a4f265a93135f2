"""``sim`` responders for every IF role — deterministic, Russian, and honestly a stand-in.

They understand only the families in :mod:`sim_families` and, so the funnel has
something to drop, deliberately answer badly some of the time: non-Russian or
garbled expansions, near-duplicates, verifiers that don't parse, don't compile,
are wrong on their own cases, hang or try to touch the system; back-translations
to a different constraint; responses that miss a constraint or get truncated.
"""

from __future__ import annotations

import json
import random
import re

import fabrika.generators.instruct.sim_families as fam_mod
from fabrika.generators.instruct.prompts import (
    TAG_BACKTRANSLATE,
    TAG_EXPAND,
    TAG_JUDGE_QUALITY,
    TAG_RESPOND,
    TAG_VERIFIERS,
)
from fabrika.llm.types import ChatRequest, Choice


def _user_text(request: ChatRequest) -> str:
    return "\n".join(str(m.get("content") or "") for m in request.messages if m.get("role") == "user")


def _all_text(request: ChatRequest) -> str:
    return "\n".join(str(m.get("content") or "") for m in request.messages)


def sim_expand(request: ChatRequest, rng: random.Random) -> str:
    """A numbered list of new constraints; ~10 % are bad on purpose (English, garbled, style)."""
    m = re.search(r"Придумай (\d+)", _user_text(request))
    n = int(m.group(1)) if m else 5
    lines = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.04:
            lines.append("The answer must contain exactly three bullet points.")
        elif roll < 0.07:
            lines.append("#@@ %% ~~ ^^ && ** ###")
        elif roll < 0.10:
            lines.append(rng.choice(fam_mod.UNRELATED_TEXTS))
        else:
            fam = rng.choice(fam_mod.FAMILIES)
            text = fam.render(fam.sample(rng))
            if rng.random() < 0.15:  # a near-duplicate phrasing
                text = text.replace("Ответ должен", "Твой ответ должен", 1)
            lines.append(text)
    return "\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1))


def _cases(fam: fam_mod.Family, params: dict, rng: random.Random) -> list[dict]:
    out = []
    for _ in range(3):
        base = " ".join(fam_mod.sentences(rng, rng.randint(2, 4)))
        label = rng.random() < 0.5
        out.append({"input": (fam.comply if label else fam.violate)(base, params), "output": label})
    return out


def sim_verifier(request: ChatRequest, rng: random.Random) -> str:
    """One JSON verifier answer; which kind is drawn from ``rng`` (seeded by the request)."""
    m = re.search(r"Ограничение: «(.*)»\s*$", _user_text(request), re.MULTILINE)
    constraint = m.group(1) if m else ""
    known = fam_mod.recognise(constraint)
    roll = rng.random()
    if known is None:
        code = "def evaluate(response):\n    return len(response.strip()) > 0"
        cases = [{"input": "Короткий ответ.", "output": True}, {"input": "", "output": False},
                 {"input": "Ещё один ответ.", "output": True}]
        return json.dumps({"func": code, "cases": cases}, ensure_ascii=False)
    fam, params = known
    cases = _cases(fam, params, rng)
    if roll < 0.06:
        return "Конечно! Вот функция, которая проверяет ограничение: она смотрит на ответ и решает."
    if roll < 0.10:
        return '{"func": "def evaluate(response):\\n    return len(response.split()) >'
    if roll < 0.15:
        code = fam_mod.code_for(fam, params, request.sample_index).replace("def evaluate(response):", "def evaluate(response)")
    elif roll < 0.23:
        code = fam_mod.wrong_code_for(fam, params)
    elif roll < 0.26:
        code = "def evaluate(response):\n    while True:\n        pass"
    elif roll < 0.29:
        code = "def evaluate(response):\n    import os\n    os.system('rm -rf /tmp/x')\n    return True"
    elif roll < 0.32:
        code = "def evaluate(response):\n    return response.nonexistent_method()"
    else:
        code = fam_mod.code_for(fam, params, request.sample_index)
    answer = json.dumps({"func": code, "cases": cases}, ensure_ascii=False)
    if roll > 0.9:  # prose and a fence around it, as models like to do
        answer = f"Вот решение:\n```json\n{answer}\n```\nНадеюсь, это поможет."
    return answer


def sim_backtranslate(request: ChatRequest, rng: random.Random) -> str:
    """Read the family back from the code; 10 % of the time describe something else."""
    m = re.search(r"```python\n(.*?)```", _user_text(request), re.DOTALL)
    known = fam_mod.recognise_code(m.group(1)) if m else None
    if known is None or rng.random() < 0.1:
        return rng.choice(fam_mod.UNRELATED_TEXTS)
    fam, params = known
    return fam.render(params)


def sim_respond(request: ChatRequest, rng: random.Random) -> Choice | str:
    """Answer the query following the recognised constraints; sometimes miss one or get cut off."""
    text = " ".join(fam_mod.sentences(rng, rng.randint(3, 6)))
    found = fam_mod.recognise_all(_all_text(request))
    roll = rng.random()
    if roll < 0.04:
        return Choice(content=text[: len(text) // 2], finish_reason="length")
    if roll < 0.07:
        return "Sorry, I can only answer in English."
    skip = rng.randrange(len(found)) if found and roll < 0.30 else -1
    order = ["min_words", "max_words", "keyword", "paragraphs", "title", "starts_with", "ends_with",
             "no_commas", "no_digits", "lowercase", "uppercase", "quotes"]
    for i, (fam, params) in enumerate(sorted(found, key=lambda fp: order.index(fp[0].name))):
        if i != skip:
            text = fam.comply(text, params)
    return text


def sim_judge(request: ChatRequest, rng: random.Random) -> str:
    """A 0–10 rating; 5 % of the time no number at all."""
    if rng.random() < 0.05:
        return "Хороший ответ."
    if request.tag.startswith("if.judge.similarity"):
        from fabrika.filters.similarity import TfidfBackend

        m = re.search(r"Инструкция A: (.*)\nИнструкция B: (.*)", _user_text(request))
        score = TfidfBackend().score(m.group(1), m.group(2)) if m else 0.0
        return str(round(min(10.0, score * 25)))
    return str(rng.randint(5, 9))


def register_sim_responders() -> None:
    """Register the IF roles with the sim backend (idempotent; called on package import)."""
    from fabrika.llm.sim import register_sim_responder

    register_sim_responder(TAG_EXPAND, sim_expand)
    register_sim_responder(TAG_VERIFIERS, sim_verifier)
    register_sim_responder(TAG_BACKTRANSLATE, sim_backtranslate)
    register_sim_responder(TAG_RESPOND, sim_respond)
    register_sim_responder("if.judge", sim_judge)
    assert TAG_JUDGE_QUALITY.startswith("if.judge")
