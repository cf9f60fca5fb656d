"""Several OpenAI-compatible servers as one: least-loaded routing, quarantine with back-off, an
outage deadline, counters."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from prompttune.core.errors import BackendUnavailable, UserError

log = logging.getLogger(__name__)


@dataclass
class ServerStats:
    """Per-server counters for the run report; attempts = requests + retries + failures."""

    requests: int = 0  # HTTP requests this server answered (a scored example may take several)
    retries: int = 0  # attempts here that failed retryably and were tried again
    failures: int = 0  # calls given up here: refused (4xx), or still failing after every retry
    quarantines: int = 0  # times taken out after a connection error
    readmissions: int = 0  # times put back after a health check answered


@dataclass
class Server:
    """One base URL, its own HTTP client (connections) and its routing state (calls in flight, quarantine and
    back-off). A client per server, not one for all: httpx hands each request a connection by scanning its
    whole pool, so one client over N servers costs O(N) per request and stops the pool scaling with N."""

    url: str
    client: httpx.AsyncClient
    in_flight: int = 0
    quarantined: bool = False
    probing: bool = False
    retry_at: float = 0.0
    strikes: int = 0
    last_error: str = ""
    stats: ServerStats = field(default_factory=ServerStats)


def normalize_url(url: str) -> str:
    """`http://host:8000` means its `/v1`; any explicit path is kept as given."""
    url = url.rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"--base-url {url!r} is not an http(s) URL")
    return url if parts.path else url + "/v1"


def describe_error(exc: Exception) -> str:
    """The exception's type and the first line of its message, short enough for a one-line error."""
    first = str(exc).splitlines()[0][:120] if str(exc) else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class ServerPool:
    """Routes each call to the least-loaded healthy server; quarantines dead ones with back-off.

    A quarantined server is health-checked (GET /models) once its back-off has passed and comes
    back only if that check succeeds. At most `concurrency` calls are in flight per server. Once
    every server has been out for `outage_limit` seconds, each is checked one last time and, if
    none answers, a call waiting for a server raises `BackendUnavailable` instead of waiting forever.
    """

    def __init__(self, urls: list[str], clients: list[httpx.AsyncClient], concurrency: int, health_timeout: float,
                 outage_limit: float, quarantine_base: float = 1.0, quarantine_max: float = 60.0) -> None:
        self.servers = [Server(url, client) for url, client in zip(urls, clients, strict=True)]
        self.concurrency = concurrency
        self.health_timeout = health_timeout
        self.outage_limit = outage_limit
        self.quarantine_base = quarantine_base
        self.quarantine_max = quarantine_max
        self.down_since: float | None = None  # when the last server still in service was taken out
        self._changed = asyncio.Condition()

    async def health_error(self, server: Server) -> str | None:
        """Why GET /models failed, or None when the server answers."""
        try:
            response = await server.client.get(f"{server.url}/models", timeout=self.health_timeout)
        except httpx.HTTPError as exc:
            return describe_error(exc)
        return None if response.status_code == 200 else f"HTTP {response.status_code}"

    def quarantine(self, server: Server, error: str) -> None:
        """Take a server out after a lost connection; calls failing on it meanwhile change nothing more."""
        server.last_error = error
        if server.quarantined:
            return
        server.stats.quarantines += 1
        server.quarantined = True
        log.warning("server %s taken out after a failure (%s); health-checking it again later", server.url, error)
        self._check_later(server)
        if self.down_since is None and all(s.quarantined for s in self.servers):
            self.down_since = time.monotonic()

    def _check_later(self, server: Server) -> None:
        server.retry_at = time.monotonic() + min(self.quarantine_max, self.quarantine_base * 2 ** server.strikes)
        server.strikes += 1

    def _past_deadline(self) -> bool:
        return self.down_since is not None and time.monotonic() >= self.down_since + self.outage_limit

    async def _readmit_due(self, force: bool = False) -> None:
        """Health-check the quarantined servers whose back-off has passed (all of them if `force`)."""
        now = time.monotonic()
        due = [s for s in self.servers if s.quarantined and not s.probing and (force or s.retry_at <= now)]
        if not due:
            return
        for server in due:
            server.probing = True
        errors = await asyncio.gather(*(self.health_error(s) for s in due))
        async with self._changed:
            for server, error in zip(due, errors):
                server.probing = False
                if error is None:
                    server.quarantined, server.strikes = False, 0
                    server.stats.readmissions += 1
                    self.down_since = None
                    log.warning("server %s is back", server.url)
                else:
                    server.last_error = f"health check: {error}"
                    self._check_later(server)
            self._changed.notify_all()

    def _pick(self) -> Server | None:
        open_ = [s for s in self.servers if not s.quarantined and s.in_flight < self.concurrency]
        return min(open_, key=lambda s: (s.in_flight, s.stats.requests), default=None)

    def _next_wake_in(self) -> float | None:
        """Seconds until a back-off or the outage deadline runs out; None: wait for a release."""
        times = [s.retry_at for s in self.servers if s.quarantined and not s.probing]
        if self.down_since is not None:
            times.append(self.down_since + self.outage_limit)
        return max(0.0, min(times) - time.monotonic()) if times else None

    def outage(self) -> str:
        """One line: how long every server has been out, each with its last error."""
        servers = ", ".join(f"{s.url} ({s.last_error})" for s in self.servers)
        return f"no server answered for {self.outage_limit:g} s: {servers}"

    async def acquire(self) -> Server:
        """A server with room for one more call; raises `BackendUnavailable` past the outage deadline."""
        while True:
            past_deadline = self._past_deadline()
            await self._readmit_due(force=past_deadline)
            async with self._changed:
                server = self._pick()
                if server is not None:
                    server.in_flight += 1
                    return server
                if past_deadline and self._past_deadline() and not any(s.probing for s in self.servers):
                    raise BackendUnavailable(self.outage())
                try:
                    await asyncio.wait_for(self._changed.wait(), self._next_wake_in())
                except TimeoutError:
                    pass

    async def release(self, server: Server) -> None:
        """One slot is free: wake one waiting call, not all (a batch of thousands would each wake, look and
        sleep again at every release). A waiter that misses the slot waits for the next release."""
        async with self._changed:
            server.in_flight -= 1
            self._changed.notify()
