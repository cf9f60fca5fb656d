"""How a run stops resumably: on SIGINT or SIGTERM, or on an outage, and the one marker that says so.

While a search runs, the first signal only asks it to stop after the trial in flight, so the run
can still test its best candidate so far on the held-out split and write that report. A second
signal, or one outside the search (model set-up, the verdict, the report), stops at once. Either
way every paid call is in the run's cache and the run directory stays resumable.

Whatever stopped it (a signal, or no server answering), the runner writes `interruption.json` in
the run directory: the one-line reason and the per-server counts so far. While it exists the run
is interrupted; `--resume` reads it (adding the counts to its own) and removes it once the run finishes.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Iterator

from prompttune.core.errors import BackendUnavailable
from prompttune.core.run_files import INTERRUPTION
from prompttune.core.storage import write_atomic

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """A run stopped on a signal; the message is the one line that says how to finish it, `reason`
    the part that says what stopped it."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


def mark_interrupted(run_dir: Path, reason: str, servers: dict[str, dict[str, int]]) -> None:
    """Record that a session of the run stopped resumably: why, and the per-server counts so far."""
    write_atomic(run_dir / INTERRUPTION, json.dumps({"reason": reason, "servers": servers}, indent=2))


def interruption(run_dir: Path) -> dict:
    """What the last interrupted session of this run recorded ({} if none is pending)."""
    path = run_dir / INTERRUPTION
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def clear_interruption(run_dir: Path) -> None:
    """The run finished: no interruption is pending any more."""
    (run_dir / INTERRUPTION).unlink(missing_ok=True)


def resumable_outage(exc: BackendUnavailable, resume_command: str) -> BackendUnavailable:
    """An outage's one line, also saying how to finish what it stopped."""
    return BackendUnavailable(f"{exc}; the run is kept: finish it with `{resume_command}` once a server answers")


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
        reason = f"stopped at once by {signal.Signals(signum).name}"
        raise RunInterrupted(f"{reason}; every paid call is kept in the run's cache: finish it with "
                             f"`{self.resume_command}`", reason)


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
