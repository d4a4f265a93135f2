"""What a stage's rows depend on besides its config: its code, the prompts it renders, the sim responders.

:mod:`fabrika.pipeline.fingerprint` puts these digests into a stage's fingerprint, so an
edited stage module, an edited prompt template or (on ``backend: sim``) an edited sim
responder redoes that stage and, through the inputs' fingerprints, everything downstream.
Answers to requests that did not change still come from the LLM cache (it is keyed by
request); the ``sim`` backend names its responder's code in its cache scope, so an edited
responder answers afresh.

Code
    The modules of the stage class and of its bases (not the framework in
    ``fabrika.pipeline``), and the modules they reference at module level (imported modules,
    functions and classes), followed transitively inside the *content* packages
    (:data:`CONTENT_PACKAGES`) and the stage module's own package (plugins). Each module is
    hashed by its syntax tree without docstrings, so comments and formatting do not redo a
    stage. ``code_version`` on the stage class (any string) is hashed too: bump it when the
    stage's behaviour changes through code outside this closure (a library, the framework).
    Modules that only register sim responders are left to the ``sim`` part.

Prompts
    A stage may declare ``prompt_templates`` (a class attribute): objects with a
    ``digests() -> {name: digest}`` method, e.g. :meth:`fabrika.prompts.PromptCatalogue.select`;
    then exactly those templates (every language) are hashed. Otherwise every
    :class:`~fabrika.prompts.PromptCatalogue` found at module level in its code modules is
    hashed whole. The FC role prompts are a catalogue too (``fabrika.agents.prompts``, one YAML
    file per language), each FC stage selecting the keys it renders, so an edited FC template
    redoes exactly the stages that render it. Modules whose name ends in ``prompts`` (the
    request builders beside a catalogue) are reported as prompts rather than code.

Sim responders (``backend: sim`` only)
    The responders registered for the stage kind's family (``if.*`` responders for
    ``if.*`` stages: the first dotted component of the tag prefix and of the kind agree),
    and those whose prefix names a tag written in the stage's code modules (a string constant
    such as ``"if.judge.similarity"`` in ``filters/similarity.py``); a stage that never calls
    the LLM (``calls_llm = False``) reaches none. Each is hashed by the source of its module
    and its qualified name.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Mapping

#: Packages whose modules are a stage's code when a stage module references them.
CONTENT_PACKAGES = ("fabrika.generators", "fabrika.filters", "fabrika.agents", "fabrika.rewards",
                    "fabrika.constraints")
#: The framework: a change here is not a change of any one stage (bump ``code_version`` when it is).
FRAMEWORK_PREFIXES = ("fabrika.pipeline", "builtins", "abc", "typing")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


class _NoDocstrings(ast.NodeTransformer):
    def _strip(self, node: Any) -> Any:
        self.generic_visit(node)
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_Module = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _strip


@lru_cache(maxsize=1024)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    source = Path(path).read_bytes()
    try:
        tree = _NoDocstrings().visit(ast.parse(source))
    except (SyntaxError, ValueError):
        return _digest(source)
    return _digest(ast.dump(tree, include_attributes=False).encode())


@lru_cache(maxsize=1024)
def _file_words(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    """Short string constants of a source file without spaces (where tags such as ``"if.expand"`` are written)."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (SyntaxError, ValueError):
        return frozenset()
    return frozenset(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                     and 0 < len(n.value) < 64 and not any(c.isspace() for c in n.value))


def module_words(module: ModuleType) -> frozenset[str]:
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py") or not Path(path).is_file():
        return frozenset()
    st = Path(path).stat()
    return _file_words(path, st.st_mtime_ns, st.st_size)


def module_digest(module: ModuleType) -> str:
    """Digest of a module's code: its syntax tree without docstrings (comments and layout do not count)."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py") or not Path(path).is_file():
        try:
            return _digest(inspect.getsource(module).encode())
        except (OSError, TypeError):
            return "unknown"
    st = Path(path).stat()
    return _file_digest(path, st.st_mtime_ns, st.st_size)


def _package(name: str) -> str:
    return name.rpartition(".")[0] or name


def _followed(name: str, home: str) -> bool:
    if name.startswith(FRAMEWORK_PREFIXES):
        return False
    return any(name == p or name.startswith(p + ".") for p in (*CONTENT_PACKAGES, home))


def _referenced(module: ModuleType) -> Iterable[str]:
    """Names of the modules ``module`` references at module level (modules, and where its functions/classes live)."""
    for value in list(vars(module).values()):
        if isinstance(value, ModuleType):
            yield value.__name__
        elif inspect.isfunction(value) or inspect.isclass(value):
            yield getattr(value, "__module__", "") or ""


def sim_responder_modules() -> set[str]:
    """Modules of sim responders named ``*sim*`` (``sim_responders``, ``topics_sim``): the ``sim`` part, not code.

    A stage module that also registers a responder (``fc.tools_import``) stays code.
    """
    from fabrika.llm.sim import registered_sim_responders

    names = {getattr(fn, "__module__", "") or "" for fn in registered_sim_responders().values()}
    return {n for n in names if "sim" in n.rsplit(".", 1)[-1]}


def code_modules(stage_cls: type) -> list[str]:
    """The modules whose code a stage's rows depend on (see the module docstring), sorted."""
    starts = [c.__module__ for c in stage_cls.__mro__ if not c.__module__.startswith(FRAMEWORK_PREFIXES)]
    home = _package(stage_cls.__module__)
    skip = sim_responder_modules()
    seen: set[str] = set()
    todo = list(dict.fromkeys(starts))
    while todo:
        name = todo.pop()
        if name in seen or name not in sys.modules:
            continue
        seen.add(name)
        for ref in _referenced(sys.modules[name]):
            if ref and ref not in seen and ref not in skip and _followed(ref, home):
                todo.append(ref)
    return sorted(seen - (skip - set(starts)))


