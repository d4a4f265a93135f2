"""Static pre-check of LLM-written verifier code: a lint, run before anything executes.

It gives early, readable rejections: code that imports outside the allow-list,
touches dunder or private attributes (also by name inside a string constant),
copies attributes by name (``functools.update_wrapper``/``wraps``), or names the
builtins that open doors (``eval``, ``open``, ``getattr``…). It is NOT a security
boundary and nothing relies on it being one: Python offers endless spellings
(``'__glo' + 'bals__'``), so the tests assume it is bypassed and the process
isolation (a fresh child per verifier, bubblewrap, rlimits, wall-clock kill) must
hold on its own. Problems come back as strings; :class:`fabrika.sandbox.SandboxPool`
turns them into ``Verdict(status="error", error_kind="precheck")``.
"""

from __future__ import annotations

import ast
import re

#: Modules a verifier may import. The Russian text libraries are preloaded in the
#: worker (``pymorphy3.MorphAnalyzer()`` returns one shared analyzer per worker).
#: Not ``operator`` (``attrgetter('__globals__')`` reads dunders from a string) nor
#: ``statistics`` (``statistics.sys``). Verifier code gets *views* of these modules:
#: public names only, no foreign submodules (see ``_worker._view``).
ALLOWED_MODULES: frozenset[str] = frozenset(
    {
        "re", "string", "math", "json", "collections", "itertools", "functools",
        "unicodedata", "razdel", "pymorphy3",
    }
)

#: Names a verifier may not mention at all (calling them, or passing them around).
BANNED_NAMES: frozenset[str] = frozenset(
    {
        "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr",
        "delattr", "breakpoint", "input", "memoryview", "help", "exit", "quit", "super",
        "classmethod", "staticmethod", "property", "object",
        # copy attributes of a foreign object by *name*: updated=['__globals__'] reads its globals
        "update_wrapper", "wraps", "WRAPPER_ASSIGNMENTS", "WRAPPER_UPDATES",
    }
)

#: Attributes that lead from ordinary objects to frames, code and interpreter state.
BANNED_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame",
        "tb_next", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "co_code",
        "func_globals", "mro", "format_map", "update_wrapper", "wraps", "WRAPPER_ASSIGNMENTS",
        "WRAPPER_UPDATES",
    }
)

#: A dunder name inside a string constant (``'__globals__'``, ``'{0.__class__}'``): the
#: usual way to smuggle an attribute past the name checks.
DUNDER_IN_STRING = re.compile(r"__[A-Za-z][A-Za-z0-9_]*__")

MAX_CODE_CHARS = 20_000


def _dotted_root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.problems: list[str] = []

    def _add(self, node: ast.AST, text: str) -> None:
        self.problems.append(f"line {getattr(node, 'lineno', '?')}: {text}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            root = alias.name.split(".")[0]
            if root not in ALLOWED_MODULES:
                self._add(node, f"import of {alias.name!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_MODULES))})")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or module.split(".")[0] not in ALLOWED_MODULES:
            self._add(node, f"import from {module or '.'!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_MODULES))})")
        for alias in node.names:
            if alias.name == "*" or alias.name.startswith("_"):
                self._add(node, f"'from {module} import {alias.name}' is not allowed; import names explicitly")
            elif alias.name in BANNED_NAMES:
                self._add(node, f"'from {module} import {alias.name}' is not allowed")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        if isinstance(text, str) and (match := DUNDER_IN_STRING.search(text)):
            self._add(node, f"string constant names the dunder {match.group()!r}; dunder access is not allowed")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id.startswith("__") or node.id in BANNED_NAMES:
            self._add(node, f"name {node.id!r} is not allowed")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            self._add(node, f"attribute {node.attr!r} is not allowed (no private or dunder access)")
        elif node.attr in BANNED_ATTRIBUTES:
            self._add(node, f"attribute {node.attr!r} is not allowed (interpreter introspection)")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._add(node, f"assigning or deleting attribute {node.attr!r} is not allowed")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and isinstance(node.value, (ast.Attribute, ast.Subscript)):
            self._add(node, f"assigning into {_dotted_root(node) or 'an attribute'}[...] is not allowed")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._add(node, "class definitions are not allowed; write plain functions")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self._add(node, "'global' is not allowed")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self._add(node, "'nonlocal' is not allowed")

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) != 1:
            self._add(node, "type() with more than one argument (building classes) is not allowed")
        self.generic_visit(node)


def precheck(code: str) -> list[str]:
    """Return the problems that forbid running ``code``; an empty list means it may run.

    Syntax errors are *not* reported here (the worker reports them as kind
    ``"syntax"`` with the interpreter's message); a missing ``evaluate`` is
    reported by the worker as ``"no_function"``.
    """
    if not isinstance(code, str):
        return [f"code must be a str, got {type(code).__name__}"]
    if len(code) > MAX_CODE_CHARS:
        return [f"code is {len(code)} characters; the limit is {MAX_CODE_CHARS}"]
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    checker = _Checker()
    checker.visit(tree)
    return checker.problems


def is_syntax_error(code: str) -> str | None:
    """The interpreter's message when ``code`` does not parse, else ``None``."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
