"""BFCL data for ``eval fc --checker bfcl``: items that keep BFCL's own function docs and answers.

The fabrika checker works on JSON-Schema tools and resolved answers
(:mod:`fabrika.eval.fc_cases`); BFCL's checker needs the original function docs (its
type names decide the typing) and the raw ``ground_truth`` lists, so each item carries
both. The request follows BFCL's function-calling mode: in Java and JavaScript categories
every parameter is sent as a string (its declared type and element type named in its
description), because BFCL asks for values as source text there.

:func:`read_items` reads the single-turn AST categories: ``simple_*``, ``multiple``, ``parallel``,
``parallel_multiple``, their ``live_*`` twins, ``irrelevance``, ``live_irrelevance`` and
``live_relevance``; the multi-turn categories are read by :mod:`fabrika.eval.bfcl_multi_data`. A data
directory's other files (memory, web search, format sensitivity) are skipped and named.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from fabrika.errors import InputError
from fabrika.eval.bfcl_checker import is_relevance, language
from fabrika.eval.fc_cases import _bfcl_expected, _tools, bfcl_category, bfcl_questions, read_possible_answers

#: how a skipped multi-turn category is named when ``bfcl-eval`` is not installed
NEEDS_BFCL_EVAL = "(needs bfcl-eval)"
#: category names (from ``BFCL_v<N>_<category>.json``) this checker does not score
NOT_SINGLE_TURN = re.compile(r"^(multi_turn|memory|web_search|format_sensitivity|agentic)")


def data_dir_pairs(root: Path) -> tuple[list[tuple[Path, Path | None]], list[str]]:
    """(question file, possible-answer file or None) for each scorable category; and the skipped ones.

    The multi-turn categories (:data:`fabrika.eval.bfcl_multi_data.MULTI_TURN`) are scorable when
    ``bfcl-eval`` is installed, else skipped with the install command named."""
    files = sorted(root.glob("BFCL_v*_*.json"))
    if not files:
        raise InputError(f"--bfcl {root}: no BFCL_v*_<category>.json files in this directory")
    from fabrika.eval.bfcl_multi_data import MULTI_TURN
    from fabrika.eval.bfcl_sim import BfclNotInstalled, require_bfcl_eval

    pairs: list[tuple[Path, Path | None]] = []
    skipped: list[str] = []
    for f in files:
        category = bfcl_category("", f)
        if category in MULTI_TURN:  # run on BFCL's simulators when its package is installed
            try:
                require_bfcl_eval()
            except BfclNotInstalled:
                skipped.append(f"{category} {NEEDS_BFCL_EVAL}")
                continue
        elif NOT_SINGLE_TURN.match(category):
            skipped.append(category)
            continue
        twin = root / "possible_answer" / f.name
        pairs.append((f, twin if twin.is_file() else None))
    return pairs, skipped


def _hint(lang: str, spec: dict[str, Any]) -> str:
    kind = "Java" if lang == "java" else "JavaScript"
    out = f" Give it as {kind} source text of type {spec.get('type')}."
    items = spec.get("items")
    if isinstance(items, dict) and items.get("type"):
        out += f" Its elements are of type {items['type']}."
    return out


def request_functions(functions: list[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    """The function docs as sent: Java/JavaScript parameters become strings of source text."""
    lang = language(category)
    if lang == "python":
        return functions
    sent = copy.deepcopy(functions)
    for fn in sent:
        props = (fn.get("parameters") or {}).get("properties") or {}
        for spec in props.values():
            spec["description"] = str(spec.get("description", "")) + _hint(lang, spec)
            spec.pop("items", None)
            spec.pop("properties", None)
            spec["type"] = "string"
    return sent


def read_items(questions: Path, answers: Path | None) -> list[dict[str, Any]]:
    """One eval item per BFCL question, with ``functions`` and ``ground_truth`` for the BFCL checker."""
    gt = read_possible_answers(answers)
    items = []
    for where, cid, q, fns in bfcl_questions(questions):
        category = bfcl_category(cid, questions)
        if len(q) > 1 or NOT_SINGLE_TURN.match(category):
            raise InputError(f"{where}: {cid} is a multi-turn case; name its file BFCL_v<N>_multi_turn_<category>.json "
                             f"(multi-turn files are read by fabrika.eval.bfcl_multi_data), or evaluate "
                             f"single-turn categories")
        turn = q[0] if isinstance(q[0], list) else [q[0]]
        messages = [m for m in turn if isinstance(m, dict) and "role" in m and "content" in m]
        if not messages:
            raise InputError(f"{where}: the question's first turn holds no {{role, content}} messages")
        tools, names = _tools(request_functions(fns, category), where)
        expected: Any
        ground_truth = None
        if "irrelevance" in category:
            expected = None
        elif is_relevance(category):
            expected = "any"
        elif cid in gt:
            ground_truth = gt[cid]
            expected = _bfcl_expected(ground_truth, f"{answers}: id {cid}")
        else:
            raise InputError(f"{where}: no possible answer for {cid!r}; pass the matching possible_answer file "
                             f"with --answers")
        items.append({"id": cid, "category": category, "messages": messages, "tools": tools, "expected": expected,
                      "names": names, "functions": fns, "ground_truth": ground_truth, "checker": "bfcl"})
    return items
