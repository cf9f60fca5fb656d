"""Throughput of the OpenAI-compatible backend's server pool with N = 1, 2, 4, 8 servers, on loopback.

Each server is a fake (`prompttune/testing/fake_openai.py`) that answers every request after `--delay` seconds, as a
latency-bound model server (a vLLM replica answering a batch) does, over persistent HTTP/1.1 connections as
vLLM's; all of them run in one child process,
so their JSON work does not share this process's interpreter. For each N, one `score` call asks for
`--per-server` x N labelled examples (three labels each, scored by echo: three HTTP requests an example)
through `OpenAIBackend` with `--concurrency` requests in flight per server, and the rate is timed.

Printed per N: examples scored per second (prompttune's calls/s), HTTP requests per second, and the ratio
to N x the one-server rate (the target: at least 0.8).

Run from the repository root: python benchmarks/server_pool.py [--servers 1,2,4,8] [--delay 0.1]
    [--concurrency 8] [--per-server 400]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prompttune.backends.openai_backend import OpenAIBackend  # noqa: E402
from prompttune.core.types import ScoreRequest  # noqa: E402

LABELS = (" red", " green", " blue")


def serve(count: int, delay: float, pipe: Connection) -> None:
    """`count` fake servers in this (child) process; their URLs go back through `pipe`, which then says when to stop."""
    from prompttune.testing.fake_openai import FakeServer

    servers = [FakeServer(delay=delay, keep_alive=True) for _ in range(count)]
    pipe.send([server.url for server in servers])
    pipe.recv()
    for server in servers:
        server.stop()


def measure(urls: list[str], concurrency: int, examples: int) -> tuple[float, float]:
    """Examples and HTTP requests per second of one `score` call over `examples` examples."""
    backend = OpenAIBackend(urls, "fake", concurrency=concurrency)
    try:
        requests = [ScoreRequest(f"Input: item {i}\nAnswer:", LABELS) for i in range(examples)]
        backend.score(requests[:concurrency])  # connections open
        before = sum(s.requests for s in backend.stats.values())
        started = time.perf_counter()
        backend.score(requests)
        seconds = time.perf_counter() - started
        answered = sum(s.requests for s in backend.stats.values()) - before
    finally:
        backend.close()
    return examples / seconds, answered / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="1,2,4,8", help="comma-separated server counts")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds each server takes per request")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight per server")
    parser.add_argument("--per-server", type=int, default=400, help="examples scored per server in the pool")
    args = parser.parse_args()
    counts = [int(n) for n in args.servers.split(",")]
    here, there = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(target=serve, args=(max(counts), args.delay, there))
    child.start()
    try:
        urls = here.recv()
        print(f"fake servers: {args.delay * 1000:g} ms a request, {args.concurrency} in flight per server, "
              f"{args.per_server} examples x {len(LABELS)} labels per server")
        print(f"{'servers':>7} {'examples/s':>11} {'requests/s':>11} {'ideal req/s':>12} {'vs N x one':>10}")
        one = None
        for n in counts:
            rate, http_rate = measure(urls[:n], args.concurrency, args.per_server * n)
            one = one if one is not None else rate / n
            ideal = n * args.concurrency / args.delay
            print(f"{n:>7} {rate:>11.1f} {http_rate:>11.1f} {ideal:>12.0f} {rate / (n * one):>10.2f}")
    finally:
        here.send("stop")
        child.join(timeout=10)


if __name__ == "__main__":
    main()
