"""Warnings about inputs that validate but will not make the run the config asks for.

A config that targets thousands of topics but still points at the shipped demo
corpus produces LLM-invented topics instead of ones grounded in the user's data;
a config named for scale (``fc_ru_300k``) whose endpoint is ``localhost`` is
usually a copied example, not the user's servers. Both are warnings (``fabrika
validate`` and ``run`` print them), never errors: either can be intended.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

from fabrika.inputs import DATA_DIR, PACKAGE_PREFIX, resolve_data_path

#: A run asking for at least this many topics is "at scale".
MANY_TOPICS = 1000
SCALE_NAME = re.compile(r"(\d+\s*[kKmM](?![a-zA-Z])|\d{5,}|scale|prod)")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0")
COUNT_LIMIT = 2_000_000  # lines counted at most per corpus file


def _is_shipped(path: str, resolved: Path) -> bool:
    if path.startswith(PACKAGE_PREFIX):
        return True
    try:
        resolved.resolve().relative_to(DATA_DIR.resolve())
    except ValueError:
        return False
    return True


def _count_texts(path: Path) -> int | None:
    if not path.is_file() or path.suffix == ".parquet":
        return None
    n = 0
    with path.open("rb") as fh:
        for line in fh:
            n += bool(line.strip())
            if n >= COUNT_LIMIT:
                break
    return n


def scale_warnings(config: Any) -> Iterator[tuple[str, str]]:
    """``(key path, message)`` per warning (see module docs)."""
    resolve = getattr(config, "resolve_path", None)
    for i, stage in enumerate(config.stages):
        target = getattr(stage, "target_size", None)
        corpus = getattr(stage, "corpus", None)
        if not isinstance(target, dict) or not corpus:
            continue
        wanted = sum(int(v) for v in target.values())
        if wanted < MANY_TOPICS:
            continue
        for j, entry in enumerate(corpus):
            raw = str(getattr(entry, "path", ""))
            path = resolve_data_path(raw, resolve)
            texts = _count_texts(path)
            size = f" ({texts} texts)" if texts is not None else ""
            where = f"stages[{i}].corpus[{j}].path"
            if _is_shipped(raw, path):
                yield where, (f"the pipeline asks for {wanted} topics but the corpus is fabrika's demo corpus{size}; "
                              "give your own texts (jsonl with 'text' and optional 'lang'; README 'Bring your data')")
            elif texts is not None and texts < wanted:
                yield where, (f"the corpus has {texts} texts for {wanted} topics: most topics will be LLM "
                              "expansions rather than clusters of your data; aim for at least as many texts as topics")
    name = str(getattr(config, "name", ""))
    if SCALE_NAME.search(name):
        for k, endpoint in enumerate(config.llm.endpoints):
            host = urlparse(str(endpoint.base_url)).hostname or ""
            if host in LOCAL_HOSTS:
                yield f"llm.endpoints[{k}].base_url", (
                    f"config {name!r} is named for scale but its endpoint is {host}; point it at your inference "
                    "servers (or ignore this for a single-machine run)")
