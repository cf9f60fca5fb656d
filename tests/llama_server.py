"""The suite's llama.cpp server (`prompttune.testing.llama_server`) as a session fixture. A missing llama_cpp
is a failure, not a skip: `make test` installs it, so its absence means a broken set-up."""

from __future__ import annotations

import importlib.util
from typing import Iterator

import pytest

from prompttune.testing.llama_server import INSTALL, running_llama_server


@pytest.fixture(scope="session")
def llama_server() -> Iterator[str]:
    from prompttune.backends.transformers_setup import embedded_model_path

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail(f"llama_cpp is not installed; run `make test` (it does `{INSTALL}`)")
    with running_llama_server(embedded_model_path()) as url:
        yield url
