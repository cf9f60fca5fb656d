"""Using prompttune from Python: your own rows as a task, a search, the held-out verdict, what ships.

Run: PROMPTTUNE_DATA_DIR=../shared/data python examples/api_usage.py
(the embedded SmolLM2-135M model on CPU; a few minutes)
"""

import csv
import os
from pathlib import Path

import prompttune
from prompttune import Task


def main() -> None:
    # Any list of dicts (or a pandas DataFrame) is a task: name the label column.
    path = Path(os.environ.get("PROMPTTUNE_DATA_DIR", "../shared/data")) / "sst2" / "validation.tsv"
    with open(path, encoding="utf-8") as f:
        rows = [{"text": r["sentence"], "label": ["negative", "positive"][int(r["label"])]}
                for r in csv.DictReader(f, delimiter="\t")]
    task = Task.from_records(rows[:600], label="label", name="sst2-sample")

    result = prompttune.optimize(task, optimizer="random", budget=400, runs_dir="runs")
    lead = result.verdict.leader_confirmation  # the dev winner against the baseline on test
    print(f"baseline {lead.baseline_accuracy:.3f}, dev winner {lead.best_accuracy:.3f} on test "
          f"(gain {lead.gain:+.3f}, 95% CI {lead.gain_ci[0]:+.3f}..{lead.gain_ci[1]:+.3f}, "
          f"one-sided McNemar p {lead.comparison.p_one_sided:.3g})")
    print(result.verdict.summary())
    print("The model sees:\n" + result.shipped.render({"text": "A warm, funny film."}))
    result.save("runs/sst2-shipped")  # prompt.txt and prompt.json for production


if __name__ == "__main__":
    main()
