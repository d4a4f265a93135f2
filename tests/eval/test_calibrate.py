"""`fabrika eval calibrate` against the fake server with a scripted judge of known agreement."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.eval.judge import TaskScheme, normalize_verdict, parse_verdict
from tests.eval.conftest import llm_flags

runner = CliRunner()
LABELS = ["A", "B", "tie"]
ROTATE = {"A": "B", "B": "tie", "tie": "A"}
_SLOTS = re.compile(r"## Ответ A\n(.*?)\n\n## Ответ B\n(.*?)\n\n", re.DOTALL)


def hand_kappa(human: list[str], judge: list[str]) -> float:
    """Cohen's κ written out (independent of the code under test)."""
    n = len(human)
    po = sum(h == j for h, j in zip(human, judge)) / n
    pe = sum((human.count(c) / n) * (judge.count(c) / n) for c in LABELS)
    return (po - pe) / (1 - pe)


def make_rows(n: int, task: str, reference: bool = False) -> list[dict]:
    rows = []
    for i in range(n):
        row = {"id": f"{task}-{i}", "task_type": task, "prompt": f"Вопрос номер {i} про {task}?",
               "response_a": f"{task}-{i}: ответ первый", "response_b": f"{task}-{i}: ответ второй",
               "label": LABELS[i % 3]}
        if reference:
            row["reference"] = f"Эталон для {task}-{i}"
        rows.append(row)
    return rows


def judge_verdict(item_id: str) -> str:
    """The scripted judge's verdict in the logged order: the human label except every 5th item."""
    task, i = item_id.rsplit("-", 1)
    label = LABELS[int(i) % 3]
    return ROTATE[label] if int(i) % 5 == 0 else label


def biased(item_id: str) -> bool:
    """In the 'gen' task every 4th item is judged by position in the swapped order (always 'A')."""
    task, i = item_id.rsplit("-", 1)
    return task == "gen" and int(i) % 4 == 0


def responder(req: dict) -> str:
    content = req["messages"][-1]["content"]
    a, b = _SLOTS.search(content).groups()
    item_id = a.split(":")[0]
    swapped = a.endswith("второй")
    v = judge_verdict(item_id)
    if swapped:
        v = "A" if biased(item_id) else {"A": "B", "B": "A"}.get(v, v)
    shown = {"A": "А", "B": "B", "tie": "tie"}[v] if int(item_id.rsplit("-", 1)[1]) % 2 else v  # Cyrillic А too
    return (f"<think>Сравниваю ответы {item_id}…</think>\nВот мой вердикт:\n```json\n"
            f"{json.dumps({'reasoning': 'коротко', 'verdict': shown}, ensure_ascii=False)}\n```")


