"""Sandbox worker: a long-lived process that runs LLM-written ``evaluate`` functions.

This file runs as a *script* inside the sandbox (bubblewrap or rlimits-only), so it
imports only the standard library (plus the allowed text libraries it preloads)
and nothing from fabrika. The parent (:mod:`fabrika.sandbox.pool`) starts it as
``python -s -P -B _worker.py CONFIG_JSON``.

Protocol (why so small: millions of calls, the parent parses every reply):

* requests on fd 0: 4-byte big-endian length + JSON
  ``{"code": str, "responses": [...], "guard": bool}``;
* replies on the fd named in the config (``reply_fd``), one line per response, in order:
  ``T`` (True), ``F`` (False), ``E{"k": kind, "m": message}`` (error); a batch whose
  code does not compile gets one line ``C{"k": kind, "m": message}``, otherwise the
  replies are preceded by ``K`` (module body ran; timeouts after it are per response);
  every batch ends with ``D`` (done) or ``R`` (done, and recycle this worker: it is
  tainted, e.g. a thread outlived its call; the worker exits after writing it).

Per-response timeouts are the parent's job: it kills the whole sandbox.
The worker's own stdout/stderr are /dev/null, so printing megabytes costs time only.
"""

from __future__ import annotations

import builtins
import json
import os
import resource
import struct
import sys
import types

CONFIG = json.loads(sys.argv[1])
ALLOWED = frozenset(CONFIG["allowed_modules"])
MSG_MAX = 400

# Preload the allowed modules once (trusted context, before limits), so a verifier's
# ``import`` is a dict lookup. Heavy ones load on first use, still before the code runs.
LAZY = frozenset({"pymorphy3"}) if CONFIG.get("isolation") == "bwrap" else frozenset()


def _preload(name: str) -> None:
    try:
        __import__(name)
    except Exception:  # noqa: BLE001 - a missing optional library only narrows the allow-list
        return
    if name == "pymorphy3":
        _install_morph_singleton()


_morph_cache: list = []


def _install_morph_singleton() -> None:
    """``pymorphy3.MorphAnalyzer()`` loads dictionaries (~0.3 s); verifiers call it per response."""
    mod = sys.modules["pymorphy3"]
    real = mod.MorphAnalyzer

    def shared_analyzer(*args: object, **kwargs: object) -> object:
        if args or kwargs:
            return real(*args, **kwargs)
        if not _morph_cache:
            _morph_cache.append(real())
        return _morph_cache[0]

    mod.MorphAnalyzer = shared_analyzer
    shared_analyzer()  # load the dictionaries now, in trusted context, not on a verifier's clock


for _name in sorted(ALLOWED - LAZY):
    _preload(_name)
if "collections" in ALLOWED:
    # ``import collections.abc`` would otherwise set the attribute on first use, which the
    # taint check (rightly) reads as a changed module and recycles the worker.
    import collections.abc  # noqa: F401


def _die_with_parent() -> None:
    """Without bwrap nothing kills a worker stuck in a loop when the parent dies: ask the kernel to."""
    if CONFIG.get("isolation") != "rlimits" or not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith("ctypes.")]:
        del sys.modules[name]


_die_with_parent()

# Protocol fds: keep private copies, then point 0/1/2 at /dev/null.
_REQ = os.dup(0)
_REP = os.dup(CONFIG["reply_fd"])
_null = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2, CONFIG["reply_fd"]):
    os.dup2(_null, _fd)
os.close(_null)


def _apply_limits() -> None:
    lim = CONFIG["limits"]
    for name, value in lim.items():
        res = getattr(resource, name)
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            soft, hard = resource.getrlimit(res)
            if hard == resource.RLIM_INFINITY or value <= hard:
                resource.setrlimit(res, (value, hard))
    uid = CONFIG.get("uid")
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


_apply_limits()

_BLOCKED_BUILTINS = (
    "open", "eval", "exec", "compile", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "breakpoint", "input", "memoryview", "help", "exit", "quit", "copyright",
    "credits", "license", "__build_class__", "__loader__", "__spec__",
)
_REAL_IMPORT = builtins.__import__
#: ``string.Formatter().get_field`` resolves attribute paths (dunders too) from a string.
_HIDDEN_ATTRIBUTES = frozenset({"Formatter"})
_VIEWS: dict[str, types.ModuleType] = {}
_NEW_MODULES: list[str] = []


def _view(module: types.ModuleType) -> types.ModuleType:
    """What verifier code gets for an allowed module: a copy with only its public names, and
    without the modules it imported itself (``statistics.sys``, ``json.codecs``…), so the
    usual attribute chains out of the allow-list end here. Submodules of allowed packages
    get views too. Cached per worker; the taint check watches the views as well."""
    name = module.__name__
    cached = _VIEWS.get(name)
    if cached is not None:
        return cached
    view = types.ModuleType(name, getattr(module, "__doc__", None))
    _VIEWS[name] = view
    for key, value in list(vars(module).items()):
        if key.startswith("_") or key in _HIDDEN_ATTRIBUTES:
            continue
        if isinstance(value, types.ModuleType):
            if value.__name__.split(".")[0] not in ALLOWED:
                continue
            value = _view(value)
        setattr(view, key, value)
    return view


