"""DSPy as a peer on prompttune's model, budget and verdict (optional extra `prompttune[dspy]`).

Nothing here imports dspy at package import time: `require_dspy` turns a missing install into
one line for the user, and the submodules that need dspy are imported only after it.
"""

from __future__ import annotations

import importlib.metadata

from prompttune.core.errors import UserError

DSPY_ARMS = ("dspy-mipro", "dspy-bfrs", "dspy-gepa", "dspy-copro", "dspy-simba")  # dspy_bridge.optimizers
DSPY_VERSION = "3.4.1"  # the adapter follows this release's engine and adapter interfaces


def require_dspy(what: str) -> None:
    """Fail in one line when dspy is absent or not the release the bridge was written against."""
    try:
        installed = importlib.metadata.version("dspy")
    except importlib.metadata.PackageNotFoundError:
        raise UserError(f"{what} needs DSPy: pip install 'prompttune[dspy]'") from None
    if installed != DSPY_VERSION:
        raise UserError(f"{what} needs dspy=={DSPY_VERSION} (found {installed}): "
                        f"pip install 'prompttune[dspy]'")
