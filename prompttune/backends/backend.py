"""The two operations every backend offers: label scoring and generation, both batched."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Sequence

from prompttune.backends.capabilities import IN_PROCESS, Capabilities
from prompttune.core.errors import UserError
from prompttune.core.types import (
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    Prompt,
    ScoreRequest,
    ScoreResult,
)

Request = ScoreRequest | GenerateRequest | ChoiceRequest


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

    @property
    def scores_labels(self) -> bool:
        """Whether the backend can score label log-probabilities (a server without log-probs only generates)."""
        return True

    @property
    def decodes_together(self) -> bool:
        """Whether one `generate` call's texts are decoded at once (vLLM's batches, a server's concurrent
        requests), so several cost about one's time; False where they are decoded one after another."""
        return False

    @property
    def batch_decode_ratio(self) -> float | None:
        """Time for several texts decoded in one call over one text's (`decode_cost`), where the backend measures
        it because how it decodes is not known from its kind (a model in process: GPU or CPU); None elsewhere."""
        return None

    def server_counts(self) -> dict[str, dict[str, int]]:
        """Per-server counters (requests, retries, failures, quarantines, readmissions) since the
        backend was built, for the run report; empty for a model run in process."""
        return {}

    def capabilities(self) -> Capabilities:
        """Which serving contracts the target honours, known before a run spends anything (a server is probed
        once, outside any ledger); a model run in process honours them all."""
        return IN_PROCESS

    @property
    def renders_chat(self) -> bool:
        """Whether a chat prompt (messages and an assistant prefix) reaches the model as its chat template lays it
        out: a search may toggle the template only where it does."""
        return True

    def close(self) -> None:
        """Release threads, connections or GPU memory; safe to call twice."""

    @abstractmethod
    def to_text(self, prompt: Prompt) -> str:
        """Final prompt string (chat messages go through the model's chat template)."""

    def count_tokens(self, texts: Sequence[str], continuation: bool = False) -> list[int]:
        """Tokens each text costs, as `score` and `generate` report them: as a prompt (special
        tokens included), or as a label `continuation` (tokenized alone, after the prompt).

        Without a tokenizer this is an upper bound: its UTF-8 bytes plus two. Byte-level BPE and
        SentencePiece with byte fallback never make a token of less than one byte, and at most
        two tokens carry none of the text (a BOS token, and SentencePiece's word-start piece, or
        for a continuation a server token that straddles the prompt's end). Backends with the
        model's tokenizer count exactly.
        """
        return [len(text.encode()) + 2 for text in texts]

    def first_tokens(self, texts: Sequence[str]) -> list[int] | None:
        """Each label continuation's first token id, tokenized alone as `score` and `choose` tokenize it (what a
        `logit_bias` map names); None without the model's tokenizer."""
        return None

    def token_bounds(self, requests: Sequence[Request]) -> list[int]:
        """The most tokens each request can be charged, known before it runs: its prompt, plus
        every label continuation (score), the longest choice (choose) or `max_new_tokens` (generate)."""
        prompts = self.count_tokens([r.text for r in requests])
        labels = list(dict.fromkeys(c for r in requests if not isinstance(r, GenerateRequest) for c in _labels(r)))
        counts = dict(zip(labels, self.count_tokens(labels, continuation=True)))
        return [n + (r.max_new_tokens if isinstance(r, GenerateRequest) else
                     max(counts[c] for c in r.choices) if isinstance(r, ChoiceRequest) else
                     sum(counts[c] for c in r.continuations))
                for r, n in zip(requests, prompts)]

    @abstractmethod
    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        """One result per request, same order."""

    @abstractmethod
    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        """Greedy decoding, or seeded sampling where a request sets a temperature; one result per
        request, same order."""

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """Greedy decoding constrained to each request's choices (`ChoiceRequest`), exactly as the server or
        engine that serves `serve: choice` decodes; one result per request, same order."""
        raise UserError(f"the {type(self).__name__} cannot decode constrained to the labels; serve choice needs the "
                        "transformers backend (or serve logprobs / generate)")


def _labels(request: ScoreRequest | ChoiceRequest) -> tuple[str, ...]:
    return request.choices if isinstance(request, ChoiceRequest) else request.continuations


class WrappedBackend(Backend):
    """A backend around another that passes every request through: the base of wrappers that watch, count or
    time what reaches the model (compare's fairness watch, tests' counters, benchmarks' clocks)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.model_id = inner.model_id

    def to_text(self, prompt: Prompt) -> str:
        return self.inner.to_text(prompt)

    @property
    def decodes_together(self) -> bool:
        return self.inner.decodes_together

    @property
    def renders_chat(self) -> bool:
        return self.inner.renders_chat

    @property
    def batch_decode_ratio(self) -> float | None:
        return self.inner.batch_decode_ratio

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()

    def count_tokens(self, texts: Sequence[str], continuation: bool = False) -> list[int]:
        return self.inner.count_tokens(texts, continuation)

    def first_tokens(self, texts: Sequence[str]) -> list[int] | None:
        return self.inner.first_tokens(texts)

    def token_bounds(self, requests: Sequence[Request]) -> list[int]:
        return self.inner.token_bounds(requests)

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        return self.inner.score(requests)

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return self.inner.generate(requests)

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        return self.inner.choose(requests)


def tokenizer_counts(tokenizer: Any, texts: Sequence[str], continuation: bool = False) -> list[int]:
    """`Backend.count_tokens` with a Hugging Face tokenizer, tokenizing as the backends do."""
    if not texts:
        return []
    return [len(ids) for ids in tokenizer(list(texts), add_special_tokens=not continuation).input_ids]


def apply_chat_template(tokenizer: Any, prompt: Prompt) -> str:
    """Plain text as is; chat messages through the model's own chat template, then the answer prefix."""
    if prompt.messages is None:
        return prompt.text or ""
    messages = [{"role": role, "content": content} for role, content in prompt.messages]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prompt.assistant_prefix


class TokenizerBackend(Backend):
    """A model run in process with its Hugging Face tokenizer (`self.tokenizer`, set by the subclass):
    chat template, token counts and prompt encoding exactly as its `score` and `generate` do them."""

    tokenizer: Any

    def to_text(self, prompt: Prompt) -> str:
        return apply_chat_template(self.tokenizer, prompt)

    @property
    def renders_chat(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def count_tokens(self, texts: Sequence[str], continuation: bool = False) -> list[int]:
        """Exact: the model's own tokenizer, as `score` and `generate` tokenize."""
        return tokenizer_counts(self.tokenizer, texts, continuation)

    def first_tokens(self, texts: Sequence[str]) -> list[int] | None:
        return [ids[0] for ids in self.tokenizer(list(texts), add_special_tokens=False).input_ids]

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=True).input_ids
