"""``json.dumps(value, ensure_ascii=False, indent=1)`` without the stdlib's slow path.

With ``indent`` set the stdlib never uses its C encoder: it walks the value with
nested Python generators, which was the largest single CPU cost of rendering FC
prompts (tool schemas, goal cards and plans, re-rendered on every turn). This
module writes the same bytes with one plain recursion and the stdlib's own C
primitives (``encode_basestring``, ``float.__repr__``), mirroring
``json.encoder._make_iterencode`` branch for branch. Anything outside plain JSON
data (a non-``str`` key, a custom object, a circular structure) goes to the
stdlib itself, so the output — or the error — is always the stdlib's.

:func:`dumps_sorted_indent2` is the same for the run manifest's form (``indent=2``,
``sort_keys=True``, ``default=str``), written after every stage event.

:func:`dumps_compact` is ``json.dumps(value, ensure_ascii=False, separators=(",", ":"),
default=str)`` — the form of every nested row value, journal record and request body the store
writes — through orjson where :func:`plain` proves orjson writes the same bytes (``str`` keys,
``str``/``int``/``bool``/``None``, lists, tuples and dicts, floats whose ``repr`` has no exponent;
orjson writes ``1e-7`` where Python writes ``1e-07``, and ``null`` for NaN); anything else, and a
lone surrogate, takes the stdlib, so the text (and any error) is always the stdlib's.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring  # the C function where the stdlib has it
from typing import Any, Callable

import orjson

__all__ = ["Rendered", "dumps_compact", "dumps_compact_bytes", "dumps_indent1", "dumps_sorted_indent2", "plain"]

_INF = float("inf")
_INDENT = ["\n" + " " * i for i in range(202)]
_INDENT2 = ["\n" + "  " * i for i in range(202)]
_JSON_TYPES = (str, int, float, list, tuple, dict)
_MAX_DEPTH = 200  # deeper (or circular) data goes to the stdlib, with its own handling and errors


class _Unusual(Exception):
    """A value this encoder leaves to the stdlib."""


class Rendered:
    """A value :func:`dumps_indent1` writes once per nesting depth and then reuses (a tool schema sent
    on every judge round): the text is exactly that of the value itself. Read only — the value must
    not change once wrapped. Only :func:`dumps_indent1` knows it (the stdlib path unwraps it)."""

    __slots__ = ("_text", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self._text: dict[int, str] = {}

    def at(self, depth: int) -> str:
        got = self._text.get(depth)
        if got is None:
            got = self._text[depth] = _enc(self.value, depth)
        return got


def _encoder(indents: list[str], sort_keys: bool, default_str: bool,
             rendered: bool = False) -> Callable[[Any, int], str]:
    """One plain recursion mirroring ``json.encoder._make_iterencode`` for the given indent table,
    ``sort_keys`` and ``default=str`` (the two forms below share it; each is built once); ``rendered``:
    a :class:`Rendered` writes its cached text."""

    def enc(o: Any, depth: int) -> str:
        t = type(o)
        if t is str:
            return encode_basestring(o)
        if rendered and t is Rendered:
            return o.at(depth)
        if t is dict:
            if not o:
                return "{}"
            if depth >= _MAX_DEPTH:
                raise _Unusual
            for k in o:
                if type(k) is not str:
                    raise _Unusual
            inner = indents[depth + 1]
            return "{" + inner + ("," + inner).join(
                [encode_basestring(k) + ": " + (encode_basestring(v) if type(v) is str else enc(v, depth + 1))
                 for k, v in (sorted(o.items()) if sort_keys else o.items())]) + indents[depth] + "}"
        if t is list or t is tuple:
            if not o:
                return "[]"
            if depth >= _MAX_DEPTH:
                raise _Unusual
            inner = indents[depth + 1]
            return "[" + inner + ("," + inner).join(
                [encode_basestring(v) if type(v) is str else enc(v, depth + 1) for v in o]) + indents[depth] + "]"
        if o is None:
            return "null"
        if o is True:
            return "true"
        if o is False:
            return "false"
        if t is int:
            return int.__repr__(o)
        if t is float:
            if o != o:
                return "NaN"
            if o == _INF:
                return "Infinity"
            if o == -_INF:
                return "-Infinity"
            return float.__repr__(o)
        if not default_str or isinstance(o, _JSON_TYPES):
            raise _Unusual  # subclasses of str/int/float/dict/list, custom objects: the stdlib decides
        return encode_basestring(str(o))  # what ``default=str`` gives (str() never returns a non-str)

    return enc


_enc = _encoder(_INDENT, sort_keys=False, default_str=False, rendered=True)
_enc2 = _encoder(_INDENT2, sort_keys=True, default_str=True)


def dumps_indent1(value: Any) -> str:
    """Exactly ``json.dumps(value, ensure_ascii=False, indent=1)``, ~3x faster on plain JSON data (a
    :class:`Rendered` inside counts as its value)."""
    try:
        return _enc(value, 0)
    except _Unusual:
        return json.dumps(value, ensure_ascii=False, indent=1, default=_unwrap)


def _unwrap(o: Any) -> Any:
    """The stdlib's ``default`` for :func:`dumps_indent1`: a :class:`Rendered` is its value; anything else
    gets the stdlib's own error."""
    if type(o) is Rendered:
        return o.value
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def dumps_sorted_indent2(value: Any) -> str:
    """Exactly ``json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)`` (the run
    manifest, written after every stage event), without the stdlib's generator walk."""
    try:
        return _enc2(value, 0)
    except _Unusual:
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


_PLAIN_DEPTH = 64  # deeper data goes to the stdlib (its own recursion handling)


def plain(o: Any, depth: int = 0) -> bool:
    """True when orjson writes ``o`` exactly as the stdlib's compact ``ensure_ascii=False`` JSON does
    (see module docs); strings, the bulk of the bytes, are not read."""
    t = type(o)
    if t is str or o is None or o is True or o is False:
        return True
    if depth > _PLAIN_DEPTH:
        return False
    if t is dict:
        for k, v in o.items():
            if type(k) is not str:
                return False
            if type(v) is not str and not plain(v, depth + 1):
                return False
        return True
    if t is list or t is tuple:
        for v in o:
            if type(v) is not str and not plain(v, depth + 1):
                return False
        return True
    if t is int:
        return -(1 << 63) <= o < (1 << 64)
    if t is float:
        a = abs(o)
        return a == 0.0 or 1e-4 <= a < 1e16  # repr without an exponent; NaN and infinities fail both
    return False


def _refuse(o: Any) -> Any:
    raise TypeError


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
_COMPACT_STRICT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def dumps_compact_bytes(value: Any, *, default_str: bool = True) -> bytes:
    """UTF-8 of :func:`dumps_compact` (no decode and re-encode on the orjson path)."""
    if plain(value):
        try:
            return orjson.dumps(value, default=_refuse)
        except (TypeError, orjson.JSONEncodeError):  # a lone surrogate: the stdlib says what is wrong
            pass
    return (_COMPACT if default_str else _COMPACT_STRICT)(value).encode("utf-8")


def dumps_compact(value: Any, *, default_str: bool = True) -> str:
    """Exactly ``json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)`` (keys in
    their own order); ``default_str=False`` leaves out ``default=str``, so an odd value raises the
    stdlib's ``TypeError``."""
    if plain(value):
        try:
            return orjson.dumps(value, default=_refuse).decode("utf-8")
        except (TypeError, orjson.JSONEncodeError):
            pass
    return (_COMPACT if default_str else _COMPACT_STRICT)(value)