def expected_verdicts(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        v = judge_verdict(r["id"])
        out.append("tie" if biased(r["id"]) and v != "B" else v)  # biased swap says A → mapped B; agrees only if v == B
    return out


def write(tmp_path: Path, rows: list[dict], schemes: dict | None = None) -> tuple[Path, Path | None]:
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    spath = None
    if schemes is not None:
        spath = tmp_path / "schemes.yaml"
        spath.write_text(yaml.safe_dump(schemes, allow_unicode=True), encoding="utf-8")
    return labels, spath


SCHEMES = {"default": {"scheme": "uniform_sbs"},
           "task_types": {"qa": {"scheme": "reference"},
                          "gen": {"scheme": "criteria_sbs", "criteria": ["полнота", "точность"]}}}


def test_calibrate_reports_constructed_kappa_within_ci(server, tmp_path: Path):
    server.script(tag="eval.judge", responder=responder)
    rows = make_rows(90, "qa", reference=True) + make_rows(60, "gen")
    labels, schemes = write(tmp_path, rows, SCHEMES)
    out = tmp_path / "cal"
    res = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(out), "--schemes", str(schemes),
                              *llm_flags(server)])
    assert res.exit_code == 0, res.output
    assert not server.errors
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    verdicts = expected_verdicts(rows)
    for task in ("qa", "gen"):
        idx = [i for i, r in enumerate(rows) if r["task_type"] == task]
        want = hand_kappa([rows[i]["label"] for i in idx], [verdicts[i] for i in idx])
        per = doc["per_group"][task]
        assert per["kappa"] == pytest.approx(want, abs=1e-9)
        lo, hi = per["ci"]
        assert lo <= want <= hi
    assert doc["per_group"]["qa"]["kappa"] == pytest.approx(hand_kappa([r["label"] for r in rows[:90]],
                                                                       [judge_verdict(r["id"]) for r in rows[:90]]))
    # order-swap disagreement: only the biased 'gen' items whose verdict is not B disagree
    gen = rows[90:]
    want_swap = sum(biased(r["id"]) and judge_verdict(r["id"]) != "B" for r in gen) / len(gen)
    assert doc["per_group"]["gen"]["order_swap_disagreement"] == pytest.approx(want_swap)
    assert doc["per_group"]["qa"]["order_swap_disagreement"] == 0.0
    n_qa, n_gen = 90, 60
    wk = (doc["per_group"]["qa"]["kappa"] * n_qa + doc["per_group"]["gen"]["kappa"] * n_gen) / 150
    assert doc["kappa_weighted"] == pytest.approx(wk)
    assert doc["rejected"] == 0
    # the schemes reached the judge: gold answers for qa, criteria for gen, JSON schema asked for
    qa_req = next(r for r in server.requests if "qa-1:" in r["messages"][-1]["content"])
    assert "Эталон для qa-1" in qa_req["messages"][-1]["content"]
    gen_req = next(r for r in server.requests if "gen-1:" in r["messages"][-1]["content"])
    assert "- полнота" in gen_req["messages"][-1]["content"]
    assert gen_req["response_format"]["type"] == "json_schema"
    assert len(server.requests) == 2 * len(rows)  # both orders

    served = server.served  # a rerun answers from results.jsonl / the cache: no new requests
    res = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(out), "--schemes", str(schemes),
                              *llm_flags(server)])
    assert res.exit_code == 0, res.output
    assert server.served == served


def test_calibrate_unreadable_verdicts_are_counted_not_guessed(server, tmp_path: Path):
    server.script(tag="eval.judge", responder=lambda req: "Оба ответа неплохие, сложно выбрать.")
    labels, _ = write(tmp_path, make_rows(6, "x"))
    res = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(tmp_path / "o"), *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "report.json").read_text(encoding="utf-8"))
    assert doc["rejected"] == 6 and doc["n"] == 0
    assert any("invalid_json" in r for r in doc["rejected_reasons"])


def test_calibrate_failed_requests_leave_items_pending_and_resume(server, tmp_path: Path):
    server.script(tag="eval.judge", responder=responder)
    server.faults(kind="bad_request", match="x-3: ответ первый")  # not retryable: the item stays unfinished
    labels, _ = write(tmp_path, make_rows(9, "x"))
    out = tmp_path / "o"
    args = ["eval", "calibrate", str(labels), "--out", str(out), *llm_flags(server)]
    res = runner.invoke(app, args)
    assert res.exit_code == 1 and "rerun the same command" in res.output
    assert not (out / "report.json").exists() and (out / "report.partial.json").exists()
    assert json.loads((out / "report.partial.json").read_text())["finished"] == 8
    server.clear()
    server.script(tag="eval.judge", responder=responder)
    before = server.served
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert server.served - before <= 2  # only the missing item is asked (its other order may be cached)
    assert json.loads((out / "report.json").read_text())["n"] == 9


