"""Multi-turn state-based checking, as BFCL v3/v4's ``multi_turn_checker`` checks its multi-turn categories.

A case (BFCL's multi-turn entries, or fabrika's own in the same shape)::

    {"id": "fs_0", "involved_classes": ["FileSystem"],
     "initial_config": {"FileSystem": {"root": {...}, "cwd": "/home"}},
     "question": [[{"role": "user", "content": "..."}], ...],     # one list of messages per turn
     "ground_truth": [["cd(folder='docs')", "mkdir(dir_name='archive')"], ...]}   # calls per turn

The model's answer is one entry per turn: the calls it made in that turn, as Python call strings
(``"cd(folder='docs')"``, as BFCL writes them) or as ``{name: {param: value}}`` dicts; a turn may
also be a list of steps, each a list of calls (flattened in order).

:func:`check_multi_turn` executes the model's calls on one fresh set of instances and the ground truth
on another, turn by turn, keeping both states across turns — BFCL's simulators
(:mod:`fabrika.eval.bfcl_sim`, ``new_session=session_factory()``) or fabrika's own backends
(:mod:`fabrika.eval.bfcl_backends`, the default). A turn whose ground truth calls nothing is not checked
(the model's calls there still change the state); after every other turn, BFCL's checks in BFCL's order:

1. **empty turn** — the model called nothing: ``multi_turn:empty_turn_model_response``;
2. **state** — every instance's public attributes (the ground truth's) must be equal:
   ``multi_turn:instance_state_mismatch`` (the differing attributes are named);
3. **response (instance subset)** — every result the ground-truth calls returned in this turn must be
   among the results the model's calls returned **in all turns so far** (unordered, each used once):
   ``multi_turn:execution_response_mismatch``. Extra model calls that change nothing pass.

Fewer (or more) turns than the ground truth is ``multi_turn:force_terminated`` (BFCL's runner: the model
was force-quit). A call string that is not a plain call with literal arguments, or names no tool of the
involved instances, executes as an error result (as a failing call does in BFCL), never as code.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from fabrika.errors import InputError
from fabrika.eval.bfcl_backends import BACKENDS, Backend

__all__ = ["MultiTurnVerdict", "Session", "check_multi_turn", "parse_call", "parse_call_args"]

Call = tuple[str, dict[str, Any]]


def parse_call(text: str) -> Call:
    """``"cd(folder='docs')"`` → ``("cd", {"folder": "docs"})``; ValueError unless a plain call with literals."""
    name, args, kwargs = parse_call_args(text)
    if args:
        raise ValueError(f"not a call with keyword arguments only: {text!r}")
    return name, kwargs


def parse_call_args(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """``"f(1, b='x')"`` → ``("f", [1], {"b": "x"})``: a plain call whose arguments are all literals (read with
    :func:`ast.literal_eval`, never run); ValueError otherwise. BFCL's ground truth has positional arguments."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a call: {text!r}") from exc
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call: {text!r}")
    args: list[Any] = []
    for a in node.args:
        if isinstance(a, ast.Starred):
            raise ValueError(f"*args are not accepted: {text!r}")
        try:
            args.append(ast.literal_eval(a))
        except ValueError as exc:
            raise ValueError(f"an argument is not a literal: {text!r}") from exc
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(f"**kwargs are not accepted: {text!r}")
        try:
            kwargs[kw.arg] = ast.literal_eval(kw.value)
        except ValueError as exc:
            raise ValueError(f"argument {kw.arg!r} is not a literal: {text!r}") from exc
    return node.func.id, args, kwargs


def _calls(turn: Any) -> list[Any]:
    """One turn's calls, flattened (a list of steps, each a list of calls, reads as one list)."""
    out: list[Any] = []
    for item in turn or []:
        if isinstance(item, list):
            out.extend(_calls(item))
        else:
            out.append(item)
    return out


def _as_call(raw: Any) -> Call | str:
    """A call, or the error text a malformed one executes as."""
    if isinstance(raw, str):
        try:
            return parse_call(raw)
        except ValueError as exc:
            return f"Error during execution: {exc}"
    if isinstance(raw, dict) and len(raw) == 1:
        name, args = next(iter(raw.items()))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return f"Error during execution: arguments of {name} are not JSON"
        if isinstance(args, dict):
            return str(name), dict(args)
    return f"Error during execution: not a call: {raw!r}"


