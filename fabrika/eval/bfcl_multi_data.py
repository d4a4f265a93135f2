"""BFCL's multi-turn data for ``eval fc --checker bfcl``: one item per case, its functions from BFCL's package.

A BFCL v3/v4 multi-turn question row (``BFCL_v4_multi_turn_<base|miss_func|miss_param|long_context>.json``)
holds ``question`` (one list of messages per turn; a held-out turn is empty), ``involved_classes``,
``initial_config`` and, in ``miss_func``, ``missed_function`` (``{turn: [names]}``); its possible-answer row
holds ``ground_truth`` (call strings per turn). The functions offered are BFCL's function docs of the
involved classes, read from the installed ``bfcl-eval`` package (:func:`fabrika.eval.bfcl_sim.function_docs`),
as BFCL's loader builds them: the missed functions are taken out and come back at their turn. Rows'
``excluded_function`` lists are ignored, as BFCL's own code ignores them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fabrika.errors import InputError
from fabrika.eval.bfcl_sim import MULTI_TURN_CLASSES, function_docs, require_bfcl_eval
from fabrika.eval.fc_cases import bfcl_category, read_possible_answers
from fabrika.eval.logs import read_jsonl

#: categories this reader runs (BFCL's multi-turn suite; memory and web search are other APIs)
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")


def is_multi_turn(category: str) -> bool:
    return category in MULTI_TURN or category.startswith("multi_turn")


def _functions(classes: list[str], missed: dict[str, list[str]], where: str
               ) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    functions = [doc for cls in classes for doc in function_docs(cls)]
    holdout: dict[str, list[dict[str, Any]]] = {}
    for turn, names in missed.items():
        holdout[str(turn)] = []
        for name in names:
            at = next((i for i, f in enumerate(functions) if f["name"] == name), None)
            if at is None:
                raise InputError(f"{where}: missed_function names {name!r}, which no involved class has")
            holdout[str(turn)].append(functions.pop(at))
    return functions, holdout


def read_multi_items(questions: Path, answers: Path | None) -> list[dict[str, Any]]:
    """One item per multi-turn case, with everything the episode loop and the checker need."""
    require_bfcl_eval()
    gt = read_possible_answers(answers)
    items = []
    for n, row in read_jsonl(questions):
        where = f"{questions}:{n}"
        cid = str(row.get("id", f"L{n}"))
        question, classes = row.get("question"), row.get("involved_classes")
        if not isinstance(question, list) or not question or not all(isinstance(t, list) for t in question):
            raise InputError(f"{where}: a multi-turn row needs 'question' as a list of turns (lists of messages)")
        if not isinstance(classes, list) or not classes:
            raise InputError(f"{where}: a multi-turn row needs 'involved_classes'")
        unknown = [c for c in classes if c not in MULTI_TURN_CLASSES]
        if unknown:
            raise InputError(f"{where}: unknown classes {unknown}; BFCL's multi-turn classes are "
                             f"{', '.join(MULTI_TURN_CLASSES)}")
        if cid not in gt:
            raise InputError(f"{where}: no possible answer for {cid!r}; pass the matching possible_answer file "
                             f"with --answers")
        truth = gt[cid]
        if len(truth) != len(question) or not all(isinstance(t, list) for t in truth):
            raise InputError(f"{answers}: {cid}: ground_truth needs one list of calls per question turn "
                             f"({len(question)})")
        missed = row.get("missed_function") or {}
        functions, holdout = _functions(list(classes), dict(missed), where)
        for turn in holdout:
            if not turn.isdigit() or int(turn) >= len(question) or question[int(turn)]:
                raise InputError(f"{where}: missed_function turn {turn!r} must be an empty question turn")
        items.append({"id": cid, "category": bfcl_category(cid, questions), "kind": "multi_turn",
                      "question": question, "involved_classes": list(classes),
                      "initial_config": row.get("initial_config") or {}, "functions": functions,
                      "holdout": holdout, "ground_truth": truth, "checker": "bfcl"})
    return items