def test_calibrate_input_errors(tmp_path: Path, server):
    rows = make_rows(3, "qa")
    labels, schemes = write(tmp_path, rows, SCHEMES)
    res = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(tmp_path / "o"), "--schemes",
                              str(schemes), *llm_flags(server)])
    assert res.exit_code == 2 and "reference" in res.output and "labels.jsonl:1" in res.output
    rows[0]["label"] = "C"
    labels, _ = write(tmp_path, rows)
    res = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(tmp_path / "o"), *llm_flags(server)])
    assert res.exit_code == 2 and "label must be A, B or tie" in res.output
    rows[0]["label"] = "A"
    labels, _ = write(tmp_path, rows)
    res = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--base-url" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("default: {scheme: per_criterion}\n", encoding="utf-8")
    res = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(tmp_path / "o"), "--schemes", str(bad),
                              *llm_flags(server)])
    assert res.exit_code == 2 and "criteria" in res.output


def test_reusing_an_eval_dir_for_another_model_is_refused(server, tmp_path: Path):
    server.script(tag="eval.judge", responder=responder)
    labels, _ = write(tmp_path, make_rows(3, "x"))
    out = tmp_path / "o"
    assert runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(out), *llm_flags(server)]).exit_code == 0
    res = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(out), "--base-url", server.base_url,
                              "--model", "other"])
    assert res.exit_code == 2 and "different eval run" in res.output


@pytest.mark.parametrize("text,verdict", [
    ('{"verdict": "A"}', "A"),
    ('<think>долго думаю {"verdict": "B"}</think>Итог: {"reasoning": "x", "verdict": "Ответ А"}', "A"),
    ('Конечно! ```json\n{"Verdict": "ничья"}\n```', "tie"),
    ('{"verdict": "[[B]]", "reasoning": "…"}', "B"),
    ("Ответ A точнее, но B полнее. Итоговый **вердикт: B**", "B"),
    ("<think>[[A]]?</think>Сначала думал [[A]], но итог [[B]].", "B"),
    ("Verdict: tie — both are fine.", "tie"),
])
def test_parse_verdict_handles_real_model_wrapping(text, verdict):
    assert parse_verdict(text, TaskScheme())[0] == verdict


def test_parse_verdict_rejections_name_the_reason():
    assert parse_verdict('{"verdict": "C"}', TaskScheme())[2].startswith("bad_verdict")
    assert parse_verdict("Ответ A лучше, чем B.", TaskScheme())[0] is None  # no explicit verdict marker
    assert parse_verdict('{"reasoning": "x"', TaskScheme())[2].startswith("invalid_json")
    assert parse_verdict("<think>не дописал", TaskScheme())[2] == "empty_answer"
    assert normalize_verdict(None) is None


def test_per_criterion_scheme_kappa_per_criterion(server, tmp_path: Path):
    def crit_responder(req: dict) -> str:
        a, _ = _SLOTS.search(req["messages"][-1]["content"]).groups()
        i = int(a.split(":")[0].rsplit("-", 1)[1])
        logged = "A" if i % 2 else "B"  # the human label
        first = a.endswith("первый")
        v = logged if first else {"A": "B", "B": "A"}[logged]
        # right on "факты"; on "стиль" always the first-shown answer (pure position bias)
        return json.dumps({"reasoning": "-", "criteria": {"факты": v, "стиль": "A"}, "verdict": v})

    server.script(tag="eval.judge", responder=crit_responder)
    rows = make_rows(12, "s")
    for i, r in enumerate(rows):
        r["label"] = "A" if i % 2 else "B"
        r["criteria_labels"] = {"факты": r["label"], "стиль": r["label"]}
    labels, schemes = write(tmp_path, rows, {"default": {"scheme": "per_criterion", "criteria": ["факты", "стиль"]}})
    out = tmp_path / "o"
    res = runner.invoke(app, ["eval", "calibrate", str(labels), "--out", str(out), "--schemes", str(schemes),
                              *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["per_group"]["s"]["kappa"] == pytest.approx(1.0)
    assert doc["per_criterion"]["факты"]["kappa"] == pytest.approx(1.0)
    # position-biased criterion: inconsistent in every pair → tie everywhere → κ 0
    assert doc["per_criterion"]["стиль"]["kappa"] == pytest.approx(0.0)
    req = server.requests[0]
    schema = req["response_format"]["json_schema"]["schema"]
    assert set(schema["properties"]["criteria"]["required"]) == {"факты", "стиль"}
