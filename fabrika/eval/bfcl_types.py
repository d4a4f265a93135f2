"""Java and JavaScript argument values, typed the way BFCL's AST checker types them.

In BFCL's Java and JavaScript categories every parameter is sent to the model as a
string, and the model answers with a string of source text (``"5"``, ``"3.0f"``,
``"new ArrayList<>(Arrays.asList(1, 2))"``, ``"[1, 'a']"``). Before comparing, BFCL
turns that text into a Python value according to the parameter's declared type; text
that does not have the shape of its type stays a string, so it then fails the type check
(or matches only an answer written as that same string). This module is that typing,
written from the checker's documented behaviour; the shapes below (which regular
expressions accept which text) are the specification, including its quirks:

* the element lists of arrays, ``ArrayList``\\ s and JS arrays are split on every
  comma, so an element holding a comma breaks apart (and then usually fails);
* a JS array is matched up to its *first* ``]`` and a JS object up to its first ``}``;
* a Java ``char`` is left as written; Java ``String`` elements of ``ArrayList`` lose
  their first and last character (the quotes), of a ``T[]`` array they keep them;
* a JS float has no exponent form, a Java ``float`` needs its ``f`` suffix and a
  ``long`` its ``L``, a JS ``Bigint`` its ``n``.

:class:`UnsupportedType` marks the declared types BFCL itself cannot type (``Set``,
``Hashtable``, ``Queue``, ``Stack``) or does not know; the checker reports the case as
not checkable instead of guessing.
"""

from __future__ import annotations

import re
from typing import Any

#: declared Java type -> the Python type its value must have after typing
JAVA_TYPES: dict[str, type] = {
    "byte": int, "short": int, "integer": int, "float": float, "double": float, "long": int,
    "boolean": bool, "char": str, "Array": list, "ArrayList": list, "Set": set, "HashMap": dict,
    "Hashtable": dict, "Queue": list, "Stack": list, "String": str, "any": str,
}
#: declared JavaScript type -> the Python type its value must have after typing
JS_TYPES: dict[str, type] = {
    "String": str, "integer": int, "float": float, "Bigint": int, "Boolean": bool, "dict": dict,
    "array": list, "any": str,
}
#: declared types whose element type (``items.type``) is checked too
ELEMENT_TYPED = ("Array", "ArrayList", "array")


class UnsupportedType(ValueError):
    """A declared type the BFCL typing has no rule for."""


_INT = re.compile(r"^-?\d+$")
_JAVA_FLOAT = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$")
_JAVA_DOUBLE = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?$")
_JAVA_LONG = re.compile(r"^-?\d+[lL]$")
_JS_FLOAT = re.compile(r"^-?\d+(\.\d+)?$")
_JS_BIGINT = re.compile(r"^-?\d+n$")
_SUFFIX_F = re.compile(r"[fF]$")
_SUFFIX_L = re.compile(r"[lL]$")

_AS_LIST = re.compile(r"new\s+ArrayList<\w*>\(Arrays\.asList\((.+?)\)\)")
_DOUBLE_BRACE = re.compile(r"new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}", re.DOTALL)
_ADD = re.compile(r"add\((.+?)\)")
_EMPTY_LIST = re.compile(r"new\s+ArrayList<\w*>\(\)")
_ARRAY = re.compile(r"new\s+\w+\[\]\s*\{(.*?)\}")
_HASHMAP = re.compile(r"new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}", re.DOTALL)
_PUT = re.compile(r"put\(\"(.*?)\",\s*(.*?)\)")
_EMPTY_MAP = re.compile(r"new\s+HashMap<.*?>\s*\(\)")

_JS_2D = re.compile(r"\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\)")
_JS_1D = re.compile(r"\[(.*?)\]|\bnew\s+Array\((.*?)\)")
_JS_INNER = re.compile(r"\[(.*?)\]")
_JS_OBJECT = re.compile(r"\{(.*?)\}")
_JS_PAIR = re.compile(r"([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)")


