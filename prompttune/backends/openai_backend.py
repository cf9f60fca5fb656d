"""Any OpenAI-compatible completions server (vLLM, llama.cpp, SGLang, TGI), one or several.

Label scoring is probed once at start-up; the mode is logged and written into `model_id`, so
cached results of two modes never mix:
- `echo`: the server echoes prompt log-probs (`echo` + `logprobs`, with `text_offset`) and they
  agree with its next-token log-probs: exact teacher forcing, one request per label (vLLM).
- `top_logprobs`: no trustworthy echo (llama-cpp-python's echoed log-probs are shifted by one
  token): each label is walked through top-20 next-token lists, taking the longest listed token
  that continues it. Exact when the label's own tokens are listed; otherwise approximate (a path
  through shorter tokens, or a floor below the 20th entry once nothing listed fits).
- `none`: no log-probs at all; only generation works (`--scoring generate`).

httpx with asyncio rather than the `openai` client: scoring needs non-standard fields and raw
`text_offset`s, and retries must be visible (counted per server), not hidden inside a client.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Coroutine, Literal, TypeVar
from urllib.parse import urlsplit

import httpx

from prompttune.backends.base import Backend
from prompttune.core.errors import UserError
from prompttune.core.types import GenerateRequest, GenerateResult, Prompt, ScoreRequest, ScoreResult

log = logging.getLogger(__name__)

ScoringMode = Literal["echo", "top_logprobs", "none"]
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_BUSY = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout)
TOP_LOGPROBS = 20  # the most the OpenAI API allows
_PROBE_TEXT, _PROBE_CONTINUATION = "The capital of France is", " Paris"
_ECHO_TOLERANCE = 0.25  # nats between echoed and next-token log-probs of the same token
T = TypeVar("T")


class ServerError(UserError):
    """A server refused a request or stayed unreachable through every retry."""


@dataclass
class ServerStats:
    """Per-server counters for the run report; attempts = requests + retries + failures."""

    requests: int = 0  # HTTP requests this server answered (a scored example may take several)
    retries: int = 0  # attempts here that failed retryably and were tried again
    failures: int = 0  # calls given up (or refused) with their last attempt here
    quarantines: int = 0  # times taken out after a connection error or failed health check


@dataclass
class Server:
    """One base URL and its routing state (calls in flight, quarantine and back-off)."""

    url: str
    in_flight: int = 0
    quarantined: bool = False
    probing: bool = False
    retry_at: float = 0.0
    strikes: int = 0
    stats: ServerStats = field(default_factory=ServerStats)


def normalize_url(url: str) -> str:
    """`http://host:8000` means its `/v1`; any explicit path is kept as given."""
    url = url.rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"--base-url {url!r} is not an http(s) URL")
    return url if parts.path else url + "/v1"


class ServerPool:
    """Routes each call to the least-loaded healthy server; quarantines dead ones with back-off.

    A quarantined server is health-checked (GET /models) once its back-off has passed and comes
    back only if that check succeeds. At most `concurrency` calls are in flight per server.
    """

    def __init__(self, urls: list[str], client: httpx.AsyncClient, concurrency: int,
                 health_timeout: float, quarantine_base: float = 1.0, quarantine_max: float = 60.0) -> None:
        self.servers = [Server(u) for u in urls]
        self.client = client
        self.concurrency = concurrency
        self.health_timeout = health_timeout
        self.quarantine_base = quarantine_base
        self.quarantine_max = quarantine_max
        self._changed = asyncio.Condition()

    async def healthy(self, server: Server) -> bool:
        try:
            response = await self.client.get(f"{server.url}/models", timeout=self.health_timeout)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def quarantine(self, server: Server) -> None:
        if not server.quarantined:
            server.stats.quarantines += 1
            log.warning("server %s taken out after a failure; health-checking it again later", server.url)
        server.quarantined = True
        server.retry_at = time.monotonic() + min(self.quarantine_max,
                                                 self.quarantine_base * 2 ** server.strikes)
        server.strikes += 1

    async def _readmit_due(self) -> None:
        now = time.monotonic()
        due = [s for s in self.servers if s.quarantined and not s.probing and s.retry_at <= now]
        if not due:
            return
        for server in due:
            server.probing = True
        results = await asyncio.gather(*(self.healthy(s) for s in due))
        async with self._changed:
            for server, ok in zip(due, results):
                server.probing = False
                if ok:
                    server.quarantined, server.strikes = False, 0
                    log.warning("server %s is back", server.url)
                else:
                    self.quarantine(server)
            self._changed.notify_all()

    def _pick(self) -> Server | None:
        open_ = [s for s in self.servers if not s.quarantined and s.in_flight < self.concurrency]
        return min(open_, key=lambda s: (s.in_flight, s.stats.requests), default=None)

    def _next_readmit_in(self) -> float | None:
        waiting = [s.retry_at for s in self.servers if s.quarantined and not s.probing]
        return max(0.0, min(waiting) - time.monotonic()) if waiting else None

    async def acquire(self) -> Server:
        while True:
            await self._readmit_due()
            async with self._changed:
                server = self._pick()
                if server is not None:
                    server.in_flight += 1
                    return server
                try:
                    await asyncio.wait_for(self._changed.wait(), self._next_readmit_in())
                except TimeoutError:
                    pass

    async def release(self, server: Server) -> None:
        async with self._changed:
            server.in_flight -= 1
            self._changed.notify_all()


class _LoopThread:
    """A private event loop in a daemon thread: the synchronous Backend API can drive async I/O
    even when the caller already runs an event loop (a notebook)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="prompttune-http", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _gather(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    return list(await asyncio.gather(*coros))


def _detail(response: httpx.Response) -> str:
    """The server's error message, first line only (bodies can be whole tracebacks)."""
    try:
        body = response.json()
        message = body.get("error", body) if isinstance(body, dict) else body
        message = message.get("message", message) if isinstance(message, dict) else message
    except ValueError:
        message = response.text
    lines = str(message).strip().splitlines()
    return lines[0][:200] if lines else response.reason_phrase


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return min(30.0, max(0.0, float(response.headers["retry-after"])))
    except (KeyError, ValueError):
        return None


def echoed_span(logprobs: dict, start: int, end: int) -> tuple[list[float], int]:
    """Log-probs of the echoed tokens that carry characters [start, end), and how many tokens
    come before them. A token that begins before `start` but reaches past it is included."""
    offsets = logprobs["text_offset"]
    ends = offsets[1:] + [math.inf]
    picked = [i for i, (a, b) in enumerate(zip(offsets, ends)) if a < end and b > start and b > a]
    if not picked:
        raise ServerError(f"echoed log-probs do not cover characters {start}..{end} of the prompt")
    if offsets[picked[0]] < start:
        log.warning("a label starts inside a server token; its score includes that whole token")
    return [float(logprobs["token_logprobs"][i]) for i in picked], picked[0]


def last_prompt_top(logprobs: dict, end: int) -> dict[str, float] | None:
    """The top list of the last echoed token that starts before character `end`."""
    before = [i for i, offset in enumerate(logprobs["text_offset"]) if offset < end]
    return logprobs["top_logprobs"][before[-1]] if before else None


def next_piece(top: dict[str, float], rest: str) -> tuple[str, float] | None:
    """The longest top-list token that starts `rest`, with its log-prob; None if none does."""
    pieces = [t for t in top if t and rest.startswith(t)]
    if not pieces:
        return None
    piece = max(pieces, key=len)
    return piece, float(top[piece])


class OpenAIBackend(Backend):
    """Label scoring and greedy generation over HTTP, spread across `base_urls`."""

    def __init__(self, base_urls: list[str], model: str, api_key_env: str | None = None,
                 tokenizer: Any = None, concurrency: int = 8, timeout: float = 60.0, retries: int = 4,
                 backoff_base: float = 0.5, quarantine_base: float = 1.0) -> None:
        """`tokenizer` (a transformers tokenizer) only renders chat prompts; the server tokenizes."""
        if not base_urls:
            raise UserError("--backend openai needs at least one --base-url")
        self.tokenizer = tokenizer
        self.timeout = timeout
        self.retries = retries
        self.backoff_base = backoff_base
        self._echo_shifted = False  # set by the probe
        self._loop = _LoopThread()
        try:
            self._client = self._loop.run(self._make_client(api_key_env, len(base_urls) * (concurrency + 1)))
            self.pool = ServerPool([normalize_url(u) for u in base_urls], self._client, concurrency,
                                   min(timeout, 10.0), quarantine_base)
            self.model = self._loop.run(self._start_up(model))
            self.mode: ScoringMode = self._loop.run(self._probe_mode())
        except BaseException:
            self.close()
            raise
        self.model_id = f"openai:{self.model}|{self.mode}"
        message = self.describe()
        (log.info if self.mode == "echo" else log.warning)(message)

    @staticmethod
    async def _make_client(api_key_env: str | None, connections: int) -> httpx.AsyncClient:
        headers = {}
        key = os.environ.get(api_key_env or "OPENAI_API_KEY")
        if api_key_env and key is None:
            raise UserError(f"--api-key-env {api_key_env}: that environment variable is not set")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return httpx.AsyncClient(headers=headers, limits=httpx.Limits(max_connections=connections))

    def describe(self) -> str:
        """One line for the run log: model, servers and which scoring method is in use."""
        how = {"echo": "exact teacher-forced log-probs (echo + logprobs)",
               "top_logprobs": f"labels walked through top-{TOP_LOGPROBS} next-token log-probs (no "
                               f"trustworthy echo): exact while the label's tokens rank in the top "
                               f"{TOP_LOGPROBS}, approximate otherwise",
               "none": "unavailable (server returns no log-probs; use --scoring generate)"}[self.mode]
        return (f"openai backend: model {self.model} on {len(self.pool.servers)} server(s); "
                f"label scoring: {how}")

    @property
    def stats(self) -> dict[str, ServerStats]:
        return {s.url: s.stats for s in self.pool.servers}

    def close(self) -> None:
        """Close connections and stop the I/O thread; safe to call twice."""
        if self._loop.loop.is_closed():
            return
        if getattr(self, "_client", None) is not None:
            self._loop.run(self._client.aclose())
        self._loop.close()

    async def _start_up(self, model: str) -> str:
        """Every server must answer GET /models and serve `model` (the single served model
        stands in for the embedded default); returns the name to send."""
        served: list[set[str]] = []
        for server in self.pool.servers:
            try:
                response = await self._client.get(f"{server.url}/models", timeout=self.pool.health_timeout)
                response.raise_for_status()
                served.append({m["id"] for m in response.json().get("data", [])})
            except (httpx.HTTPError, ValueError, KeyError, AttributeError) as exc:
                why = str(exc).splitlines()[0] if str(exc) else "no answer"
                raise UserError(f"cannot reach an OpenAI-compatible server at {server.url} "
                                f"({type(exc).__name__}: {why})") from None
        if model.startswith("embedded:") and len(served[0]) == 1:
            model = next(iter(served[0]))
        for server, models in zip(self.pool.servers, served):
            if models and model not in models:
                raise UserError(f"server {server.url} serves {', '.join(sorted(models))}, not {model!r}: "
                                "pass one of those with --model")
        return model

    async def _probe_mode(self) -> ScoringMode:
        """Next-token top log-probs for a probe text, then echo of the text plus its likely
        continuation: echo is used only if its log-prob of that token matches the next-token one."""
        try:
            body = self._next_token_body(_PROBE_TEXT, 1, TOP_LOGPROBS)
            top = (await self._post_once("/completions", body))["choices"][0]["logprobs"]["top_logprobs"][0]
        except (ServerError, KeyError, IndexError, TypeError, ValueError):
            top = None
        expected = next_piece(top, _PROBE_CONTINUATION) if top else None
        full = _PROBE_TEXT + _PROBE_CONTINUATION
        try:
            response = await self._post_once("/completions", self._echo_body(full, TOP_LOGPROBS))
            choice = response["choices"][0]
            echoed = echoed_span(choice["logprobs"], len(_PROBE_TEXT), len(full))[0] \
                if choice["text"].startswith(full) else None
            before = last_prompt_top(choice["logprobs"], len(_PROBE_TEXT)) or {}
        except (ServerError, KeyError, IndexError, TypeError, ValueError):
            echoed, before = None, {}
        if echoed and (expected is None or abs(echoed[0] - expected[1]) <= _ECHO_TOLERANCE):
            return "echo"
        if echoed and expected:
            # Shifted: the entry one position early holds the next-token log-prob of that token.
            self._echo_shifted = abs(before.get(expected[0], math.inf) - expected[1]) <= _ECHO_TOLERANCE
            log.warning("echoed prompt log-probs %s next-token log-probs (%.2f vs %.2f): not using echo",
                        "are shifted by one token from" if self._echo_shifted else "disagree with",
                        echoed[0], expected[1])
        return "top_logprobs" if top else "none"

    async def _post_once(self, path: str, body: dict) -> dict:
        server = self.pool.servers[0]
        try:
            response = await self._client.post(server.url + path, json=body, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise UserError(f"server {server.url} failed the start-up probe: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise ServerError(f"{server.url}{path}: HTTP {response.status_code}: {_detail(response)}")
        return response.json()

    def _echo_body(self, full: str, top: int = 1) -> dict:
        # max_tokens=1, not 0: llama.cpp's server reads 0 as "until the context is full".
        return {"model": self.model, "prompt": full, "max_tokens": 1, "temperature": 0.0,
                "echo": True, "logprobs": top}

    def _next_token_body(self, text: str, max_tokens: int, top: int | None) -> dict:
        body = {"model": self.model, "prompt": text, "max_tokens": max_tokens, "temperature": 0.0}
        if top is not None:
            body["logprobs"] = top
        return body

    async def _post(self, path: str, body: dict) -> dict:
        """One model call: least-loaded server, retries with exponential back-off (and jitter) on
        connection errors, timeouts, 408/429/5xx; a lost connection also quarantines that server."""
        attempt = 0
        while True:
            server = await self.pool.acquire()
            delay: float | None = None
            try:
                response = await self._client.post(server.url + path, json=body, timeout=self.timeout)
            except httpx.TransportError as exc:
                if not isinstance(exc, _BUSY):  # a slow answer is no reason to take a server out
                    self.pool.quarantine(server)
                error = type(exc).__name__
            else:
                if response.status_code == 200:
                    server.stats.requests += 1
                    return response.json()
                error = f"HTTP {response.status_code}: {_detail(response)}"
                if response.status_code not in RETRYABLE_STATUS:
                    server.stats.failures += 1
                    raise ServerError(f"{server.url}{path}: {error}")
                delay = _retry_after(response)
            finally:
                await self.pool.release(server)
            if attempt == self.retries:
                server.stats.failures += 1
                raise ServerError(f"{server.url}{path}: giving up after {self.retries} retries ({error})")
            server.stats.retries += 1
            backoff = self.backoff_base * 2 ** attempt * random.uniform(0.5, 1.0)
            await asyncio.sleep(backoff if delay is None else delay)
            attempt += 1

    def to_text(self, prompt: Prompt) -> str:
        if prompt.messages is None:
            return prompt.text or ""
        if self.tokenizer is None:
            raise UserError("chat prompts need the model's chat template, which /v1/completions does "
                            "not apply: pass --tokenizer (a local path or id of the model's tokenizer)")
        messages = [{"role": role, "content": content} for role, content in prompt.messages]
        rendered = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return rendered + prompt.assistant_prefix

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        if self.mode == "none":
            raise UserError(f"{self.pool.servers[0].url} returns no log-probs, so labels cannot be "
                            "scored: use --scoring generate")
        scorer = self._score_echo if self.mode == "echo" else self._score_top
        return self._loop.run(_gather([scorer(r) for r in requests]))

    async def _score_echo(self, request: ScoreRequest) -> ScoreResult:
        start = len(request.text)

        async def one(continuation: str) -> tuple[list[float], int]:
            full = request.text + continuation
            choice = (await self._post("/completions", self._echo_body(full)))["choices"][0]
            return echoed_span(choice["logprobs"], start, len(full))

        spans = [await one(c) for c in request.continuations]  # in order: the server's prefix cache hits
        return ScoreResult(tuple(sum(lps) for lps, _ in spans), spans[0][1] if spans else 0,
                           sum(len(lps) for lps, _ in spans))

    async def _score_top(self, request: ScoreRequest) -> ScoreResult:
        """Each label piece by piece: the longest top-list token that continues it, then the next
        position; prefixes shared by labels are asked once."""
        asked: dict[str, tuple[dict[str, float], dict]] = {}

        async def top_after(prefix: str) -> dict[str, float]:
            if prefix not in asked:
                asked[prefix] = await self._next_top(request.text + prefix)
            return asked[prefix][0]

        scores, pieces = [], 0
        for continuation in request.continuations:
            done, total = 0, 0.0
            while done < len(continuation):
                top = await top_after(continuation[:done])
                found = next_piece(top, continuation[done:])
                if found is None:
                    total += min(top.values()) - math.log(2.0)  # below everything in the top list
                    break
                done, total, pieces = done + len(found[0]), total + found[1], pieces + 1
            scores.append(total)
        prompt_tokens = asked[""][1].get("usage", {}).get("prompt_tokens", 0) if "" in asked else 0
        return ScoreResult(tuple(scores), prompt_tokens, pieces)

    async def _next_top(self, text: str) -> tuple[dict[str, float], dict]:
        """Top next-token log-probs after `text` (and the response). When the likeliest next token
        ends the text, some servers (llama-cpp-python) return no completion token and so no
        log-probs; their shifted echo still holds them at the last prompt position."""
        response = await self._post("/completions", self._next_token_body(text, 1, TOP_LOGPROBS))
        tops = (response["choices"][0].get("logprobs") or {}).get("top_logprobs") or []
        if tops and tops[0]:
            return tops[0], response
        if self._echo_shifted:
            echoed = await self._post("/completions", self._echo_body(text, TOP_LOGPROBS))
            top = last_prompt_top(echoed["choices"][0]["logprobs"], len(text))
            if top:
                return top, response
        raise ServerError(f"the server gave no next-token log-probs after {text[-40:]!r} (the likeliest "
                          "next token ends the text): use --scoring generate")

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return self._loop.run(_gather([self._generate_one(r) for r in requests]))

    async def _generate_one(self, request: GenerateRequest) -> GenerateResult:
        top = None if self.mode == "none" else 1
        response = await self._post("/completions", self._next_token_body(request.text,
                                                                           request.max_new_tokens, top))
        choice = response["choices"][0]
        token_logprobs = tuple(float(x) for x in ((choice.get("logprobs") or {}).get("token_logprobs") or []))
        usage = response.get("usage") or {}
        return GenerateResult(choice["text"], token_logprobs, usage.get("prompt_tokens", 0),
                              usage.get("completion_tokens", len(token_logprobs)))
