"""The template-aware sampler and its baselines on small logs where the right answer is known."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.eval.logs import LogRecord, read_logs
from fabrika.eval.metrics import SampleScorer, js_distance, mean_pairwise_distance
from fabrika.eval.normalize import normalize
from fabrika.eval.sampling import allocate_budget, find_templates, global_maxmin, random_sample, tag_diversity, template_aware

runner = CliRunner()
NAMES = ["Иван Петров", "Мария Смирнова", "Олег Кузнецов", "Анна Лебедева", "Пётр Соколов", "Ирина Волкова"]
TEXTS = ["Курьер опоздал на два часа и не предупредил о задержке, коробка была мокрой и мятой.",
         "Прошу вернуть деньги на карту, товар пришёл не того цвета и с царапиной на корпусе.",
         "Менеджер не отвечал три дня, а в приложении промокод так и не сработал при оплате.",
         "Всё понравилось, но инструкция только на английском, хотелось бы перевод на русский."]


def support_prompt(rng: random.Random) -> str:
    return (f"Клиент: {rng.choice(NAMES)}\nЗаказ ORD-{rng.randint(10000, 99999)} от {rng.randint(1, 28):02d}."
            f"{rng.randint(1, 12):02d}.2025 на сумму {rng.randint(1, 90) * 100} руб.\nПочта: u{rng.randint(1, 999)}@mail.ru\n"
            f"Обращение клиента:\n\n{rng.choice(TEXTS)} {rng.choice(TEXTS)}\n\nНапиши вежливый ответ клиенту.")


def sql_prompt(rng: random.Random) -> str:
    return (f"Explain what this query does and how to speed it up:\n```sql\nSELECT * FROM t{rng.randint(1, 99)} "
            f"WHERE id = {rng.randint(1, 10**6)};\n```\nThe table has {rng.randint(1, 90)} million rows, see "
            f"https://wiki.corp/db/{rng.randint(1, 999)} for the schema.")


def two_template_log(n_a: int = 90, n_b: int = 10, seed: int = 0) -> list[LogRecord]:
    rng = random.Random(seed)
    rows = [LogRecord(id=f"a{i}", text=support_prompt(rng), service="support") for i in range(n_a)]
    rows += [LogRecord(id=f"b{i}", text=sql_prompt(rng), service="sql") for i in range(n_b)]
    rng.shuffle(rows)
    return rows


def test_normalizer_masks_variables_and_keeps_template_words():
    n = normalize("Клиент: Иван Петров\nЗаказ ORD-58213 от 12.03.2024 на сумму 4 500 руб. Пишите на ivan@mail.ru, "
                  "ссылка https://shop.ru/o/58213. Ответь «да» или «нет».\n```python\nprint(1)\n```")
    assert n.template == ("Клиент: ⟨VAL⟩\nЗаказ ⟨ID⟩ от ⟨DATE⟩ на сумму ⟨NUM⟩ руб. Пишите на ⟨EMAIL⟩, ссылка ⟨URL⟩. "
                          "Ответь «да» или «нет».\n⟨CODE⟩")
    assert "Иван Петров" in n.variables and "ORD-58213" in n.variables and "ivan@mail.ru" in n.variables
    assert "https://shop.ru/o/58213" in n.variables  # the sentence's full stop is not part of the URL


def test_normalizer_masks_pasted_blocks_tables_and_long_quotes():
    n = normalize("Суммаризируй текст:\n\nВчера в Москве прошёл форум, на котором обсуждали развитие технологий и "
                  "новые подходы к обучению моделей.\n\n| Товар | Цена |\n|---|---|\n| Хлеб | 50 |\n| Молоко | 90 |")
    assert n.template == "Суммаризируй текст:\n\n⟨TEXT⟩\n\n| Товар | Цена |\n|---|---|\n⟨ROW⟩"
    m = normalize("Переведи «Сегодня хорошая погода, пойдём гулять» на английский.")
    assert m.template == "Переведи ⟨QUOTE⟩ на английский."


def test_masked_variables_map_one_templates_rows_to_one_cluster():
    log = two_template_log(60, 40)
    assert len({r.text for r in log}) == 100  # every raw prompt differs
    labels = find_templates([normalize(r.text).template for r in log])
    by_service: dict[str, set[int]] = {}
    for rec, lab in zip(log, labels):
        by_service.setdefault(rec.service, set()).add(lab)
    assert len(by_service["support"]) == 1 and len(by_service["sql"]) == 1
    assert by_service["support"] != by_service["sql"]


def test_unmasked_prompts_do_not_form_one_cluster():
    """Control: the raw prompts (no masking) of the same template split into many clusters."""
    log = two_template_log(60, 0)
    assert len(set(find_templates([r.text for r in log]))) > 10


def test_allocate_budget_sqrt_split_with_floor():
    # floors 1 + 1, the other 8 split √90 : √10 = 3 : 1 → 6 and 2
    assert allocate_budget([90, 10], 10) == ([7, 3], 0)
    # proportional would give 9 : 1; √ is flatter
    per, tail = allocate_budget([900, 100, 25], 30)
    assert sum(per) == 30 and tail == 0 and per[2] >= 1
    assert per[0] / per[1] == pytest.approx(3, rel=0.2)


def test_allocate_budget_small_budget_goes_to_largest_templates_first():
    assert allocate_budget([5, 50, 20, 2], 2) == ([0, 1, 1, 0], 0)


def test_allocate_budget_tail_keeps_its_traffic_share():
    sizes = [60, 20] + [1] * 20  # 20 singletons = 20 % of the log
    per, tail = allocate_budget(sizes, 10)
    assert tail == 2 and per[:2] == [5, 3] and sum(per) == 8


def test_allocate_budget_larger_than_pool_takes_everything():
    assert allocate_budget([3, 1], 10, min_template_count=2) == ([3, 0], 1)


def test_template_aware_two_templates_90_10_get_sqrt_budget_split():
    log = two_template_log(90, 10)
    sel = template_aware(log, 10, seed=3)
    assert Counter(log[i].service for i in sel.indices) == {"support": 7, "sql": 3}
    assert sel.info["templates"] == 2 and sel.info["tail_rows"] == 0
    rand = random_sample(log, 10, seed=3)
    assert len(rand.indices) == 10 and len(set(rand.indices)) == 10


def test_within_template_maxmin_prefers_distinct_variables():
    base = "Клиент: {}\nНапиши вежливый ответ клиенту о статусе заказа."
    log = [LogRecord(id=f"d{i}", text=base.format("Иван Петров")) for i in range(8)]
    log += [LogRecord(id="x1", text=base.format("Мария Смирнова")), LogRecord(id="x2", text=base.format("Олег Кузнецов"))]
    for seed in range(5):
        picked = template_aware(log, 3, seed=seed).indices
        assert len({log[i].text for i in picked}) == 3


def test_global_maxmin_and_tags_are_deterministic_and_distinct():
    log = two_template_log(50, 20)
    for sampler in (global_maxmin, tag_diversity, template_aware, random_sample):
        a, b = sampler(log, 12, seed=1).indices, sampler(log, 12, seed=1).indices
        assert a == b and len(set(a)) == 12


def test_tag_diversity_covers_every_tag_before_repeating():
    log = [LogRecord(id=str(i), text="t", tags=tags) for i, tags in
           enumerate([("a",), ("a",), ("b",), ("a", "b"), ("c",), ("c",)])]
    picked = tag_diversity(log, 3, seed=0).indices
    covered = set().union(*(log[i].tags for i in picked))
    assert covered == {"a", "b", "c"}
    assert picked[0] == 3  # the row with the most tags comes first


def test_metrics_known_values():
    assert js_distance(["a", "b"], ["a", "b", "a", "b"]) == pytest.approx(0.0)
    assert js_distance(["a"], ["b"]) == pytest.approx(1.0)
    log = [LogRecord(id="1", text="кот сидит"), LogRecord(id="2", text="кот сидит"), LogRecord(id="3", text="пёс бежит")]
    sc = SampleScorer(log)
    assert sc.score([0, 1])["dist"] == pytest.approx(0.0)
    assert sc.score([0, 2])["dist"] == pytest.approx(1.0)
    assert sc.score([0, 1, 2])["js_service"] is None  # no row has a service
    m = sc.vec.transform(["кот сидит", "пёс бежит", "кот бежит"])
    assert 0.0 < mean_pairwise_distance(m) < 1.0


def test_sampler_favours_templates_over_random_on_the_synthetic_log(tmp_path: Path):
    from fabrika.eval.synthlog import write

    path = tmp_path / "log.jsonl"
    write(path, rows=3000, seed=1)
    log = read_logs(path)
    truth = [json.loads(line)["template_id"] for line in path.read_text(encoding="utf-8").splitlines()]
    sel = template_aware(log, 120, seed=0)
    templated = {t for t in truth if t != "free"}
    got = {truth[i] for i in sel.indices} - {"free"}
    rnd = {truth[i] for i in random_sample(log, 120, seed=0).indices} - {"free"}
    assert len(got) > len(rnd)  # √ allocation reaches more of the rare templates than a uniform draw
    assert len(got) >= 0.8 * len(templated)


def test_cli_sample_writes_selection_and_rejects_bad_input(tmp_path: Path):
    log = tmp_path / "log.jsonl"
    rows = two_template_log(30, 10)
    log.write_text("".join(json.dumps({"id": r.id, "prompt": r.text, "service": r.service}, ensure_ascii=False) + "\n"
                           for r in rows), encoding="utf-8")
    out = tmp_path / "sample.jsonl"
    res = runner.invoke(app, ["eval", "sample", str(log), "--budget", "6", "--out", str(out)])
    assert res.exit_code == 0, res.output
    picked = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(picked) == 6 and {p["service"] for p in picked} == {"support", "sql"}
    assert "template_cluster" in picked[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json\n', encoding="utf-8")
    res = runner.invoke(app, ["eval", "sample", str(bad), "--budget", "1"])
    assert res.exit_code == 2 and "bad.jsonl:2" in res.output
    res = runner.invoke(app, ["eval", "sample", str(log), "--budget", "0"])
    assert res.exit_code == 2 and "--budget" in res.output
    res = runner.invoke(app, ["eval", "sample", str(log), "--budget", "3", "--method", "nope"])
    assert res.exit_code == 2 and "--method" in res.output


def test_llm_tagging_stage_feeds_the_tag_sampler(server, tmp_path: Path):
    from tests.eval.conftest import llm_flags

    log = tmp_path / "log.jsonl"
    rows = two_template_log(12, 6)
    log.write_text("".join(json.dumps({"id": r.id, "prompt": r.text, "service": r.service}, ensure_ascii=False) + "\n"
                           for r in rows), encoding="utf-8")

    def tagger(req: dict) -> str:
        text = req["messages"][-1]["content"]
        if "SELECT" in text:
            return '<think>sql</think>{"tags": ["Объяснение кода", "sql", "оптимизация"]}'
        if "u1" in text:
            return "не знаю"  # unreadable: this row keeps the rule-set tags
        return '```json\n{"tags": ["ответ клиенту", "Ответ клиенту ", "вежливость"]}\n```'

    server.script(tag="eval.tag", responder=tagger)
    out = tmp_path / "tags"
    res = runner.invoke(app, ["eval", "tag", str(log), "--out", str(out), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    tagged = read_logs(out / "tagged.jsonl")
    assert len(tagged) == len(rows)
    sql = next(r for r in tagged if r.service == "sql")
    assert sql.tags == ("объяснение кода", "sql", "оптимизация")
    sup = [r for r in tagged if r.service == "support" and r.tags is not None]
    assert sup and all(r.tags == ("ответ клиенту", "вежливость") for r in sup)  # variants of one tag merged
    picked = tag_diversity(tagged, 2, seed=0).indices
    assert {tagged[i].service for i in picked} == {"sql", "support"}


def test_logs_read_from_parquet_and_messages(tmp_path: Path):
    import polars as pl

    path = tmp_path / "log.parquet"
    pl.DataFrame({"id": ["a", "b"], "prompt": ["Привет", None],
                  "messages": [None, json.dumps([{"role": "system", "content": "Ты бот."},
                                                 {"role": "user", "content": "Вопрос"},
                                                 {"role": "assistant", "content": "ответ"}], ensure_ascii=False)],
                  "service": ["chat", "chat"]}).write_parquet(path)
    a, b = read_logs(path)
    assert a.text == "Привет" and b.text == "Ты бот.\n\nВопрос" and b.service == "chat"


def test_normalizer_markdown_keys_and_list_markers():
    n = normalize("**Клиент:** Иван Петров\n- **Город**: Казань\n1. Срок: до пятницы\n2) Сумма 500 руб.")
    assert n.template == "**Клиент:** ⟨VAL⟩\n- **Город**: ⟨VAL⟩\n1. Срок: ⟨VAL⟩\n2) Сумма ⟨NUM⟩ руб."


def test_template_without_variables_is_drawn_from_all_its_rows():
    log = [LogRecord(id=str(i), text="Привет! Как дела?") for i in range(50)]
    log += [LogRecord(id=f"x{i}", text=f"Заказ ORD-{1000 + i} готов?") for i in range(50)]
    seen = set()
    for seed in range(20):
        seen |= {i for i in template_aware(log, 4, seed=seed).indices if i < 50}
    assert len(seen) > 10  # not always the first rows of the template
