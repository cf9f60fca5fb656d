"""A TEST DEVICE: a tiny OpenAI-compatible server for tests and benchmarks (stdlib http.server in
threads): completions and chat completions, failing, slowing down or dying on command (the `fakes`
fixture in tests/conftest.py stops the ones a test started)."""

from __future__ import annotations

import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONSTRAINT_FIELDS = ("grammar", "structured_outputs", "guided_choice", "response_format")


def _forced(field: str, value: Any) -> str:
    """The answer a server honouring the constraint `field` gives: its first choice (as the backend's probe
    writes each field)."""
    if field == "grammar":
        return value.split('"')[1]
    if field == "response_format":
        return json.dumps({"label": value["json_schema"]["schema"]["properties"]["label"]["enum"][0]})
    return (value["choice"] if field == "structured_outputs" else value)[0]


class _Listener(ThreadingHTTPServer):
    request_queue_size = 64  # the default 5 drops connections when a client opens many at once


class FakeServer:
    """Completions where every character is a token with log-prob -1 (or, with `varied`, a log-prob
    in (-6, 0] fixed by the text up to and including it, so different prompts predict different
    labels; top lists and echo agree, so the backend scores by echo); answers
    the next completions with the statuses queued in `failures` first, each after `delay` seconds;
    with `die_after` set, it stops (refuses connections) once it has answered that many.

    Chat completions answer "x" per token, every token listing `chat_top` (best first, cut to the
    `top_logprobs` asked, which may not pass `max_top`); with `prefill`, an answer to a final
    assistant message it is asked to continue starts " Paris", as a real model's answer to the
    backend's probe does. `completions=False` makes it a chat-only server (404 on /completions);
    `chat_bodies` keeps every chat request. `keep_alive` answers over HTTP/1.1 persistent connections, as
    vLLM does (benchmarks); by default each connection closes after one answer, so that a server that
    stops answers no more on a connection already open.

    Constraint fields (`CONSTRAINT_FIELDS`) are ignored, as most servers ignore a field they do not know,
    except those named in `honours`, answered with their first choice (a `logit_bias` never flips it);
    with `rejects`, a request holding any other is answered 400."""

    def __init__(self, delay: float = 0.0, port: int = 0, echo: bool = True, varied: bool = False,
                 die_after: int | None = None, completions: bool = True, prefill: bool = False,
                 max_top: int = 20, chat_top: dict[str, float] | None = None, keep_alive: bool = False,
                 honours: tuple[str, ...] = (), rejects: bool = False) -> None:
        self.echo, self.varied, self.die_after, self.keep_alive = echo, varied, die_after, keep_alive
        self.honours, self.rejects = honours, rejects
        self.offers_completions, self.prefill, self.max_top = completions, prefill, max_top
        self.chat_top = chat_top if chat_top is not None else {"red": -0.5, "green": -1.5, "blue": -2.5}
        self.chat_bodies: list[dict] = []
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

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
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
        chat = path.endswith("/chat/completions")
        if status == 200 and body.get("echo") and not self.echo:
            status = 400
        if status == 200 and not chat and not self.offers_completions:
            return 404, {"error": {"message": "this is a chat model: use /v1/chat/completions"}}
        if status == 200 and chat and (body.get("top_logprobs") or 0) > self.max_top:
            return 400, {"error": {"message": f"top_logprobs must be at most {self.max_top}"}}
        if status != 200:
            return status, {"error": {"message": "busy\nsecond line"}}
        fields = [name for name in CONSTRAINT_FIELDS if name in body]
        if self.rejects and any(name not in self.honours for name in fields):
            return 400, {"error": {"message": f"unknown field: {fields[0]}"}}
        forced = next((_forced(name, body[name]) for name in fields if name in self.honours), None)
        if chat:
            return 200, self._chat(body, forced)
        prompt, completion = body["prompt"], forced or "x" * body["max_tokens"]
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

    def _chat(self, body: dict, forced: str | None) -> dict:
        with self._lock:
            self.chat_bodies.append(body)
        messages, n = body["messages"], body["max_tokens"]
        go_on = self.prefill and body.get("continue_final_message") and messages[-1]["role"] == "assistant"
        tokens = [forced] if forced else ([" Paris"] if go_on else []) + ["x"] * n
        top = [{"token": t, "logprob": lp} for t, lp in sorted(self.chat_top.items(), key=lambda kv: -kv[1])]
        listed = top[:body.get("top_logprobs") or 0]
        logprobs = {"content": [{"token": t, "logprob": -1.0, "top_logprobs": listed} for t in tokens[:n]]}
        return {"choices": [{"message": {"role": "assistant", "content": "".join(tokens[:n])},
                             "logprobs": logprobs if body.get("logprobs") else None}],
                "usage": {"prompt_tokens": len(json.dumps(messages)), "completion_tokens": n}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if fake.keep_alive else "HTTP/1.0"

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
                self._send(*fake.answer(self.path, body))

        return Handler
