"""reflect's calibrated twins, as pure functions of a genome and its raw prompt's answers: each prompt races beside
itself with label offsets (batch: measured on the inputs' answers, no call; contextual: content-free inputs, 3
calls), and each finalist beside offsets refit on the final dev prefix. Why: demos can push one label onto
almost every input, which offsets undo."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from prompttune.core.config import Serve
from prompttune.core.types import Record
from prompttune.optimizers.reflect.genome import Genome
from prompttune.scoring.prediction import label_bias


def batch_twin(genome: Genome, raw_records: Sequence[Record]) -> Genome | None:
    """Batch calibration (Zhou et al. 2024): the raw prompt's mean normalised label log-probabilities over
    these inputs (labels unused) become fixed offsets that ship with it; None where the answers carry no
    label scores. On the race block it is the twin; on the final dev prefix, the finalist's refit."""
    offsets = label_bias(raw_records)
    return replace(genome, label_bias=tuple(round(x, 6) for x in offsets)) if offsets else None


def contextual_twin(genome: Genome) -> Genome:
    """Contextual calibration (Zhao et al. 2021): label scores divided by the prompt's bias on content-free
    inputs, which the scorer measures (3 calls)."""
    return replace(genome, calibrate=True)


def calibration_said(calibration: str, serve: Serve, label_offsets: bool) -> str:
    """What the report says of calibration: raced, off, or why off."""
    if not label_offsets:
        return f"off (serve {serve}: no label offsets)"
    return "off" if calibration == "off" else calibration + " raced"
