"""Shared fixtures: tiny synthetic tasks, the real data dir for integration tests, fake OpenAI servers, and the
embedded model loaded once per session."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from prompttune.testing.fake_openai import FakeServer

if TYPE_CHECKING:
    from prompttune.backends.backend import Backend
    from prompttune.backends.transformers_backend import TransformersBackend

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("PROMPTTUNE_DATA_DIR", REPO.parent / "shared" / "data")).resolve()


# Integration tests read the real AG News / SST-2 files. Without them those tests are skipped with one
# reason, the run ends with one line naming PROMPTTUNE_DATA_DIR, and it still fails (exit 1): a CI that
# lost its data must not go green on the unit tests alone. PROMPTTUNE_ALLOW_MISSING_DATA=1 lets a
# machine without the data pass on what it can run.
MISSING_DATA = f"shared data not found at {SHARED_DATA}: set PROMPTTUNE_DATA_DIR"
ALLOW_MISSING_DATA = os.environ.get("PROMPTTUNE_ALLOW_MISSING_DATA") == "1"
_skipped_for_data: list[str] = []


@pytest.fixture
def data_dir() -> Path:
    if not (SHARED_DATA / "ag_news" / "test.csv").is_file():
        pytest.skip(MISSING_DATA)
    return SHARED_DATA


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Counts the skips for missing data from the reports, which reach the main process also when the tests
    run in pytest-xdist's workers (`make test` runs two)."""
    if report.skipped and MISSING_DATA in str(report.longrepr):
        _skipped_for_data.append(report.nodeid)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on the real model first, so that the two workers share them and finish together, rather than
    one running the slowest tests alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("integration") is None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped_for_data and not ALLOW_MISSING_DATA and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped_for_data:
        verdict = "allowed by PROMPTTUNE_ALLOW_MISSING_DATA=1" if ALLOW_MISSING_DATA else "the run fails"
        terminalreporter.write_line(f"{len(_skipped_for_data)} integration tests skipped, {MISSING_DATA} ({verdict})")


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    """Fake OpenAI servers a test appends here are stopped after it."""
    servers: list[FakeServer] = []
    yield servers
    for server in servers:
        server.stop()


# -- the embedded model, loaded once -----------------------------------------------------------------
# Reading the GGUF file and converting it takes 15-25 s on 2 cores (its tokenizer and config come from
# the folder `gguf_parts` saves after the first load), and some twenty integration tests in eight files
# run the same model: they share one load per session. A test wraps it in `tests.support.CountingBackend`
# for counts of its own; the model keeps no state between calls that a result depends on (a test that
# changes `batch_size` or `prefix_reuse` puts it back). Loading it from a run's config is still checked
# end to end in processes of their own: the `optimize` child of test_resume's real-model test,
# test_integration's CLI run, the README API example.

@pytest.fixture(scope="session")
def embedded_model() -> Backend:
    """The embedded model as `optimize` loads it by default: `build_backend(RunConfig())` (dtype auto)."""
    from prompttune.backends.factory import build_backend
    from prompttune.core.config import RunConfig

    return build_backend(RunConfig())


@pytest.fixture(scope="session")
def embedded_model_fp32() -> TransformersBackend:
    """The embedded model in fp32: the reference that other paths (prefix reuse, llama.cpp) are held to."""
    from prompttune.backends.transformers_backend import TransformersBackend

    return TransformersBackend(dtype="fp32")
