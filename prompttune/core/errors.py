"""Errors that the command line turns into one line and exit code 2."""


class UserError(Exception):
    """Bad input from the user (file, option, data): reported in one line, exit code 2."""


class BudgetExhausted(Exception):
    """A request would take the ledger past its hard cap; optimizers finish gracefully on it."""
