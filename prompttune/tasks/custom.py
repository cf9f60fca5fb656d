"""Custom tasks without code: a CSV/TSV/JSONL file described by a small YAML file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.core.yamlio import load_yaml
from prompttune.tasks.base import SplitSizes, Task, check_labels, make_splits

_SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "valid": "dev", "val": "dev",
                  "test": "test"}


class TaskFile(BaseModel):
    """Schema of a task YAML file; unknown keys are errors so typos do not pass silently."""

    model_config = ConfigDict(extra="forbid")
    name: str
    data: str = Field(description="data file, relative to the YAML file")
    format: str | None = Field(None, description="csv, tsv or jsonl; inferred from the suffix")
    text_columns: list[str] | dict[str, str] = Field(
        description="input columns; a mapping renames them (field name -> column)")
    label_column: str
    labels: dict[str, list[str]] = Field(description="label value in the data -> verbalizer words")
    split_column: str | None = None
    description: str = ""
    delimiter: str | None = Field(None, description="field delimiter of a csv/tsv file (default , or tab)")

    @field_validator("delimiter")
    @classmethod
    def _one_character(cls, value: str | None) -> str | None:
        if value is not None and len(value) != 1:
            raise ValueError(f"the delimiter must be one character, got {value!r}")
        return value

    @field_validator("labels")
    @classmethod
    def _labels_have_words(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        if len(value) < 2:
            raise ValueError("a classification task needs at least two labels")
        for label, words in value.items():
            if not words:
                raise ValueError(f"label {label!r} has no verbalizer words")
        return value


def _read_rows(path: Path, fmt: str, delimiter: str | None) -> list[dict[str, str]]:
    if fmt == "jsonl":
        with open(path, encoding="utf-8") as f:
            return [{k: str(v) for k, v in json.loads(line).items()} for line in f if line.strip()]
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter=delimiter or ("\t" if fmt == "tsv" else ",")))


def _parse_spec(path: Path) -> TaskFile:
    raw = load_yaml(path)
    try:
        return TaskFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise UserError(f"{path}: {where}: {err['msg']}") from exc


def load_custom(path: str | Path, sizes: SplitSizes, seed: int) -> Task:
    path = Path(path)
    spec = _parse_spec(path)
    data_path = (path.parent / spec.data).resolve()
    if not data_path.is_file():
        raise UserError(f"{path}: data file {data_path} not found")
    fmt = spec.format or {".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}.get(data_path.suffix, "csv")
    if fmt == "jsonl" and spec.delimiter:
        raise UserError(f"{path}: delimiter: a jsonl file has no delimiter")
    rows = _read_rows(data_path, fmt, spec.delimiter)
    columns = (dict(zip(spec.text_columns, spec.text_columns)) if isinstance(spec.text_columns, list)
               else dict(spec.text_columns))
    label_names = list(spec.labels)
    needed = set(columns.values()) | {spec.label_column} | ({spec.split_column} if spec.split_column else set())
    if rows and (missing := needed - set(rows[0])):
        raise UserError(f"{path}: columns missing from {data_path.name}: {', '.join(sorted(missing))}")
    unknown = sorted({r[spec.label_column] for r in rows} - set(label_names))
    if unknown:
        raise UserError(f"{path}: data has labels not declared under 'labels': {', '.join(unknown)}")
    examples = [Example(f"{spec.name}-{i}", {field: r[col] for field, col in columns.items()},
                        label_names.index(r[spec.label_column])) for i, r in enumerate(rows)]
    check_labels(spec.name, label_names, examples)
    if spec.split_column:
        pools: dict[str, list[Example]] = {"train": [], "dev": [], "test": []}
        for row, ex in zip(rows, examples):
            split = _SPLIT_ALIASES.get(row[spec.split_column].strip().lower())
            if split is None:
                raise UserError(f"{path}: unknown split value {row[spec.split_column]!r} "
                                f"(use train, dev/validation, test)")
            pools[split].append(ex)
    else:
        pools = {"train": examples, "dev": examples, "test": examples}
    return Task(spec.name, label_names, [spec.labels[name] for name in label_names], list(columns),
                make_splits(pools, sizes, seed, spec.name), spec.description)
