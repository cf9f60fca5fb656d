"""The two operations every backend offers: label scoring and generation, both batched."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

from prompttune.search_spaces.prompt import Prompt


@dataclass(frozen=True)
class ScoreRequest:
    """Teacher-forced log-probability of each continuation after `text`.

    `prefix` is a hint, never part of the result: the start of `text` that other requests in the
    same call share (a candidate's prompt up to the input), so a backend can compute it once.
    """

    text: str
    continuations: tuple[str, ...]
    prefix: str = ""


@dataclass(frozen=True)
class ScoreResult:
    logprobs: tuple[float, ...]
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class GenerateRequest:
    """Greedy continuation of `text`; `prefix` is the same sharing hint as in ScoreRequest."""

    text: str
    max_new_tokens: int
    prefix: str = ""


@dataclass(frozen=True)
class GenerateResult:
    text: str
    token_logprobs: tuple[float, ...]
    prompt_tokens: int
    completion_tokens: int


class Backend(ABC):
    """A model behind a uniform interface; `model_id` keys the cache, so it must name the weights."""

    model_id: str

    @abstractmethod
    def to_text(self, prompt: Prompt) -> str:
        """Final prompt string (chat messages go through the model's chat template)."""

    @abstractmethod
    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        """One result per request, same order."""

    @abstractmethod
    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        """Greedy decoding; one result per request, same order."""


def apply_chat_template(tokenizer: Any, prompt: Prompt) -> str:
    """Plain text as is; chat messages through the model's own chat template, then the answer prefix."""
    if prompt.messages is None:
        return prompt.text or ""
    messages = [{"role": role, "content": content} for role, content in prompt.messages]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prompt.assistant_prefix


def measure_rate(backend: Backend, requests: Sequence[ScoreRequest]) -> float:
    """Scored prompts per second on `requests` (after a one-request warm-up), to budget wall time."""
    backend.score(list(requests[:1]))
    start = time.perf_counter()
    backend.score(list(requests))
    return len(requests) / (time.perf_counter() - start)


def estimate_seconds(calls: int, rate: float) -> float:
    """Wall time for `calls` model calls at `rate` calls/s (from `measure_rate` or a past run)."""
    return calls / rate
