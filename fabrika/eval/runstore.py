"""A resumable evaluation run: per-item results on disk, the engine's cache beside them.

An eval directory holds ``settings.json`` (what the run is: kind, model, input
digest, scheme — not the endpoint URL, which may move), ``results.jsonl`` (one
line per *finished* item, appended and fsynced as items finish), the engine's
``cache.sqlite`` and, at the end, ``report.json`` (written atomically). A rerun
of the same command skips finished items; a crash loses only the items in
flight; an item whose LLM request failed is not written, so the rerun asks
again. Reusing a directory for a different run is refused, and so is a second
process on a directory another one is working in (``DIR/.lock``, ``flock``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from fabrika.errors import ConfigError, StoreError
from fabrika.llm import ChatRequest, ChatResponse, LLMConfig, build_engine

REPORT = "report.json"


def file_digest(*paths: Path | None) -> str:
    h = hashlib.sha256()
    for p in paths:
        if p is not None:
            h.update(p.read_bytes())
    return h.hexdigest()[:20]


def write_json_atomic(path: Path, doc: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class ResultStore:
    """``results.jsonl`` keyed by item id, guarded by ``settings.json``."""

    def __init__(self, out_dir: Path, settings: dict[str, Any]) -> None:
        self.dir = out_dir
        self.path = out_dir / "results.jsonl"
        out_dir.mkdir(parents=True, exist_ok=True)
        self._lock = (out_dir / ".lock").open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise StoreError(f"{out_dir} is in use by another fabrika eval process; wait for it to finish or "
                             f"pass another --out") from None
        spath = out_dir / "settings.json"
        if spath.is_file():
            old = json.loads(spath.read_text(encoding="utf-8"))
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            if diff:
                raise ConfigError(f"{out_dir} holds a different eval run (differs in: {', '.join(diff)}); "
                                  f"pass a new --out directory or delete this one")
        else:
            write_json_atomic(spath, settings)
        self.done: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            self._load()

    def _load(self) -> None:
        good: list[str] = []
        with self.path.open(encoding="utf-8") as fh:
            lines = fh.read().split("\n")
        for n, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                if n >= len(lines) - 2:  # a line cut by a crash: drop it, the item is asked again
                    continue
                raise StoreError(f"{self.path}:{n + 1}: corrupt result line; delete the directory to start over") from None
            self.done[rec["id"]] = rec
            good.append(line)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(g + "\n" for g in good), encoding="utf-8")
        os.replace(tmp, self.path)

    def close(self) -> None:
        """Release the directory lock (also released when the process exits)."""
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        lines = [json.dumps(r, ensure_ascii=False, default=str) for r in records]
        if not lines:
            return
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        for line in lines:
            rec = json.loads(line)
            self.done[rec["id"]] = rec


def make_llm_config(*, base_url: str | None, model: str | None, api_key_env: str | None = None,
                    config_file: Path | None = None, max_retries: int | None = None,
                    timeout_s: float | None = None) -> LLMConfig:
    """An :class:`LLMConfig` from CLI flags or a YAML file holding an ``llm:`` block (flags win)."""
    import yaml

    data: dict[str, Any] = {}
    if config_file is not None:
        if not config_file.is_file():
            raise ConfigError(f"--llm-config {config_file}: no such file")
        doc = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
        section = doc.get("llm", doc) if isinstance(doc, dict) else None
        if not isinstance(section, dict):
            raise ConfigError(f"--llm-config {config_file}: expected a mapping of llm settings (optionally under `llm:`)")
        data = dict(section)
    if base_url:
        data["backend"] = "openai"
        data["endpoints"] = [{"base_url": base_url, **({"api_key_env": api_key_env} if api_key_env else {})}]
    if model:
        data["model"] = model
    if max_retries is not None:
        data["max_retries"] = max_retries
    if timeout_s is not None:
        data["timeout_s"] = timeout_s
    if not data.get("endpoints") and data.get("backend", "sim") != "sim":
        raise ConfigError("no model endpoint: pass --base-url http://host:8000/v1 (or --llm-config FILE)")
    if "backend" not in data:
        raise ConfigError("no model endpoint: pass --base-url http://host:8000/v1 (or --llm-config FILE with llm.backend)")
    try:
        cfg = LLMConfig.model_validate(data)
    except ValueError as exc:
        raise ConfigError(f"llm settings: {exc}") from None
    return cfg


@dataclass
class RunOutcome:
    finished: int = 0
    skipped: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)


Item = dict[str, Any]


async def run_items(store: ResultStore, llm: LLMConfig, items: Sequence[Item],
                    make_requests: Callable[[Item], list[ChatRequest]],
                    finish: Callable[[Item, list[ChatResponse]], dict[str, Any]],
                    *, batch: int = 256) -> RunOutcome:
    """Ask the model for every unfinished item; ``finish`` turns one item's answers into its record.

    A request that ended in an error (after the engine's retries) leaves its item
    unfinished and listed in ``failed`` with the reason.
    """
    out = RunOutcome()
    pending = [it for it in items if it["id"] not in store.done]
    out.skipped = len(items) - len(pending)
    if not pending:
        return out
    engine = build_engine(llm, store.dir)
    try:
        for start in range(0, len(pending), batch):
            chunk = pending[start:start + batch]
            per_item = [make_requests(it) for it in chunk]
            flat = [r for reqs in per_item for r in reqs]
            responses = await engine.complete(flat)
            pos = 0
            records = []
            for it, reqs in zip(chunk, per_item):
                resps = responses[pos:pos + len(reqs)]
                pos += len(reqs)
                errors = [r.error for r in resps if r.error is not None]
                if errors:
                    out.failed.append({"id": it["id"], "reason": str(errors[0])})
                    continue
                try:
                    records.append({"id": it["id"], **finish(it, resps)})
                except Exception as exc:  # noqa: BLE001 - a scorer bug must not take the finished items with it
                    out.failed.append({"id": it["id"], "reason": f"internal_error: {type(exc).__name__}: {exc}"})
            store.append(records)
            out.finished += len(records)
    finally:
        await engine.aclose()
    return out

