"""POSIX prompt sensitivity (Chatterjee et al. 2024) measured through the evaluator.

For intent-equivalent prompts x_1..x_N of one example, each prompt's greedy response y_j is
scored (teacher-forced) under every prompt: logp[i, j] = log P(y_j | x_i). The statistic itself
is `statistics.multiprompt.posix`; this module only gathers the matrices, so the calls share the
evaluator's cache and ledger (kinds `generate` and `posix`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from prompttune.core.errors import UserError
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.records import Query
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.statistics.multiprompt import posix


@dataclass(frozen=True)
class PosixResult:
    """Dataset POSIX (mean over examples) and the per-example values it averages."""

    value: float
    example_ids: tuple[str, ...]
    per_example: tuple[float, ...]
    responses: tuple[tuple[str, ...], ...]  # [example][prompt]: the greedy responses y_j


def posix_matrices(evaluator: Evaluator, specs: Sequence[PromptSpec],
                   example_ids: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray, tuple[str, ...]]]:
    """Per example: the N×N log P(y_j | x_i), the lengths L(y_j) in tokens, and the responses.

    Identical responses are scored once per prompt. L(y_j) is the number of generated tokens
    (EOS excluded, as in the teacher-forced score); an empty response gets length 1, which is
    harmless since its log-probability is 0 under every prompt.
    """
    if len(specs) < 2:
        raise UserError("POSIX compares prompts: give at least two")
    generated = evaluator.outputs_many([Query(spec, example_ids) for spec in specs], "generate")
    responses = [tuple(g[e].text or "" for g in generated) for e in range(len(example_ids))]
    unique = [tuple(dict.fromkeys(r)) for r in responses]
    scored = evaluator.outputs_many([Query(spec, example_ids, unique) for spec in specs], "score", kind="posix")
    matrices = []
    for e, texts in enumerate(responses):
        column = [unique[e].index(text) for text in texts]
        logp = np.array([[(by_prompt[e].logprobs or ())[k] for k in column] for by_prompt in scored])
        lengths = np.array([max(g[e].completion_tokens, 1) for g in generated], dtype=float)
        matrices.append((logp, lengths, texts))
    return matrices


def measure_posix(evaluator: Evaluator, specs: Sequence[PromptSpec],
                  example_ids: Sequence[str]) -> PosixResult:
    """POSIX of the prompt set on `example_ids`: how much wording alone moves the responses' likelihood."""
    if not example_ids:
        raise UserError("POSIX needs at least one example")
    matrices = posix_matrices(evaluator, specs, example_ids)
    per_example = tuple(posix(logp, lengths) for logp, lengths, _ in matrices)
    return PosixResult(float(np.mean(per_example)), tuple(example_ids), per_example,
                       tuple(texts for _, _, texts in matrices))
