"""Tasks in worker processes (`compare --jobs N`) that a signal stops as it stops one task in this process.

The workers ignore SIGINT and SIGTERM; this process alone handles them and passes the request on
through a shared flag that each worker's search polls. Left to themselves, workers neither stop nor
stop cleanly: a `kill` of this process never reaches them; a Ctrl-C does (it reaches the whole
process group), but concurrent.futures' worker loop catches a task's KeyboardInterrupt, reports it
as that task's failure and takes the next task; and leaving `with ProcessPoolExecutor` waits for
every queued task to run to its end.
"""

from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from multiprocessing.sharedctypes import Synchronized
from typing import Callable, Iterator, TypeVar

from prompttune.core.interrupt import SIGNALS, RunInterrupted, StopRequest, stop_on_signals

Item = TypeVar("Item")
Result = TypeVar("Result")

_stop_signal: Synchronized | None = None  # in a worker: the signal number its main process stopped on (0: none)


class FollowedStop(StopRequest):
    """A worker's stop request: the main process's, read from the shared signal number."""

    def __init__(self, signum: Synchronized) -> None:
        super().__init__("")
        self.signum = signum

    def __call__(self) -> bool:
        if self.signal is None and self.signum.value:
            self.signal = signal.Signals(self.signum.value).name
        return self.signal is not None

    @contextmanager
    def during_search(self) -> Iterator[None]:
        """A stop made before the search began stops at once, as a signal outside the search does in one process."""
        if self():
            raise RunInterrupted(f"stopped by {self.signal} before the search began")
        with super().during_search():
            yield


def _start_worker(signum: Synchronized) -> None:
    """One signal is one request, made by the main process: a Ctrl-C also reaching the workers must not
    count twice (a second signal stops at once)."""
    global _stop_signal
    for number in SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    _stop_signal = signum


def _run(task: Callable[[Item, StopRequest], Result], item: Item) -> Result:
    assert _stop_signal is not None, "_run runs in a worker started by run_in_workers"
    stop = FollowedStop(_stop_signal)
    if stop():  # queued before the stop and too late to cancel: left undone for the resume
        raise RunInterrupted("not started: the run was stopped")
    return task(item, stop)


def run_in_workers(task: Callable[[Item, StopRequest], Result], items: list[Item], jobs: int,
                   on_result: Callable[[Result], None], handle_signals: bool, resume_command: str) -> None:
    """`task(item, stop)` for every item in `jobs` spawned processes, `on_result` here as each finishes. A task
    polls `stop` as a search does (`StopRequest`). With `handle_signals` a first SIGINT/SIGTERM cancels the items
    not started and asks the running tasks to stop gracefully; once they have, RunInterrupted is raised. A second
    signal, a KeyboardInterrupt without `handle_signals`, or a task's failure kills the workers at once: whatever
    they paid for is in the cache, for `resume_command`."""
    context = multiprocessing.get_context("spawn")
    signum = context.Value("i", 0)
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker, initargs=(signum,))
    signals = stop_on_signals(resume_command) if handle_signals else nullcontext(StopRequest(resume_command))
    try:
        with signals as request, request.during_search():
            pending: set[Future[Result]] = {pool.submit(_run, task, item) for item in items}
            while pending:
                done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                if request.signal and not signum.value:  # a first signal: pass it on
                    signum.value = signal.Signals[request.signal].value
                    for future in pending:
                        future.cancel()
                for future in done:
                    if not future.cancelled():
                        _take(future, on_result, stopping=bool(signum.value))
    except BaseException:
        for process in list(pool._processes.values()):  # ProcessPoolExecutor has no public kill before 3.14
            process.kill()
        raise
    finally:
        pool.shutdown(cancel_futures=True)
    if request():
        raise RunInterrupted(f"stopped by {request.signal}; finish it with `{resume_command}`", request.signal)


def _take(future: Future[Result], on_result: Callable[[Result], None], stopping: bool) -> None:
    """A finished task's result to `on_result`; after a stop, a task that stopped (or a worker that a signal
    killed as it started) is left for the resume."""
    try:
        result = future.result()
    except (RunInterrupted, BrokenProcessPool):
        if stopping:
            return
        raise
    on_result(result)
