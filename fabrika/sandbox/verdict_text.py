"""Verdict messages that carry no host data: clipped, sanitised, stripped of paths.

A verdict's message is text a verifier controls: ``raise ValueError(secret)`` puts
anything the verifier could read into it, and the consistency stage stores it in its
rows (and reports). So before a message is stored it goes through :func:`clean_message`:

* control characters (but tab/newline, which become spaces) and lone surrogates go;
* absolute paths (``/etc/passwd``, ``/work/run/cache.sqlite``, ``C:\\Users\\…``) become ``<path>``;
* what looks like host data becomes a placeholder: ``passwd``/``group`` lines
  (``root:x:0:0:…``) ``<passwd-line>``, ``NAME=value`` environment assignments
  ``NAME=<env>``, long secret-looking tokens (``sk-…``, hex/base64 runs) ``<secret>``;
* the result is clipped to :data:`MESSAGE_CHARS` characters.

Only a type name and such a message ever leave the sandbox (:func:`describe_exception`
is what a worker may call instead of formatting the exception itself): never the
exception object, its ``args``, ``filename``, ``doc`` or ``object`` attributes.
Pure functions, standard library only.
"""

from __future__ import annotations

import re
import unicodedata

MESSAGE_CHARS = 300

_PASSWD_LINE = re.compile(r"[A-Za-z_][\w.-]*:[^:\s]*:\d+:\d+:[^\n]*")
_GROUP_LINE = re.compile(r"\b[A-Za-z_][\w.-]*:[x*!]?:\d+:[\w,-]*")
_ENV_ASSIGNMENT = re.compile(r"\b([A-Z][A-Z0-9_]{2,})=(\"[^\"]*\"|'[^']*'|\S+)")
_SECRET = re.compile(r"\b(?:sk|pk|rk|ghp|gho|xox[abp]|AKIA)[-_A-Za-z0-9]{8,}|\b[A-Fa-f0-9]{32,}\b|"
                     r"\b[A-Za-z0-9+/_-]{40,}={0,2}")
_POSIX_PATH = re.compile(r"(?<![\w.:/])(?:~|\.{1,2})?/(?:[^\s/'\"<>|:;,()\[\]{}]+/)*[^\s/'\"<>|:;,()\[\]{}]*")
_WINDOWS_PATH = re.compile(r"\b[A-Za-z]:\\[^\s'\"<>|]*")
_FILE_URL = re.compile(r"\bfile://\S*")
_SPACES = re.compile(r"[ \t]{2,}")


def _printable(text: str) -> str:
    out = []
    for ch in text:
        if ch in "\t\n\r":
            out.append(" ")
        elif 0xD800 <= ord(ch) <= 0xDFFF or unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Cn"):
            continue
        else:
            out.append(ch)
    return "".join(out)


def _path(match: re.Match[str]) -> str:
    text = match.group()
    return text if text in ("/", "//") or text.count("/") == 1 and len(text) <= 2 else "<path>"


def clean_message(message: object, limit: int = MESSAGE_CHARS) -> str:
    """``message`` as text safe to store: see the module docstring. Never raises."""
    try:
        text = message if isinstance(message, str) else str(message)
    except Exception:  # noqa: BLE001 - a hostile __str__
        return "<unprintable>"
    text = text[: limit * 8]  # bound the work; what survives is clipped below
    text = text.encode("utf-8", "replace").decode("utf-8", "replace")
    text = _PASSWD_LINE.sub("<passwd-line>", text)
    text = _GROUP_LINE.sub("<group-line>", text)
    text = _FILE_URL.sub("<path>", text)
    text = _WINDOWS_PATH.sub("<path>", text)
    text = _POSIX_PATH.sub(_path, text)
    text = _ENV_ASSIGNMENT.sub(lambda m: f"{m.group(1)}=<env>", text)
    text = _SECRET.sub("<secret>", text)
    text = _SPACES.sub(" ", _printable(text)).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def describe_exception(exc: BaseException, limit: int = MESSAGE_CHARS) -> str:
    """``"TypeName: cleaned message"``: all of an exception that may leave the sandbox."""
    try:
        name = type(exc).__name__
    except Exception:  # noqa: BLE001
        name = "Exception"
    name = re.sub(r"[^\w.]", "", str(name))[:60] or "Exception"
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001 - hostile __str__
        text = "<unprintable>"
    return clean_message(f"{name}: {text}" if text else name, limit)


def clean_verdict_error(kind: str | None, message: str | None, limit: int = MESSAGE_CHARS) -> str:
    """The ``"kind: message"`` text the consistency stage stores for a failing verifier."""
    kind_text = re.sub(r"[^\w]", "", str(kind or "error"))[:32] or "error"
    return clean_message(f"{kind_text}: {message or ''}".rstrip(": ").rstrip(), limit)
