"""Loaders: built-in tasks from local files, custom YAML tasks, and their one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prompttune.core.errors import UserError
from prompttune.tasks import SplitSizes, load_task
from prompttune.tasks.builtin import _agnews_local, _clean_agnews

SMALL = SplitSizes(train=20, dev=12, test=16)


def _write_agnews(root: Path, rows_per_class: int = 15) -> Path:
    (root / "ag_news").mkdir(parents=True)
    with open(root / "ag_news" / "test.csv", "w") as f:
        for c in range(1, 5):
            for i in range(rows_per_class):
                f.write(f'"{c}","Title {c} {i}","Story {c}-{i} it #39;s here \\ today."\n')
    with open(root / "ag_news" / "train_sample.tsv", "w") as f:
        for name in ["World", "Sports", "Business", "Sci/Tech"]:
            for i in range(10):
                f.write(f"Train {name} {i}\t{name}\n")
    return root


def test_agnews_local_splits_are_disjoint_stratified_and_seeded(tmp_path: Path) -> None:
    root = _write_agnews(tmp_path)
    task = load_task("agnews", root, SMALL, seed=3)
    ids = {name: {e.id for e in split} for name, split in task.splits.items()}
    assert not ids["dev"] & ids["test"] and not ids["train"] & (ids["dev"] | ids["test"])
    assert [len(task.splits[s]) for s in ("train", "dev", "test")] == [20, 12, 16]
    assert sorted(e.label for e in task.splits["test"]) == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    assert "it's here today." in task.splits["dev"][0].fields["text"]
    again = load_task("agnews", root, SMALL, seed=3)
    assert [e.id for e in again.splits["dev"]] == [e.id for e in task.splits["dev"]]
    assert "test" not in task.without_test().splits


def test_data_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPTTUNE_DATA_DIR", str(_write_agnews(tmp_path)))
    assert len(load_task("agnews", None, SMALL).splits["dev"]) == 12


def test_real_shared_data_loads(data_dir: Path) -> None:
    agnews = load_task("agnews", data_dir, SplitSizes(100, 50, 80))
    sst2 = load_task("sst2", data_dir, SplitSizes(100, 50, 80))
    assert agnews.labels == ["World", "Sports", "Business", "Sci/Tech"]
    assert {e.label for e in sst2.splits["test"]} == {0, 1}
    assert all(e.id.startswith("sst2-validation") for e in sst2.splits["test"])


def test_agnews_entities_are_decoded_on_real_rows(data_dir: Path) -> None:
    pools = _agnews_local(data_dir)
    test = {e.id: e.fields["text"] for e in pools["test"]}
    train = {e.id: e.fields["text"] for e in pools["train"]}
    assert test["agnews-test-2697"].startswith("WASHINGTON (CBS.MW) - Standard & Poor's on Tuesday cut")
    assert 'joestar writes "Mandrakesoft & LaCie have just launched "GlobeTrotter", a' in test["agnews-test-805"]
    assert "Texas Instruments Inc. <TXN.N>, STMicroelectronics <STM.PA> and" in test["agnews-test-10"]
    assert "phone bills for millions of consumers. -The Washington" in test["agnews-test-89"]  # <FONT …> dropped
    assert "the $10 million Ansari X Prize" in test["agnews-test-1"]
    assert "the inaugural Western & Southern Financial Group" in train["agnews-train-6343"]  # &amp;amp;amp;
    debris = re.compile(r"(?:^|\s)(?:amp|quot|lt|gt);|#\d+;|&[a-z]+;|</?(?:b|a|font|p)[\s>]", re.IGNORECASE)
    assert [t for t in [*test.values(), *train.values()] if debris.search(t)] == []


def test_agnews_cleaning_leaves_ordinary_text_alone() -> None:
    text = "Ranked #1; AT&T and R&D up 5% as 3 < 4, Inc. <AAPL.O> rose"
    assert _clean_agnews(text) == text


def test_missing_data_dir_and_unknown_task() -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_task("agnews", "/nonexistent/dir", SMALL)
    with pytest.raises(UserError, match="unknown task 'imdb'"):
        load_task("imdb", None, SMALL)


def _custom(tmp_path: Path, rows: str, extra: str = "") -> Path:
    (tmp_path / "reviews.csv").write_text(rows)
    spec = tmp_path / "reviews.yaml"
    spec.write_text(f"""name: reviews
data: reviews.csv
text_columns: [review]
label_column: verdict
labels:
  bad: [negative, bad]
  good: [positive, good]
{extra}""")
    return spec


def test_custom_csv_task(tmp_path: Path) -> None:
    rows = "review,verdict\n" + "".join(f"text {i},{'good' if i % 2 else 'bad'}\n" for i in range(60))
    task = load_task(str(_custom(tmp_path, rows)), sizes=SMALL)
    assert task.labels == ["bad", "good"] and task.verbalizers[1] == ["positive", "good"]
    assert task.input_fields == ["review"] and len(task.splits["test"]) == 16


def test_custom_task_with_split_column(tmp_path: Path) -> None:
    rows = "review,verdict,split\n" + "".join(
        f"text {i},{'good' if i % 2 else 'bad'},{['train', 'validation', 'test'][i % 3]}\n" for i in range(120))
    task = load_task(str(_custom(tmp_path, rows, "split_column: split\n")), sizes=SMALL)
    assert all(int(e.fields["review"].split()[1]) % 3 == 2 for e in task.splits["test"])


def test_custom_task_names_its_delimiter(tmp_path: Path) -> None:
    rows = "review;verdict\n" + "".join(f"text {i}, with a comma;{'good' if i % 2 else 'bad'}\n" for i in range(60))
    task = load_task(str(_custom(tmp_path, rows, 'delimiter: ";"\n')), sizes=SMALL)
    assert all(e.fields["review"].endswith(", with a comma") for e in task.splits["test"])
    with pytest.raises(UserError, match=r"reviews.yaml: delimiter: .*one character, got ';;'"):
        load_task(str(_custom(tmp_path, rows, 'delimiter: ";;"\n')), sizes=SMALL)


def test_custom_task_errors(tmp_path: Path) -> None:
    only_bad = "review,verdict\n" + "".join(f"text {i},bad\n" for i in range(30))
    with pytest.raises(UserError, match="labels absent from the data: good"):
        load_task(str(_custom(tmp_path, only_bad)), sizes=SMALL)
    stray = "review,verdict\nx,bad\ny,good\nz,meh\n"
    with pytest.raises(UserError, match="not declared under 'labels': meh"):
        load_task(str(_custom(tmp_path, stray)), sizes=SMALL)
    bad_yaml = tmp_path / "broken.yaml"
    bad_yaml.write_text("name: x\ndata: reviews.csv\nlabel_column: verdict\nlabels: {a: [x], b: [y]}\n")
    with pytest.raises(UserError, match=r"broken.yaml: text_columns: Field required"):
        load_task(str(bad_yaml), sizes=SMALL)


def test_shared_pool_too_small_names_the_sizes(tmp_path: Path) -> None:
    rows = "review,verdict\n" + "".join(f"text {i},{'good' if i % 2 else 'bad'}\n" for i in range(30))
    with pytest.raises(UserError, match="30 examples cannot fill test 16 \\+ dev 12 \\+ train 20"):
        load_task(str(_custom(tmp_path, rows)), sizes=SMALL)
