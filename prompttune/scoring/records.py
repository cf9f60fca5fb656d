"""What the evaluator takes and hands out: queries, raw model outputs, per-example records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from prompttune.core.types import Example
from prompttune.search_spaces.prompt import PromptSpec

CONTENT_FREE_PREFIX = "content-free:"
Mode = Literal["score", "generate", "choice"]  # what the model is asked for: label scores, generated text, or a
# label by constrained decoding


def content_free_id(value: str) -> str:
    """Stable id of the synthetic example whose every input field is `value` (e.g. "N/A")."""
    return CONTENT_FREE_PREFIX + value


@dataclass(frozen=True)
class Query:
    """One prompt on some examples; `continuations[i]` replaces the label continuations of example i."""

    spec: PromptSpec
    example_ids: Sequence[str]
    continuations: Sequence[tuple[str, ...]] | None = None


@dataclass(frozen=True)
class Output:
    """The model's answer to one rendered prompt: continuation log-probs, generated text, or the label index
    constrained decoding chose (`choice`, with each label's first-token log-prob in `logprobs`)."""

    example: Example
    logprobs: tuple[float, ...] | None
    text: str | None
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    choice: int | None = None


