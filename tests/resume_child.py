"""Child process for the resume tests: one colours-oracle run through the `optimize` command line,
slowed down so the parent can signal or kill it at a chosen point (test device only).

Run: python -m tests.resume_child TMP_DIR OPTIMIZER
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from prompttune.cli import main
from prompttune.commands import optimize
from tests.support import CountingBackend, oracle_config, oracle_for


class SlowBackend(CountingBackend):
    """Sleeps per request, so a kill lands between (or inside) trials rather than after the run."""

    def score(self, requests):
        time.sleep(0.004 * len(requests))
        return super().score(requests)


if __name__ == "__main__":
    config = oracle_config(Path(sys.argv[1]), optimizer=sys.argv[2])
    optimize.build_backend = lambda _: SlowBackend(oracle_for(config))  # the test device instead of a model
    sys.exit(main(["optimize", "--task", config.task, "--optimizer", config.optimizer, "--budget", str(config.budget),
                   "--train-size", str(config.train_size), "--dev-size", str(config.dev_size),
                   "--test-size", str(config.test_size), "--runs-dir", config.runs_dir]))
