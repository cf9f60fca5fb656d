"""The two operations every backend offers: label scoring and generation, both batched."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Sequence

from prompttune.core.types import GenerateRequest, GenerateResult, Prompt, ScoreRequest, ScoreResult

Request = ScoreRequest | GenerateRequest


class Backend(ABC):
    """A model behind a uniform interface; `model_id` keys the cache, so it must name the weights."""

    model_id: str
    options: ClassVar[tuple[str, ...]] = ()  # the BackendConfig fields it reads besides `model`

    @classmethod
    def check(cls, config: Any) -> None:
        """Cheap checks of a BackendConfig (a missing model, an unknown device) that must fail before
        any weights load or a run directory exists; a UserError says what is wrong."""

    @classmethod
    def from_config(cls, config: Any) -> "Backend":
        """Build from a BackendConfig (backends chosen by name implement it)."""
        raise NotImplementedError(f"{cls.__name__} is not built from a configuration")

    def describe(self) -> str:
        """One line for the run log: which model, where, how it scores."""
        return f"{type(self).__name__}: {self.model_id}"

    def server_counts(self) -> dict[str, dict[str, int]]:
        """Per-server counters (requests, retries, failures, quarantines, readmissions) since the
        backend was built, for the run report; empty for a model run in process."""
        return {}

    def close(self) -> None:
        """Release threads, connections or GPU memory; safe to call twice."""

    @abstractmethod
    def to_text(self, prompt: Prompt) -> str:
        """Final prompt string (chat messages go through the model's chat template)."""

    @abstractmethod
    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        """One result per request, same order."""

    @abstractmethod
    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        """Greedy decoding, or seeded sampling where a request sets a temperature; one result per
        request, same order."""

    def token_bounds(self, requests: Sequence[Request]) -> list[int] | None:
        """The most tokens each request can report (prompt and continuations, or prompt and
        `max_new_tokens`), counted before it runs so that a token cap can refuse the request that
        would pass it; None where only the server knows (a token cap then stops at the first
        request after it is passed)."""
        return None


def apply_chat_template(tokenizer: Any, prompt: Prompt) -> str:
    """Plain text as is; chat messages through the model's own chat template, then the answer prefix."""
    if prompt.messages is None:
        return prompt.text or ""
    messages = [{"role": role, "content": content} for role, content in prompt.messages]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prompt.assistant_prefix


def tokenizer_token_bounds(tokenizer: Any, requests: Sequence[Request]) -> list[int]:
    """`Backend.token_bounds` for backends that tokenize prompts themselves, as their score and
    generate calls count them (special tokens on the prompt, none on a continuation)."""
    def count(text: str, special: bool) -> int:
        return len(tokenizer(text, add_special_tokens=special).input_ids)

    return [count(r.text, True) + (r.max_new_tokens if isinstance(r, GenerateRequest)
                                   else sum(count(c, False) for c in r.continuations))
            for r in requests]
