"""Using prompttune from Python: search a space, read the held-out verdict and what ships.

Run: PROMPTTUNE_DATA_DIR=../shared/data python examples/api_usage.py
"""

from prompttune.commands.optimize import run_optimization
from prompttune.core.config import RunConfig


def main() -> None:
    config = RunConfig(task="sst2", optimizer="random", budget=400, dev_size=100, test_size=200,
                       train_size=100, runs_dir="runs")
    result = run_optimization(config)
    verdict = result.verdict
    lead = verdict.leader_confirmation  # the dev winner against the baseline on test
    print(f"baseline {lead.baseline_accuracy:.3f}, dev winner {lead.best_accuracy:.3f} on test "
          f"(gain {lead.gain:+.3f}, 95% CI {lead.gain_ci[0]:+.3f}..{lead.gain_ci[1]:+.3f}, "
          f"one-sided McNemar p {lead.comparison.p_one_sided:.3g})")
    print(f"{verdict.summary()}; ships: {result.shipped.spec}")


if __name__ == "__main__":
    main()
