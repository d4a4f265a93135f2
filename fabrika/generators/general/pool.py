"""Reading the user's prompt pool and normalising each record to chat messages.

Accepted inputs (:func:`iter_pool_records`):

* a ``.jsonl`` / ``.parquet`` file (:func:`fabrika.inputs.iter_records`);
* a directory written by ``datasets.Dataset.save_to_disk`` (a ``DatasetDict`` needs ``split``).

Accepted record shapes (:func:`normalise_record`), first match wins:

* ``messages`` (or ``conversations``): a list of ``{role, content}`` turns, or ShareGPT
  ``{from, value}`` turns, possibly as a JSON string. Trailing assistant turns (logs keep
  the production answer) are cut: the prompt ends with the last user turn;
* ``prompt`` (the ``text_field``): a string (one user turn) or a message list;
* an optional ``system`` string is put in front when the messages have no system turn.

A record that is not a usable prompt (no user turn, an unknown role, empty text)
is a recorded rejection with the reason, never a crash: production logs are dirty.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from fabrika.errors import InputError
from fabrika.inputs import iter_records

ROLES = {"system", "user", "assistant", "tool"}
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "system": "system", "bot": "assistant", "chatgpt": "assistant", "tool": "tool"}


class NotAPrompt(ValueError):
    """A pool record that cannot be turned into a prompt; ``str(exc)`` is the recorded reason."""


def iter_pool_records(path: Path, *, split: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(n, record)`` from a jsonl/parquet file or a ``save_to_disk`` directory (1-based ``n``)."""
    if path.is_dir():
        import datasets

        try:
            ds = datasets.load_from_disk(str(path))
        except FileNotFoundError as exc:
            raise InputError(f"{path}: not a datasets directory (save_to_disk) — {exc}; point `path` at a "
                             "jsonl/parquet file or a saved dataset") from exc
        if isinstance(ds, datasets.DatasetDict):
            if split is None or split not in ds:
                raise InputError(f"{path}: a DatasetDict with splits {sorted(ds)}; set `split` to one of them")
            ds = ds[split]
        for n, rec in enumerate(ds, start=1):  # memory-mapped Arrow: iteration streams
            yield n, dict(rec)
        return
    yield from iter_records(path, what="prompt pool", hint="one prompt or chat per record (see general.prompts docs)")


def _turns(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise NotAPrompt(f"invalid_messages: not JSON ({exc.msg})") from exc
    if not isinstance(value, list) or not value:
        raise NotAPrompt("invalid_messages: expected a non-empty list of turns")
    out = []
    for i, turn in enumerate(value):
        if not isinstance(turn, dict):
            raise NotAPrompt(f"invalid_messages: turn {i} is {type(turn).__name__}, not an object")
        if "role" in turn:
            role, content = turn.get("role"), turn.get("content")
        elif "from" in turn:
            role, content = SHAREGPT_ROLES.get(str(turn.get("from")).lower()), turn.get("value")
            if role is None:
                raise NotAPrompt(f"invalid_messages: turn {i} has unknown speaker {turn.get('from')!r}")
        else:
            raise NotAPrompt(f"invalid_messages: turn {i} has neither 'role' nor 'from'")
        if role not in ROLES:
            raise NotAPrompt(f"invalid_messages: turn {i} has unknown role {role!r}")
        if isinstance(content, list):  # OpenAI content parts: keep the text parts
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
        if content is not None and not isinstance(content, str):
            raise NotAPrompt(f"invalid_messages: turn {i} content is {type(content).__name__}, not text")
        out.append({"role": role, "content": (content or "").strip()})
    return out


def normalise_record(rec: dict[str, Any], text_field: str = "prompt") -> list[dict[str, str]]:
    """The prompt of a pool record as chat messages ending with a user turn (raises :class:`NotAPrompt`)."""
    raw = next((rec[k] for k in ("messages", "conversations") if rec.get(k) not in (None, "", [])), None)
    if raw is not None:
        turns = _turns(raw)
    else:
        value = rec.get(text_field)
        if isinstance(value, str):
            if value.lstrip().startswith("[") and _looks_like_turns(value):
                turns = _turns(value)
            else:
                turns = [{"role": "user", "content": value.strip()}]
        elif isinstance(value, list):
            turns = _turns(value)
        else:
            raise NotAPrompt(f"no_prompt: record has no 'messages', 'conversations' or {text_field!r} text")
    while turns and turns[-1]["role"] == "assistant":
        turns.pop()
    if not turns or turns[-1]["role"] != "user":
        raise NotAPrompt("no_user_turn: the conversation does not end with a user turn")
    if not turns[-1]["content"]:
        raise NotAPrompt("empty_prompt: the last user turn is empty")
    system = rec.get("system")
    if isinstance(system, str) and system.strip() and turns[0]["role"] != "system":
        turns.insert(0, {"role": "system", "content": system.strip()})
    return turns


def _looks_like_turns(text: str) -> bool:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(value, list) and bool(value) and all(isinstance(t, dict) and ("role" in t or "from" in t)
                                                            for t in value)
