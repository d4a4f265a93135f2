"""BFCL's AST checker semantics, for comparable single-turn BFCL scores (``eval fc --checker bfcl``).

Inputs are BFCL's own structures: the question's ``function`` list (BFCL type names:
``dict``, ``float``, ``tuple``, ``any``, Java and JavaScript types), the model's calls
as ``[{name: {param: value}}]`` and the ``ground_truth`` list of possible answers
(``[{name: {param: [allowed values]}}]``). The verdict rules, in the order BFCL applies them:

* **call count** — ``simple*`` categories need exactly one call, checked against the
  first function; ``multiple``/``live_multiple`` as many calls as answers (one), checked
  against the answer's function; ``parallel*`` as many calls as answers, each answer
  matched *greedily*, in answer order, to the first unused call that passes it (a call
  order that only a full matching would pair is wrong, as in BFCL);
* **one call** — the name must be the expected one; every ``required`` parameter must be
  present; every given parameter must be declared *and* appear in the answer; a parameter
  missing from the call must have ``""`` among its allowed values;
* **types** — a value's type must be the declared type exactly (``True`` is no integer, ``5.0``
  is no integer); an int given for a ``float`` parameter counts as that float; for ``array``/
  ``tuple`` the elements are checked against ``items.type`` (one level deep); a value whose
  type is the type of the allowed values instead (BFCL writes variable names as strings) is a
  *variable*, compared exactly;
* **values** — strings, strings inside lists and strings directly inside dicts are compared
  *standardised*: spaces and ``,./-_*^`` removed, lower case, ``'`` read as ``"``; a dict must
  use only keys of one allowed dict, with values among that key's allowed values, and may omit
  only keys allowed ``""``; a list of dicts must have an allowed list's length and match it
  dict by dict, in order; a list must equal one allowed list; anything else must be ``in`` the
  allowed values (Python equality);
* **Java / JavaScript** — every value must be a string of source text, typed by
  :mod:`fabrika.eval.bfcl_types` before the checks above;
* **irrelevance** (``irrelevance``, ``live_irrelevance``) — right iff the answer has no call;
  **relevance** (``live_relevance``) — right iff it has at least one call (any function, any
  arguments).

Multi-turn categories (state-based checking against BFCL's API simulators) are not covered here;
:mod:`fabrika.eval.bfcl_multi` does state-based checking on fabrika's own backends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, cast

from fabrika.eval.bfcl_types import ELEMENT_TYPED, JAVA_TYPES, JS_TYPES, UnsupportedType, java_value, js_value

#: declared Python-category type -> the Python type a value must have
PYTHON_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
                                 "tuple": list, "dict": dict, "any": str}
PYTHON_ELEMENT_TYPED = ("array", "tuple")

Call = dict[str, dict[str, Any]]  # {function name: {param: value}}


@dataclass(frozen=True)
class Verdict:
    """A case's verdict: ``valid`` and, when not, BFCL's error class and a readable reason."""

    valid: bool
    error_type: str = ""
    errors: tuple[str, ...] = field(default=())


OK = Verdict(True)


def _fail(error_type: str, message: str) -> Verdict:
    return Verdict(False, error_type, (message,))


def language(category: str) -> str:
    """``javascript``, ``java`` or ``python``, from the category name (as BFCL decides it)."""
    if "javascript" in category:
        return "javascript"
    if "java" in category:
        return "java"
    return "python"


def is_relevance(category: str) -> bool:
    """Categories scored by call/no-call alone (BFCL has no possible answers for them)."""
    return "relevance" in category  # also matches "irrelevance"


def check_relevance(calls: list[Call] | None, category: str) -> Verdict:
    """Irrelevance: right iff no call (an unreadable call is no call); relevance: right iff some call."""
    has_call = calls is not None and bool(calls) and not (len(calls) == 1 and not calls[0])
    if "irrelevance" in category:
        return OK if not has_call else _fail("irrelevance_error:decoder_success", "a call where none was due")
    return OK if has_call else _fail("relevance_error:decoder_failed", "no call where one was due")


def standardize(text: str) -> str:
    """BFCL's string form: no spaces or ``,./-_*^``, lower case, ``'`` as ``"``."""
    return _STRIP.sub("", text).lower().replace("'", '"')


