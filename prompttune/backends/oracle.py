"""SyntheticOracleBackend — a TEST DEVICE, not a model.

It answers with known per-prompt accuracies so optimizer and statistics logic can be checked
against ground truth. Correctness of (prompt, example) is a deterministic coin flip with the
probability that `accuracy_of(prompt_text)` returns; the gold label is looked up from the
examples it was given (the query is the last example text that appears in the prompt).
"""

from __future__ import annotations

import hashlib
from typing import Callable, Iterable

from prompttune.backends.base import (Backend, GenerateRequest, GenerateResult, ScoreRequest,
                                      ScoreResult)
from prompttune.search_spaces.prompt import Prompt
from prompttune.tasks.base import Example


_KEY = 16


def _unit(*parts: str) -> float:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class SyntheticOracleBackend(Backend):
    def __init__(self, examples: Iterable[Example], accuracy_of: Callable[[str], float],
                 seed: int = 0, proposals: Callable[[str], str] | None = None) -> None:
        self.examples = list(examples)
        self.accuracy_of = accuracy_of
        self.seed = str(seed)
        self.proposals = proposals or (lambda text: f"Proposal {_unit(text, self.seed):.6f}")
        self.model_id = f"synthetic-oracle-{seed}"
        self._index: dict[str, list[tuple[Example, str]]] = {}
        for ex in self.examples:
            for value in ex.fields.values():
                if len(value) < _KEY:
                    raise ValueError(f"oracle: example texts need at least {_KEY} characters")
                self._index.setdefault(value[:_KEY], []).append((ex, value))

    def to_text(self, prompt: Prompt) -> str:
        if prompt.messages is None:
            return prompt.text or ""
        return "\n".join(f"<{role}>{content}" for role, content in prompt.messages) + prompt.assistant_prefix

    def _query(self, text: str) -> Example:
        """The example whose text occurs last in the prompt is the one being asked about.

        Texts are indexed by their first characters so a lookup scans the prompt once.
        """
        for pos in range(len(text) - _KEY + 1, -1, -1):
            for ex, value in self._index.get(text[pos:pos + _KEY], ()):
                if text.startswith(value, pos):
                    return ex
        raise ValueError("oracle: prompt contains no known example")

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        results = []
        for r in requests:
            example = self._query(r.text)
            n = len(r.continuations)
            correct = _unit(r.text, self.seed, "correct") < self.accuracy_of(r.text)
            wrong = (example.label + 1 + int(_unit(r.text, self.seed, "wrong") * (n - 1))) % n
            winner = example.label if correct else wrong
            logprobs = tuple(-0.1 if i == winner else -3.0 for i in range(n))
            results.append(ScoreResult(logprobs, len(r.text.split()), n))
        return results

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return [GenerateResult(self.proposals(r.text), (), len(r.text.split()), 8) for r in requests]
