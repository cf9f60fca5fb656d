"""/v1/chat/completions for the openai backend: how a prompt travels as `messages`, and how label
scores are read from the first answer token's top log-probs.

The evaluator caches and the backend sends one string per prompt; over chat that string is the
request's `messages`, JSON-encoded (`to_wire`), so cache keys, ledgers and reports work as over
completions. A text prompt is one user message. A chat prompt's assistant prefix is sent as a
final assistant message for the server to continue (`continue_final_message`, vLLM's and SGLang's
name) when the start-up probe saw the server continue one; otherwise (llama-cpp-python, OpenAI)
it is appended to the last message after a newline, and the answer opens a fresh assistant turn.

A label is scored by its first token only: one answer token is requested with `top_logprobs`,
and each label's first token is looked up in that list. That is exact only while every label's
first token is listed and no two labels share one; a request where either fails is refused in one
line (`--serve generate` reads labels from generated text instead). The first token is the
model's tokenizer's (`--tokenizer`, or the embedded model's own); without a tokenizer it is taken
to be the longest listed token the label starts with.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from prompttune.core.errors import UserError
from prompttune.core.types import Prompt

TOP_LOGPROBS = (20, 5)  # asked in turn: the OpenAI API's most, then a cap some servers keep
CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}
PREFIX_JOINER = "\n"  # between the last message and an assistant prefix the server will not continue
PLAIN_PROBE = [{"role": "user", "content": "What is the capital of France?"}]
PREFILL_PROBE = PLAIN_PROBE + [{"role": "assistant", "content": "The capital of France is"}]
_PREFILL_ANSWER = " Paris"


def wire_messages(prompt: Prompt, prefill: bool) -> list[dict[str, str]]:
    """The `messages` a prompt is sent as (see the module docstring for the assistant prefix)."""
    if prompt.messages is None:
        return [{"role": "user", "content": prompt.text or ""}]
    messages = [{"role": role, "content": content} for role, content in prompt.messages]
    if prompt.assistant_prefix and prefill:
        messages.append({"role": "assistant", "content": prompt.assistant_prefix})
    elif prompt.assistant_prefix:
        messages[-1]["content"] += PREFIX_JOINER + prompt.assistant_prefix
    return messages


def to_wire(prompt: Prompt, prefill: bool) -> str:
    return json.dumps(wire_messages(prompt, prefill), ensure_ascii=False)


def from_wire(text: str) -> list[dict[str, str]]:
    return json.loads(text)


def continues(messages: Sequence[dict[str, str]], prefill: bool) -> bool:
    """Whether the server is asked to continue the last message (an assistant prefix)."""
    return prefill and messages[-1]["role"] == "assistant"


def render_wire(tokenizer: Any, text: str, prefill: bool) -> str:
    """The prompt a server with this tokenizer's chat template builds from a wire text."""
    messages = from_wire(text)
    go_on = continues(messages, prefill)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=not go_on,
                                         continue_final_message=go_on)


def first_top(response: dict) -> dict[str, float] | None:
    """The answer's first-token top log-probs, or None when the server sent none."""
    content = (response["choices"][0].get("logprobs") or {}).get("content") or []
    listed = content[0].get("top_logprobs") if content else None
    return {entry["token"]: float(entry["logprob"]) for entry in listed} if listed else None


def continued_probe(content: str) -> bool:
    """Whether the one-token answer to PREFILL_PROBE continues its assistant message (' Paris')
    rather than opening a new turn (which starts without a space)."""
    return content[:1].isspace() and _PREFILL_ANSWER.startswith(content)


def first_tokens(tokenizer: Any, labels: Sequence[str]) -> list[str | None]:
    """Each label's first token as a server lists it; None for each without a tokenizer."""
    if tokenizer is None:
        return [None] * len(labels)
    return [tokenizer.decode(tokenizer(label, add_special_tokens=False).input_ids[:1]) for label in labels]


def read_labels(top: dict[str, float], labels: Sequence[str], firsts: Sequence[str | None], asked: int,
                prompt_end: str) -> tuple[float, ...]:
    """Each label's first-token log-prob from `top`; a label whose first token is not listed, or two
    labels that share one, are refused (one line: no exact score exists)."""
    tokens = [first if first is not None else max((t for t in top if t and label.startswith(t)), key=len, default=None)
              for label, first in zip(labels, firsts)]
    for label, token in zip(labels, tokens):
        if token is None or token not in top:
            shown = "" if token is None else f" (first token {token!r})"
            raise UserError(f"label {label!r}{shown} is not among the top-{asked} first answer tokens after "
                            f"the prompt ending {prompt_end[-40:]!r}: over /v1/chat/completions its score is "
                            "unknown; use --serve generate or --api completions")
    seen: dict[str, str] = {}
    for label, token in zip(labels, tokens):
        if token in seen:
            raise UserError(f"labels {seen[token]!r} and {label!r} share their first token {token!r}: over "
                            "/v1/chat/completions a label is read from the first answer token only; use "
                            "--serve generate, --api completions, or label words that start differently")
        seen[token] = label
    return tuple(top[token] for token in tokens)
