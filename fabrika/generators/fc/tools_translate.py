"""``translate_descriptions``: an English API's documentation in Russian (or back), names untouched.

The common case is an English OpenAPI spec or MCP server and a Russian dataset. ``fc.tools_import``
with ``translate_descriptions: ru`` sends each tool's description texts (description, summary,
given tiers, parameter descriptions) that are not in the target language to the LLM in one request,
then sends the translations back for a back-translation and compares it with the original:

* names of the tool and its parameters, and enum values, are never sent as text to translate; they
  are listed as identifiers to keep, and a translation that loses one that the original mentions
  is refused (``translation_lost_name``);
* a translation not in the target language is refused (``wrong_language``);
* a back-translation whose similarity to the original (:func:`similarity`, a character-level
  ``difflib`` ratio of normalised text) is below ``min_backtranslation_similarity`` is refused
  (``backtranslation_mismatch``) with the worst text quoted.

Both requests go through the engine, so its request cache keeps them: a rerun spends no calls.
The ``sim`` backend answers with a reversible transliteration (Latin <-> Cyrillic, identifiers
kept), so offline runs exercise the whole path, back-translation check included.
"""

from __future__ import annotations

import difflib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from fabrika.generators.fc.common import language_ok
from fabrika.llm.sim import register_sim_responder
from fabrika.llm.types import ChatRequest
from fabrika.prompts import PromptCatalogue
from fabrika.textutil.answers import extract_json, is_failure

TAG_TRANSLATE = "fc.tools_import.translate"
TAG_BACK = "fc.tools_import.backtranslate"
LANG_NAMES = {"ru": ("Russian", "русский"), "en": ("English", "английский")}

HERE = Path(__file__).resolve().parent
#: The translator's prompt in each target language (jinja2, beside this module).
CATALOGUE = PromptCatalogue("fc.tools_translate", {"ru": HERE / "tools_translate_ru.yaml",
                                                   "en": HERE / "tools_translate_en.yaml"})


def other_lang(lang: str) -> str:
    return "en" if lang == "ru" else "ru"


def similarity(a: str, b: str) -> float:
    """Character-level ``difflib`` ratio of lowercased, whitespace-normalised texts (0..1)."""
    def norm(t: str) -> str:
        return " ".join(re.sub(r"[^\w\s]", " ", t.lower()).split())
    return difflib.SequenceMatcher(None, norm(a), norm(b), autojunk=False).ratio()


def translation_request(name: str, texts: Mapping[str, str], keep: Iterable[str], to: str, tag: str,
                        temperature: float, max_tokens: int) -> ChatRequest:
    """One request translating ``texts`` (key -> text) into ``to``; ``keep`` lists identifiers to leave as is."""
    task = {"tool": name, "from": other_lang(to), "to": to, "keep": sorted(set(keep)), "texts": dict(texts)}
    content = CATALOGUE.text("translate", to, task=json.dumps(task, ensure_ascii=False, indent=1))
    return ChatRequest(messages=({"role": "user", "content": content},), temperature=temperature,
                       max_tokens=max_tokens, tag=tag)


def parse_translation(text: str | None, keys: Iterable[str]) -> dict[str, str] | str:
    """The translated texts by key, or a rejection reason (no JSON, a key missing or empty)."""
    answer = extract_json(text, expect=dict)
    if is_failure(answer):
        return str(answer)
    texts = answer.get("texts") if isinstance(answer, dict) else None
    if not isinstance(texts, dict):
        return "invalid_translation: the answer has no 'texts' object"
    out: dict[str, str] = {}
    for key in keys:
        value = texts.get(key)
        if not isinstance(value, str) or not value.strip():
            return f"invalid_translation: text {key!r} is missing"
        out[key] = value.strip()
    return out


def text_language_ok(text: str, lang: str, keep: Iterable[str] = ()) -> bool:
    """:func:`language_ok` with the identifiers to keep (names, enum values) taken out: they are no language."""
    kept = set(keep)
    words = [tok for tok in _TOKEN.findall(text) if tok not in kept]
    return language_ok("".join(words), lang)


def _mentioned(text: str, names: Iterable[str]) -> list[str]:
    return [n for n in names if len(n) > 2 and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)]


@dataclass(frozen=True)
class Verdict:
    """The checks of one translation: ``reason`` is ``None`` when it is accepted."""

    reason: str | None
    min_similarity: float


def check_translation(original: Mapping[str, str], translated: Mapping[str, str], back: Mapping[str, str],
                      keep: Iterable[str], to: str, min_similarity: float) -> Verdict:
    """Language of the translation, identifiers kept, back-translation close to the original."""
    keep = list(keep)
    worst, worst_key = 1.0, ""
    for key, text in original.items():
        lost = [n for n in _mentioned(text, keep) if n not in translated[key]]
        if lost:
            return Verdict(f"translation_lost_name: {key} lost {lost[0]!r}", 0.0)
        if not text_language_ok(translated[key], to, keep):
            return Verdict(f"wrong_language: translation of {key} is not in {to!r}: {translated[key][:60]!r}", 0.0)
        score = similarity(text, back[key])
        if score < worst:
            worst, worst_key = score, key
    if worst < min_similarity:
        return Verdict(f"backtranslation_mismatch: {worst_key} similarity {worst:.2f} < {min_similarity:g}: "
                       f"{original[worst_key][:50]!r} came back as {back[worst_key][:50]!r}", worst)
    return Verdict(None, worst)


# -- sim: a reversible transliteration ------------------------------------------------------------
_LAT = "abcdefghijklmnopqrstuvwxyz"
_CYR = "абцдефгхийклмнопярстувшжыз"
_TO_RU = {**dict(zip(_LAT, _CYR)), **dict(zip(_LAT.upper(), _CYR.upper()))}
_TO_EN = {v: k for k, v in _TO_RU.items()}
_TOKEN = re.compile(r"`[^`]*`|https?://\S+|[\w-]+|[^\w`]+")


def sim_transliterate(text: str, to: str, keep: Iterable[str]) -> str:
    """Latin -> Cyrillic (``to`` ru) or back, leaving identifiers, backticks and URLs as they are."""
    kept = set(keep)
    table = _TO_RU if to == "ru" else _TO_EN
    out = []
    for tok in _TOKEN.findall(text):
        if tok in kept or tok.startswith(("`", "http")) or any(ch.isdigit() for ch in tok):
            out.append(tok)
        else:
            out.append("".join(table.get(ch, ch) for ch in tok))
    return "".join(out)


def sim_translate_responder(request: ChatRequest, rng: random.Random) -> str:
    """``sim`` translator (and back-translator): the task's texts transliterated into its ``to`` script."""
    content = request.messages[-1]["content"]
    task = json.loads(content.split("```json\n", 1)[1].rsplit("```", 1)[0])
    texts = {k: sim_transliterate(v, task["to"], task["keep"]) for k, v in task["texts"].items()}
    return json.dumps({"texts": texts}, ensure_ascii=False)


register_sim_responder(TAG_TRANSLATE, sim_translate_responder)
register_sim_responder(TAG_BACK, sim_translate_responder)
