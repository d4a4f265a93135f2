"""BFCL's own API simulators, loaded from the installed ``bfcl-eval`` package, for its multi-turn categories.

BFCL v3/v4 multi-turn cases run against stateful Python classes that ship in BFCL's package
(``bfcl_eval/eval_checker/multi_turn_eval/func_source_code/``): ``GorillaFileSystem``, ``MathAPI``,
``MessageAPI``, ``TwitterAPI``, ``TicketAPI``, ``TradingBot``, ``TravelAPI``, ``VehicleControlAPI``. fabrika
does not copy them (nor their function docs): they are imported from ``bfcl_eval`` at run time, which is
an optional install (:data:`INSTALL`, ``--no-deps``: its pinned dependencies are heavy and only its
model handlers need them; the simulators need only ``mpmath``).

BFCL's classes keep state outside their instances: mutable default arguments (``post_tweet(tags=[])``)
and ``long_context`` tables put by reference into the state (``TravelAPI``'s long-context credit cards,
whose balances bookings then change). In BFCL's runs all cases of a process share them, so a verdict can
depend on the cases run before it. Here each case gets its own copies of those modules
(:class:`World`: the class modules and ``long_context`` executed afresh, not registered in
``sys.modules``); the model's and the ground truth's instances of one case share that world, as they
share BFCL's modules in BFCL's checker. A verdict is then the one BFCL gives that case in a fresh process.

A :class:`SimSession` is one fresh set of instances for a case, set up as BFCL sets them up: each class
``_load_scenario``-ed with a deep copy of its ``initial_config`` entry (stateless ``MathAPI`` excepted),
with ``long_context=True`` in the ``long_context`` (and ``composite``) categories. Calls execute as BFCL's
``execute_multi_turn_func_call`` executes them, with one difference of means, not of results: BFCL
``eval``-s the call string; here a call string is read with :mod:`ast` (literal arguments only,
:func:`fabrika.eval.bfcl_multi.parse_call_args`), its name must be a public method of an involved
instance (the case's functions; the later class wins a shared name, as in BFCL), and the method is
called with those arguments. Results are formatted as BFCL formats them: a ``str`` as is, a ``dict`` as
``json.dumps``, anything else ``str()``, an exception ``"Error during execution: <message>"``.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import itertools
import json
import sys
import threading
from importlib import resources
from types import ModuleType
from typing import Any, Callable

from fabrika.errors import InputError
from fabrika.eval.bfcl_multi import parse_call_args

__all__ = ["INSTALL", "MULTI_TURN_CLASSES", "BfclNotInstalled", "SimSession", "World", "bfcl_constants",
           "function_docs",
           "is_long_context", "require_bfcl_eval", "session_factory"]

#: the one command that makes BFCL's multi-turn categories runnable (also in the Makefile's dev install)
INSTALL = "pip install --no-deps bfcl-eval==2026.3.23 mpmath"
MULTI_TURN_CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot",
                      "TravelAPI", "VehicleControlAPI")
#: names BFCL refuses to execute whatever the class (its guard before ``eval``)
_BLOCKED = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})


class BfclNotInstalled(InputError):
    """BFCL's package is not importable: a multi-turn category cannot run (exit 2, naming :data:`INSTALL`)."""


def require_bfcl_eval() -> None:
    """Raise :class:`BfclNotInstalled` unless ``bfcl_eval`` (and ``mpmath``, for ``MathAPI``) can be imported."""
    missing = [m for m in ("bfcl_eval", "mpmath") if importlib.util.find_spec(m) is None]
    if missing:
        raise BfclNotInstalled(f"BFCL multi-turn categories run on BFCL's own API simulators (missing: "
                               f"{', '.join(missing)}); install them with: {INSTALL}")


def _backend_config() -> Any:
    require_bfcl_eval()
    return importlib.import_module("bfcl_eval.constants.executable_backend_config")


_LONG_CONTEXT = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.long_context"
_LOAD = threading.Lock()
_COPIES = itertools.count()


def _fresh(name: str) -> ModuleType:
    """Module ``name`` executed afresh under a private name (its file's cached bytecode is reused)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise InputError(f"bfcl-eval is installed without {name}; reinstall it with: {INSTALL}")
    private = importlib.util.spec_from_file_location(f"_fabrika_bfcl_{next(_COPIES)}_{name.rsplit('.', 1)[-1]}",
                                                     spec.origin)
    assert private is not None and private.loader is not None
    module = importlib.util.module_from_spec(private)
    private.loader.exec_module(module)
    return module


class World:
    """One case's own copies of BFCL's simulator modules (see the module doc); classes made on first use."""

    def __init__(self) -> None:
        self._config = _backend_config()
        self._long_context: ModuleType | None = None
        self._modules: dict[str, ModuleType] = {}

    def cls(self, name: str) -> Any:
        """The class ``name`` from this world's copy of its module."""
        if name not in self._modules:
            with _LOAD:  # the class module's ``from …long_context import`` must bind this world's copy
                if self._long_context is None:
                    self._long_context = _fresh(_LONG_CONTEXT)
                saved = sys.modules.get(_LONG_CONTEXT)
                sys.modules[_LONG_CONTEXT] = self._long_context
                try:
                    self._modules[name] = _fresh(self._config.CLASS_FILE_PATH_MAPPING[name])
                finally:
                    if saved is None:
                        sys.modules.pop(_LONG_CONTEXT, None)
                    else:
                        sys.modules[_LONG_CONTEXT] = saved
        return getattr(self._modules[name], name)

    @property
    def stateless(self) -> list[str]:
        return list(self._config.STATELESS_CLASSES)


