"""Static pre-check of LLM-written verifier code: an ALLOW-list lint, run before anything executes.

Wave 2 was a deny-list of names; it let file reads and writes through the helpers of
allowed libraries (``pymorphy3.utils.json_read``, ``pymorphy3.analyzer.os``…) and
through exception attributes. This lint instead names what a verifier MAY use, and
refuses everything else:

* imports of the modules in :data:`ALLOWED_API` only, top level only, and from each
  module only the functions and constants listed for it (``json.loads``/``dumps``,
  ``razdel.tokenize``/``sentenize``, ``pymorphy3.MorphAnalyzer`` called with no
  arguments, …) — no file, process or network helper of any library is listed;
* a module is only ever used as ``module.name`` (never passed around or rebound);
* free names only from :data:`ALLOWED_BUILTINS` (no ``open``, ``eval``, ``getattr``,
  ``__import__``…; the doors in :data:`BANNED_NAMES` may not even be rebound);
* attributes of values only from :data:`ALLOWED_ATTRIBUTES` (string, list, dict, set,
  regex match, Counter, pymorphy3 parse/tag and razdel token methods) — no dunder or
  private name, no ``gi_frame``/``tb_frame``/``f_globals``, no ``.doc``/``.filename``;
* no dunder inside a string constant, ``str.format`` only on a literal template whose
  fields are plain (``"{0.__class__}"`` and ``"{0[x]}"`` are refused), no classes,
  no attribute assignment, ``type()`` with one argument only.

Harmless constructs real models write are accepted or stripped before the lint
(:func:`normalise_tree`): ``from typing import List`` and annotations, an
``if __name__ == '__main__':`` block (dead code: the sandbox names the module
``verifier``), helper functions, docstrings, ``global``/``nonlocal``, ``object``.

It is still NOT the only boundary: the process isolation (a fresh child per verifier,
bubblewrap, rlimits, wall-clock kill) must hold on its own, and the tests run every
attack with the pre-check off too. Problems come back as strings;
:class:`fabrika.sandbox.SandboxPool` turns them into ``Verdict(status="error",
error_kind="precheck")``. :func:`allowed_summary` renders this allow-list for the
verifier-writing prompt, so the prompt and the lint cannot drift apart.
"""

from __future__ import annotations

import ast
import re
import string
from typing import Iterator

_RE_API = frozenset({
    "compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split", "escape",
    "IGNORECASE", "I", "MULTILINE", "M", "DOTALL", "S", "UNICODE", "U", "VERBOSE", "X", "ASCII", "A", "NOFLAG",
    "error", "Pattern", "Match",
})
_MATH_API = frozenset({
    "ceil", "floor", "trunc", "sqrt", "isqrt", "exp", "log", "log2", "log10", "pow", "fabs", "fsum", "prod",
    "gcd", "lcm", "comb", "perm", "factorial", "isclose", "isfinite", "isinf", "isnan", "copysign", "fmod",
    "modf", "hypot", "dist", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "degrees", "radians",
    "pi", "e", "tau", "inf", "nan",
})
_ITERTOOLS_API = frozenset({
    "accumulate", "chain", "combinations", "combinations_with_replacement", "compress", "count", "cycle",
    "dropwhile", "filterfalse", "groupby", "islice", "pairwise", "permutations", "product", "repeat",
    "starmap", "takewhile", "tee", "zip_longest", "batched",
})
_TYPING_API = frozenset({
    "Any", "List", "Dict", "Set", "FrozenSet", "Tuple", "Optional", "Union", "Iterable", "Iterator",
    "Sequence", "Mapping", "MutableMapping", "Callable", "Counter", "DefaultDict", "Deque", "Pattern",
    "Match", "Literal", "Final", "AnyStr", "Text", "cast",
})

