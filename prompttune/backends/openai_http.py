"""HTTP to OpenAI-compatible servers from synchronous code: a private event loop, an httpx client per
server of a `ServerPool`, and retries that stay visible (counted per server) instead of hidden in a client."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from typing import Any, Coroutine, TypeVar

import httpx

from prompttune.backends.openai_pool import ServerPool, describe_error, normalize_url
from prompttune.core.errors import BackendUnavailable, UserError

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_BUSY = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout)
T = TypeVar("T")


class ServerError(UserError):
    """A server refused a request or stayed unreachable through every retry."""


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
    """All results in order; on an outage the other calls are cancelled (the run stops anyway) and
    the results already in hand travel with the error, so the caller can keep what it paid for."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException as exc:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if isinstance(exc, BackendUnavailable):
            exc.completed = {i: t.result() for i, t in enumerate(tasks)
                             if not t.cancelled() and t.exception() is None}
        raise


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


class HttpClient:
    """The pool's servers behind `post` (with retries) and `post_once` (start-up probes)."""

    def __init__(self, base_urls: list[str], api_key_env: str | None, concurrency: int, timeout: float,
                 retries: int, backoff_base: float, quarantine_base: float) -> None:
        self.timeout, self.retries, self.backoff_base = timeout, retries, backoff_base
        self._loop = _LoopThread()
        self.clients: list[httpx.AsyncClient] = []
        try:
            urls = [normalize_url(u) for u in base_urls]
            for _ in urls:
                self.clients.append(self.run(self._make_client(api_key_env, concurrency + 1)))
            self.pool = ServerPool(urls, self.clients, concurrency, min(timeout, 10.0), timeout * retries,
                                   quarantine_base)
        except BaseException:
            self.close()
            raise

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    def gather(self, coros: list[Coroutine[Any, Any, T]]) -> list[T]:
        return self.run(_gather(coros))

    def close(self) -> None:
        """Close connections and stop the I/O thread; safe to call twice."""
        if self._loop.loop.is_closed():
            return
        for client in self.clients:
            self.run(client.aclose())
        self._loop.close()

    @staticmethod
    async def _make_client(api_key_env: str | None, connections: int) -> httpx.AsyncClient:
        headers = {}
        key = os.environ.get(api_key_env or "OPENAI_API_KEY")
        if api_key_env and key is None:
            raise UserError(f"--api-key-env {api_key_env}: that environment variable is not set")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return httpx.AsyncClient(headers=headers, limits=httpx.Limits(max_connections=connections))

    async def post_once(self, path: str, body: dict) -> dict:
        server = self.pool.servers[0]
        try:
            response = await server.client.post(server.url + path, json=body, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise UserError(f"server {server.url} failed the start-up probe: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise ServerError(f"{server.url}{path}: HTTP {response.status_code}: {_detail(response)}")
        return response.json()

    async def post(self, path: str, body: dict) -> dict:
        """One model call: least-loaded server, retries with exponential back-off (and jitter) on
        connection errors, timeouts, 408/429/5xx; a lost connection also quarantines that server.
        Raises `BackendUnavailable` after `retries` retries, or when no server answers for
        `timeout` x `retries` seconds (see `ServerPool`). The caller charged the call once, before."""
        attempt = 0
        while True:
            server = await self.pool.acquire()
            delay: float | None = None
            try:
                response = await server.client.post(server.url + path, json=body, timeout=self.timeout)
            except httpx.TransportError as exc:
                error = describe_error(exc)
                if not isinstance(exc, _BUSY):  # a slow answer is no reason to take a server out
                    self.pool.quarantine(server, error)
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
                raise BackendUnavailable(f"{server.url}{path}: giving up after {self.retries} retries ({error})")
            server.stats.retries += 1
            backoff = self.backoff_base * 2 ** attempt * random.uniform(0.5, 1.0)
            await asyncio.sleep(backoff if delay is None else delay)
            attempt += 1
