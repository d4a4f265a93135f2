"""One reader of tool calls for every common format (DESIGN contract 3): rewards, eval and the episode loop use it.

A model's calls reach fabrika in whichever shape its server and chat template
produce. :func:`read_calls` turns each into the same ``{"name", "arguments":
dict}`` list and the visible text around it, or a :class:`ParseFailure` naming
what is malformed:

* **OpenAI** ``tool_calls`` (``{"function": {"name", "arguments": "<json>"}}``
  or the flat ``{"name", "arguments"}`` a client already unpacked);
* **Hermes / Qwen** ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``
  (Qwen2.5/3, Hermes 2 Pro; ``"parameters"`` accepted for ``"arguments"``);
* **Llama 3.1+** ``<|python_tag|>{"name": …, "parameters": {…}}`` (calls
  separated by ``;``; built-ins as ``brave_search.call(query="…")``) and the
  bare JSON object its JSON tool-calling mode writes without the tag;
* **Llama 3.2 / BFCL prompting** pythonic lists ``[get_weather(city="Paris")]``
  (literal keyword arguments only; nothing is executed), when tools were offered;
* **Mistral** ``[TOOL_CALLS][{"name": …, "arguments": {…}}]`` (v3 tokenizer)
  and ``[TOOL_CALLS]name[ARGS]{…}`` (v11+; ``[CALL_ID]id`` between them in v13; ``name{…}``
  where a server dropped the ``[ARGS]`` token);
* **gpt-oss harmony** ``<|start|>assistant<|channel|>commentary
  to=functions.NAME <|constrain|>json<|message|>{…}<|call|>`` (the ``to=`` may
  also sit in the role part); the ``analysis`` channel is reasoning;
* **bare JSON** — the whole answer is a call object or a list of them, with the
  call shape (``name`` and ``arguments``/``parameters``, nothing else but ``id``/``type``).
  A call-shaped answer naming a tool nobody offered is a (wrong) call, not text.

Reasoning (``<think>…</think>``, harmony ``analysis``, ``reasoning_content``)
is never read as calls nor returned as text: calls drafted while thinking are
thoughts. The format is decided by markers, so prose that merely mentions a
function is text, and a marker with a broken body is a failure, not text.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from fabrika.textutil.answers import ParseFailure, is_failure, span_end
from fabrika.textutil.reasoning import split_reasoning

__all__ = ["CallRead", "FORMATS", "call_id", "read_calls"]

#: Names of the formats :func:`read_calls` reports in :attr:`CallRead.formats`.
FORMATS = ("openai", "hermes", "llama", "pythonic", "mistral", "harmony", "json")

_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"
_LLAMA_END = re.compile(r"<\|(?:eom_id|eot_id|end_of_text)\|>")
_MISTRAL = "[TOOL_CALLS]"
# v11+: name[ARGS]{…}; v13: name[CALL_ID]id[ARGS]{…}; decoded without special tokens' text, some servers drop [ARGS]
_MISTRAL_NAMED = re.compile(r"\s*([A-Za-z_][\w.\-]*)\s*(?:\[CALL_ID\]\s*([\w\-]+)\s*)?(?:\[ARGS\]|(?=\{))")
_HARMONY_SEGMENT = re.compile(
    r"(?:<\|start\|>(?P<role>[^<]*))?<\|channel\|>(?P<header>[^<]*)(?:<\|constrain\|>(?P<constrain>[^<]*))?"
    r"<\|message\|>(?P<body>.*?)(?P<end><\|call\|>|<\|end\|>|<\|return\|>|(?=<\|start\|>)|\Z)",
    re.DOTALL)
_HARMONY_TO = re.compile(r"\bto=([\w.\-]+)")
_FENCED = re.compile(r"^```[\w-]*\s*\n?(.*?)\n?```$", re.DOTALL)
_CALL_KEYS = {"name", "arguments", "parameters", "id", "type"}
_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@dataclass(frozen=True)
class CallRead:
    """The calls and visible text of one answer.

    Attributes:
        calls: ``{"name": str, "arguments": dict}`` in the order written.
        text: what the user would see, call markup and reasoning removed.
        formats: the formats the calls were written in (empty when there are none).
        complete: False when the answer was cut off inside reasoning (there is no answer).
    """

    calls: tuple[dict[str, Any], ...]
    text: str
    formats: tuple[str, ...] = ()
    complete: bool = True


def call_id(*parts: object, prefix: str = "call_", length: int = 24) -> str:
    """A tool-call id shaped like a real API's (``call_`` + 24 letters and digits), stable in ``parts``.

    Training prompts carry the ids of earlier calls; ``call_3_0_ref`` would teach a
    model an id scheme no runtime uses, and leak which turn was injected.
    """
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    number = int.from_bytes(digest, "big")
    chars = []
    for _ in range(length):
        number, k = divmod(number, len(_ID_ALPHABET))
        chars.append(_ID_ALPHABET[k])
    return prefix + "".join(chars)


# ---------------------------------------------------------------------------
# one call object → {"name", "arguments"}

def _call(obj: Any, where: str) -> dict[str, Any] | ParseFailure:
    """``{"name", "arguments": dict}`` from one call object of any format, or why it is malformed."""
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    if not isinstance(obj, Mapping):
        return ParseFailure(f"malformed_call: {where} is {type(obj).__name__}, not an object")
    if isinstance(obj.get("function"), Mapping) and "name" not in obj:
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseFailure(f"malformed_call: {where} has no 'name'")
    args = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
    return _arguments(name.strip(), args, where)


def _arguments(name: str, args: Any, where: str) -> dict[str, Any] | ParseFailure:
    if args is None or args == "":
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as exc:
            return ParseFailure(f"malformed_call: {where} ({name}) arguments are not JSON: {exc.msg}")
    if not isinstance(args, dict):
        return ParseFailure(f"malformed_call: {where} ({name}) arguments are {type(args).__name__}, not an object")
    return {"name": name, "arguments": args}


def _json_value(text: str, where: str) -> tuple[Any, int] | ParseFailure:
    """The JSON value starting at the first non-space of ``text`` and the index after it."""
    start = len(text) - len(text.lstrip())
    if start >= len(text) or text[start] not in "{[":
        return ParseFailure(f"malformed_call: {where} is not followed by a JSON object or list")
    end = span_end(text, start)
    if end is None:
        return ParseFailure(f"malformed_call: {where} JSON is truncated (unclosed {text[start]!r})")
    try:
        return json.loads(text[start:end]), end
    except json.JSONDecodeError as exc:
        return ParseFailure(f"malformed_call: {where} is not JSON: {exc.msg}")


def _calls_of(value: Any, where: str) -> list[dict[str, Any]] | ParseFailure:
    items = value if isinstance(value, list) else [value]
    out: list[dict[str, Any]] = []
    for k, item in enumerate(items):
        call = _call(item, f"{where}[{k}]" if isinstance(value, list) else where)
        if is_failure(call):
            return call
        out.append(call)
    return out


# ---------------------------------------------------------------------------
# the formats written into the text

def _hermes(text: str) -> tuple[list[dict[str, Any]], str] | ParseFailure:
    blocks = list(_HERMES.finditer(text))
    if text.count("<tool_call>") != len(blocks) or text.count("</tool_call>") != len(blocks):
        return ParseFailure("malformed_call: unbalanced <tool_call> tags (a block is unclosed or stray)")
    calls: list[dict[str, Any]] = []
    for block in blocks:
        body = block.group(1).strip()
        try:
            value = json.loads(body)
        except json.JSONDecodeError as exc:
            return ParseFailure(f"malformed_call: <tool_call> block is not JSON: {exc.msg}: {body[:60]!r}")
        got = _calls_of(value, "<tool_call> block")
        if is_failure(got):
            return got
        calls += got
    return calls, _HERMES.sub("", text)


def _pythonic(body: str, known: set[str] | None, *, single: bool = False) -> list[dict[str, Any]] | None:
    """Calls in Python syntax (``[f(a=1), g(b="x")]`` or ``m.f(a=1)``), or ``None`` when it is not only calls.

    Only literal keyword arguments count (``ast.literal_eval``); with ``known``, every name must be in it.
    """
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError:
        return None
    nodes = [tree] if single or not isinstance(tree, (ast.List, ast.Tuple)) else list(tree.elts)
    calls: list[dict[str, Any]] = []
    for node in nodes:
        name = _dotted(node.func) if isinstance(node, ast.Call) else None
        if name is None or (known is not None and name not in known) or not isinstance(node, ast.Call):
            return None
        if node.args or any(k.arg is None for k in node.keywords):
            return None
        try:
            args = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
        except ValueError:
            return None
        calls.append({"name": name, "arguments": args})
    return calls or None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _llama(text: str) -> tuple[list[dict[str, Any]], str] | ParseFailure:
    """``<|python_tag|>`` then JSON calls separated by ``;`` or a built-in ``tool.call(k=v)``."""
    head, _, rest = text.partition(_PYTHON_TAG)
    rest = _LLAMA_END.sub("", rest).strip()
    calls: list[dict[str, Any]] = []
    if rest[:1] not in "{[":
        builtin = re.fullmatch(r"([A-Za-z_]\w*)\.call\((.*)\)", rest, re.DOTALL)
        parsed = _pythonic(f"f({builtin.group(2)})", None, single=True) if builtin else None
        if builtin is None or parsed is None:
            return ParseFailure(f"malformed_call: {_PYTHON_TAG} is followed by neither JSON nor a built-in "
                                f"tool call: {rest[:60]!r}")
        return [{"name": builtin.group(1), "arguments": parsed[0]["arguments"]}], head
    while rest:
        got = _json_value(rest, _PYTHON_TAG)
        if is_failure(got):
            return got
        value, end = got
        one = _calls_of(value, f"{_PYTHON_TAG} call")
        if is_failure(one):
            return one
        calls += one
        rest = rest[end:].strip().lstrip(";").strip()
    return calls, head


def _mistral(text: str) -> tuple[list[dict[str, Any]], str] | ParseFailure:
    """``[TOOL_CALLS]`` + a JSON list (v3), or one or more ``[TOOL_CALLS]name[ARGS]{…}`` (v11+)."""
    head, *chunks = text.split(_MISTRAL)
    calls: list[dict[str, Any]] = []
    for chunk in chunks:
        chunk = chunk.replace("</s>", "")
        named = _MISTRAL_NAMED.match(chunk)
        if named:
            got = _json_value(chunk[named.end():], f"{_MISTRAL}{named.group(1)}[ARGS]")
            if is_failure(got):
                return got
            value, end = got
            call = _arguments(named.group(1), value, f"{_MISTRAL}{named.group(1)}[ARGS]")
            if is_failure(call):
                return call
            calls.append(call)
            tail = chunk[named.end() + end:]
        else:
            got = _json_value(chunk, _MISTRAL)
            if is_failure(got):
                return got
            value, end = got
            many = _calls_of(value, f"{_MISTRAL} call")
            if is_failure(many):
                return many
            calls += many
            tail = chunk[end:]
        if tail.strip():
            return ParseFailure(f"malformed_call: text after a {_MISTRAL} call: {tail.strip()[:60]!r}")
    return calls, head


def _harmony(text: str) -> CallRead | ParseFailure:
    """gpt-oss messages: ``to=NAME`` ones are calls, ``analysis`` is reasoning, the rest is text."""
    calls: list[dict[str, Any]] = []
    shown: list[str] = []
    complete = True
    for seg in _HARMONY_SEGMENT.finditer(text):
        header = f"{seg['role'] or ''} {seg['header']}"
        target = _HARMONY_TO.search(header)
        channel = seg["header"].split()[0] if seg["header"].split() else ""
        if target:
            name = target.group(1).removeprefix("functions.")
            body = seg["body"].strip()
            if not seg["end"] and not body.endswith(("}", "]")):
                return ParseFailure(f"malformed_call: harmony call to {name} is truncated")
            try:
                value = json.loads(body) if body else {}
            except json.JSONDecodeError as exc:
                return ParseFailure(f"malformed_call: harmony call to {name} is not JSON: {exc.msg}")
            call = _arguments(name, value, "harmony call")
            if is_failure(call):
                return call
            calls.append(call)
        elif channel == "analysis":
            complete = complete and bool(seg["end"])
        else:
            shown.append(seg["body"].strip())
    if not complete and not calls and not shown:
        return CallRead((), "", (), complete=False)
    return CallRead(tuple(calls), "\n".join(s for s in shown if s).strip(), ("harmony",) if calls else ())


def _bare(text: str, known: set[str] | None) -> tuple[list[dict[str, Any]], str] | None:
    """(calls, format) when the whole answer (fences allowed) is calls: a JSON call object or list
    (``json``), or Python call syntax naming offered tools (``pythonic``); else ``None``."""
    body = text.strip()
    fenced = _FENCED.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        return None
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        python = _pythonic(body, known) if known is not None else None
        return (python, "pythonic") if python else None
    items = value if isinstance(value, list) else [value]
    if not items:
        return None
    calls: list[dict[str, Any]] = []
    for item in items:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and set(item) <= _CALL_KEYS
                and ("arguments" in item or "parameters" in item)):
            return None
        call = _call(item, "JSON call")  # a call-shaped object is a call even to a tool nobody offered (a wrong one)
        if is_failure(call):
            return None
        calls.append(call)
    return calls, "json"


# ---------------------------------------------------------------------------
# the entry point

def _message(completion: Any) -> tuple[Any, Any, Any]:
    """(content, tool_calls, reasoning) of the answer: a string, a message dict/object, or a list of messages."""
    if isinstance(completion, (list, tuple)):
        assistants = [m for m in completion
                      if (m.get("role", "assistant") if isinstance(m, Mapping) else getattr(m, "role", "assistant"))
                      == "assistant"]
        completion = assistants[-1] if assistants else ""
    if completion is None or isinstance(completion, str):
        return completion, (), None
    if isinstance(completion, Mapping):
        get = completion.get
    else:
        def get(key: str, default: Any = None) -> Any:
            return getattr(completion, key, default)
    content = get("content")
    if isinstance(content, list):  # OpenAI content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return content, get("tool_calls") or (), get("reasoning_content") or get("reasoning")


def _tool_names(tools: Iterable[Any] | None) -> set[str] | None:
    if tools is None:
        return None
    if isinstance(tools, str):
        tools = json.loads(tools)
    names: set[str] = set()
    for t in tools:
        if isinstance(t, str):
            names.add(t)
            continue
        if hasattr(t, "model_dump"):
            t = t.model_dump(mode="json")
        fn = t.get("function", t) if isinstance(t, Mapping) else {}
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


def read_calls(completion: Any, *, tools: Iterable[Any] | None = None) -> CallRead | ParseFailure:
    """Every call of an answer in any format above, and its visible text; or why a call is malformed.

    Args:
        completion: a string, a message dict or object (``content``, ``tool_calls``,
            ``reasoning_content``), or a list of messages (the last assistant one counts).
        tools: the offered tools (OpenAI dicts, :class:`~fabrika.schemas.Tool` models or
            names). A Python-syntax answer counts as calls only when it names offered
            tools (and never without them); bare JSON counts by its shape.

    Failure reasons start with ``malformed_call:`` (unbalanced tags, a body that is not
    JSON or is truncated, a call without ``name``, arguments that are not an object).
    """
    content, raw_calls, reasoning = _message(completion)
    if content is not None and not isinstance(content, str):
        return ParseFailure(f"malformed_call: content is {type(content).__name__}, not a string")
    calls: list[dict[str, Any]] = []
    formats: list[str] = []
    for k, raw in enumerate(raw_calls):
        call = _call(raw, f"tool_calls[{k}]")
        if is_failure(call):
            return call
        calls.append(call)
    if calls:
        formats.append("openai")
    text = content or ""
    if "<|channel|>" in text:
        read = _harmony(text)
        if is_failure(read):
            return read
        return CallRead((*calls, *read.calls), read.text, (*formats, *read.formats), read.complete)
    split = split_reasoning(text, reasoning if isinstance(reasoning, str) else None)
    answer = split.answer
    for marker, fmt, reader in (("<tool_call>", "hermes", _hermes), ("</tool_call>", "hermes", _hermes),
                                (_MISTRAL, "mistral", _mistral), (_PYTHON_TAG, "llama", _llama)):
        if marker in answer:
            got = reader(answer)
            if is_failure(got):
                return got
            found, answer = got
            calls += found
            if found:
                formats.append(fmt)
    if not formats:
        bare = _bare(answer, _tool_names(tools))
        if bare:
            calls += bare[0]
            formats.append(bare[1])
            answer = ""
    return CallRead(tuple(calls), answer.strip(), tuple(dict.fromkeys(formats)), split.complete)
