"""Reading /v1/completions answers: the echoed prompt log-probs that cover a label, and labels walked through
top log-prob lists (the scoring modes `echo` and `top_logprobs` in openai_backend.py)."""

from __future__ import annotations

import logging
import math
from typing import Any

from prompttune.backends.openai_http import ServerError
from prompttune.core.types import ScoreRequest, ScoreResult

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


async def score_top(backend: Any, request: ScoreRequest) -> ScoreResult:
    """Each label piece by piece: the longest top-list token that continues it, then the next
    position; prefixes shared by labels are asked once."""
    asked: dict[str, tuple[dict[str, float], dict]] = {}

    async def top_after(prefix: str) -> dict[str, float]:
        if prefix not in asked:
            asked[prefix] = await next_top(backend, request.text + prefix)
        return asked[prefix][0]

    scores, pieces = [], 0
    for continuation in request.continuations:
        done, total = 0, 0.0
        while done < len(continuation):
            top = await top_after(continuation[:done])
            found = next_piece(top, continuation[done:])
            if found is None:
                total += min(top.values()) - math.log(2.0)  # below everything in the top list
                break
            done, total, pieces = done + len(found[0]), total + found[1], pieces + 1
        scores.append(total)
    prompt_tokens = asked[""][1].get("usage", {}).get("prompt_tokens", 0) if "" in asked else 0
    return ScoreResult(tuple(scores), prompt_tokens, pieces)

async def next_top(backend: Any, text: str) -> tuple[dict[str, float], dict]:
    """Top next-token log-probs after `text` (and the response). When the likeliest next token
    ends the text, some servers (llama-cpp-python) return no completion token and so no
    log-probs; their shifted echo still holds them at the last prompt position."""
    response = await backend.http.post("/completions", backend._next_token_body(text, 1, TOP_LOGPROBS))
    tops = (response["choices"][0].get("logprobs") or {}).get("top_logprobs") or []
    if tops and tops[0]:
        return tops[0], response
    if backend._echo_shifted:
        echoed = await backend.http.post("/completions", backend._echo_body(text, TOP_LOGPROBS))
        top = last_prompt_top(echoed["choices"][0]["logprobs"], len(text))
        if top:
            return top, response
    raise ServerError(f"the server gave no next-token log-probs after {text[-40:]!r} (the likeliest "
                      "next token ends the text): use --serve generate")
