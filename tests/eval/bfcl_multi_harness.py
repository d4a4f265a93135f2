"""Agreement of fabrika's multi-turn checker with BFCL's own ``multi_turn_checker`` on BFCL's v4 data.

Both read the data that ships in the installed ``bfcl-eval`` package (never copied into the repo). For every
case, model answers are made from its ground truth: the ground truth itself (every call in one step per turn,
and one call per step) and systematic perturbations of one turn (the first and the last turn whose ground truth
calls something): a dropped call, a wrong argument value, an extra state-changing call, an empty turn, a call
to an unknown function, the previous turn's calls repeated, two dependent calls swapped, a call fed a wrong
earlier result, and the last turn missing (the model force-quit).

An answer is what a model emits: per turn, steps of ``{name: {param: value}}`` calls (the ground truth's
positional arguments bound to their parameter names). fabrika's checker gets these; BFCL's checker gets them
as its function-calling decoder turns them into call strings (``convert_to_function_call``), with empty steps
dropped as its eval runner drops them, a turn count other than the ground truth's failing as
``multi_turn:force_terminated`` before its checker runs (as its runner does). Each BFCL check runs under its
own ``model_name`` (BFCL keeps instances in module globals keyed by model and case) on freshly reloaded
simulator modules, and fabrika's on its own per-case copies: both give the verdict of a fresh process.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import itertools
import json
from collections import defaultdict
from importlib import resources
from typing import Any, Callable, Iterator

from fabrika.eval.bfcl_multi import check_multi_turn, parse_call_args
from fabrika.eval.bfcl_sim import SimSession, session_factory

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
Answer = list[list[list[dict[str, Any]]]]
#: one state-changing call per class, for the "extra call" perturbation
EXTRA = {"GorillaFileSystem": {"touch": {"file_name": "perturbation_extra.txt"}},
         "TicketAPI": {"create_ticket": {"title": "perturbation extra", "description": "x"}},
         "TwitterAPI": {"post_tweet": {"content": "perturbation extra"}},
         "MessageAPI": {"add_contact": {"user_name": "perturbation_extra"}},
         "TradingBot": {"add_to_watchlist": {"stock": "ZZZZ"}},
         "VehicleControlAPI": {"setHeadlights": {"mode": "on"}},
         "TravelAPI": {"set_budget_limit": {"access_token": "x", "budget_limit": 1.0}},
         "MathAPI": {"add": {"a": 1, "b": 2}}}


def load_cases(category: str) -> list[dict[str, Any]]:
    """BFCL's cases of one category from the installed package, each with its ``ground_truth``."""
    data = resources.files("bfcl_eval") / "data"
    rows = [json.loads(x) for x in (data / f"BFCL_v4_{category}.json").read_text(encoding="utf-8").splitlines() if x]
    answers = {json.loads(x)["id"]: json.loads(x)["ground_truth"] for x in
               (data / "possible_answer" / f"BFCL_v4_{category}.json").read_text(encoding="utf-8").splitlines() if x}
    return [{**r, "ground_truth": answers[r["id"]]} for r in rows]


