"""The proposer: an LLM that writes instructions and critiques, charged to the search ledger."""

from __future__ import annotations

import re
from typing import Sequence

from prompttune.backends.base import Backend, GenerateRequest
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.search_spaces.prompt import Prompt


class Proposer:
    """Every call is reserved on the ledger before it runs, like a scoring call."""

    def __init__(self, backend: Backend, ledger: BudgetLedger, max_new_tokens: int = 64) -> None:
        self.backend, self.ledger, self.max_new_tokens = backend, ledger, max_new_tokens

    def __call__(self, request: str, max_new_tokens: int | None = None) -> str:
        text = self.backend.to_text(Prompt(messages=(("user", request),)))
        self.ledger.reserve(1, "propose")
        out = self.backend.generate([GenerateRequest(text, max_new_tokens or self.max_new_tokens)])[0]
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


def valid_instruction(text: str, label_words: Sequence[str], original: str) -> bool:
    """Non-empty, keeps `{labels}` if the original had it, else still names every label word."""
    if len(text.split()) < 3 or len(text) > 600:
        return False
    if "{labels}" in original:
        return "{labels}" in text
    lowered = text.lower()
    return all(word.lower() in lowered for word in label_words) or "{labels}" in text
