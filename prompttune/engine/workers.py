"""Tasks in worker processes (`compare --jobs N`) that a signal stops as it stops one task in this process.

One driver loop (`Executor.run`) for two kinds of workers: a local process pool (`ProcessExecutor`) and
Ray tasks on a cluster (`prompttune.engine.ray_executor`). Only this process handles SIGINT and SIGTERM;
it passes the request on through a stop flag that each worker's search polls (`FollowedStop`). Left to
themselves, workers neither stop nor stop cleanly: a `kill` of this process never reaches them; a Ctrl-C
reaches local pool workers (the whole process group) but concurrent.futures' worker loop catches a task's
KeyboardInterrupt, reports it as that task's failure and takes the next task; and leaving `with
ProcessPoolExecutor` waits for every queued task to run to its end. Ray's workers sit in process groups of
their own, so a Ctrl-C reaches only this process, which passes it on like a `kill`.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import traceback
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from functools import partial
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Generic, Iterator, TypeVar

from prompttune.core.errors import UserError
from prompttune.core.interrupt import SIGNALS, RunInterrupted, StopRequest, stop_on_signals
from prompttune.scoring.cache import ResultCache

Item = TypeVar("Item")
Result = TypeVar("Result")
Handle = TypeVar("Handle")  # one submitted task, as its executor tracks it
WorkerTask = Callable[[Item, StopRequest], Result]

_stop_signal: Synchronized | None = None  # in a pool worker: the signal number its main process stopped on (0: none)


class FollowedStop(StopRequest):
    """A worker's stop request: the main process's, read from the stop flag (`read_signal`: 0, or the signal number)."""

    def __init__(self, read_signal: Callable[[], int]) -> None:
        super().__init__("")
        self.read_signal = read_signal

    def __call__(self) -> bool:
        if self.signal is None and (signum := self.read_signal()):
            self.signal = signal.Signals(signum).name
        return self.signal is not None

    @contextmanager
    def during_search(self) -> Iterator[None]:
        """A stop made before the search began stops at once, as a signal outside the search does in one process."""
        if self():
            raise RunInterrupted(f"stopped by {self.signal} before the search began")
        with super().during_search():
            yield


class WorkerFailed(Exception):
    """A worker's exception that cannot travel to the main process as itself (pickle refuses it, e.g. one holding
    a class DSPy made inside a function): its type and message on the first line, its traceback below."""


def run_followed(task: WorkerTask, item: Item, stop: FollowedStop) -> Result:
    """`task(item, stop)` in a worker, unless the main process stopped before it began: then it is left undone
    for the resume. A failure reaches the main process as what it is, not as the pickling error of sending it."""
    if stop():
        raise RunInterrupted("not started: the run was stopped")
    try:
        return task(item, stop)
    except Exception as error:
        try:
            pickle.dumps(error)
        except Exception:
            first = str(error).splitlines()[0] if str(error) else ""
            raise WorkerFailed(f"{type(error).__name__} in a worker{': ' + first if first else ''}\n"
                               f"{traceback.format_exc()}") from None
        raise


class Executor(ABC, Generic[Handle]):
    """Runs tasks `jobs` at a time in workers and stops them as one task in this process stops. Subclasses
    say how a task is submitted, awaited, read, stopped and killed, and how a worker reaches a cache shared
    with this process; `run` is the one driver loop. Use it as a context manager (`start`, then `close`)."""

    stopping: bool = False  # a stop was passed on to the workers
    lost: tuple[type[BaseException], ...] = ()  # what reading a task whose worker died raises

    def __init__(self, jobs: int) -> None:
        if jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {jobs}")
        self.jobs = jobs

    def run(self, task: WorkerTask, items: list[Item], on_result: Callable[[Result], None], handle_signals: bool,
            resume_command: str) -> None:
        """`task(item, stop)` for every item, `on_result` here as each finishes. A task polls `stop` as a search
        does (`StopRequest`). With `handle_signals` a first SIGINT/SIGTERM leaves the items not started and asks
        the running tasks to stop gracefully; once they have, RunInterrupted is raised. A second signal, a
        KeyboardInterrupt without `handle_signals`, or a task's failure kills the workers at once: whatever they
        paid for is in the cache, for `resume_command`."""
        signals = stop_on_signals(resume_command) if handle_signals else nullcontext(StopRequest(resume_command))
        waiting, running = list(reversed(items)), set()  # items popped in order
        try:
            with signals as request, request.during_search():
                while waiting or running:
                    while waiting and len(running) < self.jobs and not request():
                        running.add(self.submit(task, waiting.pop()))
                    if not running:  # stopped before the rest started: left for the resume
                        break
                    done, running = self.wait(running, timeout=0.1)
                    if request.signal and not self.stopping:  # a first signal: pass it on
                        self.stop(signal.Signals[request.signal])
                    for handle in done:
                        self._take(handle, on_result)
        except BaseException:
            self.kill(running)
            raise
        if request():
            raise RunInterrupted(f"stopped by {request.signal}; finish it with `{resume_command}`", request.signal)

    def _take(self, handle: Handle, on_result: Callable[[Result], None]) -> None:
        """A finished task's result to `on_result`; after a stop, a task that stopped (or a worker lost as it
        stopped) is left for the resume."""
        try:
            result = self.result(handle)
        except (RunInterrupted, *self.lost):
            if self.stopping:
                return
            raise
        on_result(result)

    def __enter__(self) -> "Executor[Handle]":
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    @abstractmethod
    def start(self) -> None:
        """Bring up the workers (or connect to them)."""

    @abstractmethod
    def cache_opener(self, path: Path) -> Callable[[], ResultCache]:
        """What a task calls to open the SQLite cache at `path`, shared with this process (picklable)."""

    @abstractmethod
    def submit(self, task: WorkerTask, item: Any) -> Handle:
        """Start `task(item, stop)` in a worker, through `run_followed` with a `FollowedStop` on this executor's flag."""

    @abstractmethod
    def wait(self, running: set[Handle], timeout: float) -> tuple[set[Handle], set[Handle]]:
        """(finished, still running), after at most `timeout` seconds."""

    @abstractmethod
    def result(self, handle: Handle) -> Any:
        """A finished task's result, or the exception it raised (RunInterrupted for one that stopped)."""

    @abstractmethod
    def stop(self, signum: signal.Signals) -> None:
        """Ask every running task to stop after its trial in flight; sets `stopping`."""

    @abstractmethod
    def kill(self, running: set[Handle]) -> None:
        """Stop the running tasks at once."""

    @abstractmethod
    def close(self) -> None:
        """Release the workers (and what `start` brought up)."""


