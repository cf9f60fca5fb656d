"""The two operations every backend offers: label scoring and generation, both batched."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from prompttune.core.types import GenerateRequest, GenerateResult, Prompt, ScoreRequest, ScoreResult


class Backend(ABC):
    """A model behind a uniform interface; `model_id` keys the cache, so it must name the weights."""

    model_id: str
    options: ClassVar[tuple[str, ...]] = ()  # the BackendConfig fields it reads besides `model`

    @classmethod
    def from_config(cls, config: Any) -> "Backend":
        """Build from a BackendConfig (backends chosen by name implement it)."""
        raise NotImplementedError(f"{cls.__name__} is not built from a configuration")

    def describe(self) -> str:
        """One line for the run log: which model, where, how it scores."""
        return f"{type(self).__name__}: {self.model_id}"

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


def apply_chat_template(tokenizer: Any, prompt: Prompt) -> str:
    """Plain text as is; chat messages through the model's own chat template, then the answer prefix."""
    if prompt.messages is None:
        return prompt.text or ""
    messages = [{"role": role, "content": content} for role, content in prompt.messages]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prompt.assistant_prefix
