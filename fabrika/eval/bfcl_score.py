"""One ``eval fc --checker bfcl`` record: BFCL's verdict, with fabrika's components alongside.

The calls are read as for the fabrika checker (:func:`fabrika.eval.fc_eval.predicted_calls`);
an answer whose calls cannot be read is no call, as BFCL's decoder failing is. ``correct``
(and ``arg_values`` on call cases) is :mod:`fabrika.eval.bfcl_checker`'s verdict; the other
components (``decision``, ``tool_choice``, ``required_args``, ``schema_valid``) are fabrika's,
kept for the error breakdown, and ``bfcl_error`` names BFCL's error class.
"""

from __future__ import annotations

from typing import Any

from fabrika.eval.bfcl_checker import check, check_relevance, is_relevance
from fabrika.eval.fc_eval import predicted_calls, score_case
from fabrika.llm import ChatResponse


def score_bfcl(item: dict[str, Any], resp: ChatResponse) -> dict[str, Any]:
    """The record kept in results.jsonl for a BFCL item (see :func:`fabrika.eval.bfcl_data.read_items`)."""
    rec = score_case(item, resp)
    calls, _, _ = predicted_calls(resp, item["names"])
    bfcl_calls = None if calls is None else [{c["name"]: c["arguments"]} for c in calls]
    category = item["category"]
    if is_relevance(category):
        verdict = check_relevance(bfcl_calls, category)
    elif bfcl_calls is None:
        verdict = None
    else:
        verdict = check(item["functions"], bfcl_calls, item["ground_truth"], category)
    valid = bool(verdict and verdict.valid)
    rec["correct"] = valid
    if item["expected"] is not None and item["expected"] != "any":
        rec["arg_values"] = valid
    rec["checker"] = "bfcl"
    rec["bfcl_error"] = ("ast_decoder:decoder_failed" if verdict is None else verdict.error_type) or None
    return rec
