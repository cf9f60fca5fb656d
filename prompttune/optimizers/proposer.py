"""The proposer: an LLM that writes instructions and critiques, charged to the search ledger."""

from __future__ import annotations

import re
from typing import Sequence

from prompttune.backends.base import Backend
from prompttune.core.types import GenerateRequest, Prompt
from prompttune.evaluation.ledger import BudgetLedger


class Proposer:
    """Every call is reserved on the ledger before it runs, like a scoring call."""

    def __init__(self, backend: Backend, ledger: BudgetLedger, max_new_tokens: int = 64) -> None:
        self.backend, self.ledger, self.max_new_tokens = backend, ledger, max_new_tokens

    def __call__(self, request: str, max_new_tokens: int | None = None) -> str:
        text = self.backend.to_text(Prompt(messages=(("user", request),)))
        request = GenerateRequest(text, max_new_tokens or self.max_new_tokens)
        self.ledger.reserve_requests(self.backend, [request], "propose")
        out = self.backend.generate([request])[0]
        self.ledger.add_tokens(out.prompt_tokens, out.completion_tokens)
        return out.text


def clean_instruction(text: str) -> str:
    """First non-empty line, without list markers, quotes or a leading 'Instruction:' label."""
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:[-*\d.)]+\s+|(?:new |improved )?instruction\s*:\s*)", "", line,
                      flags=re.IGNORECASE).strip().strip('"\'` ')
        if line:
            return line
    return ""


LABEL_CLAUSE = " Answer with one of: {labels}."


def with_label_list(text: str, label_words: Sequence[str]) -> str:
    """The instruction, keeping the label set: one that names neither `{labels}` nor every label
    word gets the `{labels}` clause appended, because small proposers drop placeholders yet write
    usable text."""
    lowered = text.lower()
    if "{labels}" in text or all(word.lower() in lowered for word in label_words):
        return text
    return text.rstrip() + LABEL_CLAUSE


def checked_instruction(text: str, label_words: Sequence[str]) -> str | None:
    """The proposal if usable, else None: 3+ words, at most 600 characters, and it keeps the
    label set (`with_label_list`)."""
    text = clean_instruction(text)
    if len(text.split()) < 3 or len(text) > 600:
        return None
    return with_label_list(text, label_words)
