"""LLM-as-judge schemes for side-by-side (SBS) comparison, per task type.

=================  ================================================================
scheme             what the judge sees and says
=================  ================================================================
``uniform_sbs``    the request and two answers; one verdict (A / B / tie)
``reference``      the same plus a gold answer; judges agreement with it in substance
``criteria_sbs``   the same plus the task type's criteria; one overall verdict
``per_criterion``  a verdict per criterion, then an overall verdict
=================  ================================================================

Every judge request asks for JSON through ``response_format`` (a JSON schema)
and the answer is parsed robustly (reasoning blocks, prose, fences, Cyrillic
«А»/«В» for Latin A/B; without JSON, an explicit ``[[A]]`` or ``Вердикт: B`` in the text). A verdict the parser cannot read is a recorded
rejection with its reason, not a guess.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fabrika.errors import ConfigError
from fabrika.eval.answers import json_schema_format, parse_object, strip_reasoning
from fabrika.llm import ChatRequest

Scheme = Literal["uniform_sbs", "reference", "criteria_sbs", "per_criterion"]
VERDICTS = ("A", "B", "tie")
JUDGE_TAG = "eval.judge"


class TaskScheme(BaseModel):
    """How one task type is judged."""

    model_config = ConfigDict(extra="forbid")

    scheme: Scheme = Field(default="uniform_sbs", description="Judging scheme (see the module table).")
    criteria: list[str] = Field(default_factory=list, description="Criteria for criteria_sbs / per_criterion.")

    @model_validator(mode="after")
    def _needs_criteria(self) -> "TaskScheme":
        if self.scheme in ("criteria_sbs", "per_criterion") and not self.criteria:
            raise ValueError(f"scheme {self.scheme!r} needs a non-empty 'criteria' list")
        return self


class JudgeConfig(BaseModel):
    """The schemes file of ``fabrika eval calibrate --schemes``."""

    model_config = ConfigDict(extra="forbid")

    default: TaskScheme = Field(default_factory=TaskScheme, description="Scheme of task types not listed.")
    task_types: dict[str, TaskScheme] = Field(default_factory=dict, description="Scheme per task type.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Judge sampling temperature.")
    max_tokens: int | None = Field(default=None, ge=1, description="Cap on the judge's answer length.")

    def for_task(self, task_type: str) -> TaskScheme:
        return self.task_types.get(task_type, self.default)


SYSTEM = ("Ты — строгий и беспристрастный эксперт, который сравнивает ответы ИИ-ассистентов. Порядок ответов "
          "случаен и не говорит об их качестве; длина ответа сама по себе не достоинство. Верни только JSON.")

_INTRO = {
    "uniform_sbs": "Сравни два ответа на запрос пользователя и реши, какой из них лучше в целом.",
    "reference": "Сравни два ответа на запрос пользователя с эталонным ответом. Лучше тот ответ, который по "
                 "существу совпадает с эталоном: те же факты, числа и выводы (формулировки могут отличаться).",
    "criteria_sbs": "Сравни два ответа на запрос пользователя по перечисленным критериям и вынеси общий вердикт.",
    "per_criterion": "Сравни два ответа на запрос пользователя по каждому критерию отдельно, затем вынеси общий вердикт.",
}
_VERDICT_HELP = ("Вердикт: \"A\" — лучше ответ A, \"B\" — лучше ответ B, \"tie\" — ответы равноценны.")


def verdict_schema(scheme: TaskScheme) -> dict[str, Any]:
    props: dict[str, Any] = {"reasoning": {"type": "string"}, "verdict": {"type": "string", "enum": list(VERDICTS)}}
    required = ["reasoning", "verdict"]
    if scheme.scheme == "per_criterion":
        props["criteria"] = {"type": "object", "additionalProperties": False, "required": list(scheme.criteria),
                             "properties": {c: {"type": "string", "enum": list(VERDICTS)} for c in scheme.criteria}}
        required.insert(1, "criteria")
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def judge_prompt(scheme: TaskScheme, prompt: str, first: str, second: str, reference: str | None) -> str:
    parts = [_INTRO[scheme.scheme], "", "## Запрос пользователя", prompt.strip()]
    if scheme.scheme == "reference":
        if reference is None:
            raise ConfigError("scheme 'reference' needs a 'reference' (gold answer) in every row of its task type")
        parts += ["", "## Эталонный ответ", reference.strip()]
    if scheme.scheme in ("criteria_sbs", "per_criterion"):
        parts += ["", "## Критерии"] + [f"- {c}" for c in scheme.criteria]
    parts += ["", "## Ответ A", first.strip(), "", "## Ответ B", second.strip(), ""]
    if scheme.scheme == "per_criterion":
        parts.append("Верни JSON: {\"reasoning\": \"…\", \"criteria\": {\"<критерий>\": \"A\" | \"B\" | \"tie\", …}, "
                     "\"verdict\": \"A\" | \"B\" | \"tie\"}. Ключи criteria — названия критериев как в списке.")
    else:
        parts.append("Верни JSON: {\"reasoning\": \"коротко, почему\", \"verdict\": \"A\" | \"B\" | \"tie\"}.")
    parts.append(_VERDICT_HELP)
    return "\n".join(parts)


def judge_requests(scheme: TaskScheme, cfg: JudgeConfig, row: dict[str, Any]) -> list[ChatRequest]:
    """Two requests: the answers in the logged order (A, B) and swapped (B, A)."""
    rf = json_schema_format("sbs_verdict", verdict_schema(scheme))
    out = []
    for first, second in ((row["response_a"], row["response_b"]), (row["response_b"], row["response_a"])):
        text = judge_prompt(scheme, row["prompt"], first, second, row.get("reference"))
        out.append(ChatRequest(messages=({"role": "system", "content": SYSTEM}, {"role": "user", "content": text}),
                               temperature=cfg.temperature, max_tokens=cfg.max_tokens, response_format=rf,
                               tag=JUDGE_TAG))
    return out


_TIE = re.compile(r"^(?:tie|draw|equal|both|ничья|равн\w*|одинаков\w*|оба)$", re.IGNORECASE)
_HOMOGLYPH = str.maketrans({"А": "A", "а": "A", "В": "B", "в": "B"})


def normalize_verdict(value: Any) -> str | None:
    """A/B/tie from what models write: 'a', 'Answer B', 'Ответ А' (Cyrillic), '[[B]]', 'ничья'."""
    if not isinstance(value, str):
        return None
    v = value.strip().strip("[]()*\"'.«» ")
    v = re.sub(r"^(?:answer|response|ответ|вариант)\s+", "", v, flags=re.IGNORECASE).strip("[]()*\"'.«» ")
    if len(v) == 1:
        v = v.translate(_HOMOGLYPH)
    if v.upper() in ("A", "B"):
        return v.upper()
    if _TIE.match(v):
        return "tie"
    return None


def swap(verdict: str | None) -> str | None:
    return {"A": "B", "B": "A"}.get(verdict, verdict) if verdict is not None else None


# An explicit verdict in prose, for models that ignore response_format: "[[A]]" (MT-Bench style) or
# "Вердикт: B" / "Verdict: tie" — the last one counts, as models restate their final choice.
_PROSE_VERDICT = re.compile(
    r"\[\[\s*(A|B|А|В|tie)\s*\]\]|(?:вердикт|verdict)\s*[:：]\s*\**\s*(?:ответ\s+|answer\s+)?(A|B|А|В|tie|ничья)(?![\w])",
    re.IGNORECASE)


def parse_verdict(text: str | None, scheme: TaskScheme) -> tuple[str | None, dict[str, str | None], str | None]:
    """(verdict, per-criterion verdicts, rejection reason or None)."""
    obj = parse_object(text, required=("verdict",))
    if isinstance(obj, str):
        if scheme.scheme != "per_criterion":
            found = list(_PROSE_VERDICT.finditer(strip_reasoning(text)))
            if found:
                last = found[-1]
                return normalize_verdict(last.group(1) or last.group(2)), {}, None
        return None, {}, obj
    verdict = normalize_verdict(obj["verdict"])
    if verdict is None:
        return None, {}, f"bad_verdict: {str(obj['verdict'])[:40]!r}"
    crit: dict[str, str | None] = {}
    if scheme.scheme == "per_criterion":
        criteria = obj.get("criteria")
        raw = criteria if isinstance(criteria, dict) else {}
        lowered = {str(k).strip().lower(): v for k, v in raw.items()}
        crit = {c: normalize_verdict(lowered.get(c.lower())) for c in scheme.criteria}
    return verdict, crit, None
