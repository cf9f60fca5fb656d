"""The pure helpers of the module `prompttune export RUN --to python` writes: the export puts this file's code
(below its imports) where served_classifier.py imports it, so the written module stays one file of the standard
library only. Kept apart so that neither template file outgrows the package's line limit."""

from __future__ import annotations

import json
import math
from typing import Any, Sequence


class ContractError(RuntimeError):
    """The server cannot answer as the run was scored (no log-probs, a label's first token not
    listed, ...): a prediction here would not be the one the test confirmed."""


class ServingError(RuntimeError):
    """The server refused a request or could not be reached."""


def normalized(logprobs: Sequence[float]) -> list[float]:
    """Log-probabilities renormalised over the labels."""
    top = max(logprobs)
    total = top + math.log(sum(math.exp(x - top) for x in logprobs))
    return [x - total for x in logprobs]


def first_max(values: Sequence[float]) -> int:
    """The first largest value's index, so ties go to the lower label as in prompttune."""
    return max(range(len(values)), key=lambda i: (values[i], -i))


def next_piece(top: dict[str, float], rest: str) -> tuple[str, float] | None:
    """The longest top-list token that starts `rest`, with its log-prob; None if none does."""
    pieces = [t for t in top if t and rest.startswith(t)]
    if not pieces:
        return None
    piece = max(pieces, key=len)
    return piece, float(top[piece])


def echoed_span(logprobs: dict, start: int, end: int) -> list[float]:
    """Log-probs of the echoed tokens that carry characters [start, end)."""
    offsets = logprobs["text_offset"]
    ends = offsets[1:] + [math.inf]
    picked = [i for i, (a, b) in enumerate(zip(offsets, ends)) if a < end and b > start and b > a]
    if not picked:
        raise ServingError(f"echoed log-probs do not cover characters {start}..{end} of the prompt")
    return [float(logprobs["token_logprobs"][i]) for i in picked]


def last_prompt_top(logprobs: dict, end: int) -> dict[str, float] | None:
    """The top list of the last echoed token that starts before character `end`."""
    before = [i for i, offset in enumerate(logprobs["text_offset"]) if offset < end]
    return logprobs["top_logprobs"][before[-1]] if before else None


def constraint(form: str, choices: Sequence[str]) -> dict[str, Any]:
    """The request fields that hold a server's greedy answer to one of `choices`, in its `form`."""
    if form == "grammar":
        return {"grammar": "root ::= " + " | ".join(json.dumps(c) for c in choices)}
    return {form: {"choice": list(choices)}} if form == "structured_outputs" else {form: list(choices)}


def first_top(response: dict) -> dict[str, float] | None:
    """A chat answer's first-token top log-probs, or None when the server sent none."""
    content = (response["choices"][0].get("logprobs") or {}).get("content") or []
    listed = content[0].get("top_logprobs") if content else None
    return {entry["token"]: float(entry["logprob"]) for entry in listed} if listed else None
