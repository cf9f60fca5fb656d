"""Shared fixtures: tiny synthetic tasks, and the real data dir for integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("PROMPTTUNE_DATA_DIR", REPO.parent / "shared" / "data"))


@pytest.fixture
def data_dir() -> Path:
    if not (SHARED_DATA / "ag_news" / "test.csv").is_file():
        pytest.fail(f"shared data not found at {SHARED_DATA}: set PROMPTTUNE_DATA_DIR")
    return SHARED_DATA
