"""compare's worker processes: a failure that pickle cannot send back (an exception holding a class made inside a
function, as DSPy's MIPROv2 proposer makes its signatures) reaches the main process as what it was."""

from __future__ import annotations

import pytest

from prompttune.core.interrupt import StopRequest
from prompttune.engine.workers import ProcessExecutor, WorkerFailed


def _fails_holding_a_local_class(item: int, stop: StopRequest) -> int:
    class MadeInside:
        pass

    error = ValueError(f"item {item} failed")
    error.signature = MadeInside  # what makes the exception unpicklable
    raise error


def _fails_plainly(item: int, stop: StopRequest) -> int:
    raise ValueError(f"item {item} failed")


def test_a_worker_failure_pickle_refuses_arrives_as_itself_with_its_traceback() -> None:
    with ProcessExecutor(1) as executor, pytest.raises(WorkerFailed) as failed:
        executor.run(_fails_holding_a_local_class, [7], lambda result: None, handle_signals=False,
                     resume_command="resume")
    first, *rest = str(failed.value).splitlines()
    assert first == "ValueError in a worker: item 7 failed"
    assert "_fails_holding_a_local_class" in "\n".join(rest) and "pickle" not in first.lower()


def test_a_picklable_worker_failure_arrives_unchanged() -> None:
    with ProcessExecutor(1) as executor, pytest.raises(ValueError, match="item 3 failed"):
        executor.run(_fails_plainly, [3], lambda result: None, handle_signals=False, resume_command="resume")
