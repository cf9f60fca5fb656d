"""Child process for the resume tests: one colours-oracle run, slowed down so the parent can kill
it with SIGKILL at a chosen point (test device only).

Run: python -m tests.resume_child TMP_DIR OPTIMIZER
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from prompttune.commands.optimize import run_optimization
from tests.support import CountingBackend, oracle_config, oracle_for


class SlowBackend(CountingBackend):
    """Sleeps per request, so a kill lands between (or inside) trials rather than after the run."""

    def score(self, requests):
        time.sleep(0.004 * len(requests))
        return super().score(requests)


if __name__ == "__main__":
    config = oracle_config(Path(sys.argv[1]), optimizer=sys.argv[2])
    run_optimization(config, backend=SlowBackend(oracle_for(config)))
