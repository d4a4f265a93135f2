"""`fabrika eval label`: failure taxonomy labelling with κ against people."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.eval.label import DEFAULT_TAXONOMY
from tests.eval.conftest import llm_flags

runner = CliRunner()
CLASSES = [c.name for c in DEFAULT_TAXONOMY]


def hand_kappa(human: list[str], judge: list[str]) -> float:
    n = len(human)
    po = sum(h == j for h, j in zip(human, judge)) / n
    pe = sum((human.count(c) / n) * (judge.count(c) / n) for c in set(human) | set(judge))
    return (po - pe) / (1 - pe)


def labeller_answer(i: int) -> str:
    human = CLASSES[i % 6]
    return human if i % 5 else ("other" if human != "other" else "formatting")


def test_label_kappa_against_people(server, tmp_path: Path):
    def responder(req: dict) -> str:
        i = int(re.search(r"случай (\d+)", req["messages"][-1]["content"]).group(1))
        return f"Думаю так.\n{json.dumps({'reason': '…', 'category': labeller_answer(i).upper()})}"

    server.script(tag="eval.label", responder=responder)
    rows = [{"id": f"r{i}", "prompt": f"случай {i}: сделай таблицу", "response": "не то", "label": CLASSES[i % 6]}
            for i in range(60)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "lab"
    res = runner.invoke(app, ["eval", "label", str(path), "--out", str(out), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    want = hand_kappa([r["label"] for r in rows], [labeller_answer(i) for i in range(60)])
    assert doc["agreement"]["kappa_pooled"] == pytest.approx(want)
    lo, hi = doc["agreement"]["kappa_weighted_ci"]
    assert lo <= want <= hi
    assert sum(doc["distribution"].values()) == 60 and doc["rejected"] == 0
    schema = server.requests[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["category"]["enum"] == CLASSES


def test_label_custom_taxonomy_and_unknown_class_is_a_rejection(server, tmp_path: Path):
    tax = tmp_path / "tax.yaml"
    tax.write_text("- {name: hallucination, description: Выдуманный факт.}\n- {name: refusal, description: Отказ.}\n",
                   encoding="utf-8")
    server.script(tag="eval.label", match="первый", responses=['{"category": "refusal", "reason": "-"}'])
    server.script(tag="eval.label", responder=lambda req: '{"category": "formatting", "reason": "-"}')
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "первый", "response": "нет"}\n{"prompt": "второй", "response": "да"}\n',
                    encoding="utf-8")
    out = tmp_path / "lab"
    res = runner.invoke(app, ["eval", "label", str(path), "--out", str(out), "--taxonomy", str(tax), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["distribution"] == {"hallucination": 0, "refusal": 1} and doc["rejected"] == 1
    assert "agreement" not in doc
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert any(r["rejected"] and "unknown_class" in r["rejected"] for r in recs)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "response": "r", "label": "weird"}\n', encoding="utf-8")
    res = runner.invoke(app, ["eval", "label", str(bad), "--out", str(tmp_path / "o2"), *llm_flags(server)])
    assert res.exit_code == 2 and "not in the taxonomy" in res.output
