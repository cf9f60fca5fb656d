"""Shared fixtures: tiny synthetic tasks, the real data dir for integration tests, fake OpenAI servers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.fake_openai import FakeServer

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("PROMPTTUNE_DATA_DIR", REPO.parent / "shared" / "data")).resolve()


@pytest.fixture
def data_dir() -> Path:
    if not (SHARED_DATA / "ag_news" / "test.csv").is_file():
        pytest.fail(f"shared data not found at {SHARED_DATA}: set PROMPTTUNE_DATA_DIR")
    return SHARED_DATA


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    """Fake OpenAI servers a test appends here are stopped after it."""
    servers: list[FakeServer] = []
    yield servers
    for server in servers:
        server.stop()