def _guarded_import(name: str, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
    if level != 0 or name.split(".")[0] not in ALLOWED:
        raise ImportError(f"import of {name!r} is not allowed in the sandbox")
    known = name in sys.modules
    _REAL_IMPORT(name, globals, locals, fromlist, level)
    if not known:
        _VIEWS.clear()  # a new submodule: rebuild views so parents show it...
        _NEW_MODULES.append(name)  # ...and recycle this worker after the batch (its snapshot is stale)
    return _view(sys.modules[name if fromlist else name.split(".")[0]])


_SAFE_BUILTINS = {k: v for k, v in vars(builtins).items() if k not in _BLOCKED_BUILTINS}
_SAFE_BUILTINS["__import__"] = _guarded_import


def _read_exact(n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(_REQ, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


_os_write = os.write


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[_os_write(_REP, view):]


def _err(prefix: str, kind: str, message: str) -> bytes:
    return (prefix + json.dumps({"k": kind, "m": message[:MSG_MAX]}) + "\n").encode()


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001 - hostile __str__
        text = "<unprintable>"
    return f"{type(exc).__name__}: {text}"


def _prepare(code: str, guard: bool):
    """Compile (cached by source) and execute the module body; return ``evaluate`` or an error line."""
    for name in LAZY:
        if name in code and name not in sys.modules:
            _preload(name)
            if name in sys.modules:
                _view(sys.modules[name])
            _snapshot()
    # Compiled per batch on purpose: a code cache would be state a hostile verifier could poison.
    try:
        compiled = compile(code, "<verifier>", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        return None, _err("C", "syntax", _describe(exc))
    namespace = {"__name__": "verifier", "__builtins__": _SAFE_BUILTINS if guard else builtins}
    try:
        exec(compiled, namespace)  # noqa: S102 - this is the sandbox
    except MemoryError as exc:
        return None, _err("C", "memory", _describe(exc))
    except BaseException as exc:  # noqa: BLE001 - untrusted module body
        return None, _err("C", "exception", "module body: " + _describe(exc))
    fn = namespace.get("evaluate")
    if not callable(fn):
        return None, _err("C", "no_function", "the code defines no callable `evaluate(response)`")
    return fn, None


def _call(fn, response) -> bytes:
    try:
        result = fn(response)
    except MemoryError as exc:
        return _err("E", "memory", _describe(exc))
    except RecursionError as exc:
        return _err("E", "exception", _describe(exc))
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt... all are verdicts
        return _err("E", "exception", _describe(exc))
    if result is True:
        return b"T\n"
    if result is False:
        return b"F\n"
    try:
        shown = repr(result)[:80]
    except BaseException:  # noqa: BLE001
        shown = "<unprintable>"
    return _err("E", "non_bool", f"evaluate returned {type(result).__name__} {shown}, expected a bool")


_SNAP_MODULES: dict[str, object] = {}
_SNAP_DICTS: list[tuple[dict, dict]] = []


def _snapshot() -> None:
    """Remember what must not change between batches: allowed modules and their views, the
    worker's own globals, the guarded builtins."""
    _SNAP_MODULES.clear()
    _SNAP_DICTS.clear()
    for name, mod in list(sys.modules.items()):
        if name.split(".")[0] in ALLOWED or name in ("builtins", "sys", "os", "json", "struct", "types", "__main__"):
            _SNAP_MODULES[name] = mod
            _SNAP_DICTS.append((vars(mod), dict(vars(mod))))
    for view in _VIEWS.values():
        _SNAP_DICTS.append((vars(view), dict(vars(view))))
    _SNAP_DICTS.append((_SAFE_BUILTINS, dict(_SAFE_BUILTINS)))


_RECURSION_LIMIT = sys.getrecursionlimit()
_listdir, _len, _MISSING = os.listdir, len, object()


def _tainted() -> bool:
    """Whether the next batch could not trust this process: a thread still runs, or code
    replaced a module (``sys.modules`` entry), a module attribute or a view attribute.
    Identity checks only, so no hostile ``__eq__`` runs here."""
    try:
        if _len(_listdir("/proc/self/task")) > 1:
            return True
    except OSError:
        pass
    if sys.getrecursionlimit() != _RECURSION_LIMIT or _NEW_MODULES:
        return True
    modules = sys.modules
    for name, mod in _SNAP_MODULES.items():
        if modules.get(name) is not mod:
            return True
    for live, frozen in _SNAP_DICTS:
        if _len(live) != _len(frozen):
            return True
        for key, value in frozen.items():
            if live.get(key, _MISSING) is not value:
                return True
    return False


def main() -> None:
    for name in sorted(ALLOWED):
        if name in sys.modules:
            _view(sys.modules[name])
    _snapshot()
    while True:
        header = _read_exact(4)
        if header is None:
            return
        body = _read_exact(struct.unpack(">I", header)[0])
        if body is None:
            return
        request = json.loads(body)
        fn, error = _prepare(request["code"], bool(request.get("guard", True)))
        if error is not None:
            _write(error)
        else:
            _write(b"K\n")
            for response in request["responses"]:
                _write(_call(fn, response))
        if _tainted():
            _write(b"R\n")
            return
        _write(b"D\n")


if __name__ == "__main__":
    main()
