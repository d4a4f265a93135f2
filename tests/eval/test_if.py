"""`fabrika eval if`: IFEval-style strict/loose scores of a scripted model with known pass rates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.constraints import get
from tests.eval.conftest import llm_flags

runner = CliRunner()
NC, LC = "ru.punct.no_commas", "ru.case.all_lowercase"
THINK = "<think>Думаю, Как Ответить, С Запятыми</think>\n"  # would fail both constraints if not stripped

# (constraints, response) — pass/fail known by construction
ITEMS = (
    [([NC], THINK + "всё хорошо и спокойно")] * 7 + [([NC], "да, конечно")] * 3
    + [([LC], "всё строчными буквами")] * 4
    + [([LC], "Конечно! Вот ответ:\nвсё строчными")] * 3  # strict fails, loose (first line dropped) passes
    + [([LC], "Всё С Заглавной")] * 3
    + [([NC, LC], "всё хорошо"), ([NC, LC], "всё хорошо, правда"), ([NC, LC], "Всё Хорошо"), ([NC, LC], "Да, Нет")]
)


def write_samples(path: Path) -> None:
    lines = []
    for k, (cids, _) in enumerate(ITEMS):
        gt = {"constraints": [{"id": f"{c}@x", "text": get(c).render({}), "library_id": c, "params": {}} for c in cids]}
        prompt = [{"role": "user", "content": f"Запрос номер {k}: расскажи о погоде.\n\n"
                                              + "\n".join(get(c).render({}) for c in cids)}]
        lines.append(json.dumps({"id": f"if{k}", "expert": "if", "lang": "ru", "prompt": json.dumps(prompt, ensure_ascii=False),
                                 "completion": "[]", "ground_truth": json.dumps(gt, ensure_ascii=False)},
                                ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def model(req: dict) -> str:
    k = int(re.search(r"Запрос номер (\d+)", req["messages"][-1]["content"]).group(1))
    return ITEMS[k][1]


def test_eval_if_known_pass_rates_per_constraint(server, tmp_path: Path):
    server.script(tag="eval.if", responder=model)
    path = tmp_path / "if.jsonl"
    write_samples(path)
    out = tmp_path / "if"
    res = runner.invoke(app, ["eval", "if", "--out", str(out), "--samples", str(path), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    assert not server.errors
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["n"] == 24
    assert doc["per_constraint"][NC] == {"n": 14, "strict": pytest.approx(9 / 14), "loose": pytest.approx(9 / 14)}
    assert doc["per_constraint"][LC] == {"n": 14, "strict": pytest.approx(6 / 14), "loose": pytest.approx(9 / 14)}
    assert doc["prompt_strict"] == pytest.approx(12 / 24)
    assert doc["prompt_loose"] == pytest.approx(15 / 24)
    assert doc["instruction_strict"] == pytest.approx(15 / 28)
    assert doc["instruction_loose"] == pytest.approx(18 / 28)
    assert "prompt" in res.output and "instruction" in res.output


def test_eval_if_generated_set_is_deterministic_and_resumable(server, tmp_path: Path):
    server.script(tag="eval.if", responder=lambda req: "коротко и ясно")
    out = tmp_path / "gen"
    args = ["eval", "if", "--out", str(out), "--generate", "30", "--seed", "4", *llm_flags(server)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    items = json.loads((out / "if_set.json").read_text(encoding="utf-8"))
    assert len(items) == 30 and all(1 <= len(it["constraints"]) <= 3 for it in items)
    first = items[0]
    assert get(first["constraints"][0][0]).render(first["constraints"][0][1]) in first["messages"][0]["content"]
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["n"] == 30 and set(doc["per_constraint"]) <= {c for it in items for c, _ in it["constraints"]}
    served = server.served
    assert runner.invoke(app, args).exit_code == 0
    assert server.served == served
    assert json.loads((out / "if_set.json").read_text(encoding="utf-8")) == items


def test_eval_if_needs_one_source(tmp_path: Path, server):
    res = runner.invoke(app, ["eval", "if", "--out", str(tmp_path / "o"), *llm_flags(server)])
    assert res.exit_code == 2 and "--samples" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": [{"role": "user", "content": "x"}], "ground_truth": {"constraints": [
        {"id": "q", "text": "t", "library_id": "ru.nope", "params": {}}]}}) + "\n", encoding="utf-8")
    res = runner.invoke(app, ["eval", "if", "--out", str(tmp_path / "o"), "--samples", str(bad), *llm_flags(server)])
    assert res.exit_code == 2 and "ru.nope" in res.output


def test_eval_if_bad_params_are_caught_before_any_request(tmp_path: Path, server):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": [{"role": "user", "content": "x"}], "ground_truth": {"constraints": [
        {"id": "q", "text": "t", "library_id": "ru.length.words_max", "params": {"count": 3}}]}}) + "\n",
        encoding="utf-8")
    res = runner.invoke(app, ["eval", "if", "--out", str(tmp_path / "o"), "--samples", str(bad), *llm_flags(server)])
    assert res.exit_code == 2 and "missing param 'n'" in res.output and server.served == 0
