"""`serve: choice` on an OpenAI-compatible server: the server itself decodes each request constrained to its choices,
greedy, in the form its probe found honoured (a llama.cpp `grammar`, vLLM's `structured_outputs` choice or its older
`guided_choice`), with the request's first-token bias as `logit_bias` on the token ids of the backend's tokenizer.
The answer is what production gets from that server, exactly. A JSON-schema `response_format` enum is not used: it
writes the label inside JSON quotes, another decoding than the run's.

The label scores beside the answer (race margins, batch offsets) are the first answer token's top log-probs where
the server lists them (llama.cpp lists them before its grammar and bias apply), shifted by the bias as the server
applies it; a label whose first token is not listed gets a bound below the list, as the top-log-probs walk does."""

from __future__ import annotations

import math
from typing import Any, Sequence

from prompttune.backends import openai_chat as chat
from prompttune.backends.constrained import choice_token_cap, first_logprobs, first_token_bias
from prompttune.backends.openai_completions import TOP_LOGPROBS, next_piece
from prompttune.backends.openai_constraints import constraint_fields
from prompttune.backends.openai_http import ServerError
from prompttune.core.errors import UserError
from prompttune.core.types import ChoiceRequest, ChoiceResult


def _label_scores(top: dict[str, float] | None, labels: Sequence[str]) -> dict[str, float]:
    """Each label's first-token log-prob from the listed top tokens (the longest listed piece that starts it),
    or a bound below the list; nothing without a list."""
    if not top:
        return {}
    floor = min(top.values()) - math.log(2.0)
    return {label: found[1] if (found := next_piece(top, label)) else floor for label in labels}


async def choose_one(backend: Any, request: ChoiceRequest, form: str) -> ChoiceResult:
    """One constrained greedy answer from the server; its index among the request's choices."""
    max_tokens = choice_token_cap(request.choices)
    if backend.api == "chat":
        messages = chat.from_wire(request.text)
        go_on = chat.continues(messages, backend.prefill)
        labels = [c if go_on else c.lstrip() for c in request.choices]  # a fresh answer carries no leading space
        body = backend._chat_body(messages, max_tokens, backend.top_k or None, go_on)
        path = "/chat/completions"
    else:
        labels = list(request.choices)
        body = backend._next_token_body(request.text, max_tokens, TOP_LOGPROBS if backend.scores_labels else None)
        path = "/completions"
    first_ids = backend.first_tokens(labels)
    if request.first_token_bias and first_ids is None:
        raise UserError("label offsets under serve choice are a logit_bias on the labels' first token ids, which need "
                        "the model's tokenizer: pass --tokenizer")
    bias = first_token_bias(first_ids, request.first_token_bias) if first_ids else {}
    extra = constraint_fields(form, labels) | ({"logit_bias": {str(t): b for t, b in bias.items()}} if bias else {})
    response = await backend.http.post(path, body | extra)
    choice = response["choices"][0]
    if backend.api == "chat":
        answer, top = choice["message"].get("content") or "", chat.first_top(response)
    else:
        tops = (choice.get("logprobs") or {}).get("top_logprobs") or []
        answer, top = choice["text"], tops[0] if tops else None
    if answer not in labels:
        raise ServerError(f"{backend.pool.servers[0].url}{path} answered {answer[:40]!r}, none of the labels, under "
                          f"its {form} constraint")
    raw = _label_scores(top, labels)
    scores: tuple[float, ...] = ()
    if raw and first_ids:
        by_id = {t: raw[label] for t, label in zip(first_ids, labels)}
        scores = first_logprobs(by_id, first_ids, bias)
    elif raw:
        scores = tuple(raw[label] for label in labels)
    usage = response.get("usage") or {}
    return ChoiceResult(labels.index(answer), scores, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 1))
