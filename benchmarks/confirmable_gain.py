"""How large a gain a test split confirms: docs/verdict.md's table, computed (not simulated) from the flip model.

For each test size n: the smallest accuracy gain the held-out verdict (exact one-sided McNemar at α)
confirms with 80% power when 10% of the examples flip against the new prompt, the exact power at
+5 and +10 points, and the test size that confirms 5 points (`prompttune.statistics.stats`). The
baseline's accuracy is left out, as before a run: it only bounds the gain.

Run: python benchmarks/confirmable_gain.py [--sizes 30,100,300,1000] [--alpha 0.05]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prompttune.statistics.stats import (  # noqa: E402
    FLIP_SHARE,
    TARGET_POWER,
    examples_for_gain,
    in_points,
    mcnemar_power,
    smallest_confirmable_gain,
)


def table(sizes: list[int], alpha: float) -> list[str]:
    """The markdown table: per test size, the smallest gain confirmed with 80% power and the power at +5 and +10."""
    rows = [f"| test examples | smallest gain confirmed with {TARGET_POWER:.0%} power | power at +5 points "
            "| power at +10 points |", "| --- | --- | --- | --- |"]
    for n in sizes:
        gain = smallest_confirmable_gain(n, alpha)
        rows.append(f"| {n} | {'none' if gain is None else f'{in_points(gain):.1f} points'} | "
                    f"{percent(mcnemar_power(n, 0.05, alpha))} | {percent(mcnemar_power(n, 0.10, alpha))} |")
    return rows


def percent(power: float) -> str:
    """A power in whole percent, without rounding a near-certainty up to 100%."""
    return ">99%" if power > 0.99 else f"{power:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="30,100,300,1000", help="test split sizes, comma-separated")
    parser.add_argument("--alpha", type=float, default=0.05, help="level of the held-out test")
    args = parser.parse_args()
    print("\n".join(table([int(size) for size in args.sizes.split(",")], args.alpha)))
    print(f"\n{FLIP_SHARE:.0%} of the examples flip against the new prompt; α = {args.alpha}; 5 points need about "
          f"{examples_for_gain(0.05, args.alpha)} test examples, 10 points about {examples_for_gain(0.10, args.alpha)}.")


if __name__ == "__main__":
    main()
