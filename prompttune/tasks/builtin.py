"""Built-in tasks (agnews, sst2): Hugging Face `datasets` when reachable, local files otherwise."""

from __future__ import annotations

import csv
import html
import os
import re
from pathlib import Path
from typing import Callable

from prompttune.core.errors import UserError
from prompttune.core.hub import hub_problem
from prompttune.core.types import Example
from prompttune.tasks.base import SplitSizes, Task, check_labels, make_splits

DATA_DIR_ENV = "PROMPTTUNE_DATA_DIR"
HUB_DATASETS = {"agnews": "fancyzhx/ag_news", "sst2": "stanfordnlp/sst2"}

AGNEWS_LABELS = ["World", "Sports", "Business", "Sci/Tech"]
AGNEWS_VERBALIZERS = [
    ["World", "world", "politics", "international"],
    ["Sports", "sports", "sport", "athletics"],
    ["Business", "business", "economy", "finance"],
    ["Technology", "Sci/Tech", "science", "tech"],
]
SST2_LABELS = ["negative", "positive"]
SST2_VERBALIZERS = [["negative", "bad", "terrible", "sad"], ["positive", "good", "great", "happy"]]

# The AG News dump lost the "&" of many entities, leaving a space in its place (" amp;", " #39;s",
# " quot;"); some entities survived ("&lt;b&gt;"), some were escaped twice ("&amp;amp;").
_STRIPPED_ENTITY = re.compile(r"\s?(?<![&\w;])(#\d{2,4};|(?:amp|quot|lt|gt|apos|nbsp);)")
_MARKUP_TAG = re.compile(r"</?(?:a|b|i|p|br|font)(?:\s[^<>]*)?/?>", re.IGNORECASE)


def _restore_ampersand(match: re.Match[str]) -> str:
    """Put back the lost "&", except for numeric forms that name no printable character."""
    entity = match.group(1)
    printable = not entity.startswith("#") or int(entity[1:-1]) >= 32
    return "&" + entity if printable else match.group(0)


def _clean_agnews(text: str) -> str:
    """Decode the AG News dump's entities, broken or not, and drop its stray HTML markup."""
    text = _STRIPPED_ENTITY.sub(_restore_ampersand, text)
    while (decoded := html.unescape(text)) != text:  # twice-escaped entities need two passes
        text = decoded
    text = _MARKUP_TAG.sub(" ", text).replace("\\", " ")
    return re.sub(r"\s{2,}", " ", text).strip()


def _require(path: Path, data_dir: Path) -> Path:
    if not path.is_file():
        raise UserError(f"data file {path} not found under data dir {data_dir} "
                        f"(expected the layout of ../shared/data, see README)")
    return path


def _agnews_local(data_dir: Path) -> dict[str, list[Example]]:
    test_rows = []
    with open(_require(data_dir / "ag_news" / "test.csv", data_dir), newline="", encoding="utf-8") as f:
        for i, (cls, _title, desc) in enumerate(csv.reader(f)):
            test_rows.append(Example(f"agnews-test-{i}", {"text": _clean_agnews(desc)}, int(cls) - 1))
    train_rows = []
    with open(_require(data_dir / "ag_news" / "train_sample.tsv", data_dir), encoding="utf-8") as f:
        for i, line in enumerate(f):
            text, label = line.rstrip("\n").rsplit("\t", 1)
            train_rows.append(Example(f"agnews-train-{i}", {"text": _clean_agnews(text)},
                                      AGNEWS_LABELS.index(label)))
    return {"train": train_rows, "dev": test_rows, "test": test_rows}


def _sst2_file(path: Path, prefix: str) -> list[Example]:
    with open(path, encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [Example(f"{prefix}-{i}", {"text": row["sentence"].strip()}, int(row["label"]))
                for i, row in enumerate(reader)]


def _sst2_local(data_dir: Path) -> dict[str, list[Example]]:
    train = _sst2_file(_require(data_dir / "sst2" / "train.tsv", data_dir), "sst2-train")
    validation = _sst2_file(_require(data_dir / "sst2" / "validation.tsv", data_dir), "sst2-validation")
    return {"train": train, "dev": train, "test": validation}


def _hub_pools(name: str) -> dict[str, list[Example]]:
    """Official splits from the hub: train feeds train+dev, the official test/validation feeds test."""
    try:
        from datasets import load_dataset
    except ImportError as exc:
        raise UserError(_no_data_message(name)) from exc
    if problem := hub_problem(HUB_DATASETS[name], "dataset"):
        raise UserError(f"{_no_data_message(name)} ({problem})")
    try:
        if name == "agnews":
            ds = load_dataset(HUB_DATASETS[name])
            train = [Example(f"agnews-hub-train-{i}", {"text": r["text"]}, r["label"])
                     for i, r in enumerate(ds["train"])]
            test = [Example(f"agnews-hub-test-{i}", {"text": r["text"]}, r["label"])
                    for i, r in enumerate(ds["test"])]
        else:
            ds = load_dataset(HUB_DATASETS[name])
            train = [Example(f"sst2-hub-train-{i}", {"text": r["sentence"]}, r["label"])
                     for i, r in enumerate(ds["train"])]
            test = [Example(f"sst2-hub-validation-{i}", {"text": r["sentence"]}, r["label"])
                    for i, r in enumerate(ds["validation"])]
    except Exception as exc:  # any hub failure means: tell the user how to give local files
        raise UserError(_no_data_message(name)) from exc
    return {"train": train, "dev": train, "test": test}


def _no_data_message(name: str) -> str:
    return (f"no data for task {name!r}: pass --data-dir DIR or set {DATA_DIR_ENV} to a folder laid "
            f"out like ../shared/data, or install `datasets` with network access to the hub")


def resolve_data_dir(data_dir: str | Path | None) -> Path | None:
    """The explicit option wins over the environment variable; None means 'try the hub'."""
    chosen = data_dir or os.environ.get(DATA_DIR_ENV)
    if not chosen:
        return None
    path = Path(chosen).expanduser()
    if not path.exists():
        raise UserError(f"data dir {path} does not exist")
    if not path.is_dir():
        raise UserError(f"data dir {path} is not a folder")
    return path


BuiltinLoader = Callable[[Path], dict[str, list[Example]]]
BUILTIN: dict[str, tuple[list[str], list[list[str]], str, BuiltinLoader]] = {
    "agnews": (AGNEWS_LABELS, AGNEWS_VERBALIZERS,
               "Classify the topic of a news article as World, Sports, Business or Sci/Tech.",
               _agnews_local),
    "sst2": (SST2_LABELS, SST2_VERBALIZERS,
             "Classify the sentiment of a movie review sentence as negative or positive.",
             _sst2_local),
}


def load_builtin(name: str, data_dir: str | Path | None, sizes: SplitSizes, seed: int) -> Task:
    labels, verbalizers, description, local_loader = BUILTIN[name]
    directory = resolve_data_dir(data_dir)
    pools = local_loader(directory) if directory is not None else _hub_pools(name)
    for pool in pools.values():
        check_labels(name, labels, pool)
    return Task(name, labels, verbalizers, ["text"], make_splits(pools, sizes, seed, name), description)