class Session:
    """One set of fresh backends for a case; :meth:`run` executes calls and returns their results."""

    def __init__(self, involved: list[str], initial_config: dict[str, Any]) -> None:
        unknown = [c for c in involved if c not in BACKENDS]
        if unknown:
            raise InputError(f"multi-turn case names unknown backends {unknown}; fabrika has {sorted(BACKENDS)}")
        self.backends: dict[str, Backend] = {}
        for name in involved:
            backend = BACKENDS[name]()
            backend.load_scenario(dict(initial_config.get(name) or {}))
            self.backends[name] = backend
        self._tools = {tool: b for b in self.backends.values() for tool in type(b).tools}

    def run(self, calls: list[Any]) -> list[str]:
        """Execute ``calls`` in order; each result as canonical JSON text (errors included, nothing raised)."""
        out = []
        for raw in calls:
            call = _as_call(raw)
            if isinstance(call, str):
                out.append(json.dumps({"error": call}, sort_keys=True))
                continue
            name, kwargs = call
            backend = self._tools.get(name)
            if backend is None:
                out.append(json.dumps({"error": f"Error during execution: no tool {name!r}"}, sort_keys=True))
                continue
            try:
                result = getattr(backend, name)(**kwargs)
            except TypeError as exc:  # wrong or missing parameters: the call fails, the state stays
                result = {"error": f"Error during execution: {name}: {exc}"}
            out.append(json.dumps(result, sort_keys=True, ensure_ascii=False))
        return out

    def state(self) -> dict[str, dict[str, Any]]:
        return {name: b.state() for name, b in self.backends.items()}


@dataclass(frozen=True)
class MultiTurnVerdict:
    """``valid``, or the first failing turn (0-based) with BFCL's error type and the details."""

    valid: bool
    error_type: str | None = None
    turn: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    turn_errors: tuple[str | None, ...] = ()


def _state_diff(model: dict[str, dict[str, Any]], truth: dict[str, dict[str, Any]]) -> dict[str, Any]:
    diff: dict[str, Any] = {}
    for cls, want in truth.items():
        got = model.get(cls, {})
        for attr in sorted(want):  # the ground truth's attributes, as BFCL compares them
            if got.get(attr) != want[attr]:
                diff[f"{cls}.{attr}"] = {"model": got.get(attr), "ground_truth": want.get(attr)}
    return diff


def _missing(truth: list[str], model: list[str]) -> list[str]:
    """Ground-truth results not found among the model's (unordered, each model result used once)."""
    left = Counter(model)
    out = []
    for r in truth:
        if left[r] > 0:
            left[r] -= 1
        else:
            out.append(r)
    return out


def check_multi_turn(case: dict[str, Any], model_turns: list[Any], *,
                     new_session: Callable[[dict[str, Any]], Any] | None = None) -> MultiTurnVerdict:
    """BFCL's multi-turn verdict of ``model_turns`` on ``case`` (see the module doc).

    ``new_session(case)`` makes one fresh set of instances (``run(calls) -> results``, ``state()``); by
    default fabrika's own backends (:class:`Session`), for BFCL's data its simulators
    (:func:`fabrika.eval.bfcl_sim.new_session`). Every turn is checked, also after a failing one, so
    ``turn_errors`` has one entry per turn; the verdict is the first failing turn's.
    """
    truth_turns = case["ground_truth"]
    if len(model_turns) != len(truth_turns):
        return MultiTurnVerdict(False, "multi_turn:force_terminated", None,
                                {"model_turns": len(model_turns), "ground_truth_turns": len(truth_turns)})
    make = new_session or (lambda c: Session(list(c["involved_classes"]), c.get("initial_config") or {}))
    model, truth = make(case), make(case)
    model_so_far: list[str] = []  # the model's results of every turn so far (BFCL's response check reads them all)
    first: MultiTurnVerdict | None = None
    errors: list[str | None] = []
    for i, (model_turn, truth_turn) in enumerate(zip(model_turns, truth_turns, strict=True)):
        model_calls, truth_calls = _calls(model_turn), _calls(truth_turn)
        model_so_far.extend(model.run(model_calls))
        truth_results = truth.run(truth_calls)
        verdict = _turn_verdict(i, model_calls, truth_calls, model, truth, model_so_far, truth_results)
        errors.append(None if verdict is None else verdict.error_type)
        if verdict is not None and first is None:
            first = verdict
    if first is None:
        return MultiTurnVerdict(True, turn_errors=tuple(errors))
    return MultiTurnVerdict(False, first.error_type, first.turn, first.details, tuple(errors))


def _turn_verdict(i: int, model_calls: list[Any], truth_calls: list[Any], model: Any, truth: Any,
                  model_so_far: list[str], truth_results: list[str]) -> MultiTurnVerdict | None:
    """One turn's checks in BFCL's order; ``None`` when it passes (a turn whose ground truth calls nothing
    is not checked: BFCL executes the model's calls there, for the later turns' states, and moves on)."""
    if not truth_calls:
        return None
    if not model_calls:
        return MultiTurnVerdict(False, "multi_turn:empty_turn_model_response", i, {"ground_truth": truth_calls})
    diff = _state_diff(model.state(), truth.state())
    if diff:
        return MultiTurnVerdict(False, "multi_turn:instance_state_mismatch", i, {"differences": diff})
    missing = _missing(truth_results, model_so_far)
    if missing:
        return MultiTurnVerdict(False, "multi_turn:execution_response_mismatch", i,
                                {"missing": missing, "model_results": list(model_so_far)})
    return None
