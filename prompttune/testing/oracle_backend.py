"""TEST DEVICE, not a model: `SyntheticOracleBackend`, the backend that answers the synthetic tasks with known
per-prompt accuracies (`prompttune.testing` builds the tasks and problems on it).

Correctness of (prompt, example) is a deterministic coin flip with the probability that
`accuracy_of(prompt_text)` returns; the gold label is looked up from the examples it was given (the query is
the last example text that appears in the prompt). With `difficulty_correlation` rho > 0 the coins of
different prompts on one example share a per-example difficulty (a Gaussian copula: latent
sqrt(rho) z_example + sqrt(1 - rho) z_prompt), as real prompts on one model do: accuracies stay as declared,
errors pile up on hard examples.
"""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist
from typing import Any, Callable, Iterable, Sequence

from prompttune.backends.backend import Backend, Request
from prompttune.core.types import (
    ChoiceRequest,
    ChoiceResult,
    Example,
    GenerateRequest,
    GenerateResult,
    Prompt,
    ScoreRequest,
    ScoreResult,
)
from prompttune.tasks.task import Task

_KEY = 16
_GENERATED_TOKENS = 8  # what every generation reports, whatever it says, unless max_new_tokens is less
_NORMAL = NormalDist()


def _generated_tokens(request: GenerateRequest) -> int:
    return min(_GENERATED_TOKENS, request.max_new_tokens)


def _unit(*parts: str) -> float:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class SyntheticOracleBackend(Backend):
    """A TEST DEVICE, not a model: known accuracies per prompt (the module docstring says how)."""

    def __init__(self, examples: Iterable[Example], accuracy_of: Callable[[str], float],
                 seed: int = 0, proposals: Callable[[str], str] | None = None,
                 difficulty_correlation: float = 0.0) -> None:
        if not 0.0 <= difficulty_correlation < 1.0:
            raise ValueError(f"difficulty_correlation must be in [0, 1), got {difficulty_correlation}")
        self.rho = difficulty_correlation
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

    @classmethod
    def for_task(cls, task: Task, accuracy_of: Callable[[str], float], **options: Any) -> "SyntheticOracleBackend":
        """The oracle over every example of `task`'s splits."""
        return cls([ex for split in task.splits.values() for ex in split], accuracy_of, **options)

    def to_text(self, prompt: Prompt) -> str:
        if prompt.messages is None:
            return prompt.text or ""
        return "\n".join(f"<{role}>{content}" for role, content in prompt.messages) + prompt.assistant_prefix

    def _query(self, text: str) -> Example | None:
        """The example whose text occurs last in the prompt is the one being asked about (None: the
        prompt holds no example, as calibration's content-free probes do).

        Texts are indexed by their first characters so a lookup scans the prompt once.
        """
        for pos in range(len(text) - _KEY + 1, -1, -1):
            for ex, value in self._index.get(text[pos:pos + _KEY], ()):
                if text.startswith(value, pos):
                    return ex
        return None

    def _draw(self, text: str, example: Example) -> float:
        """Uniform on [0, 1) per (prompt, example); correlated across prompts when rho > 0."""
        own = _unit(text, self.seed, "correct")
        if not self.rho:
            return own
        def z(u: float) -> float:
            return _NORMAL.inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
        shared = z(_unit(example.id, self.seed, "difficulty"))
        return _NORMAL.cdf(math.sqrt(self.rho) * shared + math.sqrt(1 - self.rho) * z(own))

    def count_tokens(self, texts: Sequence[str], continuation: bool = False) -> list[int]:
        """Exact, in the oracle's own units: a prompt costs its words, a label continuation one token."""
        return [1 if continuation else len(text.split()) for text in texts]

    @property
    def decodes_together(self) -> bool:
        return True  # its texts are scripted: several cost what one does

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        results = []
        for r in requests:
            n = len(r.continuations)
            example = self._query(r.text)
            if example is None:  # a content-free probe (calibration): no label preferred
                results.append(ScoreResult((-1.0,) * n, len(r.text.split()), n))
                continue
            correct = self._draw(r.text, example) < self.accuracy_of(r.text)
            wrong = (example.label + 1 + int(_unit(r.text, self.seed, "wrong") * (n - 1))) % n
            winner = example.label if correct else wrong
            logprobs = tuple(-0.1 if i == winner else -3.0 for i in range(n))
            results.append(ScoreResult(logprobs, len(r.text.split()), n))
        return results

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return [GenerateResult(self._reply(r), (), len(r.text.split()), _generated_tokens(r)) for r in requests]

    def first_tokens(self, texts: Sequence[str]) -> list[int] | None:
        """Each label one token of its own (`count_tokens`): distinct texts, distinct ids."""
        ids = {text: i for i, text in enumerate(dict.fromkeys(texts))}
        return [ids[text] for text in texts]

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """Constrained decoding over one-token labels: the label whose score plus its first-token bias is largest
        (the scores `score` gives, biased and renormalised over the labels)."""
        results = []
        for request, scored in zip(requests, self.score([ScoreRequest(r.text, r.choices) for r in requests])):
            bias = request.first_token_bias or (0.0,) * len(request.choices)
            biased = [lp + b for lp, b in zip(scored.logprobs, bias)]
            norm = math.log(sum(math.exp(x) for x in biased))
            results.append(ChoiceResult(max(range(len(biased)), key=lambda i: (biased[i], -i)),
                                        tuple(x - norm for x in biased), scored.prompt_tokens, 1))
        return results

    def _reply(self, request: GenerateRequest) -> str:
        """The proposal for the text; a sampled request's is marked with a draw that only
        (text, temperature, seed) decide, so distinct seeds give distinct texts."""
        text = self.proposals(request.text)
        if not request.temperature:
            return text
        draw = _unit(request.text, self.seed, str(request.temperature), str(request.seed), "sample")
        return f"{text} (draw {draw:.6f})"

    def token_bounds(self, requests: Sequence[Request]) -> list[int]:
        """Exactly what `score` and `generate` will report: the oracle knows a generation's length
        before it runs, so it takes the place of `max_new_tokens` in the base class's bound."""
        return [bound - r.max_new_tokens + _generated_tokens(r) if isinstance(r, GenerateRequest) else bound
                for r, bound in zip(requests, super().token_bounds(requests))]
