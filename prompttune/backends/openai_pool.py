"""Several OpenAI-compatible servers as one: least-loaded routing, quarantine with back-off, counters."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from prompttune.core.errors import UserError

log = logging.getLogger(__name__)


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
