"""Which train examples a strategy shows as demos: those that look like what the prompt is asked about.

A task's train split may not look like its dev and test inputs (sst2's train split holds the phrases of
its parse trees, its dev and test whole sentences), and demos unlike the inputs teach the model the wrong
thing; measured end to end in docs/optimizers.md."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from prompttune.core.types import Example, input_words


def demo_ids_like_dev(demo_pool: Sequence[Example], train_ids: Sequence[str], dev_input_words: Sequence[int],
                      n_classes: int) -> list[str]:
    """The train ids whose input is as long as the middle half of the dev inputs (their labels unused); all of
    `train_ids` where the dev lengths are unknown or too few of each class (4) qualify to fill a set."""
    if not dev_input_words:
        return list(train_ids)
    low, high = np.percentile(dev_input_words, [25, 75])
    like = [e for e in demo_pool if low <= input_words(e) <= high]
    per_class = Counter(e.label for e in like)
    if len(per_class) < n_classes or min(per_class.values()) < 4:
        return list(train_ids)
    return [e.id for e in like]
