"""Does a stage class reach the LLM? A static answer for pinning ``Stage.calls_llm`` in tests.

``executor: ray`` sends a per-item stage to worker actors only when its class says
``calls_llm = False``; a stage that says so wrongly fails there (``ctx.llm`` refuses), and one
that never touches the LLM but keeps the default ``True`` silently stays in the driver. The
declaration is a claim about code, so it is checked against the code:
:func:`llm_references` reads the source (``ast``) of the stage class, of every class in its MRO
that has source, and — transitively — of every function and class they name that is defined
in the same top-level package as the stage or in ``fabrika`` (through module globals,
``from … import`` and ``module.attr``), and returns each place that touches an attribute named
``llm`` (``ctx.llm``, ``self.stage.ctx.llm``, ``getattr(x, "llm")``).

It over-approximates on purpose: a name counts as reached wherever it appears in a reached
body, whichever branch it sits in. So an empty answer is strong (nothing the stage can reach
mentions the LLM); a non-empty one lists the evidence, to be read when it looks wrong.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import sys
import textwrap
from dataclasses import dataclass
from functools import cache
from typing import Any

LLM_ATTRIBUTE = "llm"


@dataclass(frozen=True)
class _Module:
    tree: ast.Module
    defs: dict[str, ast.AST]  # top-level function/class definitions by name
    imports: dict[str, tuple[str, str | None]]  # local name -> (module, attribute or None for the module)


@cache
def _module(name: str) -> _Module | None:
    module = sys.modules.get(name)
    if module is None:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an unimportable module has nothing to reach
            return None
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    defs: dict[str, ast.AST] = {}
    imports: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(tree):  # imports inside functions and TYPE_CHECKING blocks count too
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imports[alias.asname] = (alias.name, None)
                else:
                    imports[alias.name.split(".")[0]] = (alias.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:  # ``from . import x`` / ``from ..pkg import y``, as plugins may write
                package = name if hasattr(module, "__path__") else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                target = f"{package}.{target}" if target else package
            if not target:
                continue
            for alias in node.names:
                imports[alias.asname or alias.name] = (target, alias.name)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):  # module-level helpers bound to names
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    defs[t.id] = node
    return _Module(tree, defs, imports)


def _in_scope(module: str, roots: frozenset[str]) -> bool:
    return module.split(".")[0] in roots


def _resolve(module: str, name: str, roots: frozenset[str]) -> tuple[str, str] | None:
    """``(defining module, top-level name)`` of ``name`` as seen from ``module``, or None outside scope."""
    seen: set[tuple[str, str]] = set()
    while (module, name) not in seen:
        seen.add((module, name))
        info = _module(module)
        if info is None:
            return None
        if name in info.defs:
            return module, name
        target = info.imports.get(name)
        if target is None or not _in_scope(target[0], roots):
            return None
        module, attr = target
        if attr is None:
            return None  # a module, not a definition (its attributes resolve through ``module.attr``)
        sub = f"{module}.{attr}"
        if _module_exists(sub):
            return None  # ``from pkg import submodule``
        name = attr
    return None


def _module_exists(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _module_alias(module: str, node: ast.AST, roots: frozenset[str]) -> str | None:
    """The in-scope module a ``Name``/``Attribute`` chain denotes (``fc_common`` → ``fabrika.generators.fc.common``)."""
    info = _module(module)
    if info is None:
        return None
    if isinstance(node, ast.Name):
        target = info.imports.get(node.id)
        if target is None or not _in_scope(target[0], roots):
            return None
        mod, attr = target
        full = mod if attr is None else f"{mod}.{attr}"
        return full if _module_exists(full) else None
    if isinstance(node, ast.Attribute):
        base = _module_alias(module, node.value, roots)
        if base is not None and _module_exists(f"{base}.{node.attr}"):
            return f"{base}.{node.attr}"
    return None


def _scan(module: str, node: ast.AST, roots: frozenset[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """LLM touches in ``node`` (``module:line``) and the in-scope definitions it names."""
    hits: list[str] = []
    named: list[tuple[str, str]] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            if sub.attr == LLM_ATTRIBUTE:
                hits.append(f"{module}:{sub.lineno}")
            owner = _module_alias(module, sub.value, roots)
            if owner is not None:
                found = _resolve(owner, sub.attr, roots)
                if found:
                    named.append(found)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in ("getattr", "setattr"):
            if len(sub.args) >= 2 and isinstance(sub.args[1], ast.Constant) and sub.args[1].value == LLM_ATTRIBUTE:
                hits.append(f"{module}:{sub.lineno}")
        elif isinstance(sub, ast.Name):
            found = _resolve(module, sub.id, roots)
            if found:
                named.append(found)
    return hits, named


def _class_node(cls: type) -> tuple[str, ast.AST] | None:
    module = cls.__module__
    info = _module(module)
    if info is None:
        return None
    node = info.defs.get(cls.__name__)
    if isinstance(node, ast.ClassDef):
        return module, node
    try:  # a class defined inside a function (tests): parse its own source
        return module, ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    except (OSError, TypeError, IndexError):
        return None


def llm_references(cls: type, *, extra_roots: tuple[str, ...] = ()) -> list[str]:
    """Every ``module:line`` where code reachable from stage class ``cls`` touches an ``llm`` attribute.

    Reachable: the bodies of ``cls`` and of the classes of its MRO that have source, and every
    function/class/module-level name they mention that is defined under ``fabrika``, the stage's own
    top-level package or ``extra_roots``, transitively. An empty list: the stage cannot reach ``ctx.llm``.
    """
    roots = frozenset({"fabrika", cls.__module__.split(".")[0], *extra_roots})
    todo: list[tuple[str, ast.AST]] = []
    for klass in cls.__mro__:
        if klass is object or klass.__module__ in ("abc", "typing", "builtins"):
            continue
        found = _class_node(klass)
        if found is not None:
            todo.append(found)
    seen_nodes: set[int] = set()
    hits: list[str] = []
    while todo:
        module, node = todo.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        found_hits, named = _scan(module, node, roots)
        hits.extend(found_hits)
        for mod, name in named:
            info = _module(mod)
            if info is not None and name in info.defs:
                todo.append((mod, info.defs[name]))
    return sorted(set(hits))


def declaration_problem(cls: Any) -> str | None:
    """Why ``cls.calls_llm`` disagrees with its code (one line), or None when it agrees.

    Global stages are exempt (they always run in the driver, where they need the whole input).
    """
    if getattr(cls, "global_stage", False):
        return None
    refs = llm_references(cls)
    if not cls.calls_llm and refs:
        return (f"{cls.__qualname__} ({cls.kind}) declares calls_llm = False but reaches an llm attribute at "
                f"{', '.join(refs[:3])}: under executor: ray it would fail on a worker; set calls_llm = True")
    if cls.calls_llm and not refs:
        return (f"{cls.__qualname__} ({cls.kind}) never reaches ctx.llm but declares calls_llm = True: under "
                "executor: ray it would stay in the driver; set calls_llm: ClassVar[bool] = False")
    return None


__all__ = ["declaration_problem", "llm_references"]