def _number(text: str) -> Any:
    """An int, else a float, else the text itself (Python's own literal rules)."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


# -- Java --------------------------------------------------------------------------
def java_value(text: str, declared: str, element: str | None = None) -> Any:
    """The value of Java source ``text`` for a parameter of type ``declared``."""
    if declared not in JAVA_TYPES:
        raise UnsupportedType(f"Java type {declared!r}")
    if declared in ("byte", "short", "integer"):
        return int(text) if _INT.match(text) else text
    if declared == "float":
        return float(_SUFFIX_F.sub("", text)) if _JAVA_FLOAT.match(text) else text
    if declared == "double":
        return float(text) if _JAVA_DOUBLE.match(text) else text
    if declared == "long":
        return int(_SUFFIX_L.sub("", text)) if _JAVA_LONG.match(text) else text
    if declared == "boolean":
        return text == "true" if text in ("true", "false") else text
    if declared in ("char", "String", "any"):
        return text
    if declared == "ArrayList":
        return _java_arraylist(text, element)
    if declared == "Array":
        return _java_array(text, element)
    if declared == "HashMap":
        return _java_hashmap(text)
    raise UnsupportedType(f"Java type {declared!r} (BFCL does not type it)")


def _java_literal(text: str) -> Any:
    """A Java literal whose type is not declared (collection elements, map values)."""
    if text == "true":
        return True
    if text == "false":
        return False
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if _JAVA_LONG.match(text):
        return int(text[:-1])
    if _JAVA_FLOAT.match(text):
        return float(_SUFFIX_F.sub("", text))
    return _number(text)


def _java_element(text: str, element: str | None) -> Any:
    if element in ("char", "String"):
        return text[1:-1]
    return java_value(text, element) if element else _java_literal(text)


def _java_arraylist(text: str, element: str | None) -> Any:
    m = _AS_LIST.search(text)
    if m:
        return [_java_element(part.strip(), element) for part in m.group(1).split(",")]
    m = _DOUBLE_BRACE.search(text)
    if m:
        return [_java_element(arg.strip(), element) for arg in _ADD.findall(m.group(1))]
    if _EMPTY_LIST.search(text):
        return []
    return text


def _java_array(text: str, element: str | None) -> Any:
    m = _ARRAY.search(text)
    if not m:
        return text
    parts = [p.strip() for p in m.group(1).split(",") if p.strip()]
    return [java_value(p, element) if element else _java_literal(p) for p in parts]


def _java_hashmap(text: str) -> Any:
    m = _HASHMAP.search(text)
    if m:
        return {key: _java_literal(value.strip()) for key, value in _PUT.findall(m.group(1))} \
            if m.group(1).strip() else {}
    if _EMPTY_MAP.search(text):
        return {}
    return text


# -- JavaScript ----------------------------------------------------------------------
def js_value(text: str, declared: str, element: str | None = None) -> Any:
    """The value of JavaScript source ``text`` for a parameter of type ``declared``."""
    if declared not in JS_TYPES:
        raise UnsupportedType(f"JavaScript type {declared!r}")
    if declared == "String":
        quoted = (text.startswith('"') and text.endswith('"')) or (text.startswith("'") and text.endswith("'"))
        return text[1:-1] if quoted else text
    if declared == "integer":
        return int(text) if _INT.match(text) else text
    if declared == "float":
        return float(text) if _JS_FLOAT.match(text) else text
    if declared == "Bigint":
        return int(text[:-1]) if _JS_BIGINT.match(text) else text
    if declared == "Boolean":
        return text == "true" if text in ("true", "false") else text
    if declared == "dict":
        return _js_object(text.strip())
    if declared == "array":
        return _js_array(text.strip(), element)
    return text  # any


def _js_literal(text: str) -> Any:
    text = text.strip()
    if text == "true":
        return True
    if text == "false":
        return False
    if (text.startswith('"') and text.endswith('"')) or (text.startswith("'") and text.endswith("'")):
        return text[1:-1]
    return _number(text)


def _js_array(code: str, element: str | None) -> Any:
    try:
        m2 = _JS_2D.match(code)
        if m2:
            rows = []
            for n, inner in enumerate(_JS_INNER.findall(m2.group(0))):
                inner = inner.strip()
                if n == 0 and inner.startswith("["):
                    inner = inner[1:]
                rows.append([_js_literal(e.strip()) for e in inner.split(",")])
            return rows
        m = _JS_1D.match(code)
        if not m:
            return code
        body = m.group(1) if m.group(1) is not None else m.group(2)
        parts = body.strip().split(",") if body is not None and body.strip() else []
        if element:
            # an element that starts with a quote is typed with "String" as its own element type,
            # which only matters for nested arrays
            return [js_value(p.strip(), element, "String" if p.strip()[:1] in ("'", '"') else None)
                    for p in parts]
        return [_js_literal(p.strip()) for p in parts]
    except (ValueError, IndexError):  # an unknown element type or a bad literal: the text stays text
        return code


def _js_object(code: str) -> Any:
    if code == "{}":
        return {}
    m = _JS_OBJECT.match(code)
    if not m:
        return code
    out: dict[str, Any] = {}
    for key, value in _JS_PAIR.findall(m.group(1)):
        key, value = key.strip().strip("'\""), value.strip()
        if value.startswith("[") and value.endswith("]"):
            out[key] = _js_array(value, None)
        elif value.startswith("{") and value.endswith("}"):
            out[key] = _js_object(value)
        else:
            out[key] = _js_literal(value.strip("'\""))
    return out
