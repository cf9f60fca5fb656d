"""Reading /v1/completions answers: the echoed prompt log-probs that cover a label, and labels walked through
top log-prob lists (the scoring modes `echo` and `top_logprobs` in openai_backend.py)."""

from __future__ import annotations

import logging
import math

from prompttune.backends.openai_http import ServerError

log = logging.getLogger(__name__)

TOP_LOGPROBS = 20  # the most the OpenAI API allows


def echoed_span(logprobs: dict, start: int, end: int) -> tuple[list[float], int]:
    """Log-probs of the echoed tokens that carry characters [start, end), and how many tokens
    come before them. A token that begins before `start` but reaches past it is included."""
    offsets = logprobs["text_offset"]
    ends = offsets[1:] + [math.inf]
    picked = [i for i, (a, b) in enumerate(zip(offsets, ends)) if a < end and b > start and b > a]
    if not picked:
        raise ServerError(f"echoed log-probs do not cover characters {start}..{end} of the prompt")
    if offsets[picked[0]] < start:
        log.warning("a label starts inside a server token; its score includes that whole token")
    return [float(logprobs["token_logprobs"][i]) for i in picked], picked[0]


def last_prompt_top(logprobs: dict, end: int) -> dict[str, float] | None:
    """The top list of the last echoed token that starts before character `end`."""
    before = [i for i, offset in enumerate(logprobs["text_offset"]) if offset < end]
    return logprobs["top_logprobs"][before[-1]] if before else None


def next_piece(top: dict[str, float], rest: str) -> tuple[str, float] | None:
    """The longest top-list token that starts `rest`, with its log-prob; None if none does."""
    pieces = [t for t in top if t and rest.startswith(t)]
    if not pieces:
        return None
    piece = max(pieces, key=len)
    return piece, float(top[piece])
