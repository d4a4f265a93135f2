"""Sample rows with awkward shapes (tools and arguments with different keys, Cyrillic,
multi-turn tool use, text/irrelevance targets) and a materialised run around them.

A uniquely named module (not ``conftest``) so other test directories can import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fabrika.schemas import Message, Sample, Tool, ToolCall, to_row
from fabrika.store import RunStore
from fabrika.store.versions import materialise

WEATHER = Tool.model_validate({"function": {
    "name": "get_weather", "description": "Погода в городе",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}})
BOOK = Tool.model_validate({"function": {
    "name": "book_ticket", "description": "Book a train ticket",
    "parameters": {"type": "object", "properties": {
        "from_city": {"type": "string"}, "to_city": {"type": "string"},
        "passengers": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}},
        "required": ["from_city", "to_city"]}}})


def make_sample(i: int, kind: str = "tool_call", lang: str = "ru") -> Sample:
    """One sample; ``kind`` picks the target type, ``i`` varies the arguments' keys."""
    user = "Какая погода в Казани на 3 дня?" if lang == "ru" else f"Book a ticket from Paris to Berlin #{i}"
    prompt = [Message(role="system", content="Ты — полезный ассистент."), Message(role="user", content=user)]
    if kind == "tool_call":
        args: dict[str, Any] = {"city": "Казань", "days": 3} if i % 2 else {"city": f"Москва-{i}"}
        if lang == "en":
            args = {"from_city": "Paris", "to_city": "Berlin", "passengers": [{"name": "Анна"}]} if i % 2 else \
                {"from_city": "Paris", "to_city": f"Rome{i}"}
        name = "get_weather" if lang == "ru" else "book_ticket"
        completion = [Message(role="assistant", content="", train=True,
                              tool_calls=[ToolCall(id=f"call_{i}", name=name, arguments=args)])]
        gt: dict[str, Any] = {"calls": [{"name": name, "arguments": args}]}
    elif kind == "multi":
        prompt += [Message(role="assistant", content="", flag="wrong",
                           tool_calls=[ToolCall(id="c0", name="get_weather", arguments={"city": "Kazan"})]),
                   Message(role="tool", tool_call_id="c0", name="get_weather", content='{"error": "unknown city"}'),
                   Message(role="assistant", content="",
                           tool_calls=[ToolCall(id="c1", name="get_weather", arguments={"city": "Казань"})]),
                   Message(role="tool", tool_call_id="c1", name="get_weather", content='{"temp": -3}')]
        completion = [Message(role="assistant", content=f"В Казани −3 °C ({i}).", train=True)]
        gt = {"calls": []}
        kind = "text"
    else:
        text = {"text": f"Готово, ответ {i}.", "clarification": f"Уточните город, пожалуйста ({i})?",
                "irrelevance": f"У меня нет подходящего инструмента ({i})."}[kind]
        completion = [Message(role="assistant", content=text, train=True)]
        gt = {"calls": []}
    return Sample(id=f"s{i:05d}", expert="fc", lang=lang, prompt=prompt, completion=completion,
                  tools=[WEATHER, BOOK] if i % 3 else [BOOK, WEATHER], target_type=kind, ground_truth=gt,
                  meta={"episode_id": f"e{i // 2}", "step": i % 2})


def make_rows(n: int) -> list[dict[str, Any]]:
    kinds = ["tool_call", "tool_call", "multi", "text", "clarification", "irrelevance"]
    rows = []
    for i in range(n):
        row = to_row(make_sample(i, kinds[i % len(kinds)], "ru" if i % 4 in (0, 1) else "en"))
        row.update(status="ok", reason=None, input_id=f"in{i}", llm_backend="sim")
        rows.append(row)
    return rows


def make_run(root: Path, rows: list[dict[str, Any]], stage: str = "fc.samples") -> Path:
    """A run directory with one dataset stage, materialised as version ``v1`` by the real store."""
    run = root / "run"
    store = RunStore(run)
    store.write(stage, rows)
    store.write_manifest({
        "config": {"dataset": {"stages": [stage]}, "filters": {}, "llm": {"model": "qwen3-235b-sim"}},
        "order": [stage], "layout": {stage: {"inputs": [], "annotates": False}},
    })
    materialise(run, name="v1")
    return run
