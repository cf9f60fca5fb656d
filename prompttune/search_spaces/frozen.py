"""Frozen parts: texts of the user's prompt (a compliance paragraph, a required output rule) that every
candidate keeps verbatim. The search driver rejects a candidate that lacks one; the helpers here let the
spaces and instruction writers keep them, so the search is not starved of candidates."""

from __future__ import annotations

from typing import Sequence

from prompttune.core.types import Example, Prompt
from prompttune.search_spaces.prompt import PromptSpec, fixed_part


def prompt_parts(prompt: Prompt) -> tuple[str, ...]:
    """The texts a rendered prompt is made of (a frozen text must lie within one: a chat template's markup may
    go between messages)."""
    if prompt.messages is None:
        return (prompt.text or "",)
    return (*(content for _, content in prompt.messages), prompt.assistant_prefix)


def missing_frozen(spec: PromptSpec, demos: Sequence[Example], frozen: Sequence[str]) -> list[str]:
    """The frozen texts the prompt (around empty inputs, demos included) does not hold verbatim."""
    parts = prompt_parts(fixed_part(spec, demos))
    return [text for text in frozen if not any(text in part for part in parts)]


def keep_frozen(rewritten: str, original: str, frozen: Sequence[str]) -> str:
    """`rewritten` with every frozen text of `original` it dropped appended, on its own line where it stood on one
    in `original`: a rewrite of an instruction must not drop its compliance rule."""
    for text in frozen:
        if text in original and text not in rewritten:
            on_own_line = original[:original.index(text)].endswith("\n")
            rewritten = rewritten.rstrip() + ("\n" if on_own_line else " ") + text
    return rewritten
