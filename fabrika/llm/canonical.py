"""The cache key's JSON text, byte for byte the stdlib's, at orjson speed where that is provably the same.

:mod:`fabrika.llm.cache` hashes ``json.JSONEncoder(sort_keys=True, ensure_ascii=False,
separators=(",", ":"), default=str)`` of each request (every message, every tool schema), once per
request and again for the request log: the largest single JSON cost of a client with long dialogues.
orjson writes the same bytes for plain JSON data — ``str`` keys, ``str``/``int``/``bool``/``None``,
lists, tuples and dicts, and floats whose ``repr`` has no exponent (orjson writes ``1e-7`` where
Python writes ``1e-07``, and ``null`` for NaN). :func:`plain` checks that in one pass over the
containers (strings, the bulk of the bytes, are not read); anything else — a non-``str`` key, a
custom object, a subclass, a huge int, an exponent or non-finite float, a lone surrogate — takes the
stdlib encoder, so the text (and any error) is always exactly the stdlib's.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from fabrika.textutil.jsontext import plain

_stdlib = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode
_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME \
    | orjson.OPT_PASSTHROUGH_SUBCLASS


def _refuse(o: Any) -> Any:
    raise TypeError


def canonical_bytes(value: Any) -> bytes:
    """UTF-8 of the stdlib's ``sort_keys`` compact JSON of ``value`` (``default=str``)."""
    if plain(value):
        try:
            return orjson.dumps(value, default=_refuse, option=_OPTS)
        except (TypeError, orjson.JSONEncodeError):  # a lone surrogate: the stdlib says what is wrong
            pass
    return _stdlib(value).encode("utf-8")


__all__ = ["canonical_bytes", "plain"]
