"""Which constrained-decoding forms an OpenAI-compatible server honours, and whether it honours `logit_bias`
under one (`Capabilities.constraints` and `.logit_bias` of the openai backend).

Each form (`CONSTRAINT_FORMS`) is asked once to answer one of two nonsense words that a model answering freely
would never write (greedy, a few tokens): the form is honoured where the answer is exactly one of them. A server
that ignores an unknown field answers freely and one that rejects it answers an error: both mean not honoured.
`logit_bias` is then asked under the first form honoured, with a large bias on the first tokens of the word the
model did not choose: honoured where the answer flips to it. That needs the token ids, so without the model's
tokenizer it stays unknown. The requests go out once per backend through the start-up probe's client: no ledger
charges them and no server counter counts them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Sequence

from prompttune.backends.capabilities import CONSTRAINT_FORMS
from prompttune.backends.openai_http import HttpClient, ServerError

CHOICES = ("qzx", "vwk")  # distinct first letters: their first tokens differ in any tokenizer
PROBE_TEXT = "Q: What colour is the sky on a clear day?\nA:"
PROBE_MESSAGES = [{"role": "user", "content": "What colour is the sky on a clear day? Answer in one word."}]
BIAS = 100  # the most the OpenAI API allows


def constraint_fields(form: str, choices: Sequence[str]) -> dict[str, Any]:
    """The request fields that hold a server's answer to one of `choices` in `form` (the enum inside an object:
    OpenAI's strict mode wants one)."""
    if form == "grammar":
        return {"grammar": "root ::= " + " | ".join(json.dumps(c) for c in choices)}
    if form == "structured_outputs":
        return {"structured_outputs": {"choice": list(choices)}}
    if form == "guided_choice":
        return {"guided_choice": list(choices)}
    schema = {"type": "object", "properties": {"label": {"type": "string", "enum": list(choices)}},
              "required": ["label"], "additionalProperties": False}
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "label", "strict": True,
                                                                       "schema": schema}}}


def constraint(form: str) -> dict[str, Any]:
    """The probe's constraint to `CHOICES` in `form`, and room for it (a word, or a JSON object holding one): a
    free answer is cut as short."""
    return constraint_fields(form, CHOICES) | {"max_tokens": 16 if form == "response_format" else 6}


def chosen(form: str, text: str) -> str | None:
    """The choice the answer is, exactly (around white space); None for anything else."""
    if form == "response_format":
        try:
            value = json.loads(text)
        except ValueError:
            return None
        text = value.get("label") if isinstance(value, dict) and value.keys() == {"label"} else None
    return text.strip() if isinstance(text, str) and text.strip() in CHOICES else None


def first_tokens(tokenizer: Any, word: str) -> set[int]:
    """The ids a server's first token of `word` may have: alone, after a space, inside a JSON string."""
    return {tokenizer(text, add_special_tokens=False).input_ids[0] for text in (word, " " + word, '"' + word)}


async def _ask(http: HttpClient, path: str, body: dict[str, Any], form: str) -> str | None:
    """The choice the server answers `body` with under `form`; None for a free answer or a refusal."""
    try:
        choice = (await http.post_once(path, body))["choices"][0]
        return chosen(form, choice["message"]["content"] if "message" in choice else choice["text"])
    except (ServerError, KeyError, IndexError, TypeError):
        return None


async def probe_constraints(http: HttpClient, path: str, body: dict[str, Any],
                            tokenizer: Any) -> tuple[tuple[str, ...], bool | None]:
    """The forms honoured on `path` (`body`: the endpoint's plain greedy request), and whether `logit_bias` is
    honoured under the first of them (None: unknown)."""
    answers = await asyncio.gather(*(_ask(http, path, body | constraint(form), form) for form in CONSTRAINT_FORMS))
    honoured = {form: answer for form, answer in zip(CONSTRAINT_FORMS, answers) if answer is not None}
    if not honoured or tokenizer is None:
        return tuple(honoured), None
    form, answer = next(iter(honoured.items()))
    other = next(c for c in CHOICES if c != answer)
    biased = {str(token): BIAS for token in first_tokens(tokenizer, other) - first_tokens(tokenizer, answer)}
    flipped = await _ask(http, path, body | constraint(form) | {"logit_bias": biased}, form)
    return tuple(honoured), flipped == other
