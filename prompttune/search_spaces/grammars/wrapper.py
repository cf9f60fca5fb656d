"""Retrieval-context wrappers: how passages are headed, numbered and separated.

Each passage renders as `casing(header) + " " + index + separator + text`; passages are joined
by the chunk separator, which also separates them from the remaining fields. The defaults give
5 headers × 4 index styles × 6 separators × 3 chunk separators × 2 casings × 2 instruction
positions = 1,440 renderings, with no rule pruning any of them.

With `answer: index` the label words become the passage markers as shown (1, 01, 1, a), so a
"which passage…" task asks for the marker the prompt actually displays; label i is passage i.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from prompttune.core.types import Example
from prompttune.search_spaces.grammars import Casing, GrammarContext, SpacePart, apply_casing
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Dimension

IndexStyle = Literal["1", "01", "[1]", "(a)"]
HEADERS = ("Document", "Passage", "Context", "Source", "Excerpt")
INDEX_STYLES: tuple[IndexStyle, ...] = ("1", "01", "[1]", "(a)")
SEPARATORS = (": ", ":\n", " - ", "\n", " | ", " :: ")
CHUNKS = ("\n", "\n\n", "\n---\n")
HEADER_CASINGS: tuple[Casing, ...] = ("as_is", "upper")
POSITIONS = ("before", "after")

HEADER, INDEX, SEP, CHUNK, CASE, POSITION = (f"wrapper.{p}" for p in
                                             ("header", "index", "separator", "chunk", "casing", "position"))


def index_marker(style: IndexStyle, i: int) -> tuple[str, str]:
    """(shown, bare) marker of the i-th (0-based) passage, e.g. ("[2]", "2")."""
    if style == "(a)":
        return f"({chr(97 + i)})", chr(97 + i)
    bare = f"{i + 1:02d}" if style == "01" else str(i + 1)
    return (f"[{bare}]" if style == "[1]" else bare), bare


class WrapperGrammar(BaseModel):
    """YAML `grammars.wrapper`; `passages` names the task's passage fields in order."""

    model_config = ConfigDict(extra="forbid")
    passages: list[str] = Field(min_length=1)
    headers: list[str] = Field(default_factory=lambda: list(HEADERS), min_length=1)
    indexes: list[IndexStyle] = Field(default_factory=lambda: list(INDEX_STYLES), min_length=1)
    separators: list[str] = Field(default_factory=lambda: list(SEPARATORS), min_length=1)
    chunks: list[str] = Field(default_factory=lambda: list(CHUNKS), min_length=1)
    casings: list[Casing] = Field(default_factory=lambda: list(HEADER_CASINGS), min_length=1)
    positions: list[Literal["before", "after"]] = Field(default_factory=lambda: list(POSITIONS),
                                                        min_length=1)
    answer: Literal["labels", "index"] = "labels"

    def part(self, context: GrammarContext) -> SpacePart:
        task = context.task
        if missing := [p for p in self.passages if p not in task.input_fields]:
            raise ValueError(f"passages {missing} are not input fields of task {task.name!r}")
        if self.answer == "index" and len(task.labels) != len(self.passages):
            raise ValueError(f"answer: index needs one label per passage ({len(self.passages)} "
                             f"passages, {len(task.labels)} labels)")
        dims = [Dimension(HEADER, tuple(self.headers), f"part:{HEADER}", "wrapper", "header"),
                Dimension(INDEX, tuple(self.indexes), f"part:{INDEX}", "wrapper", "index style"),
                Dimension(SEP, tuple(self.separators), f"part:{SEP}", "wrapper", "header separator"),
                Dimension(CHUNK, tuple(self.chunks), f"part:{CHUNK}", "wrapper", "chunk separator"),
                Dimension(CASE, tuple(self.casings), f"part:{CASE}", "wrapper", "header casing"),
                Dimension(POSITION, tuple(self.positions), "instruction_position", "wrapper",
                          "instruction position")]
        return SpacePart(dims, [], self.compose)

    def compose(self, spec: PromptSpec, parts: Mapping[str, Any], pool: Sequence[Example]) -> PromptSpec:
        header = apply_casing(parts[HEADER], parts[CASE])
        markers = [index_marker(parts[INDEX], i) for i in range(len(self.passages))]
        templates = tuple((p, f"{header} {shown}{parts[SEP]}{{}}")
                          for p, (shown, _) in zip(self.passages, markers))
        updates: dict[str, Any] = {"passage_templates": templates, "passage_separator": parts[CHUNK]}
        if self.answer == "index":
            updates["label_words"] = tuple(bare for _, bare in markers)
        return spec.with_updates(**updates)
