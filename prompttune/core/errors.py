"""Errors that the command line turns into one line: exit code 2 for bad input, 75 for an outage."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError


class UserError(Exception):
    """Bad input from the user (file, option, data): reported in one line, exit code 2."""


class BudgetExhausted(Exception):
    """A request would take the ledger past its hard cap; optimizers finish gracefully on it."""


class BackendUnavailable(UserError):
    """The model's servers stopped answering (past the outage deadline, or a call out of retries):
    not bad input, so the command line ends it with its own exit code, and the run it interrupted
    can be resumed.

    `completed` maps the positions of a batch's requests that were answered before the outage to
    their results, so the caller can keep (cache) them instead of paying for them again;
    `run_dir` is set by the runner to the run directory the outage interrupted.
    """

    def __init__(self, message: str, completed: dict[int, object] | None = None) -> None:
        super().__init__(message)
        self.completed = completed or {}
        self.run_dir: Path | None = None


def validation_message(exc: ValidationError) -> str:
    """`key.path: what was expected` for the first error of a file's schema (union branch tags left out)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"] if "[" not in str(p)) or "<top level>"
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = "unknown key (not part of the schema)"
    return f"{where}: {message}"