def as_dicts(case: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The ground truth per turn as ``{name: {param: value}}`` calls (positional arguments bound by name)."""
    methods = SimSession(case["involved_classes"], case.get("initial_config") or {})._methods
    out = []
    for turn in case["ground_truth"]:
        calls = []
        for text in turn:
            name, args, kwargs = parse_call_args(text)
            bound = inspect.signature(methods[name]).bind(*args, **kwargs)
            calls.append({name: dict(bound.arguments)})
        out.append(calls)
    return out


def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.5
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "perturbed": 1}
    return "x"


def _with(turns: list[list[dict[str, Any]]], t: int, calls: list[dict[str, Any]]) -> Answer:
    return [[calls] if i == t else [c] for i, c in enumerate(turns)]


def perturbations(case: dict[str, Any]) -> Iterator[tuple[str, Answer]]:
    """``(name, answer)`` for the ground truth and each perturbation that applies to this case."""
    turns = as_dicts(case)
    yield "ground truth", [[c] for c in turns]
    yield "ground truth, one call per step", [[[x] for x in c] for c in turns]
    called = [i for i, c in enumerate(turns) if c]
    for where, t in (("first", called[0]), ("last", called[-1])) if called else ():
        calls = turns[t]
        yield f"dropped call ({where})", _with(turns, t, calls[:-1])
        args = next(((i, k) for i, c in enumerate(calls) for k in next(iter(c.values()))), None)
        if args is not None:
            i, k = args
            changed = copy.deepcopy(calls)
            params = next(iter(changed[i].values()))
            params[k] = _wrong(params[k])
            yield f"wrong argument value ({where})", _with(turns, t, changed)
        extra = EXTRA[case["involved_classes"][0]]
        yield f"extra state-changing call ({where})", _with(turns, t, [*calls, extra])
        yield f"empty turn ({where})", _with(turns, t, [])
        yield f"unknown function called ({where})", _with(turns, t, [*calls, {"no_such_function": {"x": 1}}])
        if t > 0:  # the turn also redoes the previous turn's calls (results of earlier turns count in BFCL)
            yield f"previous turn's calls repeated ({where})", _with(turns, t, [*turns[t - 1], *calls])
        if len(calls) >= 2:
            yield f"dependent calls swapped ({where})", _with(turns, t, [calls[1], calls[0], *calls[2:]])
            fed = copy.deepcopy(calls)
            first_args, last_args = next(iter(fed[0].values())), next(iter(fed[-1].values()))
            if last_args and first_args:
                key = next(iter(last_args))
                last_args[key] = next(iter(first_args.values())) if last_args[key] != next(iter(first_args.values())) \
                    else _wrong(last_args[key])
                yield f"call result fed wrongly ({where})", _with(turns, t, fed)
    if len(turns) > 1:
        yield "last turn missing (force-quit)", [[c] for c in turns[:-1]]


def bfcl_verdict(case: dict[str, Any], answer: Answer, model_name: str) -> tuple[bool, str | None]:
    """BFCL's verdict: its runner's turn-count rule, its decoder, its ``multi_turn_checker``."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if len(answer) != len(case["ground_truth"]):
        return False, "multi_turn:force_terminated"
    _reload(case["involved_classes"])
    decoded = [[_decode(step) for step in turn if step] for turn in answer]
    entry = {k: case[k] for k in ("id", "initial_config", "involved_classes")}
    result = multi_turn_checker(decoded, case["ground_truth"], entry, case["id"].rsplit("_", 1)[0], model_name)
    return bool(result["valid"]), result.get("error_type")


def _reload(classes: list[str]) -> None:
    """BFCL's simulator modules reloaded: this check starts from a fresh process's state (BFCL's classes keep
    state in mutable default arguments and ``long_context`` tables; see :mod:`fabrika.eval.bfcl_sim`)."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    importlib.reload(importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.long_context"))
    for cls in classes:
        importlib.reload(importlib.import_module(CLASS_FILE_PATH_MAPPING[cls]))


def _decode(step: list[dict[str, Any]]) -> list[str]:
    """BFCL's ``convert_to_function_call`` on one step (``name(k=repr(v),…)``), restated: importing it from
    ``bfcl_eval.model_handler.utils`` pulls its parsers' heavy dependencies (tree_sitter, …)."""
    return [f"{name}({','.join(f'{k}={v!r}' for k, v in args.items())})" for call in step for name, args in call.items()]


def fabrika_verdict(case: dict[str, Any], answer: Answer) -> tuple[bool, str | None]:
    verdict = check_multi_turn(case, answer, new_session=session_factory())
    return verdict.valid, verdict.error_type


def agreement(categories: tuple[str, ...] = CATEGORIES, *, every: int = 1,
              on_disagree: Callable[[str, str, Any, Any], None] | None = None) -> dict[str, dict[str, Any]]:
    """Per category: cases, answers, BFCL-valid answers, agreeing verdicts and error types (every ``every``-th case)."""
    counter = itertools.count()
    table: dict[str, dict[str, Any]] = {}
    for category in categories:
        row: dict[str, Any] = defaultdict(int)
        row["by_kind"] = defaultdict(lambda: [0, 0, 0])  # answers, BFCL-valid, agreeing
        for case in load_cases(category)[::every]:
            row["cases"] += 1
            for kind, answer in perturbations(case):
                want = bfcl_verdict(case, answer, f"agreement_{next(counter)}")
                got = fabrika_verdict(case, answer)
                row["answers"] += 1
                row["bfcl_valid"] += want[0]
                row["agree"] += got[0] == want[0]
                row["agree_error_type"] += got == want
                base = kind.split(" (")[0]
                row["by_kind"][base][0] += 1
                row["by_kind"][base][1] += want[0]
                row["by_kind"][base][2] += got[0] == want[0]
                if kind.startswith("ground truth"):
                    row["ground_truth_valid"] += got[0] and want[0]
                if got != want and on_disagree is not None:
                    on_disagree(case["id"], kind, got, want)
        table[category] = dict(row)
    return table
