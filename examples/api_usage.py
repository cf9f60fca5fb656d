"""Using prompttune from Python: load a task, search a space, confirm on the held-out split.

Run: PROMPTTUNE_DATA_DIR=../shared/data python examples/api_usage.py
"""

from prompttune.config import RunConfig
from prompttune.runner import run_optimization


def main() -> None:
    config = RunConfig(task="sst2", optimizer="random", budget=400, dev_size=100, test_size=200,
                       train_size=100, runs_dir="runs")
    result = run_optimization(config)
    c = result.confirmation
    print(f"baseline {c.baseline_accuracy:.3f} → best {c.best_accuracy:.3f} on test "
          f"(gain {c.gain:+.3f}, 95% CI {c.gain_ci[0]:+.3f}..{c.gain_ci[1]:+.3f}, "
          f"McNemar p {c.comparison.p_two_sided:.3g})")


if __name__ == "__main__":
    main()
