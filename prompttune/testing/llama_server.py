"""A TEST DEVICE: a real OpenAI-compatible server for tests and benchmarks, llama.cpp's
(llama-cpp-python) on the embedded GGUF.

`LlamaServer` starts it on a loopback port, waits until GET /v1/models answers, and kills or stops
it by PID; `running_llama_server` is a context around one (the suite's session fixture is in
tests/llama_server.py).
"""

from __future__ import annotations

import contextlib
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

INSTALL = "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_BLAS=OFF' pip install 'llama-cpp-python[server]==0.3.36'"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(path: Path) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-15:])


class LlamaServer:
    """A llama.cpp server process on a fixed loopback port: outage tests kill it and start it again
    at the same address.

    One thread by default: llama.cpp's threads spin while they wait for each other, so a second one
    on a 2-core machine, where the test process (and anything else running) needs a core too, made
    requests 6-8x slower (2 cores under load, medians of 6 interleaved rounds: 0.89 s against 0.11 s
    for a top-20 log-prob completion of a 40-token prompt, 7.7 s against 1.2 s for 16 generated
    tokens); the 135M model needs no more for the tests' short prompts."""

    def __init__(self, model: Path, threads: int = 1, port: int | None = None) -> None:
        self.command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
                        "--port", str(port or free_port()), "--n_threads", str(threads), "--n_ctx", "2048"]
        self.url = f"http://127.0.0.1:{self.command[self.command.index('--port') + 1]}/v1"
        self.log_path = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        self.process: subprocess.Popen | None = None

    def start(self, startup_s: float = 120.0) -> None:
        """Start the process and wait until GET /v1/models answers."""
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + startup_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited ({self.process.returncode}):\n{_log_tail(self.log_path)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/models", timeout=2.0).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server unhealthy after {startup_s:.0f}s:\n{_log_tail(self.log_path)}")
            time.sleep(0.25)

    def kill(self) -> None:
        """SIGKILL by PID: the server vanishes mid-request, as in a crash."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        """SIGTERM by PID, then SIGKILL if it lingers; removes the log."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None
        self.log_path.unlink(missing_ok=True)


@contextlib.contextmanager
def running_llama_server(model: Path, threads: int = 1, startup_s: float = 120.0) -> Iterator[str]:
    """Yields the base URL (`http://127.0.0.1:PORT/v1`) of a server serving `model`."""
    server = LlamaServer(model, threads)
    try:
        server.start(startup_s)
        yield server.url
    finally:
        server.stop()

