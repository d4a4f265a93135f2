"""Which verifiers give the same first verdict on every response (so the pool may decide it once).

A call runs ``evaluate(response)`` on its responses in order, in a module whose body ran afresh
for that call. The *first* verdict of a call is therefore a function of the code and the first
response only. When ``evaluate`` never reads its argument it is a function of the code alone:
``def evaluate(response): while True: pass`` times out on every response of every call, and a
verifier whose module body hangs or cannot define ``evaluate`` does the same whatever it is given.

:func:`ignores_response` decides that statically, conservatively: exactly one binding of the name
``evaluate`` in the module, a plain undecorated top-level ``def``, none of whose parameter names
occurs anywhere in its body (nested functions and comprehensions included). It is sound only with
the pre-check and the guarded builtins on (no ``locals()``, ``vars()``, ``eval``, frame attributes:
nothing else can reach the argument), which is the only case the pool uses it in.
"""

from __future__ import annotations

import ast
import functools

NAME = "evaluate"


def _binds_evaluate(node: ast.AST) -> bool:
    """``node`` binds (or declares) the name ``evaluate`` somewhere other than a plain load."""
    if isinstance(node, ast.Name):
        return node.id == NAME and not isinstance(node.ctx, ast.Load)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == NAME
    if isinstance(node, ast.alias):
        return (node.asname or node.name.split(".")[0]) == NAME
    if isinstance(node, ast.arg):
        return node.arg == NAME
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return NAME in node.names
    if isinstance(node, ast.ExceptHandler):
        return node.name == NAME
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return node.name == NAME
    if isinstance(node, ast.MatchMapping):
        return node.rest == NAME
    return False


@functools.lru_cache(maxsize=4096)
def ignores_response(code: str) -> bool:
    """True when the first verdict of a call of ``code`` cannot depend on the response (see above)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == NAME]
    if len(defs) != 1 or defs[0].decorator_list:
        return False
    func = defs[0]
    if sum(1 for node in ast.walk(tree) if _binds_evaluate(node)) != 1:  # the def itself, nothing else
        return False
    a = func.args
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    params |= {p.arg for p in (a.vararg, a.kwarg) if p is not None}
    for stmt in func.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id in params:
                return False
            if isinstance(node, (ast.Global, ast.Nonlocal)) and params & set(node.names):
                return False
    return True
