"""SIGINT and SIGTERM during a run.

While a search runs, the first signal only asks it to stop after the trial in flight, so the run
can still test its best candidate so far on the held-out split and write that report. A second
signal, or one outside the search (model set-up, the verdict, the report), stops at once. Either
way every paid call is in the run's cache and the run directory stays resumable.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """A run stopped on a signal; the message is the one line that says how to finish it."""


class StopRequest:
    """What a signal asked for; a search polls it (call it) before each evaluation."""

    def __init__(self, resume_command: str) -> None:
        self.resume_command = resume_command
        self.signal: str | None = None  # the signal that asked the search to stop, once one did
        self.searching = False

    def __call__(self) -> bool:
        return self.signal is not None

    @contextmanager
    def during_search(self) -> Iterator[None]:
        """Inside this block the first signal stops the search gracefully instead of at once."""
        self.searching = True
        try:
            yield
        finally:
            self.searching = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.searching and self.signal is None:
            self.signal = signal.Signals(signum).name
            print(f"{self.signal}: stopping after the trial in flight, then testing the best candidate so far "
                  "on the held-out split (signal again to stop at once)", file=sys.stderr)
            return
        raise RunInterrupted(f"stopped at once by {signal.Signals(signum).name}; every paid call is kept in the "
                             f"run's cache: finish it with `{self.resume_command}`")


@contextmanager
def stop_on_signals(resume_command: str) -> Iterator[StopRequest]:
    """Route SIGINT and SIGTERM to a `StopRequest` while the block runs, then restore the handlers.

    Python delivers signals to the main thread only; elsewhere the request never fires and the
    process's own handling applies."""
    request = StopRequest(resume_command)
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {number: signal.signal(number, request.handle) for number in SIGNALS}
    try:
        yield request
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
