"""Fixtures of the export tests (helpers live in ``export_fixtures``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.export.export_fixtures import make_rows, make_run


@pytest.fixture
def rows() -> list[dict[str, Any]]:
    return make_rows(24)


@pytest.fixture
def run_dir(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    return make_run(tmp_path, rows)
