"""Tuning and reporting pools: a stable, by-example partition of every built-in task; the reporting test split
never shares an example with any tuning draw; scripts that tune refuse the reporting pool and seeds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from prompttune.cli import main
from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.tasks import SplitSizes, load_task
from prompttune.tasks.builtin import _sst2_pools, builtin_draws, sst2_sentences, tuning_pool
from prompttune.tasks.pools import (
    REPORTING_SPLIT_SEEDS,
    in_reporting_part,
    partition,
    require_tuning,
    seen_in_tuning,
)
from tests.test_tasks import _write_agnews

SMALL = SplitSizes(train=10, dev=8, test=8)
ROOT = Path(__file__).resolve().parent.parent


def _examples(n: int, prefix: str = "row") -> list[Example]:
    return [Example(f"{prefix}-{i}", {"text": f"{prefix} sentence number {i}"}, i % 2) for i in range(n)]


def test_the_part_of_a_text_is_fixed_by_its_hash_whatever_its_case_or_spacing() -> None:
    # Pinned: a change of hash or share would move every reported test split.
    assert [in_reporting_part(f"row sentence number {i}") for i in range(8)] == \
        [in_reporting_part(f"  ROW sentence   number {i} ") for i in range(8)]
    shares = [in_reporting_part(f"text {i}") for i in range(4000)]
    assert 0.45 < sum(shares) / len(shares) < 0.55


def test_reporting_tests_on_its_part_and_trains_and_selects_on_the_other() -> None:
    shared = _examples(400)
    train = _examples(200, "train")
    tuning = partition({"train": train, "dev": shared, "test": shared}, "tuning")
    reporting = partition({"train": train, "dev": shared, "test": shared}, "reporting")
    assert partition({"train": train, "dev": shared, "test": shared}, "all")["test"] is shared
    reported = {ex.id for ex in reporting["test"]}
    assert reported and all(in_reporting_part(ex.fields["text"]) for ex in reporting["test"])
    assert not reported & {ex.id for split in tuning.values() for ex in split}
    assert not reported & {ex.id for ex in [*reporting["train"], *reporting["dev"]]}
    assert tuning["dev"] is tuning["test"]  # one shared source stays one list: make_splits keeps draws disjoint
    assert reporting["dev"] == tuning["dev"] and reporting["train"] == tuning["train"]


def test_a_built_in_task_draws_each_pool_from_its_part_and_all_by_default(tmp_path: Path) -> None:
    root = _write_agnews(tmp_path, rows_per_class=30)
    before = load_task("agnews", root, SMALL, seed=3)
    assert [e.id for e in load_task("agnews", root, SMALL, seed=3, pool="all").splits["test"]] == \
        [e.id for e in before.splits["test"]]
    reported = load_task("agnews", root, SMALL, seed=3, pool="reporting")
    pool = tuning_pool("agnews", root)
    assert not seen_in_tuning(reported.splits["test"], pool)
    for seed in range(5):
        tuned = load_task("agnews", root, SMALL, seed=seed, pool="tuning")
        assert not {e.id for e in reported.splits["test"]} & {e.id for s in tuned.splits.values() for e in s}
    # The default draws from everything, tuning part included.
    assert any(seen_in_tuning(load_task("agnews", root, SMALL, seed=seed).splits["test"], pool) for seed in range(5))


def test_many_draws_from_one_read_are_the_draws_one_at_a_time(tmp_path: Path) -> None:
    root = _write_agnews(tmp_path, rows_per_class=30)
    draws = builtin_draws("agnews", root, SMALL, [3, 4, 3], "reporting")
    for seed, drawn in zip([3, 4, 3], draws):
        alone = load_task("agnews", root, SMALL, seed=seed, pool="reporting")
        assert {name: [e.id for e in split] for name, split in drawn.splits.items()} == \
            {name: [e.id for e in split] for name, split in alone.splits.items()}
    assert [e.id for e in draws[0].splits["test"]] != [e.id for e in draws[1].splits["test"]]

def test_a_task_file_has_no_pools(tmp_path: Path) -> None:
    task_file = tmp_path / "t.yaml"
    task_file.write_text("name: t\n")
    with pytest.raises(UserError, match="pool 'reporting' partitions the built-in tasks"):
        load_task(str(task_file), None, SMALL, pool="reporting")


def test_sst2_reports_on_train_sentences_held_out_with_their_phrases() -> None:
    sentences = [f"the film number {i} is {'good' if i % 2 else 'bad'} ." for i in range(60)]
    phrases = [" ".join(s.split()[k:k + 3]) for s in sentences for k in (0, 2)]
    rows = list(dict.fromkeys([*sentences, *phrases]))
    train = [Example(f"sst2-train-{i}", {"text": text}, int("good" in text)) for i, text in enumerate(rows)]
    validation = [Example(f"sst2-validation-{i}", {"text": f"a review {i} ."}, i % 2) for i in range(30)]
    assert {ex.fields["text"] for ex in sst2_sentences(train)} == set(sentences)
    reporting = _sst2_pools(train, validation, "reporting")
    tuning = _sst2_pools(train, validation, "tuning")
    reported = [ex.fields["text"] for ex in reporting["test"]]
    assert reported and set(reported) <= set(sentences)
    assert reporting["dev"] == validation == tuning["dev"]  # the 872 validation sentences: dev only
    assert not seen_in_tuning(reporting["test"], [ex for split in tuning.values() for ex in split])
    # No phrase of a reported sentence is left to be a demo or a reflection example.
    held = {" ".join(s.split()[k:k + 3]) for s in reported for k in (0, 2)}
    assert not held & {ex.fields["text"] for ex in [*tuning["train"], *reporting["train"]]}


def test_real_tasks_report_on_examples_no_tuning_draw_holds(data_dir: Path) -> None:
    for name in ("agnews", "trec"):
        reported = load_task(name, data_dir, SplitSizes(100, 50, 1000), seed=100, pool="reporting")
        assert len(reported.splits["test"]) == 1000
        assert not seen_in_tuning(reported.splits["test"], tuning_pool(name, data_dir))


def test_tuning_refuses_the_reporting_pool_and_seeds() -> None:
    require_tuning("tuning", [0, 5, 99, 110], "probe")
    require_tuning("all", [7], "probe")
    with pytest.raises(UserError, match="the reporting pool is for the headline run only"):
        require_tuning("reporting", [7], "probe")
    with pytest.raises(UserError, match="split seed\\(s\\) 100, 104, 109 are reporting seeds"):
        require_tuning("tuning", [99, 100, 104, 109], "probe")
    assert list(REPORTING_SPLIT_SEEDS) == list(range(100, 110))  # protocols v1 and v2


def test_a_tuning_benchmark_refuses_a_reporting_seed_in_one_line() -> None:
    done = subprocess.run([sys.executable, "benchmarks/demo_lengths.py", "--split-seed", "102"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == ("error: demo_lengths.py: split seed(s) 102 are reporting seeds (100-109, "
                                   "docs/results/headline_protocol*.md); tune on other seeds")


def test_the_cli_takes_a_pool_and_refuses_one_a_task_file_lacks(capsys, tmp_path: Path) -> None:
    task_file = tmp_path / "t.yaml"
    task_file.write_text("name: t\n")
    code = main(["optimize", "--task", str(task_file), "--pool", "tuning", "--runs-dir", str(tmp_path / "runs")])
    assert code == 2
    assert capsys.readouterr().err.strip().startswith("error: pool 'tuning' partitions the built-in tasks")


def test_a_comparison_on_the_reporting_pool_reports_that_no_test_example_is_in_a_tuning_draw(tmp_path: Path) -> None:
    from prompttune.core.config import RunConfig
    from prompttune.engine.comparison import CompareRequest, run_compare
    from tests.support import oracle_for

    root = _write_agnews(tmp_path / "data", rows_per_class=40)
    with open(root / "ag_news" / "train_sample.tsv", "w") as f:  # the oracle keys on texts of 16+ characters
        f.writelines(f"A longer training story {name} {i}\t{name}\n" for name in ["World", "Sports", "Business",
                                                                             "Sci/Tech"] for i in range(10))
    config = RunConfig(task="agnews", data_dir=str(root), pool="reporting", budget=60, train_size=10, dev_size=20,
                       test_size=20, split_seed=100, runs_dir=str(tmp_path / "runs"))
    result = run_compare(CompareRequest(config, ["random"], [0, 1], {}, backend=oracle_for(config),
                                        allow_underspend=True))
    check = next(c for c in result.checks if "tuning draw" in c.claim)
    assert check.ok and check.detail.startswith("0 of 40 test examples are in the ")
    assert "✓ no test example of any seed appears in any tuning draw" in (result.run_dir / "report.md").read_text()
    tuning = config.model_copy(update={"pool": "tuning", "split_seed": 7})
    tuned = run_compare(CompareRequest(tuning, ["random"], [0], {}, backend=oracle_for(tuning), allow_underspend=True))
    assert not any("tuning draw" in c.claim for c in tuned.checks)
