"""Whether one call's texts decode together for about one text's time, timed on the device, not read from the backend's kind.

Where a decode step is bound by kernel launches (a GPU), four texts in one batch cost about what one costs, and
reflect writes several parents' critiques in one call; where it is bound by arithmetic (a CPU), each text adds its
own time and reflect keeps to one parent a step. The ratio is timed once per backend, on one forward pass over
plain counting prompts after a warm-up, each timing the best of two: milliseconds on a GPU. A model in process on
a CPU is not timed: there a batch costs its rows' time (the CPU checks in docs/results/tuning_log.md: four parents
made the same budget slower), and on two loaded cores the timing took 5-14 s and ranged 1.2-4.0.
"""

from __future__ import annotations

import time
from typing import Callable

from prompttune.core.types import GenerateRequest, GenerateResult

TEXTS = 4  # texts decoded together in the timed batch
CHEAP = 2.0  # the batch in under two texts' time: decoding together saves time
TOKENS = 1  # new tokens per text: the prompt's forward pass is what is timed
PROMPT_NUMBERS = 24  # numbers in each prompt (93 tokens of the embedded model)


def _requests(first: int, count: int) -> list[GenerateRequest]:
    """Distinct counting prompts in one request group, so that they share a batch."""
    return [GenerateRequest("Count on: " + ", ".join(str(n) for n in range(first + k, first + k + PROMPT_NUMBERS)) + ",",
                            TOKENS, group=1) for k in range(count)]


def batch_decode_ratio(generate: Callable[[list[GenerateRequest]], list[GenerateResult]]) -> float:
    """Seconds for TEXTS texts decoded in one call over seconds for one text."""
    generate(_requests(0, 1))  # warm-up: the first call pays for allocation and kernels chosen

    def best(first: int, count: int) -> float:
        times = []
        for repeat in range(2):
            started = time.perf_counter()
            generate(_requests(first + 10 * repeat, count))
            times.append(time.perf_counter() - started)
        return min(times)

    return best(TEXTS, TEXTS) / best(1, 1)


def decoding_line(ratio: float | None) -> str | None:
    """The plan's statement of what a call's texts cost together and what reflect's default makes of it."""
    if ratio is None:
        return None
    together = ratio < CHEAP
    return (f"generation: {TEXTS} texts decoded in one call take {ratio:.2f}× one text's time (measured): reflect's "
            + ("default draws several parents per step and decodes their texts together" if together else
               "default draws one parent per step"))
