"""Sandbox worker: a preloaded *zygote* that forks a fresh child for every verifier batch.

This file runs as a *script* inside the sandbox (bubblewrap or rlimits-only), so it
imports only the standard library (plus the allowed text libraries it preloads)
and nothing from fabrika. The parent (:mod:`fabrika.sandbox.pool`) starts it as
``python -s -P -B _worker.py CONFIG_JSON``.

Why a zygote: importing razdel and loading pymorphy3's dictionaries costs a third of
a second, a fork a millisecond. The zygote imports them once and never runs
LLM-written code itself; each batch (one verifier, its responses) runs in a child
forked from the zygote's pristine state, under a uid of its own with tight rlimits,
and is SIGKILLed when the batch ends. Whatever a verifier changes — library tables,
``re``'s cache, ``sys.settrace``, signal handlers, timers, threads, ``atexit``, the
worker's own functions — dies with its process; the next verifier starts from the
zygote's copy, which no verifier has touched.

Protocol (why so small: millions of calls, the parent parses every reply):

* parent -> zygote, fd 0: a header, 4-byte big-endian length + JSON ``{"nonce": str, "n":
  int, "lazy": [module], "segments": [int], "probes": [int]}``, then the body, 4-byte length +
  JSON ``{"code": str, "responses": [...], "guard": bool, "segments": [int]}``. A batch holds
  one or more *segments* (calls of the pool, of the same verifier): each runs the module body
  afresh, so a verifier's module state never crosses from one call to another; a probe
  segment's fatal verdict also answers the next segment. The zygote decodes only the header; the body it reads into a
  buffer of its own, hands to the child and zeroes, and the child's reply lines it checks
  and relays from another such buffer, never as Python objects: nothing of an earlier
  batch's code, responses or messages is left in the heap the next spare is forked from (the
  next spare is forked while the current child runs, so its first act is to zero its copy of
  the body);
* zygote -> parent, on ``reply_fd``: for each response, in order, one line
  ``<nonce>T`` (True), ``<nonce>F`` (False), ``<nonce>E{"k": kind, "m": message}``
  (error) or ``<nonce>X{"m": message}`` (timeout), then ``<nonce>D`` (done); or, when
  the host (not the verifier) kept a verdict from being reached, ``<nonce>I{"m": message}``
  (infrastructure: the parent retries the batch on a fresh worker) and ``<nonce>D``. The
  nonce is fresh per batch and the child never holds the parent's pipe, so nothing a
  verifier writes can pass for a reply.
* child -> zygote, on a pipe of its own, every line prefixed with the child's CPU seconds
  so far (``"0.0123 "``): ``R`` once it is set up (before it is given a
  request: off the batch's critical path), ``K`` once the module body ran,
  then ``T``, ``F`` or ``E{...}`` per response; ``C{...}`` instead of ``K`` when the code
  cannot load. The zygote checks every line; anything else is a ``protocol`` verdict.

Clocks (why CPU, not wall: a verdict must not depend on how loaded the host is): the
zygote owns the per-response budget, ``timeout_s`` seconds of the child's own CPU time
(``/proc/<pid>/stat``, checked whenever the child has been silent for as long as it had
budget left: CPU time never runs faster than the wall clock). A child that used it up is
killed, the response is a ``timeout`` verdict and the remaining responses go to a new
child. ``RLIMIT_CPU`` is the backstop for code the zygote cannot watch. A child silent
for ``wall_ceiling_s`` without using its CPU budget is either blocked on purpose (asleep:
a ``timeout`` verdict, whatever the host load) or starved by the host (runnable: an
infrastructure line, never a verdict).

Namespaces (bwrap): each child unshares a mount and an IPC namespace of its own before it
sees its request, and mounts a fresh tmpfs (size and inode limits) on ``/tmp``: nothing one
verifier writes, and no SysV/POSIX IPC object it creates, is visible to the next, and
nothing is deleted on anyone's clock (the namespace dies with the child). A Python
installation that lives under ``/tmp`` is bound back, read-only, from its stash.
The worker's stdout/stderr are /dev/null.
"""

from __future__ import annotations

import builtins
import gc
import json
import os
import re
import resource
import select
import signal
import struct
import sys
import time
import types

CONFIG = json.loads(sys.argv[1])
ALLOWED = frozenset(CONFIG["allowed_modules"])
ERROR_KINDS = frozenset(CONFIG["error_kinds"])
TIMEOUT_S = float(CONFIG["timeout_s"])  # CPU seconds per response (and for the module body)
WALL_CEILING_S = float(CONFIG.get("wall_ceiling_s") or max(10 * TIMEOUT_S, 10.0))
MSG_MAX = 400
MAX_LINE = 64 * 1024
#: bwrap: {"path": "/tmp", "bytes": N, "inodes": N, "rebind": [[stash, target], ...]}; rlimits:
#: {"base": private dir} (a fresh sub-directory per child); None: no scratch (cwd "/").
SCRATCH = CONFIG.get("scratch")
NAMESPACES = bool(CONFIG.get("namespaces"))
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: rlimits with a uid per child: after each batch the zygote removes what its children left in the
#: host's SysV IPC tables and world-writable directories (bwrap: their namespaces take it all along).
CLEAN_AFTER_BATCH = not NAMESPACES and CONFIG.get("uid_base") is not None and os.getuid() == 0

# Heavy libraries load on first use, in the zygote (trusted, before any fork).
LAZY = frozenset({"pymorphy3"})


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
    real = getattr(mod, "MorphAnalyzer")  # noqa: B009 - a module patched at run time

    def shared_analyzer(*args: object, **kwargs: object) -> object:
        if args or kwargs:
            return real(*args, **kwargs)
        if not _morph_cache:
            _morph_cache.append(real())
        return _morph_cache[0]

    setattr(mod, "MorphAnalyzer", shared_analyzer)  # noqa: B010 - a module patched at run time
    shared_analyzer()  # load the dictionaries now, in the zygote, not on a verifier's clock


