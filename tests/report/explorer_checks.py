"""Helpers shared by the explorer tests: what `fabrika status --json` says, and a version's row ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from typer.testing import CliRunner

from fabrika.cli.app import app


def status_json(run: Path) -> dict[str, Any]:
    res = CliRunner().invoke(app, ["status", str(run), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def status_value(doc: dict[str, Any], path: str) -> Any:
    """A page's ``data-count`` path (``stages/S/rows``, ``gates/S/out``, ``versions/V/rows``) in the status JSON."""
    head, *rest = path.split("/")
    node: Any = {"stages": doc["stages"], "gates": (doc["latest_funnel"] or {}).get("gates", {}),
                 "versions": doc["versions"]}[head]
    for key in rest:
        node = node[key]
    return node


def version_ids(run: Path, version: str, stage: str, dropped: bool = False) -> set[str]:
    path = run / "versions" / version / ("dropped" if dropped else "data") / f"{stage}.parquet"
    return set(pl.read_parquet(path)["id"].to_list())
