"""Imports inside ``fabrika`` point one way: down the layers declared here.

The order below is written once, here, and copied into ``docs/ARCHITECTURE.md``.
A module may import modules of its own layer or of any lower layer, never of a
higher one, and no set of modules may import each other in a circle.

Why this order (bottom to top):

* 0 ``errors``, ``schemas``, ``textutil`` — the exception tree, the row/record
  types (and their chat rendering), and text helpers every other layer uses,
  including the parsing of untrusted LLM answers (``textutil.answers``).
* 1 leaves that depend only on layer 0: reading inputs, the sandbox, the LLM
  client, gate machinery (``gates``: predicates, ``mark_dropped``, the funnel,
  ``--set`` parsing, gate groups), the constraint library, agent visibility.
* 2 ``rewards`` — pure scoring functions over samples (sandbox, constraints, llm).
* 3 ``store`` — shards, manifests, resume and dataset versions; it applies gates
  (``gates``) but knows nothing of the pipeline: the caller loads the modules
  that register gate groups (``pipeline.registry.load_run_modules``), and
  materialisation refuses while a group the run recorded is missing.
* 4 ``pipeline`` — the document, stage contract and runner; executors other than
  ``local`` are loaded by module string (like stage kinds), so ``pipeline``
  never imports ``ray``.
* 5 ``embeddings`` (reports phases through ``pipeline.progress``),
  6 ``filters``, 7 ``generators`` — stage modules; generators reuse filters
  (dedup, similarity) and reward helpers.
* 8 ``export`` and ``ray`` — consume finished runs / run stages elsewhere.
* 9 ``eval`` and ``train`` — use exports and rewards; nothing imports them but the CLI.
* 10 ``testing`` — the shipped test harness, which may build any of the above.
* 11 ``cli`` and ``__main__`` — the top.

The package root ``fabrika/__init__.py`` names its exports as strings and
imports none of them, so it sits at the bottom.

An import is a dependency wherever it is written: inside a function, under
``TYPE_CHECKING``, anywhere. ``from fabrika.store import shards`` depends on
``fabrika/store/__init__.py`` too (the name is read off the package), so a
sibling is imported as ``from fabrika.store.shards import …`` or
``import fabrika.store.shards as shards``, keeping package ``__init__`` files
free to re-export their submodules. Loading a module by string (``importlib``), as the
stage registry does, is not an edge — that is what registries are for.

When this test fails, the message names both modules and the line: move the
imported thing down to a layer both can see, or pass it in from the caller.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

#: Bottom → top. The first dotted component under ``fabrika`` names the layer.
LAYERS: list[set[str]] = [
    {"", "errors", "schemas", "textutil"},                                   # 0
    {"inputs", "sandbox", "llm", "gates", "constraints", "agents", "prompts"},  # 1
    {"rewards"},                                                             # 2
    {"store"},                                                               # 3
    {"pipeline"},                                                            # 4
    {"embeddings"},                                                          # 5
    {"filters"},                                                             # 6
    {"generators"},                                                          # 7
    {"export", "ray"},                                                       # 8
    {"eval", "train"},                                                       # 9
    {"testing"},                                                             # 10
    {"cli", "__main__"},                                                     # 11
]

ROOT = Path(__file__).resolve().parents[1] / "fabrika"

#: module -> [(imported module, line)]
Graph = dict[str, list[tuple[str, int]]]


# ---------------------------------------------------------------------------
# reading the graph


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def read_graph(root: Path = ROOT) -> Graph:
    """Every ``import``/``from … import`` inside the package, resolved to package modules.

    ``import a.b`` is an edge to ``a.b``; ``from a.b import c`` is an edge to ``a.b``
    and, when ``a.b.c`` is a module, to ``a.b.c`` too — so a submodule that does
    ``from fabrika.store import shards`` depends on ``fabrika/store/__init__.py``
    (import a sibling as ``from fabrika.store.shards import …`` instead). Imports of
    anything outside the package are ignored.
    """
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: Graph = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges: list[tuple[str, int]] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # ``from a.b import c`` reads ``c`` off ``a.b`` (running its ``__init__``), so ``a.b``
                # is always an edge; ``a.b.c`` is one too when it is a module.
                targets = [source]
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in files:
                        targets.append(submodule)
            else:
                continue
            for target in targets:
                # ``import fabrika.a.b`` of a name that is not a module: its nearest module.
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != module and (target, node.lineno) not in edges:
                    edges.append((target, node.lineno))
        graph[module] = edges
    return graph


# ---------------------------------------------------------------------------
# the checks (pure functions over a graph)


def layer_of(module: str, layers: list[set[str]]) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    for index, names in enumerate(layers):
        if top in names:
            return index
    raise KeyError(f"{module}: package {top!r} has no layer; add it to LAYERS in tests/test_layers.py "
                   f"and to docs/ARCHITECTURE.md")


def upward_imports(graph: Graph, layers: list[set[str]]) -> list[str]:
    """One message per import from a lower layer to a higher one."""
    problems = []
    for module in sorted(graph):
        low = layer_of(module, layers)
        for target, line in graph[module]:
            high = layer_of(target, layers)
            if high > low:
                problems.append(f"{module} (layer {low}) imports {target} (layer {high}) at line {line}: "
                                f"move what it needs down to layer {low} or lower, or pass it in from the caller")
    return problems


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    succ = {m: [t for t, _ in edges] for m, edges in graph.items()}

    # iterative Tarjan: a deep import chain must not hit the recursion limit
    for start in sorted(succ):
        if start in index:
            continue
        work = [(start, iter(succ.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(succ.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def cycle_messages(graph: Graph) -> list[str]:
    """One message per circle, naming every import line that closes it."""
    problems = []
    for component in cycles(graph):
        members = set(component)
        lines = [f"{m} imports {t} at line {line}"
                 for m in component for t, line in graph[m] if t in members]
        problems.append("import circle between " + ", ".join(component) + ": " + "; ".join(lines)
                        + " — move the shared piece into a module both import, or import the sibling "
                          "module directly instead of its package")
    return problems


# ---------------------------------------------------------------------------
# the checker on synthetic graphs: it can fail


SYNTHETIC_LAYERS = [{"", "errors"}, {"llm"}, {"pipeline"}]


def test_checker_accepts_a_downward_graph() -> None:
    graph: Graph = {
        "fabrika.errors": [],
        "fabrika.llm.engine": [("fabrika.errors", 3)],
        "fabrika.pipeline.runner": [("fabrika.llm.engine", 5), ("fabrika.errors", 6)],
    }
    assert upward_imports(graph, SYNTHETIC_LAYERS) == []
    assert cycle_messages(graph) == []


def test_checker_fails_on_an_inverted_import() -> None:
    graph: Graph = {
        "fabrika.errors": [],
        "fabrika.llm.engine": [("fabrika.errors", 3), ("fabrika.pipeline.runner", 12)],
        "fabrika.pipeline.runner": [],
    }
    problems = upward_imports(graph, SYNTHETIC_LAYERS)
    assert len(problems) == 1
    assert "fabrika.llm.engine (layer 1) imports fabrika.pipeline.runner (layer 2) at line 12" in problems[0]


def test_checker_fails_on_a_cycle_inside_one_layer() -> None:
    graph: Graph = {
        "fabrika.llm.config": [("fabrika.llm.engine", 40)],
        "fabrika.llm.engine": [("fabrika.llm.sim", 7)],
        "fabrika.llm.sim": [("fabrika.llm.config", 9)],
        "fabrika.llm.types": [],
    }
    assert upward_imports(graph, SYNTHETIC_LAYERS) == []  # same layer: only the cycle check sees it
    (problem,) = cycle_messages(graph)
    assert "fabrika.llm.config, fabrika.llm.engine, fabrika.llm.sim" in problem
    assert "fabrika.llm.sim imports fabrika.llm.config at line 9" in problem
    assert "fabrika.llm.types" not in problem


def test_a_submodule_importing_its_package_that_imports_it_is_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "fabrika" / "store"
    package.mkdir(parents=True)
    (tmp_path / "fabrika" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from fabrika.store.run import open_run\n")
    (package / "run.py").write_text("def open_run():\n    from fabrika.store.shards import write\n")
    (package / "shards.py").write_text("from .run import open_run\n")
    graph = read_graph(tmp_path / "fabrika")
    assert graph["fabrika.store"] == [("fabrika.store.run", 1)]
    assert graph["fabrika.store.run"] == [("fabrika.store.shards", 2)]  # inside a function still counts
    assert graph["fabrika.store.shards"] == [("fabrika.store.run", 1)]
    (problem,) = cycle_messages(graph)
    assert problem.startswith("import circle between fabrika.store.run, fabrika.store.shards:")

    # a sibling read off the package runs the package __init__, which imports run back
    (package / "run.py").write_text("from fabrika.store import shards\n")
    (package / "shards.py").write_text("")
    graph = read_graph(tmp_path / "fabrika")
    assert graph["fabrika.store.run"] == [("fabrika.store", 1), ("fabrika.store.shards", 1)]
    (problem,) = cycle_messages(graph)
    assert problem.startswith("import circle between fabrika.store, fabrika.store.run:")
    assert "fabrika.store.run imports fabrika.store at line 1" in problem


def test_type_checking_imports_are_edges(tmp_path: Path) -> None:
    (tmp_path / "fabrika" / "llm").mkdir(parents=True)
    (tmp_path / "fabrika" / "pipeline").mkdir()
    (tmp_path / "fabrika" / "__init__.py").write_text("")
    (tmp_path / "fabrika" / "llm" / "__init__.py").write_text("")
    (tmp_path / "fabrika" / "pipeline" / "__init__.py").write_text("")
    (tmp_path / "fabrika" / "pipeline" / "runner.py").write_text("")
    (tmp_path / "fabrika" / "llm" / "engine.py").write_text(
        "from typing import TYPE_CHECKING\nimport importlib\n"
        "if TYPE_CHECKING:\n    from fabrika.pipeline.runner import Run\n"
        "importlib.import_module('fabrika.pipeline.runner')\n")
    graph = read_graph(tmp_path / "fabrika")
    assert graph["fabrika.llm.engine"] == [("fabrika.pipeline.runner", 4)]  # the string load is no edge
    (problem,) = upward_imports(graph, SYNTHETIC_LAYERS)
    assert "at line 4" in problem


def test_an_unlisted_package_is_an_error() -> None:
    with pytest.raises(KeyError, match="'newpkg' has no layer"):
        upward_imports({"fabrika.newpkg.x": []}, SYNTHETIC_LAYERS)


# ---------------------------------------------------------------------------
# the real package


def test_every_package_has_a_layer() -> None:
    for module in read_graph():
        layer_of(module, LAYERS)


def test_no_import_points_up() -> None:
    problems = upward_imports(read_graph(), LAYERS)
    assert not problems, "\n".join(problems)


def test_no_import_circles() -> None:
    problems = cycle_messages(read_graph())
    assert not problems, "\n".join(problems)


def test_architecture_doc_states_the_same_order() -> None:
    doc = (ROOT.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for index, names in enumerate(LAYERS):
        listed = ", ".join(f"`{n}`" for n in sorted(names) if n)
        assert f"| {index} | {listed} |" in doc, f"docs/ARCHITECTURE.md lacks the row '| {index} | {listed} |'"
