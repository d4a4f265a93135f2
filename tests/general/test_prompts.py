"""general.prompts: the user's pool in every accepted shape, normalised to messages; dirty log rows are recorded
rejections; exact repeats are rejected; the template cap keeps a few prompts of a templated service."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from fabrika.errors import InputError
from fabrika.generators.general.pool import NotAPrompt, normalise_record
from fabrika.generators.general.prompts import GeneralPromptsConfig, GeneralPromptsStage
from fabrika.generators.general.templates import template_clusters, template_view
from fabrika.testing import stage_context


def _stage(path: Path, **cfg) -> GeneralPromptsStage:
    return GeneralPromptsStage(GeneralPromptsConfig(path=path, **cfg), stage_context())


async def _rows(stage: GeneralPromptsStage) -> list[dict]:
    out = []
    for row in stage.input_rows():
        out += await stage.process(row)
    return out


def test_record_shapes_normalise_to_messages_ending_with_a_user_turn() -> None:
    assert normalise_record({"prompt": "  Привет!  "}) == [{"role": "user", "content": "Привет!"}]
    log = {"messages": [{"role": "system", "content": "Ты оператор."}, {"role": "user", "content": "Где заказ?"},
                        {"role": "assistant", "content": "Уже едет."}]}  # the production answer is cut off
    assert normalise_record(log) == log["messages"][:2]
    sharegpt = {"conversations": json.dumps([{"from": "human", "value": "Как дела?"}, {"from": "gpt", "value": "Ок"},
                                             {"from": "human", "value": "А у меня нет."}], ensure_ascii=False)}
    assert [m["role"] for m in normalise_record(sharegpt)] == ["user", "assistant", "user"]
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Опиши фото"},
                                                        {"type": "image_url", "image_url": {"url": "x"}}]}]}
    assert normalise_record(parts) == [{"role": "user", "content": "Опиши фото"}]
    with_system = normalise_record({"prompt": "Вопрос", "system": "Отвечай кратко."})
    assert with_system[0] == {"role": "system", "content": "Отвечай кратко."}


@pytest.mark.parametrize(("record", "reason"), [
    ({"messages": [{"role": "assistant", "content": "Здравствуйте!"}]}, "no_user_turn"),
    ({"messages": [{"role": "user", "content": "   "}]}, "empty_prompt"),
    ({"messages": [{"role": "robot", "content": "бип"}]}, "unknown role"),
    ({"messages": "[{not json"}, "not JSON"),
    ({"title": "без текста"}, "no_prompt"),
    ({"prompt": 42}, "no_prompt"),
])
def test_unusable_records_say_why(record: dict, reason: str) -> None:
    with pytest.raises(NotAPrompt, match=reason):
        normalise_record(record)


async def test_jsonl_log_rows_with_service_fields_and_dirty_rows(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    records = [{"prompt": "Как сварить борщ?", "lang": "ru", "service": "chat", "task": None},
               {"messages": [{"role": "assistant", "content": "Чем помочь?"}]},
               {"prompt": "Как сварить борщ?", "lang": "ru"},  # an exact repeat
               {"prompt": "What is a monad?"}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n", encoding="utf-8")
    rows = await _rows(_stage(path, default_lang="ru"))
    assert [r["status"] for r in rows] == ["ok", "rejected", "rejected", "ok"]
    assert rows[1]["reason"].startswith("no_user_turn") and rows[1]["source_row"] == 2
    assert rows[2]["reason"] == f"exact_duplicate_of: {rows[0]['id']}"
    assert len({r["id"] for r in rows}) == 4  # every record has its own id: resume and counts stay exact
    assert json.loads(rows[0]["prompt"]) == [{"role": "user", "content": "Как сварить борщ?"}]
    assert (rows[0]["service"], rows[0]["task"], rows[3]["lang"]) == ("chat", None, "ru")


async def test_parquet_and_save_to_disk_pools_give_the_same_rows(tmp_path: Path) -> None:
    from datasets import Dataset, DatasetDict

    records = [{"prompt": "Что такое ОМС?", "lang": "ru"}, {"prompt": "Посоветуй книгу.", "lang": "ru"}]
    pl.DataFrame(records).write_parquet(tmp_path / "pool.parquet")
    Dataset.from_list(records).save_to_disk(str(tmp_path / "ds"))
    DatasetDict({"train": Dataset.from_list(records)}).save_to_disk(str(tmp_path / "dd"))
    a = await _rows(_stage(tmp_path / "pool.parquet"))
    b = await _rows(_stage(tmp_path / "ds"))
    c = await _rows(_stage(tmp_path / "dd", split="train"))
    assert [r["id"] for r in a] == [r["id"] for r in b] == [r["id"] for r in c] and len(a) == 2
    with pytest.raises(InputError, match="set `split`"):
        list(_stage(tmp_path / "dd").input_rows())


def test_template_clusters_group_a_templated_service_not_distinct_prompts() -> None:
    system = {"role": "system", "content": "Ты — оператор поддержки сервиса доставки. Отвечай вежливо."}
    tickets = ["Не приходит код по СМС.", "Списали деньги дважды.", "Курьер опоздал на 3 часа.",
               "Приложение вылетает.", "Не могу сменить адрес."]
    templated = [[system, {"role": "user", "content": f"Обращение клиента №{i}: {t} Составь ответ клиенту."}]
                 for i, t in enumerate(tickets)]
    distinct = [[{"role": "user", "content": q}] for q in ("Как заварить пуэр?", "Почему небо голубое?",
                                                          "Составь план пробежки на неделю.")]
    prompts = templated + distinct
    ids = [f"p{i}" for i in range(len(prompts))]
    clusters = template_clusters(ids, [template_view(p) for p in prompts], [None] * len(prompts))
    assert len({clusters[i][0] for i in ids[:5]}) == 1
    assert sorted(clusters[i][1] for i in ids[:5]) == [0, 1, 2, 3, 4]
    assert {clusters[i] for i in ids[5:]} == {(i, 0) for i in ids[5:]}
    by_task = template_clusters(ids[5:], ["a", "b", "c"], ["svc/summary", "svc/summary", None])
    assert by_task["p5"][0] == by_task["p6"][0] == "p5" and by_task["p7"] == ("p7", 0)


async def test_template_rank_is_order_independent(tmp_path: Path) -> None:
    rows = [{"prompt": f"Переведи на английский: фраза номер {i} про погоду"} for i in range(6)]
    for name, order in (("a", rows), ("b", rows[::-1])):
        (tmp_path / f"{name}.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in order),
                                                encoding="utf-8")
    a = {r["id"]: (r["template_id"], r["template_rank"]) for r in await _rows(_stage(tmp_path / "a.jsonl", templates=True))}
    b = {r["id"]: (r["template_id"], r["template_rank"]) for r in await _rows(_stage(tmp_path / "b.jsonl", templates=True))}
    assert a == b and len({t for t, _ in a.values()}) == 1
