"""Errors that the command line turns into one line: exit code 2 for bad input, 75 for an outage."""

from __future__ import annotations

import difflib
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
    """`key.path: what was expected` for the first error of a file's schema (union branch tags left out).
    An unknown key comes first: a misspelt required key (`label_colum`) is the cause of its "Field
    required", so it is named, with the missing key it resembles."""
    errors = exc.errors()
    unknown = [err for err in errors if err["type"] == "extra_forbidden"]
    err = (unknown or errors)[0]
    where = ".".join(str(p) for p in err["loc"] if "[" not in str(p)) or "<top level>"
    message = err["msg"].removeprefix("Value error, ")
    if unknown:
        missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and e["loc"][:-1] == err["loc"][:-1]]
        like = difflib.get_close_matches(str(err["loc"][-1]), missing, n=1)
        message = "unknown key (not part of the schema" + (f"; did you mean {like[0]}?)" if like else ")")
    return f"{where}: {message}"
