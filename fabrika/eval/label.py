"""Error analysis: an LLM labeller sorts failed production answers into a failure taxonomy.

The default taxonomy is the T-pro report's six classes; ``--taxonomy FILE``
(YAML or JSON: a list of ``{name, description}``) replaces it. Input rows:
``id``, ``prompt``, ``response``, optionally ``label`` (a person's class, for
agreement) and ``task_type``. The labeller answers JSON through
``response_format``; an answer naming no known class is a recorded rejection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fabrika.errors import ConfigError, InputError
from fabrika.eval.agreement import agreement_report
from fabrika.eval.answers import json_schema_format, parse_object
from fabrika.eval.logs import read_jsonl
from fabrika.llm import ChatRequest, ChatResponse

LABEL_TAG = "eval.label"


class FailureClass(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Short id of the class (what the labeller answers).")
    description: str = Field(min_length=1, description="What belongs to the class, for the labeller.")


DEFAULT_TAXONOMY = (
    FailureClass(name="formatting", description="Нарушен требуемый формат: JSON, таблица, список, разметка, длина, "
                 "структура ответа."),
    FailureClass(name="instruction_following", description="Не выполнено содержательное (не форматное) требование "
                 "инструкции: не то действие, пропущена часть задачи, нарушено ограничение по смыслу."),
    FailureClass(name="classification", description="Неверно выбран класс, метка, категория или тональность в "
                 "задаче классификации."),
    FailureClass(name="knowledge_base", description="Фактическая ошибка или ответ, противоречащий базе знаний "
                 "или предоставленному контексту; выдуманные сведения."),
    FailureClass(name="language", description="Ответ не на том языке, смешение языков или нарушено языковое "
                 "предпочтение пользователя."),
    FailureClass(name="other", description="Ошибка, которая не подходит ни под один класс выше."),
)


def load_taxonomy(path: Path | None) -> list[FailureClass]:
    if path is None:
        return list(DEFAULT_TAXONOMY)
    import yaml

    if not path.is_file():
        raise ConfigError(f"--taxonomy {path}: no such file")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = data.get("classes")
    if not isinstance(data, list) or not data:
        raise ConfigError(f"--taxonomy {path}: expected a list of {{name, description}} (or classes: [...])")
    try:
        classes = [FailureClass.model_validate(c) for c in data]
    except ValidationError as exc:
        raise ConfigError(f"--taxonomy {path}: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}") from None
    names = [c.name for c in classes]
    if len(set(names)) != len(names):
        raise ConfigError(f"--taxonomy {path}: class names must be unique, got {names}")
    return classes


def read_label_rows(path: Path, taxonomy: list[FailureClass]) -> list[dict[str, Any]]:
    names = {c.name for c in taxonomy}
    rows, seen = [], set()
    for n, row in read_jsonl(path):
        where = f"{path}:{n}"
        if not isinstance(row.get("prompt"), str) or not isinstance(row.get("response"), str):
            raise InputError(f"{where}: each row needs 'prompt' and 'response' strings")
        if row.get("label") is not None and row["label"] not in names:
            raise InputError(f"{where}: label {row['label']!r} is not in the taxonomy ({', '.join(sorted(names))})")
        rid = str(row.get("id", f"L{n}"))
        if rid in seen:
            raise InputError(f"{where}: duplicate id {rid!r}")
        seen.add(rid)
        rows.append({**row, "id": rid, "task_type": str(row.get("task_type") or "default")})
    if not rows:
        raise InputError(f"{path}: no rows")
    return rows


SYSTEM = ("Ты — аналитик качества ответов ИИ-ассистента. Тебе показывают запрос и ответ, который пользователь или "
          "разметчик счёл неудачным. Определи главную причину неудачи — ровно один класс из списка. Верни только JSON.")


def label_requests(row: dict[str, Any], taxonomy: list[FailureClass]) -> list[ChatRequest]:
    classes = "\n".join(f"- {c.name}: {c.description}" for c in taxonomy)
    text = (f"## Классы ошибок\n{classes}\n\n## Запрос\n{row['prompt'].strip()}\n\n## Ответ ассистента\n"
            f"{row['response'].strip()}\n\nВерни JSON: {{\"reason\": \"одно-два предложения\", \"category\": "
            f"\"<название класса из списка>\"}}.")
    schema = {"type": "object", "additionalProperties": False, "required": ["reason", "category"],
              "properties": {"reason": {"type": "string"}, "category": {"type": "string",
                                                                        "enum": [c.name for c in taxonomy]}}}
    return [ChatRequest(messages=({"role": "system", "content": SYSTEM}, {"role": "user", "content": text}),
                        temperature=0.0, response_format=json_schema_format("failure_class", schema), tag=LABEL_TAG)]


def parse_label(text: str | None, taxonomy: list[FailureClass]) -> tuple[str | None, str | None]:
    obj = parse_object(text, required=("category",))
    if isinstance(obj, str):
        return None, obj
    raw = str(obj["category"]).strip().strip("\"'«».").lower()
    for c in taxonomy:
        if raw == c.name.lower() or raw.replace(" ", "_").replace("-", "_") == c.name.lower():
            return c.name, None
    return None, f"unknown_class: {raw[:40]!r}"


def make_finish(taxonomy: list[FailureClass]):
    def finish(row: dict[str, Any], resps: list[ChatResponse]) -> dict[str, Any]:
        label, reason = parse_label(resps[0].text, taxonomy)
        return {"task_type": row["task_type"], "human": row.get("label"), "label": label, "rejected": reason}
    return finish


def label_report(records: list[dict[str, Any]], taxonomy: list[FailureClass], *, iterations: int = 1000,
                 seed: int = 0) -> dict[str, Any]:
    names = [c.name for c in taxonomy]
    counts = {n: sum(r["label"] == n for r in records) for n in names}
    rep: dict[str, Any] = {"n": len(records), "distribution": counts,
                           "rejected": sum(r["label"] is None for r in records)}
    pairs = [r for r in records if r["label"] is not None and r["human"] is not None]
    if pairs:
        rep["agreement"] = agreement_report([r["human"] for r in pairs], [r["label"] for r in pairs],
                                            [r["task_type"] for r in pairs], names, iterations=iterations, seed=seed)
    return rep

