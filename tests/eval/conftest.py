"""A fake OpenAI server per test (a real HTTP server on 127.0.0.1) and the CLI runner."""

from __future__ import annotations

from typing import Iterator

import pytest

from fabrika.testing import FakeOpenAIServer


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(models=["judge-model", "m"]) as srv:
        yield srv


def llm_flags(srv: FakeOpenAIServer, *extra: str) -> list[str]:
    return ["--base-url", srv.base_url, "--model", "judge-model", "--max-retries", "3", *extra]
