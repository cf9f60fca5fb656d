"""A real OpenAI-compatible server for tests: llama.cpp's (llama-cpp-python) on the embedded GGUF.

`running_llama_server` starts it on a free loopback port, waits until GET /v1/models answers,
and stops it by PID; `llama_server` is the session fixture around it. A missing llama_cpp is a
failure, not a skip: `make test` installs it, so its absence means a broken set-up.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

INSTALL = "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_BLAS=OFF' pip install 'llama-cpp-python[server]==0.3.36'"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(path: Path) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-15:])


@contextlib.contextmanager
def running_llama_server(model: Path, threads: int = 2, startup_s: float = 120.0) -> Iterator[str]:
    """Yields the base URL (`http://127.0.0.1:PORT/v1`) of a server serving `model`."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    log_path = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--n_threads", str(threads), "--n_ctx", "2048"]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited ({process.returncode}):\n{_log_tail(log_path)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/models", timeout=2.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server unhealthy after {startup_s:.0f}s:\n"
                                   f"{_log_tail(log_path)}")
            time.sleep(0.25)
        yield url
    finally:
        _stop(process.pid, process)
        log_path.unlink(missing_ok=True)


def _stop(pid: int, process: subprocess.Popen) -> None:
    """SIGTERM by PID, then SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="session")
def llama_server() -> Iterator[str]:
    from prompttune.backends.transformers_backend import embedded_model_path

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail(f"llama_cpp is not installed; run `make test` (it does `{INSTALL}`)")
    with running_llama_server(embedded_model_path()) as url:
        yield url
