"""`compare --executor ray[:ADDRESS]`: arm-seeds as Ray tasks, `--jobs` at a time, stopped as worker processes are.

Ray's workers run in process groups of their own, so a Ctrl-C reaches only this process; its first signal is
passed on through a small actor (the stop flag) that each task's search polls, so every running arm stops after
its trial in flight and writes its interim report, as in a local worker process. A second signal cancels the
tasks by force (their worker processes are killed; what they paid for is in the shared cache). Ray reports a
task's KeyboardInterrupt as a cancellation, so a task that stopped returns `Stopped` instead of raising.

The comparison's SQLite cache keeps a write-ahead log that only processes on one machine may share, so tasks
reach it through an actor on this process's machine (`CacheServer`) rather than opening the file; the run
directory itself (each arm's trials, reports and arm.json) must be on a file system every node mounts at the
same path.
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from prompttune.core.errors import UserError
from prompttune.core.interrupt import RunInterrupted
from prompttune.engine.workers import Executor, FollowedStop, Item, WorkerTask, run_followed
from prompttune.scoring.cache import ResultCache

try:
    import ray
    from ray.exceptions import RayError, RayTaskError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:
    raise UserError("--executor ray needs Ray: pip install 'prompttune[ray]'") from None

POLL_SECONDS = 0.25  # how stale a task's view of the stop flag may be: a search polls it before every evaluation


class StopFlag:
    """The main process's stop request for the tasks to read: 0, or the number of the signal it stopped on."""

    def __init__(self) -> None:
        self.signum = 0

    def set(self, signum: int) -> None:
        self.signum = signum

    def get(self) -> int:
        return self.signum


class PolledFlag:
    """A task's reader of the stop flag: one round trip to the actor at most every POLL_SECONDS."""

    def __init__(self, flag: Any) -> None:
        self.flag, self.signum, self.next_read = flag, 0, 0.0

    def __call__(self) -> int:
        if not self.signum and time.monotonic() >= self.next_read:
            self.signum = ray.get(self.flag.get.remote())
            self.next_read = time.monotonic() + POLL_SECONDS
        return self.signum


class CacheServer:
    """The comparison's shared cache, opened on this process's machine for tasks on any node."""

    def __init__(self, path: Path) -> None:
        self.cache = ResultCache(path)

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        return self.cache.get_many(keys)

    def put_many(self, items: list[tuple[str, Any]]) -> None:
        self.cache.put_many(items)

    def size(self) -> int:
        return len(self.cache)

    def close(self) -> None:
        self.cache.close()


class RemoteCache(ResultCache):
    """A task's view of the `CacheServer`: what `MeteredCache` asks of its shared cache, one round trip each."""

    def __init__(self, server: Any) -> None:  # no file of its own
        self.server = server

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        return ray.get(self.server.get_many.remote(keys))

    def put_many(self, items: Iterable[tuple[str, Any]]) -> None:
        ray.get(self.server.put_many.remote(list(items)))

    def __len__(self) -> int:
        return ray.get(self.server.size.remote())

    def close(self) -> None:
        """The server's owner (the executor) closes the file."""


@dataclass(frozen=True)
class Stopped:
    """What a task that stopped on request returns (its RunInterrupted would reach this process as a cancellation)."""

    reason: str


def _run_in_ray(task: WorkerTask, item: Item, flag: Any) -> Any:
    try:
        return run_followed(task, item, FollowedStop(PolledFlag(flag)))
    except RunInterrupted as stopped:
        return Stopped(str(stopped))


class RayExecutor(Executor["ray.ObjectRef"]):
    """Tasks of one CPU each on a Ray cluster: the one this process is already connected to, else the one
    `address` (or RAY_ADDRESS) names, else a local one started here and shut down after. A task is not retried
    when its worker dies: the comparison stops and `compare --resume` finishes it."""

    lost = (RayError,)

    def __init__(self, jobs: int, address: str | None) -> None:
        super().__init__(jobs)
        self.address = address
        self.connected_here = False
        self.cache_servers: list[Any] = []

    def start(self) -> None:
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"the Ray cluster at {self.address}" if self.address else "Ray"
                raise UserError(f"--executor: could not start or reach {where}: {str(exc).splitlines()[0]}") from None
            self.connected_here = True
        self.flag = ray.remote(num_cpus=0)(StopFlag).remote()
        self.remote_run = ray.remote(num_cpus=1, max_retries=0)(_run_in_ray)

    def cache_opener(self, path: Path) -> Callable[[], ResultCache]:
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        server = ray.remote(num_cpus=0)(CacheServer).options(scheduling_strategy=here).remote(path)
        self.cache_servers.append(server)
        return partial(RemoteCache, server)

    def submit(self, task: WorkerTask, item: Any) -> "ray.ObjectRef":
        return self.remote_run.remote(task, item, self.flag)

    def wait(self, running: set["ray.ObjectRef"], timeout: float) -> tuple[set["ray.ObjectRef"], set["ray.ObjectRef"]]:
        done, _ = ray.wait(list(running), num_returns=1, timeout=timeout)
        return set(done), running - set(done)

    def result(self, handle: "ray.ObjectRef") -> Any:
        try:
            value = ray.get(handle)
        except RayTaskError as failure:  # the task's own exception, with its one-line message
            raise failure.cause or failure from None
        if isinstance(value, Stopped):
            raise RunInterrupted(value.reason)
        return value

    def stop(self, signum: signal.Signals) -> None:
        ray.get(self.flag.set.remote(signum.value))
        self.stopping = True

    def kill(self, running: set["ray.ObjectRef"]) -> None:
        for handle in running:
            ray.cancel(handle, force=True)

    def close(self) -> None:
        ray.get([server.close.remote() for server in self.cache_servers])
        for actor in [self.flag, *self.cache_servers]:
            ray.kill(actor)
        if self.connected_here:
            ray.shutdown()
