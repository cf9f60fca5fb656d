"""POSIX through the evaluator: greedy responses, re-scored under every prompt, hand-computed ψ."""

from __future__ import annotations

import numpy as np
import pytest

from prompttune.core.errors import UserError
from prompttune.core.types import ScoreRequest, ScoreResult
from prompttune.scoring.prompt_sources import template_spec
from prompttune.scoring.sensitivity import measure_posix
from tests.test_prediction import WORDS, TableBackend, make_evaluator

RESPONSES = {"A": "x y", "B": "z", "C": "x y"}  # C answers like A: scored once per prompt
LOGP = {"A": {"x y": -1.0, "z": -4.0}, "B": {"x y": -3.0, "z": -0.5}, "C": {"x y": -2.0, "z": -2.5}}


class PosixBackend(TableBackend):
    """log P(continuation | prompt) from LOGP, doubled for the example 'beta'."""

    def __init__(self) -> None:
        super().__init__(lambda text: [], responses=lambda text: RESPONSES[text[0]])
        self.continuations: list[tuple[str, ...]] = []

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        self.calls += len(requests)
        self.continuations += [r.continuations for r in requests]
        return [ScoreResult(tuple(LOGP[r.text[0]][c] * (2 if "beta" in r.text else 1) for c in r.continuations),
                            1, len(r.continuations)) for r in requests]


def test_posix_matches_the_hand_computed_value() -> None:
    # logp[i, j] = log P(y_j | x_i); rows A, B, C: (-1, -4, -1), (-3, -.5, -3), (-2, -2.5, -2); L = (2, 1, 2)
    # off-diagonal |logp[i, j] - logp[j, j]| / L_j: 2/2 + 1/2 + 3.5/1 + 2/1 + 1/2 + 1/2 = 8 → ψ = 8 / (3·2)
    backend = PosixBackend()
    evaluator = make_evaluator(backend)
    specs = [template_spec(f"{name}: {{text}}\nColour:", ["text"], WORDS) for name in "ABC"]
    result = measure_posix(evaluator, specs, ["a", "b"])
    assert result.per_example == pytest.approx((4 / 3, 8 / 3))
    assert result.value == pytest.approx(2.0)
    assert result.responses == (("x y", "z", "x y"),) * 2
    assert all(c == ("x y", "z") for c in backend.continuations)  # identical responses scored once
    assert evaluator.ledger.calls == backend.calls == 12
    assert dict(evaluator.ledger.calls_by_kind) == {"generate": 6, "posix": 6}
    measure_posix(evaluator, specs, ["a", "b"])
    assert backend.calls == 12  # all cached


def test_posix_needs_two_prompts_and_an_example() -> None:
    evaluator = make_evaluator(PosixBackend())
    spec = template_spec("A: {text}\nColour:", ["text"], WORDS)
    with pytest.raises(UserError, match="at least two"):
        measure_posix(evaluator, [spec], ["a"])
    with pytest.raises(UserError, match="at least one example"):
        measure_posix(evaluator, [spec, spec], [])
    assert np.isfinite(measure_posix(evaluator, [spec, spec], ["a"]).value)