#: Module -> the names a verifier may use from it. Anything unlisted (``json.load``, ``json.codecs``,
#: ``pymorphy3.utils``, ``pymorphy3.analyzer``, ``string.Formatter``, ``functools.wraps``,
#: ``typing.get_type_hints``…) is refused.
ALLOWED_API: dict[str, frozenset[str]] = {
    "re": _RE_API,
    "string": frozenset({"ascii_letters", "ascii_lowercase", "ascii_uppercase", "digits", "hexdigits",
                         "octdigits", "punctuation", "printable", "whitespace", "capwords"}),
    "math": _MATH_API,
    "json": frozenset({"loads", "dumps", "JSONDecodeError"}),
    "collections": frozenset({"Counter", "defaultdict", "OrderedDict", "deque", "ChainMap"}),
    "itertools": _ITERTOOLS_API,
    "functools": frozenset({"reduce", "lru_cache", "cache", "partial", "cmp_to_key"}),
    "unicodedata": frozenset({"category", "name", "lookup", "normalize", "is_normalized", "combining",
                              "east_asian_width", "bidirectional", "decimal", "digit", "numeric", "mirrored",
                              "decomposition"}),
    "razdel": frozenset({"tokenize", "sentenize"}),
    "pymorphy3": frozenset({"MorphAnalyzer"}),
    "typing": _TYPING_API,
    "__future__": frozenset({"annotations"}),
}

#: Modules a verifier may import (the worker's import guard and module views use this set).
ALLOWED_MODULES: frozenset[str] = frozenset(ALLOWED_API)

#: Library callables that may only be called with no arguments: ``MorphAnalyzer(path=...)``
#: reads dictionaries (files) from any path.
NO_ARGUMENT_CALLS: frozenset[tuple[str, str]] = frozenset({("pymorphy3", "MorphAnalyzer")})

#: Builtins a verifier may name.
ALLOWED_BUILTINS: frozenset[str] = frozenset({
    "True", "False", "None", "Ellipsis", "NotImplemented",
    "abs", "all", "any", "ascii", "bin", "bool", "bytes", "bytearray", "callable", "chr", "dict", "divmod",
    "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "int", "isinstance", "issubclass",
    "iter", "len", "list", "map", "max", "min", "next", "object", "oct", "ord", "pow", "print", "range",
    "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "type", "zip", "id",
    "ArithmeticError", "AssertionError", "AttributeError", "BaseException", "Exception", "IndexError",
    "KeyError", "LookupError", "NotImplementedError", "OverflowError", "RecursionError", "RuntimeError",
    "StopIteration", "TypeError", "UnicodeDecodeError", "UnicodeEncodeError", "UnicodeError", "ValueError",
    "ZeroDivisionError", "MemoryError", "SystemExit", "KeyboardInterrupt", "GeneratorExit", "ImportError",
    "ModuleNotFoundError",
})

#: Names that open doors: refused anywhere, even as a variable of one's own.
BANNED_NAMES: frozenset[str] = frozenset({
    "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr", "delattr",
    "hasattr", "dir", "breakpoint", "input", "memoryview", "help", "exit", "quit", "super", "classmethod",
    "staticmethod", "property", "copyright", "credits", "license",
})

_STR = {"capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "index",
        "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
        "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
        "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition",
        "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate",
        "upper", "zfill", "decode", "hex"}
_CONTAINERS = {"append", "extend", "insert", "pop", "remove", "clear", "copy", "reverse", "sort", "keys",
               "values", "items", "get", "setdefault", "update", "add", "discard", "union", "intersection",
               "difference", "symmetric_difference", "issubset", "issuperset", "isdisjoint", "fromkeys",
               "most_common", "elements", "total", "subtract", "appendleft", "popleft", "extendleft", "rotate",
               "popitem", "move_to_end", "maxlen", "default_factory"}
_REGEX_OBJECTS = {"group", "groups", "groupdict", "start", "end", "span", "lastindex", "lastgroup",
                  "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split", "pattern", "flags"}
