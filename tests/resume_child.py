"""Child process for the resume tests: one colours-oracle `optimize` or `compare` through the command
line, slowed down so the parent can signal or kill it at a chosen point (test device only).

Run: python -m tests.resume_child TMP_DIR optimize OPTIMIZER
     python -m tests.resume_child TMP_DIR compare OPTIMIZER,OPTIMIZER,... [OPTION ...]

Options after the optimizers are passed on (`--jobs 2 --seeds 3` replaces the default `--seeds 2`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from prompttune.cli import main
from prompttune.core.config import RunConfig
from prompttune.engine import comparison, study
from prompttune.optimizers.driver import SearchDriver
from prompttune.scoring.evaluator import Evaluator
from tests.support import CountingBackend, oracle_config, oracle_for


class SlowBackend(CountingBackend):
    """Sleeps per request, so a kill lands between (or inside) trials rather than after the run."""

    def score(self, requests):
        time.sleep(0.004 * len(requests))
        return super().score(requests)

    def choose(self, requests):
        time.sleep(0.004 * len(requests))
        return super().choose(requests)


def one_request_at_a_time() -> None:
    """No requests answered ahead (tests/test_batching.py covers that): a round's trials then reach the model one
    by one, so the parent's signal, sent once some trials are logged, still lands mid-search."""
    SearchDriver.prefetch = lambda self, request: None
    Evaluator.prefetch = lambda self, work: None


def slow_oracle(config: RunConfig) -> SlowBackend:
    """The test device; a module function, so that `--jobs` workers can be handed it (pickled)."""
    return SlowBackend(oracle_for(config))


if __name__ == "__main__":
    folder, command, optimizers = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    config = oracle_config(folder)
    study.build_backend = comparison.build_backend = slow_oracle
    one_request_at_a_time()
    which = ["--optimizer", optimizers] if command == "optimize" else ["--optimizers", optimizers, "--seeds", "2"]
    sys.exit(main([command, *which, "--task", config.task, "--budget", str(config.budget),
                   "--train-size", str(config.train_size), "--dev-size", str(config.dev_size),
                   "--test-size", str(config.test_size), "--runs-dir", config.runs_dir, *sys.argv[4:]]))