_STRIP = re.compile(r"[ ,./\-_*^]")


def check(functions: list[dict[str, Any]], calls: list[Call], possible: list[Call], category: str) -> Verdict:
    """The AST verdict of ``calls`` for a non-relevance category (see the module docstring)."""
    lang = language(category)
    try:
        if "parallel" in category:
            return _parallel(functions, calls, possible, lang)
        if "multiple" in category:
            if len(calls) != len(possible):
                return _fail("multiple_function_checker:wrong_count", "wrong number of calls")
            name = next(iter(possible[0]))
            return _one_call(_find(functions, name), calls[0], possible[0], lang)
        if len(calls) != 1:
            return _fail("simple_function_checker:wrong_count", "wrong number of calls")
        return _one_call(functions[0], calls[0], possible[0], lang)
    except UnsupportedType as exc:
        return _fail("unsupported_type", f"not checkable: {exc}")


def _find(functions: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for fn in functions:
        if fn.get("name") == name:
            return fn
    raise UnsupportedType(f"the answer names {name!r}, which the question does not offer")


def _parallel(functions: list[dict[str, Any]], calls: list[Call], possible: list[Call], lang: str) -> Verdict:
    if len(calls) != len(possible):
        return _fail("parallel_function_checker_no_order:wrong_count", "wrong number of calls")
    used: set[int] = set()
    for n, answer in enumerate(possible):
        fn = _find(functions, next(iter(answer)))
        for i, call in enumerate(calls):
            if i not in used and _one_call(fn, call, answer, lang).valid:
                used.add(i)
                break
        else:
            return _fail("parallel_function_checker_no_order:cannot_find_match",
                         f"no unused call matches answer {n} ({next(iter(answer))})")
    return OK


def _declared(spec: dict[str, Any], lang: str) -> tuple[str, type, type | None, str | None]:
    """(declared type, its Python type, the element's Python type, the element's declared type)."""
    declared = spec.get("type")
    table = {"java": JAVA_TYPES, "javascript": JS_TYPES}.get(lang, PYTHON_TYPES)
    if declared not in table:
        raise UnsupportedType(f"{lang} type {declared!r}")
    element_typed = ELEMENT_TYPED if lang != "python" else PYTHON_ELEMENT_TYPED
    if declared not in element_typed:
        return declared, table[declared], None, None
    element = (spec.get("items") or {}).get("type")
    if element not in table:
        raise UnsupportedType(f"{lang} element type {element!r} of a {declared}")
    return declared, table[declared], table[element], element


def _one_call(fn: dict[str, Any], call: Call, possible: Call, lang: str) -> Verdict:
    name = fn["name"]
    allowed_by_param = next(iter(possible.values()))
    schema = fn.get("parameters") or {}
    props: dict[str, Any] = schema.get("properties") or {}
    if name not in call:
        return _fail("simple_function_checker:wrong_func_name", f"function {name!r} not called")
    args = call[name]
    for p in schema.get("required") or []:
        if p not in args:
            return _fail("simple_function_checker:missing_required", f"missing required parameter {p!r}")
    for p, value in args.items():
        if p not in props or p not in allowed_by_param:
            return _fail("simple_function_checker:unexpected_param", f"unexpected parameter {p!r}")
        allowed = allowed_by_param[p]
        declared, want, element_want, element = _declared(props[p], lang)
        if lang in ("java", "javascript"):
            if type(value) is not str:
                return _fail(f"type_error:{'java' if lang == 'java' else 'js'}",
                             f"{p!r}: a {lang} value must be given as a string of source text")
            value = (java_value if lang == "java" else js_value)(value, declared, element)
        if lang == "python" and declared == "float" and type(value) is int:
            value = float(value)
        ok, variable = _type_ok(value, allowed, want, element_want)
        if not ok:
            return _fail("type_error:simple", f"{p!r}: expected {declared}, got {type(value).__name__}")
        verdict = None if variable else _value_check(p, value, allowed, want, element_want)
        if verdict is None and value not in allowed:
            verdict = _fail("value_error:others", f"{p!r}: {value!r} is not among {allowed!r}")
        if verdict is not None and not verdict.valid:
            return verdict
    for p, allowed in allowed_by_param.items():
        if p not in args and "" not in allowed:
            return _fail("simple_function_checker:missing_optional", f"parameter {p!r} left out but not optional")
    return OK


def _answer_type(allowed: list[Any]) -> type | None:
    """The type of the first allowed value that is not the "may be omitted" marker."""
    return next((type(a) for a in allowed if a != ""), None)


def _type_ok(value: Any, allowed: list[Any], want: type, element_want: type | None) -> tuple[bool, bool]:
    """(type accepted, value is a *variable*) — BFCL's type rule, elements one level deep."""
    answer_type = _answer_type(allowed)
    variable = answer_type is not None and answer_type is not want
    if type(value) is want:
        if element_want is None:
            return True, variable
        elements = cast("list[Any]", value)  # type(value) is list here
        for option in allowed:
            if type(option) is not list or all(_type_ok(v, option, element_want, None)[0] for v in elements):
                return True, variable
        return False, variable
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, variable


def _std_options(options: Any) -> list[Any]:
    """Allowed values with their strings standardised (an allowed ``""`` list reads as empty)."""
    return [standardize(o) if type(o) is str else o for o in options]


def _value_check(p: str, value: Any, allowed: list[Any], want: type, element_want: type | None) -> Verdict | None:
    """The special comparisons (dict, list of dicts, string, list); ``None``: compare with ``in``."""
    if want is dict:
        return _dict_check(p, value, allowed)
    if want is list and element_want is dict:
        return _dict_list_check(p, value, allowed)
    if want is str:
        if standardize(value) in [standardize(o) for o in allowed if type(o) is str]:
            return OK
        return _fail("value_error:string", f"{p!r}: {value!r} is not among {allowed!r}")
    if want is list:
        got = [standardize(v) if type(v) is str else v for v in value]
        if got in [_std_options(option) for option in allowed]:
            return OK
        return _fail("value_error:list/tuple", f"{p!r}: {value!r} is not among {allowed!r}")
    return None


def _dict_check(p: str, value: dict[str, Any], allowed: list[Any]) -> Verdict:
    last = _fail("dict_checker:unclear", f"{p!r}: no allowed dict")
    for option in allowed:
        if option == "":
            continue
        last = _dict_against(p, value, option)
        if last.valid:
            return OK
    return last


def _dict_against(p: str, value: dict[str, Any], option: Any) -> Verdict:
    for key, v in value.items():
        if key not in option:
            return _fail("value_error:dict_key", f"{p!r}: unexpected key {key!r}")
        got = standardize(v) if type(v) is str else v
        if got not in _std_options(option[key]):
            return _fail("value_error:dict_value", f"{p!r}: {key!r}={v!r} is not among {option[key]!r}")
    for key, options in option.items():
        if key not in value and "" not in options:
            return _fail("value_error:dict_key", f"{p!r}: missing key {key!r}")
    return OK


def _dict_list_check(p: str, value: list[Any], allowed: list[Any]) -> Verdict:
    last = _fail("list_dict_checker:unclear", f"{p!r}: no allowed list")
    for option in allowed:
        if len(value) != len(option):
            last = _fail("value_error:list_dict_count", f"{p!r}: wrong number of dicts")
            continue
        for item, want in zip(value, option):
            last = _dict_check(p, item, [want]) if isinstance(item, dict) else _fail(
                "value_error:dict_value", f"{p!r}: {item!r} is not a dict")
            if not last.valid:
                break
        else:
            return OK
    return last