def is_prompt_module(name: str) -> bool:
    """A module named ``*prompts`` that defines no stage (``general.prompts`` is a stage, not prompts)."""
    if not name.rsplit(".", 1)[-1].endswith("prompts"):
        return False
    module = sys.modules.get(name)
    return module is None or not any(inspect.isclass(v) and v.__module__ == name and hasattr(v, "process")
                                      and hasattr(v, "kind") for v in vars(module).values())


def _catalogues(modules: Iterable[str]) -> list[Any]:
    from fabrika.prompts import PromptCatalogue

    found: dict[int, Any] = {}
    for name in modules:
        for value in list(vars(sys.modules[name]).values()):
            if isinstance(value, PromptCatalogue):
                found[id(value)] = value
    return list(found.values())


def stage_lineage(stage_cls: type, sim: bool, calls_llm: bool | None = None) -> dict[str, Any]:
    """``{"code": {module: digest}, "prompts": {name: digest}, "sim": {prefix: digest}}`` of a stage class.

    ``code`` also holds ``code_version`` when the class sets one; ``sim`` is empty unless
    ``sim`` (the run's backend is ``sim``).
    """
    modules = code_modules(stage_cls)
    code: dict[str, str] = {}
    prompts: dict[str, str] = {}
    for name in modules:
        (prompts if is_prompt_module(name) else code)[name] = module_digest(sys.modules[name])
    version = getattr(stage_cls, "code_version", None)
    if version is not None:
        code["code_version"] = str(version)
    declared = getattr(stage_cls, "prompt_templates", None)
    sources = list(declared) if declared is not None else _catalogues(modules)
    for item in sources:
        prompts.update(item.digests())
    out: dict[str, Any] = {"code": code, "prompts": prompts, "sim": {}}
    llm = bool(getattr(stage_cls, "calls_llm", True)) if calls_llm is None else calls_llm
    if sim and llm:  # a stage that never calls the LLM (``calls_llm = False``) reaches no responder
        words: set[str] = set()
        for name in modules:
            words |= module_words(sys.modules[name])
        out["sim"] = sim_digests(str(getattr(stage_cls, "kind", "")), words)
    return out


def responder_digest(fn: Any) -> str:
    """A sim responder's digest: its module's code and its qualified name."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    code = module_digest(module) if module is not None else "unknown"
    return _digest(f"{code}:{getattr(fn, '__qualname__', type(fn).__name__)}".encode())


def _names_tag(prefix: str, words: Iterable[str]) -> bool:
    return any(w == prefix or w.startswith(prefix + ".") or (w.endswith(".") and prefix.startswith(w))
               for w in words)


def sim_digests(kind: str, words: Iterable[str] = ()) -> dict[str, str]:
    """``{tag prefix: digest}`` of the sim responders a stage of ``kind`` may reach (module docstring):
    its kind's family, and prefixes of the tags its code modules write (``words``: their string constants)."""
    from fabrika.llm.sim import registered_sim_responders

    responders = registered_sim_responders()
    family = kind.split(".", 1)[0]
    words = set(words)
    mine = {p: fn for p, fn in responders.items() if p.split(".", 1)[0] == family or _names_tag(p, words)}
    return {p: responder_digest(fn) for p, fn in sorted(mine.items())}


def reads_rows(kind: str) -> bool:
    """True when a stage of ``kind`` reads its gated input row by row, keyed by the row's id (the default
    :meth:`~fabrika.pipeline.stage.Stage.input_rows` and ``item_id``): its rows trace to their input rows."""
    from fabrika.pipeline.stage import STAGES, Stage

    cls = STAGES.get(kind)
    return (cls is not None and not cls.global_stage and not cls.annotates
            and cls.input_rows is Stage.input_rows and cls.item_id is Stage.item_id)


def row_readers(layout: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """Names of the stages of a manifest ``layout`` that :func:`reads_rows` (materialisation traces them)."""
    return {name for name, info in layout.items() if info.get("inputs") and reads_rows(str(info.get("kind")))}


__all__ = ["CONTENT_PACKAGES", "code_modules", "module_digest", "reads_rows", "responder_digest", "row_readers",
           "sim_digests", "stage_lineage"]
