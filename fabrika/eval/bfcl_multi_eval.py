"""``eval fc --checker bfcl`` on BFCL's multi-turn categories: episodes on BFCL's simulators, BFCL's verdict.

Each item (:func:`fabrika.eval.bfcl_multi_data.read_multi_items`) is asked as BFCL's inference asks it
(:func:`fabrika.eval.bfcl_multi_run.answer_bfcl_case`); the model's calls per turn and step are then replayed
on fresh instances against the ground truth, executed on other fresh instances, by
:func:`fabrika.eval.bfcl_multi.check_multi_turn` (BFCL's empty-turn, state and response checks, in its
order). The record is the single-turn path's (``correct``, ``bfcl_error``, ``decision``, ``malformed``,
``truncated``, ``calls``, ``text``, ``checker``) plus ``turn`` (the first failing turn), ``turn_errors``
(each turn's own check, ``None`` where it passed or was not checked), ``steps`` and ``force_quit``.

Items run in the same results store as single-turn ones: finished items are skipped on a rerun, the
engine's cache replays the requests already answered, and an item whose request failed is left pending.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

from fabrika.eval.bfcl_multi import check_multi_turn
from fabrika.eval.bfcl_multi_run import MultiTurnRun, answer_bfcl_case
from fabrika.eval.bfcl_sim import session_factory
from fabrika.eval.runstore import ResultStore, RunOutcome, run_items
from fabrika.llm import ChatRequest, ChatResponse, LLMConfig, build_engine

__all__ = ["run_fc_items", "run_multi_items", "score_multi"]


def score_multi(item: dict[str, Any], run: MultiTurnRun) -> dict[str, Any]:
    """The record of one finished multi-turn episode."""
    verdict = check_multi_turn(item, run.turns, new_session=session_factory())
    truth = item["ground_truth"]
    decision = len(run.turns) == len(truth) and all(
        bool([c for step in model for c in step]) == bool(want) for model, want in zip(run.turns, truth))
    return {"category": item["category"], "expects_call": True, "calls": run.turns, "text": run.text[:500],
            "malformed": run.malformed[0] if run.malformed else None, "truncated": run.truncated,
            "decision": decision, "tool_choice": None, "required_args": None, "schema_valid": None,
            "arg_values": verdict.valid, "correct": verdict.valid, "checker": "bfcl",
            "bfcl_error": verdict.error_type, "turn": verdict.turn, "turn_errors": list(verdict.turn_errors),
            "steps": run.steps, "force_quit": run.force_quit}


async def run_multi_items(store: ResultStore, llm: LLMConfig, items: Sequence[dict[str, Any]], *,
                          temperature: float = 0.0, batch: int = 64) -> RunOutcome:
    """Run every unfinished multi-turn item (``batch`` episodes at a time), appending records as they finish."""
    out = RunOutcome()
    pending = [it for it in items if it["id"] not in store.done]
    out.skipped = len(items) - len(pending)
    if not pending:
        return out
    engine = build_engine(llm, store.dir)
    try:
        for start in range(0, len(pending), batch):
            chunk = pending[start:start + batch]
            runs = await asyncio.gather(*(answer_bfcl_case(it, engine, temperature=temperature) for it in chunk))
            records = []
            for it, run in zip(chunk, runs, strict=True):
                if run.error is not None:
                    out.failed.append({"id": it["id"], "reason": run.error})
                    continue
                try:
                    records.append({"id": it["id"], **score_multi(it, run)})
                except Exception as exc:  # noqa: BLE001 - a scorer bug must not take the finished items with it
                    out.failed.append({"id": it["id"], "reason": f"internal_error: {type(exc).__name__}: {exc}"})
            store.append(records)
            out.finished += len(records)
    finally:
        await engine.aclose()
    return out


async def run_fc_items(store: ResultStore, llm: LLMConfig, items: Sequence[dict[str, Any]],
                       make_requests: Callable[[dict[str, Any]], list[ChatRequest]],
                       finish: Callable[[dict[str, Any], list[ChatResponse]], dict[str, Any]]) -> RunOutcome:
    """Single-turn items through :func:`~fabrika.eval.runstore.run_items`, then the multi-turn ones."""
    single = [it for it in items if it.get("kind") != "multi_turn"]
    multi = [it for it in items if it.get("kind") == "multi_turn"]
    out = await run_items(store, llm, single, make_requests, finish) if single else RunOutcome()
    if multi:
        more = await run_multi_items(store, llm, multi)
        out.finished += more.finished
        out.skipped += more.skipped
        out.failed += more.failed
    return out
