"""``--set KEY=VALUE`` overrides of a pipeline document, applied before validation.

Keys are dotted paths into the YAML; a stage is addressed by its name (or kind
when unnamed): ``seed=3``, ``llm.sim.latency_ms=0``,
``stages.answers.max_items=5``, ``filters.length.max_tokens=1024``. Values are
YAML scalars or flow collections (``[ru, en]``). Wrong keys and types are then
reported by the normal validation, with their key path.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import yaml

from fabrika.errors import ConfigError
from fabrika.textutil.suggest import did_you_mean


def _parse_value(raw: str) -> Any:
    try:
        return yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        return raw


def _stage_names(stages: list[Any]) -> list[str]:
    return [str(s.get("name") or s.get("kind")) if isinstance(s, dict) else "?" for s in stages]


def apply_overrides(data: Any, assignments: Sequence[str]) -> Any:
    """A copy of ``data`` with each ``KEY=VALUE`` applied; :class:`ConfigError` on a malformed one.

    Stage names may contain dots (``fc.tools``): the longest matching name wins.
    """
    if not assignments:
        return data
    if not isinstance(data, dict):
        raise ConfigError("--set needs a config whose top level is a mapping")
    out = copy.deepcopy(data)
    for item in assignments:
        key, sep, raw = item.partition("=")
        parts = [p for p in key.strip().split(".") if p]
        if not sep or not parts:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. stages.answers.max_items=5")
        node: Any = out
        i = 0
        while i < len(parts) - 1:
            if isinstance(node, list):  # the stages list: pick a stage by (dotted) name or index
                names = _stage_names(node)
                for j in range(len(parts) - 1, i, -1):
                    candidate = ".".join(parts[i:j])
                    if candidate in names or (candidate.isdigit() and int(candidate) < len(node)):
                        node = node[names.index(candidate) if candidate in names else int(candidate)]
                        i = j
                        break
                else:
                    hint = next((h for h in (did_you_mean(".".join(parts[i:j]), names)
                                             for j in range(len(parts) - 1, i, -1)) if h), "")
                    raise ConfigError(f"--set {item!r}: no stage named {parts[i]!r}…; stages: {', '.join(names)}{hint}")
                continue
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(parts[:i])} is not a mapping")
            part = parts[i]
            node = node["stages"] if part == "stages" and isinstance(node.get("stages"), list) else node.setdefault(part, {})
            i += 1
        if isinstance(node, list):
            raise ConfigError(f"--set {item!r}: name a field of a stage, e.g. stages.<stage>.max_items=5")
        if not isinstance(node, dict):
            raise ConfigError(f"--set {item!r}: {'.'.join(parts[:-1])} is not a mapping")
        node[parts[-1]] = _parse_value(raw)
    return out
