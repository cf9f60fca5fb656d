"""reflect's `--option` settings: what each stage may spend, how it races, what it may write or show."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from prompttune.optimizers.strategy_contract import OptimizerOptions


class ReflectOptions(OptimizerOptions):
    pool: int = Field(8, ge=2, description="prompts kept in the evolving pool")
    screen_share: float = Field(0.3, gt=0, lt=1, description="share of the budget for the first screen")
    final_share: float = Field(0.4, gt=0, lt=1, description="share of the budget kept for the final race "
                               "(the pool on growing dev prefixes, then the finalists and the baseline); never more "
                               "than scoring the whole pool on the whole dev split costs")
    finalists: int = Field(2, ge=1, description="best prompts by race score scored on the dev split at the end")
    min_examples: int = Field(20, ge=4, description="smallest race block (at least 4 per class)")
    minibatch: int = Field(16, ge=4, description="train examples a reflection reads the parent's errors on")
    parents: int | None = Field(None, ge=1, description="parents a reflection step draws: their minibatches are "
                                "scored together and their critiques, then their edits, are written in one generate "
                                "call each (1: one parent per step, each drawn after the last child's race). Unset: "
                                "4 where the backend that writes the texts decodes a call's texts together (vLLM, "
                                "OpenAI-compatible servers), with decode_together, or on a model in process timed "
                                "to decode four texts in under two texts' time (a GPU; decoded together then); "
                                "else 1 (on a CPU four parents make a budget slower)")
    decode_together: bool = Field(False, description="with several parents, decode a step's critiques, then its "
                                  "edits, in one batch: faster where the backend decodes one request group at a "
                                  "time (transformers); each text then depends on the step's set (off: each alone)")
    shown_errors: int = Field(3, ge=1, description="errors quoted to the critic per direction")
    patience: int = Field(4, ge=1, description="rejected children before the race block grows")
    write_instructions: bool = Field(True, description="reflect, merge and sample write instructions (off: the "
                                     "listed ones only)")
    sampled: float = Field(0.0, ge=0, le=1, description="share of the screen's draws whose instruction is a "
                           "proposal sampled at temperature 1.0; above 0 (with writing on) sampling is also a move")
    swap_demos: bool = Field(True, description="replace demos by train examples the parent answers right (where "
                             "the space searches few-shot k)")
    demo_sets: bool = Field(True, description="each screen draw that shows demos gets its own class-balanced set "
                            "of train examples (where the space searches few-shot k; off: the grid's one set per k)")
    demo_pool: Literal["like-dev", "train"] = Field(
        "like-dev", description="which train examples demos come from (screen sets, swaps, k moves): like-dev, those as "
        "long as the middle half of the dev inputs (labels unused); train, any")
    calibration: Literal["batch", "contextual", "off"] = Field(
        "batch", description="also race each prompt calibrated: batch (its mean label scores over the block's inputs "
        "subtracted, no call), contextual (divided by its bias on content-free inputs, 3 calls), or off")
    refit: bool = Field(True, description="with batch calibration, race each finalist once more with offsets "
                        "measured on the final dev prefix's inputs (no call: its own answers)")
    race_score: Literal["margin", "probability", "tiebreak", "objective", "staged"] = Field(
        "tiebreak", description="what the race ranks by on the block: the gold label's mean log-probability margin, "
        "its mean probability over the labels, the objective with ties broken by margin, the objective alone, or "
        "staged: the probability while the pool is screened and evolves, the objective with ties broken by margin "
        "in the final race")
