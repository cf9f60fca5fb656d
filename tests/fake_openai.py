"""A tiny OpenAI-compatible completions server for tests (stdlib http.server in threads) that fails,
slows down or dies on command (the `fakes` fixture in conftest.py stops the ones a test started)."""

from __future__ import annotations

import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Listener(ThreadingHTTPServer):
    request_queue_size = 64  # the default 5 drops connections when a client opens many at once


class FakeServer:
    """Completions where every character is a token with log-prob -1 (or, with `varied`, a log-prob
    in (-6, 0] fixed by the text up to and including it, so different prompts predict different
    labels; top lists and echo agree, so the backend scores by echo); answers
    the next completions with the statuses queued in `failures` first, each after `delay` seconds;
    with `die_after` set, it stops (refuses connections) once it has answered that many."""

    def __init__(self, delay: float = 0.0, port: int = 0, echo: bool = True, varied: bool = False,
                 die_after: int | None = None) -> None:
        self.echo, self.varied, self.die_after = echo, varied, die_after
        self.failures: list[int] = []
        self.completions = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay = delay
        self.stopped_at: float | None = None  # time.monotonic() when it stopped answering
        self._lock = threading.Lock()
        self.httpd = _Listener(("127.0.0.1", port), self._handler())
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        if self.stopped_at is None:
            self.stopped_at = time.monotonic()
            self.httpd.shutdown()
            self.httpd.server_close()

    def _logprob(self, text: str) -> float:
        """Log-prob of the last character of `text` after the ones before it."""
        if not self.varied:
            return -1.0
        return -6.0 * (zlib.crc32(text.encode()) % 1000 / 1000) ** 3  # heavy-tailed: labels of any length can win

    def answer(self, body: dict) -> tuple[int, dict]:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            status = self.failures.pop(0) if self.failures else 200
        time.sleep(self.delay)
        with self._lock:
            self.in_flight -= 1
            self.completions += status == 200
            if self.completions == self.die_after:
                threading.Thread(target=self.stop, daemon=True).start()
        if status == 200 and body.get("echo") and not self.echo:
            status = 400
        if status != 200:
            return status, {"error": {"message": "busy\nsecond line"}}
        prompt, completion = body["prompt"], "x" * body["max_tokens"]
        full = prompt + completion
        text = full if body.get("echo") else completion
        start = len(full) - len(text)  # offsets count from the prompt's start
        positions = range(start, len(full))
        logprobs = {"tokens": list(text), "text_offset": list(positions),
                    "token_logprobs": [None if at == 0 else self._logprob(full[:at + 1]) for at in positions],
                    "top_logprobs": [{" ": self._logprob(full[:at] + " "), "x": self._logprob(full[:at] + "x"),
                                      "xy": -3.0} for at in positions]}
        return 200, {"choices": [{"text": text, "logprobs": logprobs}],
                     "usage": {"prompt_tokens": len(prompt), "completion_tokens": body["max_tokens"]}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"data": [{"id": "fake"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._send(*fake.answer(body))

        return Handler