_NUMBERS = {"is_integer", "real", "imag", "bit_length", "numerator", "denominator", "conjugate"}
_MORPH = {"parse", "normal_forms", "word_is_known", "tag", "normal_form", "word", "score", "lexeme", "inflect",
          "make_agree_with_number", "is_known", "normalized", "POS", "animacy", "aspect", "case", "gender",
          "involvement", "mood", "number", "person", "tense", "transitivity", "voice", "grammemes", "cyr_repr",
          "text", "stop"}
_EXCEPTIONS = {"args"}
#: Attribute names a verifier may read on its values (not on modules: those use :data:`ALLOWED_API`).
ALLOWED_ATTRIBUTES: frozenset[str] = frozenset(
    _STR | _CONTAINERS | _REGEX_OBJECTS | _NUMBERS | _MORPH | _EXCEPTIONS | {"format"}
)

#: A dunder name inside a string constant (``'__globals__'``, ``'{0.__class__}'``): the
#: usual way to smuggle an attribute past the name checks.
DUNDER_IN_STRING = re.compile(r"__[A-Za-z][A-Za-z0-9_]*__")

MAX_CODE_CHARS = 20_000

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\r?\n(.*?)(?:\r?\n)?```", re.DOTALL | re.IGNORECASE)


# -- normalisation: what real models write that is harmless ------------------------------


def strip_fences(code: str) -> str:
    """The first fenced code block of ``code`` when it has one (models wrap code in markdown)."""
    match = _FENCE.search(code)
    return match.group(1) if match else code


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1 and not node.orelse


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def normalise_tree(tree: ast.Module) -> ast.Module:
    """Drop what cannot matter at run time before the lint sees the code: top-level
    ``if __name__ == '__main__':`` blocks (the sandbox runs the module as ``verifier``, so
    they never run), docstrings (a docstring mentioning ``__init__`` is prose), and type
    annotations (``-> List[str]``). ``typing`` imports stay and are linted like any import."""
    tree.body = [node for node in tree.body if not _is_main_guard(node)]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body \
                and _is_docstring(body[0]):
            node.body = body[1:] or [ast.Pass()]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                        node.args.vararg, node.args.kwarg]:
                if arg is not None:
                    arg.annotation = None
    for node in ast.walk(tree):  # x: List[int] = [] -> x = []; a bare "x: int" -> pass
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                setattr(node, field, [_drop_annotation(s) for s in stmts])
    return ast.fix_missing_locations(tree)


def _drop_annotation(node: ast.stmt) -> ast.stmt:
    if not isinstance(node, ast.AnnAssign):
        return node
    if node.value is None:
        return ast.copy_location(ast.Pass(), node)
    return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)


def normalise(code: str) -> str:
    """``code`` without markdown fences, main guard, docstrings and annotations (source text).

    What the lint checks is :func:`normalise_tree` of the parsed code; this is the same as
    text, for callers that want to store or run the stripped form."""
    code = strip_fences(code)
    try:
        return ast.unparse(normalise_tree(ast.parse(code)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code


# -- the lint ----------------------------------------------------------------------------------


def _constant_rebinds(tree: ast.AST) -> set[int]:
    """Names assigned a constant (``pymorphy3 = None`` in an ``except ImportError:`` fallback):
    harmless even for an imported name, which then holds None instead of the module."""
    return {id(node.targets[0]) for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)}


def _bound_names(tree: ast.AST, skip: frozenset[int] | set[int] = frozenset()) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if id(node) not in skip:
                names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


def _only_tested(node: ast.Name, parent: ast.AST | None) -> bool:
    """``if pymorphy3 is None:`` / ``if not pymorphy3:``: the module is only tested, never handed on."""
    if isinstance(parent, ast.Compare):
        return all(isinstance(op, (ast.Is, ast.IsNot)) for op in parent.ops) and all(
            isinstance(side, ast.Constant) and side.value is None
            for side in [parent.left, *parent.comparators] if side is not node)
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        return True
    return isinstance(parent, (ast.If, ast.IfExp, ast.While)) and parent.test is node


def _format_fields(template: str) -> Iterator[str]:
    """Every field name of a ``str.format`` template, nested format specs included."""
    for _, field, spec, _ in string.Formatter().parse(template):
        if field is not None:
            yield field
        if spec:
            yield from _format_fields(spec)


class _Checker(ast.NodeVisitor):
    def __init__(self, tree: ast.Module) -> None:
        self.problems: list[str] = []
        self.modules: dict[str, str] = {}             # local name -> module
        self.members: dict[str, tuple[str, str]] = {}  # local name -> (module, name) from "from m import n"
        self.parents: dict[int, ast.AST] = {}
        imported: list[str] = []
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if "." not in alias.name:
                        self.modules[alias.asname or alias.name] = alias.name
                        imported.append(alias.asname or alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.members[alias.asname or alias.name] = (node.module, alias.name)
                    imported.append(alias.asname or alias.name)
        self.constant_rebinds = _constant_rebinds(tree)
        self.bound = _bound_names(tree)
        rebound = _bound_names(tree, self.constant_rebinds)
        for name in imported:
            if name in rebound:
                self._add(tree, f"{name!r} is imported and also assigned; do not rebind imported names")

    def _add(self, node: ast.AST, text: str) -> None:
        self.problems.append(f"line {getattr(node, 'lineno', '?')}: {text}")

    # imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in ALLOWED_API:
                self._add(node, f"import of {alias.name!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_API))})")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or module not in ALLOWED_API:
            self._add(node, f"import from {module or '.'!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_API))})")
            return
        for alias in node.names:
            if alias.name not in ALLOWED_API[module]:
                self._add(node, f"'from {module} import {alias.name}' is not allowed "
                                f"(allowed from {module}: {', '.join(sorted(ALLOWED_API[module]))})")

    # names
    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        parent = self.parents.get(id(node))
        if name in self.members and not name.startswith("__"):  # from re import compile: re.compile
            self._check_member(node, *self.members[name], parent)
        elif name.startswith("__") or name in BANNED_NAMES:
            self._add(node, f"name {name!r} is not allowed")
        elif name in self.modules:
            if id(node) in self.constant_rebinds or _only_tested(node, parent):
                pass
            elif not (isinstance(parent, ast.Attribute) and parent.value is node) or not isinstance(node.ctx, ast.Load):
                self._add(node, f"module {name!r} may only be used as {name}.<name>")
        elif name in self.members:
            self._check_member(node, *self.members[name], parent)
        elif name not in self.bound and name not in ALLOWED_BUILTINS:
            self._add(node, f"name {name!r} is not allowed (not defined here and not an allowed builtin)")

    def _check_member(self, node: ast.AST, module: str, name: str, parent: ast.AST | None) -> None:
        if (module, name) in NO_ARGUMENT_CALLS and not (
                isinstance(parent, ast.Call) and parent.func is node and not parent.args and not parent.keywords):
            self._add(node, f"{module}.{name} may only be called with no arguments: {name}()")

    # attributes
    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr, value = node.attr, node.value
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._add(node, f"assigning or deleting attribute {attr!r} is not allowed")
        if isinstance(value, ast.Name) and value.id in self.modules:
            module = self.modules[value.id]
            if attr not in ALLOWED_API.get(module, frozenset()):
                self._add(node, f"{module}.{attr} is not allowed (allowed from {module}: "
                                f"{', '.join(sorted(ALLOWED_API.get(module, ())))})")
            else:
                self._check_member(node, module, attr, self.parents.get(id(node)))
        elif attr.startswith("_"):
            self._add(node, f"attribute {attr!r} is not allowed (no private or dunder access)")
        elif attr not in ALLOWED_ATTRIBUTES:
            self._add(node, f"attribute {attr!r} is not allowed (not a string, container, regex, number, "
                            "pymorphy3 or razdel method)")
        elif attr == "format":
            self._check_format(node)
        self.generic_visit(node)

    def _check_format(self, node: ast.Attribute) -> None:
        value = node.value
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            self._add(node, "'.format' only on a literal template (\"{}\".format(x)) or use an f-string")
            return
        try:
            fields = list(_format_fields(value.value))
        except ValueError:
            return  # a malformed template raises at run time
        for field in fields:
            if "." in field or "[" in field:
                self._add(node, f"format field {{{field}}} walks attributes or items; use plain fields")

    # everything else
    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        if isinstance(text, str) and (match := DUNDER_IN_STRING.search(text)):
            self._add(node, f"string constant names the dunder {match.group()!r}; dunder access is not allowed")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and isinstance(node.value, (ast.Attribute, ast.Subscript)):
            root: ast.expr = node.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(node.value, ast.Attribute) or (isinstance(root, ast.Name) and root.id in self.modules):
                self._add(node, "assigning into an attribute's items is not allowed")
        self.generic_visit(node)

    def _check_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name.startswith("__"):
            self._add(node, f"function name {node.name!r} is not allowed")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._check_function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._check_function(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._add(node, "class definitions are not allowed; write plain functions")

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
        tree = normalise_tree(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    checker = _Checker(tree)
    try:
        checker.visit(tree)
    except RecursionError:
        return ["code is nested too deeply to check"]
    return checker.problems


def is_syntax_error(code: str) -> str | None:
    """The interpreter's message when ``code`` does not parse, else ``None``."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


_SUMMARY_NAMES = {
    "re": "re (compile, search, match, fullmatch, findall, finditer, sub, split, escape, flags)",
    "string": "string (punctuation, digits, ascii_letters, whitespace…)",
    "math": "math",
    "json": "json (loads, dumps only)",
    "collections": "collections (Counter, defaultdict, OrderedDict, deque)",
    "itertools": "itertools",
    "functools": "functools (reduce, lru_cache, partial)",
    "unicodedata": "unicodedata (category, normalize, name)",
    "razdel": "razdel (tokenize, sentenize)",
    "pymorphy3": "pymorphy3 (MorphAnalyzer() without arguments, .parse(word), .normal_forms(word))",
    "typing": "typing (type names for annotations)",
    "__future__": "from __future__ import annotations",
}

_SUMMARY = {
    "ru": ("Разрешено импортировать только эти модули: {modules}. Больше ничего: ни os, sys, io, pathlib, "
           "subprocess, socket, importlib, ни open(), eval(), exec(), compile(), getattr(), __import__. "
           "Нельзя обращаться к атрибутам с подчёркиванием (__class__, __globals__ и т. п.), писать классы, "
           "присваивать атрибутам и вызывать .format у чего-либо, кроме строкового литерала "
           "(лучше f-строки). Можно: вспомогательные функции, строковые, списковые и словарные методы, "
           "регулярные выражения, аннотации типов, докстроки, global; блок if __name__ == '__main__' "
           "не выполняется. Функция `evaluate(response: str) -> bool` должна возвращать именно True или False."),
    "en": ("Import only these modules: {modules}. Nothing else: no os, sys, io, pathlib, subprocess, socket "
           "or importlib, and no open(), eval(), exec(), compile(), getattr() or __import__. Do not touch "
           "attributes that start with an underscore (__class__, __globals__ and the like), do not define "
           "classes, do not assign to attributes, and call .format only on a string literal (f-strings are "
           "better). Helper functions, string, list and dict methods, regular expressions, type annotations, "
           "docstrings and global are fine; an if __name__ == '__main__' block is never run. "
           "`evaluate(response: str) -> bool` must return exactly True or False."),
}


def allowed_summary(lang: str = "ru") -> str:
    """The allow-list in words, for the verifier-writing prompt (``lang``: "ru" or "en")."""
    modules = ", ".join(_SUMMARY_NAMES[m] for m in ALLOWED_API)
    return _SUMMARY["en" if lang == "en" else "ru"].format(modules=modules)