for _name in sorted(ALLOWED - LAZY):
    _preload(_name)
if "collections" in ALLOWED:
    import collections.abc  # noqa: F401 - present before the views are built


class _Libc:
    """libc entry points the zygote and its children call, looked up and typed once, in the zygote:
    a child that built them itself (ctypes attribute lookups, a ``Structure`` class for capset) paid
    ~0.4 ms of CPU and ~80 copied pages per batch for it."""

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        lib = ctypes.CDLL(None, use_errno=True)
        self.prctl = lib.prctl
        self.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        self.unshare = lib.unshare
        self.unshare.argtypes = [ctypes.c_int]
        self.mount = lib.mount
        self.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        self.shmctl, self.semctl, self.msgctl = lib.shmctl, lib.semctl, lib.msgctl
        self.capset = lib.capset
        self.capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        # fork(2) itself, called with the GIL held (PyDLL): see :func:`_fork`
        self.fork = ctypes.PyDLL(None, use_errno=True).fork
        self.fork.argtypes, self.fork.restype = [], ctypes.c_int

        class CapHeader(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        self.cap_header = CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
        self.cap_data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2: all empty
        self.cap_args = (ctypes.addressof(self.cap_header), ctypes.addressof(self.cap_data))

    def check(self, result: int, what: str) -> None:
        if result != 0:
            err = self.ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")


_LIBC = _Libc() if sys.platform.startswith("linux") else None


def _single_threaded() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _fork() -> int:
    """``fork(2)`` without CPython's fork hooks, when the zygote is single-threaded (it starts no thread).

    ``os.fork`` runs the interpreter's before/after-fork work in both processes (import lock, thread
    and GIL re-initialisation, every ``os.register_at_fork`` callback: ``random`` reseeding itself from
    ``os.urandom``…): ~0.2 ms of CPU and ~60 copied pages in every child, all of it there for threads
    the zygote does not have. With one thread nothing holds a lock another thread could leave locked,
    the GIL stays with the only thread, and the C library's own fork handlers still run. One visible
    difference: ``random`` is not reseeded per child (no verifier may import it). Falls back to
    ``os.fork`` when a thread exists or libc is not at hand."""
    if _LIBC is None or not _RAW_FORK[0]:
        return os.fork()
    pid = _LIBC.fork()
    if pid < 0:
        err = _LIBC.ctypes.get_errno()
        raise OSError(err, f"fork: {os.strerror(err)}")
    return pid


#: Whether :func:`_fork` may skip CPython's hooks (checked at start and after each lazy import).
_RAW_FORK = [_LIBC is not None and _single_threaded()]


def _prctl(option: int, value: int) -> None:
    if _LIBC is not None:
        _LIBC.prctl(option, value, 0, 0, 0)


def _proc_stat(pid: int) -> tuple[str, float]:
    """State letter and CPU seconds (user + system) of process ``pid`` from ``/proc/<pid>/stat``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return "X", 0.0
    fields = data[data.rindex(b")") + 2:].split()
    return fields[0].decode(), (int(fields[11]) + int(fields[12])) / CLK_TCK


PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4


def _harden_zygote() -> None:
    """Not dumpable: a child with the same uid cannot ptrace it or read its /proc/<pid>/mem.
    Without bwrap nothing kills a zygote when the parent dies: ask the kernel to."""
    if not sys.platform.startswith("linux"):
        return
    _prctl(PR_SET_DUMPABLE, 0)
    if CONFIG.get("isolation") == "rlimits":
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


_harden_zygote()
_PRCTL = _prctl  # the child calls it after its uid drop (which resets both settings)

# Protocol fds: keep private copies, then point 0/1/2 at /dev/null.
_REQ = os.dup(0)
_REP = os.dup(CONFIG["reply_fd"])
_null = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2, CONFIG["reply_fd"]):
    os.dup2(_null, _fd)
os.close(_null)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

_BLOCKED_BUILTINS = (
    "open", "eval", "exec", "compile", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "breakpoint", "input", "memoryview", "help", "exit", "quit", "copyright",
    "credits", "license", "__build_class__", "__loader__", "__spec__",
)
_REAL_IMPORT = builtins.__import__
#: ``string.Formatter().get_field`` resolves attribute paths (dunders too) from a string;
#: ``functools.update_wrapper``/``wraps`` copy arbitrary attributes (``__globals__``) by name.
_HIDDEN_ATTRIBUTES = frozenset({"Formatter", "update_wrapper", "wraps", "WRAPPER_ASSIGNMENTS", "WRAPPER_UPDATES"})
_VIEWS: dict[str, types.ModuleType] = {}


def _view(module: types.ModuleType) -> types.ModuleType:
    """What verifier code gets for an allowed module: a copy with only its public names, and
    without the modules it imported itself (``statistics.sys``, ``json.codecs``…), so the
    usual attribute chains out of the allow-list end here. A lint-level fence: the real
    boundary is the process (see the module docstring)."""
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
        _VIEWS.clear()  # a new submodule (in this child only): rebuild views so parents show it
    return _view(sys.modules[name if fromlist else name.split(".")[0]])


_SAFE_BUILTINS = {k: v for k, v in vars(builtins).items() if k not in _BLOCKED_BUILTINS}
_SAFE_BUILTINS["__import__"] = _guarded_import


# -- the child: runs one verifier on responses[start:], then is killed ------------------


def _err(prefix: str, kind: str, message: str) -> bytes:
    return (prefix + json.dumps({"k": kind, "m": message[:MSG_MAX]}) + "\n").encode()


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001 - hostile __str__
        text = "<unprintable>"
    return f"{type(exc).__name__}: {text}"


def _child_uid() -> int | None:
    """The uid this child drops to (one per child: no peer to signal), or None when it keeps its own."""
    uid_base, uid_span = CONFIG.get("uid_base"), CONFIG.get("uid_span")
    if uid_base is not None and os.getuid() == 0:
        return uid_base + int.from_bytes(os.urandom(4), "little") % uid_span
    return None


CLONE_NEWNS, CLONE_NEWIPC = 0x00020000, 0x08000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_RDONLY = 2, 4, 8, 1
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18


def _ipc_limit_writes(max_bytes: int) -> tuple[tuple[str, bytes], ...]:
    """Small SysV limits for each fresh IPC namespace: segments are not charged to RLIMIT_AS, so they
    get the scratch tmpfs's size in all."""
    return tuple((f"/proc/sys/kernel/{name}", str(value).encode()) for name, value in (
        ("shmmax", max_bytes), ("shmall", max(1, max_bytes // 4096)), ("shmmni", 16), ("msgmni", 16),
        ("sem", "250 1024 32 16")))


_IPC_LIMITS = _ipc_limit_writes(SCRATCH["bytes"]) if NAMESPACES else ()
#: bwrap's /dev is one tmpfs per zygote: as root a child (its own uid) cannot write its /dev/shm, but as a
#: non-root user the children own it, so a POSIX shm file one verifier made was seen by the next
#: (tests/sandbox/test_non_root.py). Each child mounts an empty read-only tmpfs there (it has no
#: capability left to remount it).
_SHM_DIR = b"/dev/shm" if NAMESPACES and os.path.isdir("/dev/shm") else None
_SCRATCH_OPTS = (f"size={SCRATCH['bytes']},nr_inodes={SCRATCH['inodes']},mode=1777" if NAMESPACES else "")


def _private_namespaces(uid: int | None) -> None:
    """A mount and an IPC namespace of this child's own, with a fresh tmpfs scratch (bwrap only)."""
    libc = _LIBC
    assert libc is not None
    libc.check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    libc.check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _ipc_limits()
    owner = uid if uid is not None else os.getuid()
    opts = f"{_SCRATCH_OPTS},uid={owner},gid={owner}".encode()
    libc.check(libc.mount(b"tmpfs", SCRATCH["path"].encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts), "mount scratch")
    if _SHM_DIR is not None:  # an empty, read-only /dev/shm of this child's own (see _SHM_DIR)
        libc.check(libc.mount(b"tmpfs", _SHM_DIR, b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                              b"size=4k,nr_inodes=2,mode=0755"), "mount /dev/shm")
    for stash, target in SCRATCH.get("rebind", ()):  # an interpreter under /tmp: back, read-only
        os.makedirs(target, mode=0o755, exist_ok=True)
        libc.check(libc.mount(stash.encode(), target.encode(), None, MS_BIND | MS_REC, None), f"bind {target}")
        libc.check(libc.mount(b"none", target.encode(), None,
                              MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
                   f"remount {target} read-only")


def _ipc_limits() -> None:
    """Write :data:`_IPC_LIMITS` into this child's IPC namespace (plain ``os`` calls: no file objects).
    Best effort (a read-only /proc/sys keeps the defaults; the namespace still dies with the child)."""
    for path, value in _IPC_LIMITS:
        try:
            fd = os.open(path, os.O_WRONLY)
        except OSError:
            continue
        try:
            os.write(fd, value)
        except OSError:
            pass
        finally:
            os.close(fd)


def _drop_caps() -> None:
    """No capability left in this child (capset with empty sets; a non-root bwrap zygote keeps
    CAP_SYS_ADMIN in its user namespace only to give each child its own namespaces)."""
    assert _LIBC is not None
    _LIBC.check(_LIBC.capset(*_LIBC.cap_args), "capset")


def _private_dir(uid: int | None) -> str:
    """rlimits: a fresh scratch directory per child inside the pool's private base directory."""
    path = os.path.join(SCRATCH["base"], f"c{os.getpid()}")
    os.mkdir(path, 0o700)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def _child_setup(uid: int | None) -> str | None:
    """What a spare child does before it sees any request: namespaces or scratch dir, uid (picked by
    the zygote, which cleans up after it), caps, rlimits (all but RLIMIT_CPU, which depends on the
    request). Returns the scratch dir."""
    scratch = None
    if NAMESPACES:
        _private_namespaces(uid)
        scratch = SCRATCH["path"]
    elif SCRATCH is not None:
        scratch = _private_dir(uid)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if NAMESPACES and os.getuid() != 0:
        _drop_caps()
    if sys.platform.startswith("linux"):
        _PRCTL(PR_SET_DUMPABLE, 0)
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)
    for res, value in _LIMITS:
        _set_limit(res, value)
    return scratch


#: The children's rlimits, resolved once in the zygote (a child that looked them up paid for it).
_LIMITS = tuple((getattr(resource, name), int(value)) for name, value in CONFIG["limits"].items())


def _set_limit(res: int, value: int) -> None:
    try:
        resource.setrlimit(res, (value, value))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(res)
        if hard == resource.RLIM_INFINITY or value <= hard:
            resource.setrlimit(res, (value, hard))


def _cpu_limit(responses_left: int) -> int:
    """RLIMIT_CPU of a child with ``responses_left`` responses to go: the zygote's per-response CPU
    budget for each of them and the module body, plus what it used already, plus slack. Only code
    the zygote cannot watch ever meets it (SIGKILL; the zygote then reads the rusage: a timeout)."""
    return int(time.process_time() + TIMEOUT_S * (responses_left + 1)) + 2


#: Trusted warm-up the ZYGOTE runs before it forks any child (never a child: that cost would be on
#: every batch). Python 3.11 counts calls into a code object and rewrites ("quickens") its bytecode
#: in place after a few of them: a code object the zygote ran only once or twice is written to by
#: the first call in every child, which copies its page (copy on write). Running the paths every
#: verifier takes (guarded import, compile, the regex compiler on varied patterns, json, str
#: methods, the reply helpers) a dozen times here quickens them once for all children: measured in
#: bwrap, a child's compile + module body + first call fell from 2.05 ms of CPU (309 page faults)
#: to 0.28 ms (72), and the spare's own warm-up (2.2 ms a batch) is gone (bench/RESULTS.md).
WARM_UP = (
    "import re, json, math, string, unicodedata\n"
    "from collections import Counter\n"
    "from typing import List\n"
    "WORD = re.compile(r'[а-яёa-z]+', re.IGNORECASE)\n"
    "PATTERN = re.compile(r'^(?:\\s*[-*\\d]+[.)]?\\s+\\S.*)$', re.MULTILINE)\n"
    "def _words(text: str) -> List[str]:\n"
    "    return WORD.findall(text.lower())\n"
    "def evaluate(response):\n"
    "    words = _words(response)\n"
    "    counts = Counter(words)\n"
    "    lines = [line.strip() for line in response.splitlines() if line.strip()]\n"
    "    sentences = [s for s in re.split(r'(?<=[.!?…])\\s+', response.strip()) if s]\n"
    "    bullets = PATTERN.findall(response)\n"
    "    upper = sum(1 for ch in response if ch.isupper())\n"
    "    data = json.loads(json.dumps({'n': len(words), 'top': counts.most_common(2)}, ensure_ascii=False))\n"
    "    cats = {unicodedata.category(ch) for ch in response[:50]}\n"
    "    if re.search(r'\\d{2,}', response) and string.punctuation and math.isfinite(len(lines)):\n"
    "        pass\n"
    "    return len(words) > 1 and data['n'] == len(words) and len(sentences) >= 0 and upper >= 0 \\\n"
    "        and len(bullets) >= 0 and bool(cats) and response.endswith(('.', '!', '?', 'ы'))\n"
    "if __name__ == '__main__':\n"
    "    print(evaluate('x'))\n"
)
WARM_UP_TEXTS = ("Пример ответа, в котором есть слова. Второе предложение!", "ещё один пример: 1. пункт\n2. пункт",
                 "", "Short English answer, 42 words?", 7)
#: Regex shapes verifiers write (classes, groups, quantifiers, alternation, anchors, lookarounds),
#: compiled with varied literals so the regex compiler's code, not re's cache, is what warms up.
WARM_UP_PATTERNS = (r"\b[А-ЯЁ][а-яё]{%d,}\b", r"^(?:да|нет|%d)$", r"(\w+)\s+\1{%d}", r"[.!?]\s*$|\d{%d}",
                    r"(?i)(?<!\w)пример(?:ы|ов)?(?=\W)|x{%d}", r"^\s*[-*•]\s+.{1,%d}$")


def _warm_up() -> None:
    """Run :data:`WARM_UP` through a child's own path, enough times to quicken it (see above)."""
    request = json.dumps({"code": WARM_UP, "responses": list(WARM_UP_TEXTS), "guard": True})
    for round_ in range(12):
        data = json.loads(request)
        namespace: dict[str, object] = {"__name__": "verifier", "__builtins__": _SAFE_BUILTINS}
        exec(compile(data["code"], "<warm-up>", "exec"), namespace)  # noqa: S102 - our own code
        evaluate = namespace["evaluate"]
        for text in data["responses"]:
            _call(evaluate, text)
        _call(_warm_up_raises, round_)
        _err("E", "exception", _describe(ValueError("warm-up")))
        for pattern in WARM_UP_PATTERNS:
            re.compile(pattern % (round_ + 1)).search("Пример ответа 1234.\n- пункт")
    re.purge()  # the warm-up's patterns need not sit in the children's cache


def _warm_up_raises(value: object) -> bool:
    raise ValueError(f"warm-up {value}")


def _read_fd(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _child(go_fd: int, wfd: int, uid: int | None) -> None:
    """Body of a forked child; never returns (``os._exit``: no atexit, no thread joins).

    As a spare it sets itself up (namespaces, uid, limits), then waits for its
    request (``>II`` body length and first response index, then the request JSON) from the
    zygote, and only then runs the verifier. Every line it sends starts with its CPU seconds."""
    write = os.write
    clock = time.process_time

    def send(data: bytes) -> None:
        view = memoryview(b"%.6f " % clock() + data)
        while view:
            view = view[write(wfd, view):]

    try:
        try:
            scratch = _child_setup(uid)
        except BaseException as exc:  # noqa: BLE001 - the zygote turns this into an infrastructure line
            view = memoryview(b"0 Z" + json.dumps({"m": _describe(exc)}).encode()[:MSG_MAX] + b"\n")
            while view:
                view = view[write(wfd, view):]
            os._exit(0)
        send(b"R\n")  # ready: the module body's CPU clock starts at this line's figure
        size, start = struct.unpack(">II", _read_fd(go_fd, 8))
        request = json.loads(_read_fd(go_fd, size))
        os.close(go_fd)
        code, responses, guard = request["code"], request["responses"], bool(request.get("guard", True))
        segments = [int(k) for k in request.get("segments") or [len(responses)]]
        del request
        _set_limit(resource.RLIMIT_CPU, _cpu_limit(len(responses) - start + len(segments)))
        if scratch:
            os.chdir(scratch)
        try:
            compiled = compile(code, "<verifier>", "exec")
        except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
            send(_err("C", "syntax", _describe(exc)))
            os._exit(0)
        begin, ran = 0, False
        for length in segments:  # one call of the pool each: a fresh module state for every one
            end, first = begin + length, max(start, begin)
            begin = end
            if end <= start:
                continue
            if ran:
                gc.collect()  # nothing of the last call's module state outlives it (cycles included)
            fn = _load(compiled, guard, send)
            for response in responses[first:end]:
                send(_call(fn, response))
            del fn
            ran = True
    except BaseException:  # noqa: BLE001 - whatever happens, the zygote sees EOF and says "crash"
        pass
    os._exit(0)


def _load(compiled: types.CodeType, guard: bool, send) -> object:
    """Run the module body in a fresh namespace and return its ``evaluate`` (``K`` sent); on failure
    send the ``C`` line and exit: the zygote answers the rest of this call and goes on in a new child."""
    namespace = {"__name__": "verifier", "__builtins__": _SAFE_BUILTINS if guard else builtins}
    try:
        exec(compiled, namespace)  # noqa: S102 - this is the sandbox
    except MemoryError as exc:
        send(_err("C", "memory", _describe(exc)))
        os._exit(0)
    except BaseException as exc:  # noqa: BLE001 - untrusted module body
        send(_err("C", "exception", "module body: " + _describe(exc)))
        os._exit(0)
    fn = namespace.get("evaluate")
    if not callable(fn):
        send(_err("C", "no_function", "the code defines no callable `evaluate(response)`"))
        os._exit(0)
    send(b"K\n")
    return fn


def _call(fn, response) -> bytes:
    try:
        result = fn(response)
    except MemoryError as exc:
        return _err("E", "memory", _describe(exc))
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


# -- the zygote: fork, watch, check, relay -------------------------------------------------


class _ChildGone(Exception):
    pass


class _ChildTimeout(Exception):
    """The child used its CPU budget (or slept past the wall ceiling): a ``timeout`` verdict."""


class _HostStall(Exception):
    """The child was runnable but got no CPU for the whole wall ceiling: the host's fault, no verdict."""


#: A child's E/C line as the child writes it (``json.dumps`` with ``ensure_ascii``): kind, then the message
#: as a JSON string literal, checked in place (no decoding: the zygote keeps no copy of a message).
_ERROR_LINE = re.compile(rb'[EC]\{"k": "([a-z_]+)", "m": "(?:[^"\\\x00-\x1f\x7f-\xff]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"\}')
_KINDS_B = frozenset(k.encode() for k in ERROR_KINDS)


#: Wiped output buffers of reaped children, reused by the next ones (at most four kept).
_FREE_BUFFERS: list[bytearray] = []


class _ChildOutput:
    """The zygote's end of one child's pipe: ``(cpu, line)`` pairs, each within a CPU budget.

    Lines are memoryviews into a buffer this object owns and zeroes in :meth:`wipe`: a
    verifier's output never becomes a Python object in the zygote."""

    SIZE = MAX_LINE + (1 << 16)

    def __init__(self, fd: int, pid: int) -> None:
        self.fd, self.pid = fd, pid
        # a wiped (all-zero) buffer of an earlier child when there is one: a fresh 128 KiB one per
        # batch cost the zygote ~0.1-0.4 ms of page faults
        self.buf = _FREE_BUFFERS.pop() if _FREE_BUFFERS else bytearray(self.SIZE)
        self.view = memoryview(self.buf)
        self.start = self.end = 0

    def wipe(self) -> None:
        """Zero what was read (the rest of the buffer is zero already: see :meth:`line`). Reply pieces
        not yet written may point into it: they go out first."""
        if _PENDING:
            _flush()
        self.view[:self.end] = bytes(self.end)
        self.start = self.end = 0

    def release(self) -> None:
        """Wipe and hand the buffer to the next child's output (the child is reaped: nothing more comes)."""
        self.wipe()
        if len(_FREE_BUFFERS) < 4:
            _FREE_BUFFERS.append(self.buf)
        self.buf = bytearray()
        self.view = memoryview(self.buf)

    def line(self, mark: float, budget: float = TIMEOUT_S) -> tuple[float, memoryview]:
        """Next line; ``mark`` is the child's CPU seconds when the awaited work began. Raises
        :class:`_ChildTimeout` once the child used ``budget`` CPU seconds past ``mark``."""
        started = time.monotonic()
        wait = min(budget, WALL_CEILING_S)
        while True:
            nl = self.buf.find(b"\n", self.start, self.end)
            if nl >= 0:
                first, self.start = self.start, nl + 1
                space = self.buf.find(b" ", first, nl)
                if space < 0 or space - first > 32:
                    raise _ChildGone("protocol: unexpected reply (no CPU figure)")
                try:
                    cpu = float(bytes(self.view[first:space]))  # a number: nothing of the verifier's data
                except ValueError:
                    raise _ChildGone("protocol: unexpected reply (bad CPU figure)") from None
                return cpu, self.view[space + 1:nl]
            if self.end - self.start > MAX_LINE:
                raise _ChildGone("protocol: reply line too long")
            if self.start == self.end and not _PENDING:
                self.wipe()
            elif self.end > self.SIZE - (1 << 14):  # keep room: move the partial line to the front
                if _PENDING:
                    _flush()  # they may point into what moves
                size = self.end - self.start
                self.view[:size] = self.view[self.start:self.end]
                self.view[size:self.end] = bytes(self.end - size)
                self.start, self.end = 0, size
            if _PENDING and not select.select([self.fd], [], [], 0)[0]:
                _flush()  # nothing more from the child yet: the parent gets what is ready before we wait
            if not select.select([self.fd], [], [], wait)[0]:
                state, cpu = _proc_stat(self.pid)
                used = cpu - mark
                if used >= budget:
                    raise _ChildTimeout("used up its CPU budget")
                waited = time.monotonic() - started
                if waited >= WALL_CEILING_S:
                    if state in ("S", "T", "t"):  # asleep on purpose (or stopped by itself)
                        raise _ChildTimeout(f"blocked for {WALL_CEILING_S:.0f}s without using its CPU budget")
                    raise _HostStall(f"the host gave the verifier {used:.2f}s of CPU in {waited:.1f}s")
                # CPU time never runs faster than the wall clock: nothing to check before this
                wait = max(0.005, min(budget - used, WALL_CEILING_S - waited))
                continue
            got = os.readv(self.fd, [self.view[self.end:]])
            if not got:
                raise _ChildGone("eof")
            self.end += got


class _Child:
    """One forked child (started as a spare that sets itself up) and the zygote's ends of its pipes."""

    def __init__(self) -> None:
        go_r, go_w = os.pipe()
        rfd, wfd = os.pipe()
        uid = self.uid = _child_uid()
        _wipe_outputs()
        pid = _fork()
        if pid == 0:  # child: keep 0-2 (/dev/null), its request pipe's read end and its reply pipe's write end
            for view in _INPUT:  # forked during a batch (the next spare): its copy of that batch's input goes
                view[:] = bytes(len(view))
            low, high = sorted((go_r, wfd))
            os.closerange(3, low)
            os.closerange(low + 1, high)
            os.closerange(high + 1, 1 << 20)
            _child(go_r, wfd, uid)
        os.close(go_r)
        os.close(wfd)
        self.pid, self.go_w, self.out = pid, go_w, _ChildOutput(rfd, pid)
        self.how: str | None = None
        self.cpu_killed = False  # reaped after RLIMIT_CPU's SIGKILL: a timeout, not a crash
        self.killed = False

    def go(self, body: memoryview, start: int) -> bool:
        """Hand the child its request (straight from the zygote's request buffer); False when it is gone."""
        try:
            for data in (memoryview(struct.pack(">II", len(body), start)), body):
                while data:
                    data = data[os.write(self.go_w, data):]
            return True
        except OSError:
            return False
        finally:
            os.close(self.go_w)
            self.go_w = -1

    def kill(self) -> None:
        """SIGKILL without waiting; the child is reaped later, off every verifier's clock."""
        if self.how is None and not self.killed:
            self.killed = True
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def reap(self, grace_s: float = 0.0, block: bool = True) -> str | None:
        """SIGKILL the child (done or not) and reap it; its end in words (None: not yet gone and
        ``block`` is False). ``grace_s`` first waits for a child that is already dying, so the
        words name its real end."""
        if self.how is not None:
            return self.how
        if self.go_w >= 0:
            os.close(self.go_w)
            self.go_w = -1
        got = 0
        deadline = time.monotonic() + grace_s
        while grace_s and time.monotonic() < deadline:
            got, status, usage = os.wait4(self.pid, os.WNOHANG)
            if got:
                break
            time.sleep(0.002)
        if not got:
            if not block:
                self.kill()
                got, status, usage = os.wait4(self.pid, os.WNOHANG)
                if not got:
                    return None
            else:
                self.kill()
                _, status, usage = os.wait4(self.pid, 0)
        os.close(self.out.fd)
        self.out.release()
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            self.cpu_killed = sig == signal.SIGKILL and not self.killed and \
                usage.ru_utime + usage.ru_stime >= TIMEOUT_S  # RLIMIT_CPU's kill (the verifier's own CPU)
            try:
                self.how = f"signal {signal.Signals(sig).name}"
            except ValueError:
                self.how = f"signal {sig}"
        else:
            self.how = f"exit code {os.WEXITSTATUS(status)}"
        _after_child(self.pid, self.uid)
        return self.how


def _after_child(pid: int, uid: int | None) -> None:
    """rlimits only (bwrap: the child's namespaces are gone already): remove the child's scratch
    directory and, when it ran under a uid of its own, what it left in the host's shared places."""
    if NAMESPACES or SCRATCH is None:
        return
    if uid is not None:
        _remove_ipc_of(uid)
        _remove_files_of(uid)
    path = os.path.join(SCRATCH["base"], f"c{pid}")
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    _remove_later(path)


#: /proc/sysvipc table -> (column of the id, column of the creator's uid, IPC_RMID call)
_SYSV_TABLES = (("shm", 1, 9), ("sem", 1, 6), ("msg", 1, 9))
IPC_RMID = 0
#: World-writable places of the host a verifier under rlimits can leave entries in.
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def _remove_ipc_of(uid: int) -> None:
    """Remove every SysV shared-memory segment, semaphore set and message queue the child created
    (creator uid: its own, which it cannot change; the owner uid it can). rlimits has no IPC
    namespace: without this a later verifier attaches to what an earlier one left, and segments
    outlive the pool. Run after the child is dead, before the next batch's verifier starts."""
    if _LIBC is None:
        return
    for table, id_col, cuid_col in _SYSV_TABLES:
        try:
            with open(f"/proc/sysvipc/{table}", "rb") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > cuid_col and int(fields[cuid_col]) == uid:
                ident = int(fields[id_col])
                if table == "shm":
                    _LIBC.shmctl(ident, IPC_RMID, None)
                elif table == "sem":
                    _LIBC.semctl(ident, 0, IPC_RMID)
                else:
                    _LIBC.msgctl(ident, IPC_RMID, None)


def _remove_files_of(uid: int) -> None:
    """Entries the child made in the host's world-writable directories (its own uid owns them), moved
    out of sight at once and deleted by a detached process: an inode flood is gone before the next
    verifier starts, and its deletion runs on nobody's clock."""
    for top in SHARED_DIRS:
        try:
            entries = [e for e in os.scandir(top) if e.stat(follow_symlinks=False).st_uid == uid]
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _remove_later(entry.path)
            else:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass


_TRASH_SEQ = [0]


def _remove_later(path: str) -> None:
    """A non-empty scratch dir is renamed away and removed by a detached grandchild: the zygote
    (and so the next verifier) does not wait for a flood of files to be deleted."""
    _TRASH_SEQ[0] += 1
    trash = os.path.join(SCRATCH["base"], f"trash-{os.getpid()}-{_TRASH_SEQ[0]}-" + os.path.basename(path))
    try:
        os.rename(path, trash)
    except OSError:  # another filesystem (/dev/shm): delete it in the detached process where it is
        trash = path
    pid = os.fork()
    if pid == 0:
        try:
            if os.fork() == 0:
                import shutil

                for root, dirs, _ in os.walk(trash):
                    for d in dirs:
                        try:
                            os.chmod(os.path.join(root, d), 0o700)
                        except OSError:
                            pass
                shutil.rmtree(trash, ignore_errors=True)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _checked_error(line: memoryview) -> tuple[list, bytes] | None:
    """The pieces to relay for an E/C line from a child (``[b"E", payload view]``) and its kind, or
    None when malformed. Checked in place: the message never becomes an object of the zygote."""
    m = _ERROR_LINE.fullmatch(line)
    if m is None or m.group(1) not in _KINDS_B:
        return None
    return [b"E", line[1:]], bytes(m.group(1))


#: A probe call's first verdict that answers the whole call (see ``SandboxPool.run_probed``): the
#: code cannot load or run at all, so every other response would only cost a timeout or a crash.
_FATAL_KINDS = frozenset({b"syntax", b"no_function", b"memory", b"crash"})


def _error(kind: str, message: str) -> bytes:
    return b"E" + json.dumps({"k": kind, "m": message[:MSG_MAX]}).encode()


def _timeout(where: str, why: str) -> bytes:
    return b"X" + json.dumps({"m": f"{where} {why} (limit {TIMEOUT_S}s of its own CPU time)"}).encode()


class _Infrastructure(Exception):
    """No verdict for reasons of the host: the whole batch is answered with one ``I`` line."""


def _is(line: memoryview, tag: bytes) -> bool:
    """``line`` is exactly the one-byte ``tag`` (compared without copying the line)."""
    return len(line) == 1 and line[0] == tag[0]


def _ready(child: "_Child") -> float:
    """Wait for the child's ``R`` line (set up; usually there already, written while the
    zygote waited for the request) and return its CPU figure: where the module body's budget starts."""
    try:
        cpu, line = child.out.line(0.0, budget=float("inf"))  # trusted setup: only the wall ceiling applies
    except (_ChildGone, _ChildTimeout, _HostStall) as exc:
        child.kill()
        _DYING.append(child)
        raise _Infrastructure(f"a verifier process did not get ready: {exc}") from exc
    if not _is(line, b"R"):
        child.kill()
        _DYING.append(child)
        raise _Infrastructure(f"verifier process setup failed: {bytes(line[1:MSG_MAX]).decode('utf-8', 'replace')}")
    return cpu


def _run_batch(body: memoryview, n: int, spare: "_Child | None", emit, segments: list | None = None,
               probes: frozenset = frozenset()) -> None:
    """Verdict lines for every response of the request ``body`` (``n`` responses in ``segments``,
    one per pool call, each with a fresh module state), the first child being the spare. A crash,
    timeout or protocol breach of the verifier costs one verdict (the rest of its call's when it
    happens before the module body finished). ``probes``: indices of segments whose single verdict,
    when fatal, also answers the next segment (which is then not run). Raises :class:`_Infrastructure`
    when the host kept a verdict from being reached."""
    seg_end: list[int] = []  # end (exclusive) of the segment of each response
    probe_ends = set()
    begin = 0
    for index, length in enumerate(segments or [n]):
        seg_end.extend([begin + length] * length)
        begin += length
        if index in probes:
            probe_ends.add(begin)
    i = 0
    while i < n:
        _reap_dying(block=len(_DYING) > 32)
        try:
            child, spare = spare or _Child(), None
        except OSError as exc:  # fork failed: the host's process table or memory, not the verifier
            raise _Infrastructure(f"cannot fork a verifier process: {exc}") from exc
        mark = _ready(child)
        if not child.go(body, i):
            child.reap()
            child = _Child()
            mark = _ready(child)
            child.go(body, i)
        if _NEXT[0] is None:
            # the next batch's spare, forked while this child runs the verifier: the fork is off the
            # critical path (the zygote would otherwise fork it after the end marker)
            try:
                _NEXT[0] = _Child()
            except OSError:
                pass
        started = False
        try:
            while i < n:
                count = 1 if started else seg_end[i] - i
                fatal = stop = True
                try:
                    cpu, line = child.out.line(mark)
                    mark = cpu
                except _ChildTimeout as exc:
                    pieces = [_timeout("evaluate" if started else "module body", str(exc))]
                except _HostStall as exc:
                    raise _Infrastructure(str(exc)) from exc
                except _ChildGone as exc:
                    if str(exc).startswith("protocol"):
                        pieces, fatal = [_error("protocol", str(exc))], False
                    else:
                        how = child.reap(grace_s=0.5)
                        if child.cpu_killed:
                            pieces = [_timeout("evaluate" if started else "module body", "hit RLIMIT_CPU")]
                        else:
                            pieces = [_error("crash", f"worker died ({how})")]
                else:
                    tag = bytes(line[:1])
                    checked = _checked_error(line) if tag in (b"C", b"E") else None
                    if not started and _is(line, b"K"):
                        started = True
                        continue
                    if not started and tag == b"C" and checked is not None:
                        pieces, fatal = checked[0], checked[1] in _FATAL_KINDS
                    elif started and (_is(line, b"T") or _is(line, b"F")):
                        pieces, fatal, stop = [tag], False, False
                    elif started and tag == b"E" and checked is not None:
                        pieces, fatal, stop = checked[0], checked[1] in _FATAL_KINDS, False
                    else:
                        pieces, fatal = [_error("protocol", f"unexpected reply with tag {tag!r} ({len(line)} bytes)")], False
                emit([pieces] * count)
                i += count
                if i == seg_end[i - 1]:  # this call is answered: the next one starts with a fresh module
                    started = False
                    if i in probe_ends and i < n and fatal:
                        skip = seg_end[i] - i
                        emit([pieces] * skip)
                        i, stop = i + skip, True
                if stop:
                    break
        finally:
            child.kill()
            _DYING.append(child)
            _UNWIPED.append(child.out)  # wiped once its verdict lines are written (they point into it)


#: The spare forked during a batch for the next one, and the current batch's request body: a child
#: forked during the batch zeroes its copy of that body before anything else (nothing of an earlier
#: batch's inputs is in a verifier's memory).
_NEXT: list["_Child | None"] = [None]
_INPUT: list[memoryview] = []
#: Output buffers of this batch's children, wiped after the end marker is written (see ``_PENDING``)
#: or before any fork, whichever comes first: no child is forked with another's output in its memory.
_UNWIPED: list["_ChildOutput"] = []


def _wipe_outputs() -> None:
    if _UNWIPED:
        _flush()
        for out in _UNWIPED:
            out.wipe()
        _UNWIPED.clear()

#: Children killed at the end of a batch, reaped without waiting: their teardown (a namespace, a
#: tmpfs full of files) runs in the kernel on the dead child's account, on no verifier's clock.
_DYING: list[_Child] = []


def _reap_dying(block: bool = False) -> None:
    still = []
    for child in _DYING:
        if child.reap(block=block) is None:
            still.append(child)
    _DYING[:] = still


def _read_exact(n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(_REQ, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(_REP, view):]


def _read_into(view: memoryview) -> bool:
    """Fill ``view`` from the request pipe; False on end of file."""
    pos = 0
    while pos < len(view):
        got = os.readv(_REQ, [view[pos:]])
        if not got:
            return False
        pos += got
    return True


#: Reply pieces for the parent not written yet: verdict lines go out together, when the zygote is about to
#: wait for its child or with the end marker, so the parent wakes once per burst, not once per line.
_PENDING: list = []


def _flush(*tail: bytes) -> None:
    pieces = [*_PENDING, *tail]
    _PENDING.clear()
    if pieces:
        _writev(pieces)


def _writev(pieces: list) -> None:
    total = sum(len(p) for p in pieces)
    done = os.writev(_REP, pieces)
    if done < total:  # a partial write (rare on a blocking pipe): finish piece by piece, without copies
        for piece in pieces:
            view = memoryview(piece)
            if done >= len(view):
                done -= len(view)
                continue
            view, done = view[done:], 0
            while view:
                view = view[os.write(_REP, view):]


def main() -> None:
    for name in sorted(ALLOWED):
        if name in sys.modules:
            _view(sys.modules[name])
    try:
        _warm_up()
    except Exception:  # noqa: BLE001 - a warm-up problem costs speed, never a verdict
        pass
    gc.collect()
    gc.freeze()  # children share the preloaded heap; the collector need not touch (and copy) it
    body_buf = bytearray(1 << 16)  # the request body: passed on to the child, zeroed after the batch
    spare: _Child | None = _Child()
    while True:
        header = _read_exact(4)
        if header is None:
            return
        head = _read_exact(struct.unpack(">I", header)[0])
        size_b = _read_exact(4) if head is not None else None
        if head is None or size_b is None:
            return
        request = json.loads(head)
        nonce, n = request["nonce"].encode(), int(request["n"])
        size = struct.unpack(">I", size_b)[0]
        if size > len(body_buf):
            body_buf = bytearray(size)
        body = memoryview(body_buf)[:size]
        if not _read_into(body):
            return
        for name in request.get("lazy", ()):
            if name in LAZY and name not in sys.modules:
                if spare is not None:
                    spare.reap()  # forked before the library was loaded: stale
                _preload(name)
                if name in sys.modules:
                    _view(sys.modules[name])
                gc.freeze()
                _RAW_FORK[0] = _RAW_FORK[0] and _single_threaded()
                spare = _Child()

        def emit(lines: list, nonce: bytes = nonce) -> None:
            _PENDING.extend(piece for pieces in lines for piece in (nonce, *pieces, b"\n"))

        segments = [int(k) for k in request.get("segments") or [n]]
        probes = frozenset(int(k) for k in request.get("probes") or ())
        if sum(segments) != n or min(segments) < 1:
            segments = [n]
        _INPUT[:] = [body]
        try:
            _run_batch(body, n, spare, emit, segments, probes)
        except _Infrastructure as exc:
            emit([[b"I" + json.dumps({"m": str(exc)[:MSG_MAX]}).encode()]])
        body[:] = bytes(size)  # no later spare is forked with this batch's inputs in its memory
        _INPUT.clear()
        del body
        _flush(nonce + b"D\n")
        _wipe_outputs()
        # rlimits under uids of their own: the batch's children are reaped (and what they left in the
        # host's IPC tables and shared directories removed) before the next verifier can start
        _reap_dying(block=CLEAN_AFTER_BATCH)
        spare, _NEXT[0] = _NEXT[0], None
        if spare is None:
            try:
                spare = _Child()  # sets itself up while the parent reads the verdicts
            except OSError:
                spare = None


if __name__ == "__main__":
    main()
