"""Shared fixtures: tiny synthetic tasks, and the real data dir for integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prompttune.core.types import Example
from prompttune.tasks.base import SplitSizes, Task, make_splits

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("PROMPTTUNE_DATA_DIR", REPO.parent / "shared" / "data"))


def synthetic_task(n_per_class: int = 60, seed: int = 0, sizes: SplitSizes = SplitSizes(40, 60, 60)) -> Task:
    """A three-class task with unique, searchable texts (for the synthetic oracle)."""
    labels = ["red", "green", "blue"]
    pool = [Example(f"syn-{c}-{i}", {"text": f"item {c}-{i} is about colour {labels[c]} number {i}."}, c)
            for c in range(3) for i in range(n_per_class)]
    splits = make_splits({"train": pool, "dev": pool, "test": pool}, sizes, seed, "synthetic")
    return Task("synthetic", labels, [[w, w.upper()] for w in labels], ["text"], splits,
                "Name the colour.")


@pytest.fixture
def data_dir() -> Path:
    if not (SHARED_DATA / "ag_news" / "test.csv").is_file():
        pytest.fail(f"shared data not found at {SHARED_DATA}: set PROMPTTUNE_DATA_DIR")
    return SHARED_DATA
