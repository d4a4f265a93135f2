"""Shared fixtures: a fake OpenAI server per test and an engine factory pointed at it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from fabrika.llm import LLMEngine, build_engine
from fabrika.testing import FakeOpenAIServer
from tests.llm.llm_helpers import http_config


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def make_engine(tmp_path: Path) -> Callable[..., LLMEngine]:
    """``make_engine(server, transport=..., cache=True, **config_overrides)``."""

    def factory(*servers: FakeOpenAIServer, transport: str = "raw", cache: bool = False,
                run_dir: Path | None = None, **overrides: Any) -> LLMEngine:
        cfg = http_config(*servers, transport=transport, cache={"enabled": cache}, **overrides)
        return build_engine(cfg, run_dir or tmp_path)

    return factory
