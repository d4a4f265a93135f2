"""if.multi.prompts composes by construction: «не менее 55 слов» × «закончите фразой …» is kept (a padded
joint answer passes both LLM-written verifiers although no stored case does — the old check refused it), two
different required openings are refused with the conflicting phrases named, and so are stacked word bounds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from fabrika.store.run import RunStore

from .test_multi_constraints import _run, answer

LONG = "Ответ должен содержать не менее 55 слов."
LONG2 = "Напишите не меньше 30 слов."
END = "Ответ должен заканчиваться фразой «Вот и всё.»"
ITAK = "Начните ответ с фразы «Итак,»"
FIRST = "Начните ответ со слов «Прежде всего,»"
_L = " ".join(["слово"] * 60)
_M = " ".join(["текст"] * 35)

VERIFIERS = {
    LONG: [answer("return len(response.split()) >= 55", [(_L, True), ("мало слов", False), (_L + " ещё", True)]),
           answer("return len(response.split()) > 54", [(_L + " да", True), ("коротко", False), ("два слова", False)]),
           answer("n = len(response.split())\nreturn n >= 55", [(_L + " нет", True), ("одно", False),
                                                                 ("три слова тут", False)])],
    LONG2: [answer("return len(response.split()) >= 30", [(_M, True), ("мало слов", False), (_M + " ещё", True)]),
            answer("return len(response.split()) > 29", [(_M + " да", True), ("коротко", False), ("два слова", False)]),
            answer("n = len(response.split())\nreturn n >= 30", [(_M + " нет", True), ("одно", False),
                                                                  ("три слова тут", False)])],
    END: [answer("return response.strip().endswith('Вот и всё.')", [("Коротко. Вот и всё.", True), ("Всё.", False),
                                                                      ("Ясно. Вот и всё.", True)]),
          answer("return response.rstrip().endswith('Вот и всё.')", [("Итог. Вот и всё.", True), ("Нет.", False),
                                                                       ("Вот и всё. Ещё", False)]),
          answer("return response.strip()[-10:] == 'Вот и всё.'", [("Да. Вот и всё.", True), ("Пока", False),
                                                                      ("Просто. Вот и всё.", True)])],
    ITAK: [answer("return response.startswith('Итак,')", [("Итак, начнём.", True), ("Начнём.", False),
                                                           ("Итак, всё.", True)]),
           answer("return response.lstrip().startswith('Итак,')", [("Итак, да.", True), ("Да.", False),
                                                                    ("Итак, нет.", True)]),
           answer("return response[:5] == 'Итак,'", [("Итак, ясно.", True), ("Ясно.", False), ("Итак, ок.", True)])],
    FIRST: [answer("return response.startswith('Прежде всего,')", [("Прежде всего, да.", True), ("Да.", False),
                                                                    ("Прежде всего, нет.", True)]),
            answer("return response.lstrip().startswith('Прежде всего,')",
                   [("Прежде всего, ясно.", True), ("Ясно.", False), ("Прежде всего, ок.", True)]),
            answer("return response[:13] == 'Прежде всего,'", [("Прежде всего, так.", True), ("Так.", False),
                                                                ("Прежде всего, вот.", True)])],
}
SEEDS = {"c-long": LONG, "c-long2": LONG2, "c-end": END, "c-itak": ITAK, "c-first": FIRST}


def no_conflict(req: dict) -> str:
    return '{"reason": "нет", "conflict": false, "pairs": []}'


def passes(code_answers: list[str], text: str) -> bool:
    """Every LLM-written verifier of the test data passes ``text`` (run here: it is this file's own code)."""
    out = True
    for raw in code_answers:
        scope: dict = {}
        exec(json.loads(raw)["func"], scope)  # noqa: S102 - the test's own verifier strings
        out = out and bool(scope["evaluate"](text))
    return out


def test_compatible_pairs_are_kept_and_conflicts_refused_with_a_witness(tmp_path: Path) -> None:
    from fabrika.constraints.compose import text_member

    run_dir, _ = _run(tmp_path, no_conflict, 24, SEEDS, VERIFIERS)
    prompts = RunStore(run_dir).scan_raw("if.multi.prompts").collect()
    rows = list(prompts.filter(pl.col("status") == "ok").iter_rows(named=True))
    kept = [{c["id"] for c in json.loads(r["constraints"])} for r in rows]
    reasons = list(prompts["reason"].drop_nulls())
    assert any({"c-long", "c-end"} <= ids for ids in kept), (kept, reasons)  # refused by the stored-case check
    # each kept prompt stores its joint answer; it passes every LLM-written verifier and the mapped library ones
    for ids, row in zip(kept, rows, strict=True):
        witness = row["witness"]
        assert witness, row
        for cid in ids:
            text = SEEDS[cid]
            assert passes(VERIFIERS[text], witness), (cid, witness)
            member = text_member(cid, text)
            assert member.structured and member.verify and member.verify(witness), (cid, witness)
    pair = next(r["witness"] for r, ids in zip(rows, kept, strict=True) if ids == {"c-long", "c-end"})
    assert pair.endswith("Вот и всё.") and len(pair.split()) >= 55
    assert not any({"c-itak", "c-first"} <= ids or {"c-long", "c-long2"} <= ids for ids in kept)
    openings = [r for r in reasons if r.startswith("composition_conflict:")]
    assert openings and all("two different openings" in r and {"c-itak", "c-first"} <= set(re.findall(r"c-\w+", r))
                            for r in openings)
    stacked = [r for r in reasons if r.startswith("redundant_bound:")]
    assert stacked and all({"c-long", "c-long2"} <= set(re.findall(r"c-[\w]+", r)) for r in stacked)
    # every compatible pair of the pool is composable: nothing refused for want of a joint answer
    assert not [r for r in reasons if r.startswith(("no_joint_answer", "verifier_contradiction"))], reasons


def test_library_and_llm_written_openings_are_composed_too(tmp_path: Path) -> None:
    """Library × LLM-written pairs were left to the judge (which says «no conflict» here): now a library
    «начните с фразы …» other than «Итак,» never joins «Начните ответ с фразы «Итак,»»."""
    seeds = {"c-itak": ITAK, "c-end": END}
    multi = {"llm_share": 0.5, "library_ids": ["ru.startend.start_phrase", "ru.length.words_max"]}
    run_dir, _ = _run(tmp_path, no_conflict, 24, seeds, {k: VERIFIERS[k] for k in (ITAK, END)}, multi)
    prompts = RunStore(run_dir).scan_raw("if.multi.prompts").collect()
    for row in prompts.filter(pl.col("status") == "ok").iter_rows(named=True):
        members = json.loads(row["constraints"])
        ids = {c["id"] for c in members}
        phrases = {c["params"]["phrase"] for c in members if c.get("library_id") == "ru.startend.start_phrase"}
        if "c-itak" in ids:
            assert phrases <= {"Итак,"}, members
    refused = [r for r in prompts["reason"].drop_nulls() if r.startswith("composition_conflict:")]
    assert any("ru.startend.start_phrase" in r and "c-itak" in r for r in refused), refused


GREET = "Начинайте ответ с приветствия."  # an opening in a form the structured map does not know
VERIFIERS_GREET = {GREET: [  # lenient verifiers: a greeting anywhere passes («Итак, привет …» too)
    answer("return 'привет' in response.lower()", [("Привет, друг.", True), ("Добрый день.", False),
                                                   ("Привет всем!", True)]),
    answer("return response.lower().count('привет') > 0", [("Привет! Рад помочь.", True), ("Ну.", False),
                                                            ("И вам привет.", True)]),
    answer("return 'привет' in response.casefold()", [("Привет, это я.", True), ("Пока.", False),
                                                      ("Всем привет.", True)])]}


def test_an_unmapped_phrasing_next_to_a_fixed_opening_is_cannot_verify(tmp_path: Path) -> None:
    """«Начинайте ответ с приветствия» maps to nothing; its verifiers pass «Итак, привет …», so the old lenient
    path kept it next to «Начните ответ с фразы «Итак,»» — a prompt demanding two openings. Now it is refused
    as cannot_verify, naming both; next to a word bound (a facet it does not speak of) it is still kept."""
    seeds = {"c-greet": GREET, "c-itak": ITAK, "c-long": LONG}
    verifiers = {**VERIFIERS_GREET, ITAK: VERIFIERS[ITAK], LONG: VERIFIERS[LONG]}
    run_dir, _ = _run(tmp_path, no_conflict, 24, seeds, verifiers, {"count_weights": {2: 1}})
    prompts = RunStore(run_dir).scan_raw("if.multi.prompts").collect()
    kept = [{c["id"] for c in json.loads(r["constraints"])}
            for r in prompts.filter(pl.col("status") == "ok").iter_rows(named=True)]
    reasons = list(prompts["reason"].drop_nulls())
    assert not any({"c-greet", "c-itak"} <= ids for ids in kept), kept
    unread = [r for r in reasons if r.startswith("cannot_verify:")]
    assert unread and all({"c-greet", "c-itak"} <= set(re.findall(r"c-\w+", r)) and "opening" in r
                          for r in unread), reasons
    assert any({"c-greet", "c-long"} <= ids for ids in kept), (kept, reasons)
