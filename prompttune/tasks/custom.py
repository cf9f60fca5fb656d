"""Custom tasks without code: a CSV/TSV/JSONL file described by a small YAML file."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

from prompttune.core.config import Serve
from prompttune.core.errors import UserError, validation_message
from prompttune.core.types import Example
from prompttune.core.yamlio import load_yaml
from prompttune.tasks.task import (
    SplitSizes,
    Task,
    check_labels,
    check_verbalizers,
    label_words,
    make_splits,
    rare_label_warnings,
    shares_note,
)
from prompttune.tasks.user_prompt import PromptSource

_SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "valid": "dev", "val": "dev",
                  "test": "test"}


class TaskFile(PromptSource):
    """Schema of a task YAML file (with the user's `prompt:` or `messages:`); unknown keys are errors so typos
    do not pass silently."""

    model_config = ConfigDict(extra="forbid")
    name: str
    data: str = Field(description="data file, relative to the YAML file")
    format: Literal["csv", "tsv", "jsonl"] | None = Field(None, description="inferred from the suffix when absent")
    text_columns: list[str] | dict[str, str] = Field(
        description="input columns; a mapping renames them (field name -> column)")
    label_column: str
    labels: dict[str, list[str]] | None = Field(
        None, description="label value in the data -> verbalizer words; default: the data's values, each its own word")
    split_column: str | None = None
    description: str = Field("", description="the baseline instruction of the built-in space (used without a prompt)")
    delimiter: str | None = Field(None, description="field delimiter of a csv/tsv file (default , or tab)")
    serve: Serve | None = Field(None, description="the serving contract: how production gets the answer (logprobs, "
                                                  "generate, choice); --serve overrides it")

    @field_validator("text_columns")
    @classmethod
    def _some_text(cls, value: list[str] | dict[str, str]) -> list[str] | dict[str, str]:
        if not value:
            raise ValueError("name at least one input column")
        return value

    @field_validator("delimiter")
    @classmethod
    def _one_character(cls, value: str | None) -> str | None:
        if value is not None and len(value) != 1:
            raise ValueError(f"the delimiter must be one character, got {value!r}")
        return value

    @field_validator("labels")
    @classmethod
    def _labels_have_words(cls, value: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        if value is not None and len(value) < 2:
            raise ValueError("a classification task needs at least two labels")
        for label, words in (value or {}).items():
            if not words:
                raise ValueError(f"label {label!r} has no verbalizer words")
        return value

    @field_validator("description")
    @classmethod
    def _only_labels_placeholder(cls, value: str) -> str:
        if unknown := [name for name in re.findall(r"\{(\w*)\}", value) if name != "labels"]:
            raise ValueError(f"the instruction may hold {{labels}} only, not {{{unknown[0]}}}")
        return value


def _decode(path: Path) -> str:
    """The file as UTF-8 text; other encodings are named by the line where they break."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UserError(f"{path}: line {line} is not UTF-8 ({exc.reason} at byte {exc.start}); "
                        f"save the file as UTF-8") from None


def _read_rows(path: Path, fmt: str, delimiter: str | None, needed: set[str]) -> list[dict[str, str]]:
    """Every row as {column: text}, each checked: a row that cannot be read is named by its line."""
    text = _decode(path)
    rows = []
    if fmt == "jsonl":
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}: line {number} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}: line {number} is not a JSON object ({{\"column\": value, ...}})")
            if missing := needed - row.keys():
                raise UserError(f"{path}: line {number} lacks {', '.join(sorted(missing))}")
            rows.append({k: str(v) for k, v in row.items()})
        return rows
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter or ("\t" if fmt == "tsv" else ","))
    header = next(reader, [])
    if not header and not text.strip():
        return rows  # an empty file: "has no data rows", not a header that lacks every column
    if missing := needed - set(header):
        raise UserError(f"{path}: columns missing from the header: {', '.join(sorted(missing))}")
    for fields in reader:
        if not fields:
            continue
        if len(fields) != len(header):
            raise UserError(f"{path}: line {reader.line_num} has {len(fields)} fields, the header "
                            f"{len(header)} (quote a text that contains the delimiter)")
        rows.append(dict(zip(header, fields)))
    return rows


def _parse_spec(path: Path) -> TaskFile:
    raw = load_yaml(path)
    try:
        return TaskFile.model_validate(raw)
    except ValidationError as exc:
        raise UserError(f"{path}: {validation_message(exc)}") from exc


def load_custom(path: str | Path, sizes: SplitSizes | None, seed: int) -> Task:
    """The task a YAML file describes. `sizes=None` (a caller given no sizes, as `space show`): a
    split column's splits whole, else `SplitSizes.fitting` the data, stated in `split_note`."""
    path = Path(path)
    spec = _parse_spec(path)
    data_path = (path.parent / spec.data).resolve()
    if not data_path.is_file():
        raise UserError(f"{path}: data file {data_path} not found")
    fmt = spec.format or {".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}.get(data_path.suffix, "csv")
    if fmt == "jsonl" and spec.delimiter:
        raise UserError(f"{path}: delimiter: a jsonl file has no delimiter")
    columns = (dict(zip(spec.text_columns, spec.text_columns)) if isinstance(spec.text_columns, list)
               else dict(spec.text_columns))
    needed = set(columns.values()) | {spec.label_column} | ({spec.split_column} if spec.split_column else set())
    rows = _read_rows(data_path, fmt, spec.delimiter, needed)
    if not rows:
        raise UserError(f"{path}: {data_path} has no data rows")
    words = label_words((r[spec.label_column] for r in rows), spec.labels)
    if len(words) < 2:
        raise UserError(f"{path}: label column {spec.label_column!r} holds one value ({', '.join(words)}); a "
                        f"classification task needs at least two labels")
    check_verbalizers(str(path), words)
    label_names = list(words)
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
        note = "the data's split column, each split whole" if sizes is None else ""
        sizes = sizes or SplitSizes(*(len(pools[name]) for name in ("train", "dev", "test")))
    else:
        pools = {"train": examples, "dev": examples, "test": examples}
        fitted = SplitSizes.fitting(len(examples))
        note = shares_note(len(examples), seed) if sizes is None and fitted != SplitSizes() else ""
        sizes = sizes or fitted
    return Task(spec.name, label_names, [words[name] for name in label_names], list(columns),
                make_splits(pools, sizes, seed, spec.name), spec.description, prompt=spec.user_prompt(str(path)),
                split_note=note, warnings=rare_label_warnings(spec.name, [r[spec.label_column] for r in rows]),
                serve=spec.serve)
