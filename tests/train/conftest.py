"""Fixtures: a tiny local model and fabrika-shaped exports (SFT, GRPO per expert)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from datasets import Dataset, Features, Json, List  # noqa: E402

from fabrika.train.tiny import save_tiny  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Погода в городе",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _call(name: str, args: dict) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


SFT_ROWS = [
    {"prompt": [{"role": "system", "content": "Ты помощник."}, {"role": "user", "content": "Какая погода в Москве?"}],
     "completion": [{"role": "assistant", "content": "", "tool_calls": [_call("get_weather", {"city": "Москва"})]}],
     "tools": [WEATHER]},
    {"prompt": [{"role": "user", "content": "Ответь кратко: столица России?"}],
     "completion": [{"role": "assistant", "content": "Москва."}], "tools": []},
    {"prompt": [{"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", {"city": "Paris"})]},
                {"role": "tool", "content": '{"temp": 18}'}],
     "completion": [{"role": "assistant", "content": "It is 18 degrees in Paris."}], "tools": [WEATHER]},
    {"prompt": [{"role": "user", "content": "Напиши три пункта плана."}],
     "completion": [{"role": "assistant", "content": "1. Проверить. 2. Описать. 3. Отправить."}], "tools": []},
]

# The export's layout: one JSON value per message / tool (``List(Json())``).
SFT_FEATURES = Features({"prompt": List(Json()), "completion": List(Json()), "tools": List(Json())})


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny") / "base", seed=0)


@pytest.fixture(scope="session")
def sft_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sft") / "export"
    Dataset.from_list(SFT_ROWS, features=SFT_FEATURES).save_to_disk(str(path))
    return path


def _prompt(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="session")
def grpo_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One GRPO export per expert, in the export engineer's column layout."""
    root = tmp_path_factory.mktemp("grpo")
    fc = [{"prompt": _prompt(q), "tools": [WEATHER], "target_type": "tool_call", "lang": lang,
           "ground_truth": json.dumps({"calls": [{"name": "get_weather", "arguments": {"city": c}}]},
                                      ensure_ascii=False)}
          for q, c, lang in [("Погода в Москве?", "Москва", "ru"), ("Weather in Paris?", "Paris", "en")]]
    gen = [{"prompt": _prompt(q), "target_type": "general", "lang": "ru", "ground_truth": "null",
            "ref_length": ref, "rm_score": rm}
           for q, ref, rm in [("Расскажи о Казани.", 150, 0.5), ("Что такое JSON?", 120, -0.25)]]
    constraints = [{"id": "ru.length.words_max", "params": {"n": 3}}, {"id": "ru.punct.no_commas", "params": {}}]
    if_rows = [{"prompt": _prompt(q), "target_type": "text", "lang": "ru", "ground_truth": json.dumps(
        {"constraints": constraints}, ensure_ascii=False), "constraints": json.dumps(constraints),
        "rm_score": rm, "teacher_rm_mean": 0.5}
        for q, rm in [("Опиши Москву не более чем тремя словами без запятых.", 0.9),
                      ("Назови город тремя словами без запятых.", 0.1)]]
    out = {}
    for name, rows in (("fc", fc), ("general", gen), ("if", if_rows)):
        path = root / name
        Dataset.from_list(rows).save_to_disk(str(path))
        out[name] = path
    return out