def bfcl_constants() -> tuple[int, str]:
    """BFCL's inference constants: ``MAXIMUM_STEP_LIMIT`` (steps with calls per turn before a force-quit) and
    ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC`` (the user message of a turn that adds held-out functions)."""
    require_bfcl_eval()
    prompts = importlib.import_module("bfcl_eval.constants.default_prompts")
    return int(prompts.MAXIMUM_STEP_LIMIT), str(prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC)


def function_docs(cls: str) -> list[dict[str, Any]]:
    """BFCL's function docs of one simulator class, read from the installed package's data."""
    if cls not in MULTI_TURN_CLASSES:
        raise InputError(f"a multi-turn case names class {cls!r}; BFCL's multi-turn classes are "
                         f"{', '.join(MULTI_TURN_CLASSES)}")
    name = _backend_config().MULTI_TURN_FUNC_DOC_FILE_MAPPING[cls]
    text = (resources.files("bfcl_eval") / "data" / "multi_turn_func_doc" / name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def is_long_context(case_id: str) -> bool:
    """BFCL's rule: the category (the id without its number) names ``long_context`` or ``composite``."""
    category = case_id.rsplit("_", 1)[0]
    return "long_context" in category or "composite" in category


def _result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def _as_call(raw: Any) -> tuple[str, list[Any], dict[str, Any]]:
    """``"f(a=1)"`` or ``{"f": {"a": 1}}`` (arguments possibly a JSON string) → ``(name, args, kwargs)``."""
    if isinstance(raw, str):
        return parse_call_args(raw)
    if isinstance(raw, dict) and len(raw) == 1:
        name, args = next(iter(raw.items()))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError as exc:
                raise ValueError(f"arguments of {name} are not JSON") from exc
        if isinstance(args, dict):
            return str(name), [], dict(args)
    raise ValueError(f"not a call: {raw!r}")


class SimSession:
    """Fresh instances of a case's BFCL classes; :meth:`run` executes calls, :meth:`state` reads the state."""

    def __init__(self, involved: list[str], initial_config: dict[str, Any], *, long_context: bool = False,
                 world: World | None = None) -> None:
        world = world or World()
        unknown = [c for c in involved if c not in MULTI_TURN_CLASSES]
        if unknown:
            raise InputError(f"a multi-turn case names classes {unknown}; BFCL's multi-turn classes are "
                             f"{', '.join(MULTI_TURN_CLASSES)}")
        self.instances: dict[str, Any] = {}
        self._methods: dict[str, Any] = {}
        for cls in involved:
            instance = world.cls(cls)()
            if cls not in world.stateless:
                instance._load_scenario(copy.deepcopy(initial_config.get(cls, {})), long_context=long_context)
            self.instances[cls] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self._methods[name] = method

    @property
    def functions(self) -> set[str]:
        """The names a call may use: the public methods of the involved instances."""
        return set(self._methods)

    def run(self, calls: list[Any]) -> list[str]:
        """Execute ``calls`` in order; one result text per call (failures are results, nothing raises)."""
        out = []
        for raw in calls:
            try:
                name, args, kwargs = _as_call(raw)
            except ValueError as exc:
                out.append(f"Error during execution: {exc}")
                continue
            if name in _BLOCKED:
                out.append(f"Error during execution: Function call {name} is not allowed.")
                continue
            method = self._methods.get(name)
            if method is None:  # BFCL's eval of an unknown bare name raises NameError with this text
                out.append(f"Error during execution: name '{name}' is not defined")
                continue
            try:  # copies: the simulators keep argument objects in their state (BFCL's eval makes fresh ones)
                out.append(_result_text(method(*copy.deepcopy(args), **copy.deepcopy(kwargs))))
            except Exception as exc:  # noqa: BLE001 - a failing simulator call is a result, as in BFCL
                out.append(f"Error during execution: {exc}")
        return out

    def state(self) -> dict[str, dict[str, Any]]:
        """Each instance's public attributes (live values; BFCL's state check compares them with ``!=``)."""
        return {cls: {k: v for k, v in vars(inst).items() if not k.startswith("_")}
                for cls, inst in self.instances.items()}


def session_factory() -> Callable[[dict[str, Any]], SimSession]:
    """Sessions for one case, all in one :class:`World` (pass as ``new_session`` to
    :func:`~fabrika.eval.bfcl_multi.check_multi_turn`; make a new factory per case)."""
    world = World()

    def make(case: dict[str, Any]) -> SimSession:
        return SimSession(list(case["involved_classes"]), case.get("initial_config") or {},
                          long_context=is_long_context(str(case.get("id", ""))), world=world)

    return make