def _start_worker(signum: Synchronized) -> None:
    """One signal is one request, made by the main process: a Ctrl-C also reaching the workers must not
    count twice (a second signal stops at once)."""
    global _stop_signal
    for number in SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    _stop_signal = signum


def _run_in_pool(task: WorkerTask, item: Item) -> Result:
    assert _stop_signal is not None, "_run_in_pool runs in a worker started by ProcessExecutor"
    signum = _stop_signal
    return run_followed(task, item, FollowedStop(lambda: signum.value))


class ProcessExecutor(Executor[Future]):
    """`jobs` spawned processes on this machine; the stop flag is a shared integer."""

    lost = (BrokenProcessPool,)

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.signum = context.Value("i", 0)
        self.pool = ProcessPoolExecutor(self.jobs, mp_context=context, initializer=_start_worker,
                                        initargs=(self.signum,))

    def cache_opener(self, path: Path) -> Callable[[], ResultCache]:
        return partial(ResultCache, path)  # the workers run on this machine, beside this process

    def submit(self, task: WorkerTask, item: Any) -> Future:
        return self.pool.submit(_run_in_pool, task, item)

    def wait(self, running: set[Future], timeout: float) -> tuple[set[Future], set[Future]]:
        done, pending = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
        return set(done), set(pending)

    def result(self, handle: Future) -> Any:
        return handle.result()

    def stop(self, signum: signal.Signals) -> None:
        self.signum.value = signum.value
        self.stopping = True

    def kill(self, running: set[Future]) -> None:
        for process in list(self.pool._processes.values()):  # ProcessPoolExecutor has no public kill before 3.14
            process.kill()

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)

