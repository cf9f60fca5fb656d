"""SyntheticOracleBackend — a TEST DEVICE, not a model.

It answers with known per-prompt accuracies so optimizer and statistics logic can be checked
against ground truth. Correctness of (prompt, example) is a deterministic coin flip with the
probability that `accuracy_of(prompt_text)` returns; the gold label is looked up from the
examples it was given (the query is the last example text that appears in the prompt).

With `difficulty_correlation` rho > 0 the coins of different prompts on one example share a
per-example difficulty (a Gaussian copula: latent sqrt(rho) z_example + sqrt(1 - rho) z_prompt),
as real prompts on one model do: accuracies stay as declared, errors pile up on hard examples.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Callable, Iterable, Sequence

from prompttune.backends.base import Backend, Request
from prompttune.core.types import Example, GenerateRequest, GenerateResult, Prompt, ScoreRequest, ScoreResult
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Dimension, SearchSpace
from prompttune.tasks.base import Task

_KEY = 16
_GENERATED_TOKENS = 8  # what every generation reports, whatever it says, unless max_new_tokens is less
_NORMAL = NormalDist()


def _generated_tokens(request: GenerateRequest) -> int:
    return min(_GENERATED_TOKENS, request.max_new_tokens)


def _unit(*parts: str) -> float:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class SyntheticOracleBackend(Backend):
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


def demo_task(per_label: int = 40) -> Task:
    """A three-colour task for the oracle (test-device data for examples and doctests): 40 items per
    colour, drawn into train/dev/test halves and quarters."""
    rows = [{"text": f"item {i:03d} is painted {colour} all over", "colour": colour}
            for i in range(per_label) for colour in ("red", "green", "blue")]
    return Task.from_records(rows, label="colour", name="colours")


# -- a ready-made problem on the oracle, for the runnable examples in the optimizers' docstrings ----

COLOURS = ("red", "green", "blue")
GOOD_INSTRUCTION = "Pick the colour of the item ({labels})."
_OTHER_INSTRUCTIONS = ("Say the colour of the item ({labels}).", "Tell me which colour the item has ({labels}).")


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def is_better(text: str) -> bool:
    """Better in `OracleProblem`: 'Pick' in the instruction, or two or more demos (query included: 3 texts)."""
    return "Pick the colour" in text or text.count(" is about colour ") >= 3


def scripted_proposals(text: str) -> str:
    """A scripted proposer that depends only on what it was asked (its calls are cached by prompt):
    critiques and task summaries, a word list, or one of three instructions, one of them good."""
    if "In one sentence" in text or "Describe in one sentence" in text:
        return f"Mention the colour list explicitly (note {_digest(text) % 1000:03d})."
    if "single words" in text:
        return "Choose, Give"
    return (GOOD_INSTRUCTION, *_OTHER_INSTRUCTIONS)[_digest(text) % 3]


@dataclass
class OracleProblem:
    """A TEST DEVICE, not a task: a three-colour problem on the `SyntheticOracleBackend`, with a search
    space that every strategy can improve in its own way: the word slot `{verb}` (Name, Pick, State),
    the output and field formats, proposed instructions (`scripted_proposals`) and demo sets. By
    default a prompt is better (0.85 against 0.55) when `is_better` says so. For the runnable examples
    in the optimizers' docstrings, which run it through `prompttune.optimize`."""

    task: Task
    space: SearchSpace
    backend: SyntheticOracleBackend

    @classmethod
    def colours(cls, accuracy: Callable[[str], float] | None = None, sizes: tuple[int, int, int] = (60, 120, 60),
                seed: int = 0) -> "OracleProblem":
        """Train, dev and test of `sizes` examples (colours in turn); `accuracy` of a prompt's text
        (default: 0.85 when `is_better`, else 0.55)."""
        n = sum(sizes)
        examples = [Example(f"colour-{i:04d}", {"text": f"item {i:04d} is about colour {COLOURS[i % 3]}."}, i % 3)
                    for i in range(n)]
        train, dev, test = (examples[:sizes[0]], examples[sizes[0]:sizes[0] + sizes[1]],
                            examples[sizes[0] + sizes[1]:])
        base = PromptSpec(instruction="{verb} the colour of the item ({labels}).",
                          input_templates=(("text", "Input: {}"),), label_words=COLOURS)
        space = SearchSpace("oracle-colours", base, [
            Dimension("verb", ("Name", "Pick", "State"), "slot:verb", kind="word"),
            Dimension("output", ("Answer: {}", "Label: {}", "Colour: {}"), "output_template"),
            Dimension("field", ("Input: {}", "Text: {}", "Item: {}"), "input:text")]).bind(train)
        backend = SyntheticOracleBackend(examples, accuracy or (lambda text: 0.85 if is_better(text) else 0.55),
                                         seed=seed, proposals=scripted_proposals)
        task = Task("oracle-colours", list(COLOURS), [[c] for c in COLOURS], ["text"],
                    {"train": train, "dev": dev, "test": test})
        return cls(task, space, backend)
