"""A reflect prompt as its parts, so that moves can change one part and keep the others."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Genome:
    """A pool member as its parts: the grid choices, and what moves wrote over them."""

    assignment: tuple[tuple[str, int], ...]
    instruction: str | None = None  # written over the grid's instruction
    demo_ids: tuple[str, ...] | None = None  # swapped over the grid's demos
    calibrate: bool = False
    label_bias: tuple[float, ...] = ()
