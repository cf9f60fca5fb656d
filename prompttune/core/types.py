"""Types every layer shares: an example, a rendered prompt, backend requests and results, and a
per-example record. They live at the bottom so backends, search spaces and evaluation need not
import each other for them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Example:
    """One labelled input; `id` is stable across runs so cache keys and pairing survive restarts."""

    id: str
    fields: dict[str, str]
    label: int


def input_words(example: Example) -> int:
    """How many words an example's input holds (every field): how long the inputs a prompt sees are."""
    return sum(len(value.split()) for value in example.fields.values())


@dataclass(frozen=True)
class Prompt:
    """Rendered prompt: plain text, or chat messages plus the text that opens the assistant turn."""

    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    assistant_prefix: str = ""
    label_continuations: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class ScoreRequest:
    """Teacher-forced log-probability of each continuation after `text`.

    `prefix` is a hint, never part of the result: the start of `text` that other requests in the
    same call share (a candidate's prompt up to the input), so a backend can compute it once.
    `group` keeps requests apart: a backend that batches never puts requests of different groups in one
    batch, so what several prompts asked together in one call (`Meter.prefetch`) score exactly as each
    prompt's requests alone (batch composition moves log-probs: docs/resume.md, Determinism).
    """

    text: str
    continuations: tuple[str, ...]
    prefix: str = ""
    group: int = 0


@dataclass(frozen=True)
class ScoreResult:
    logprobs: tuple[float, ...]
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class GenerateRequest:
    """Continuation of `text`: greedy at `temperature` 0, else sampled with `seed`, so that one
    (text, temperature, seed) always yields one text and a cache may key on them; `prefix` and `group`
    are as in ScoreRequest."""

    text: str
    max_new_tokens: int
    prefix: str = ""
    temperature: float = 0.0
    seed: int = 0
    group: int = 0


@dataclass(frozen=True)
class GenerateResult:
    text: str
    token_logprobs: tuple[float, ...]
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class ChoiceRequest:
    """Greedy decoding after `text` constrained to one of `choices`, as a server decodes vLLM's structured-outputs
    choice or a llama.cpp grammar at temperature 0: at each step the likeliest token that keeps the text a prefix
    of some choice (or ends it where it is one). `first_token_bias[i]` is added to the logit of choice i's first
    token (its own tokenization) at every step, what a `logit_bias` map on those ids does; `prefix` and `group`
    are as in ScoreRequest."""

    text: str
    choices: tuple[str, ...]
    first_token_bias: tuple[float, ...] = ()
    prefix: str = ""
    group: int = 0


@dataclass(frozen=True)
class ChoiceResult:
    """The decoded choice's index (None: no token sequence spells a choice), and each choice's first token's
    log-probability at the first step, bias included (the label scores margins and calibration read)."""

    choice: int | None
    logprobs: tuple[float, ...]
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Record:
    """Outcome of one prompt on one example; `pred` is None for an invalid response.

    `label_logprobs` are the scores the prediction was taken from: raw label log-probs for
    direct scoring, the adjusted (normalised) ones for calibrated and ensemble prediction.
    """

    example_id: str
    gold: int
    pred: int | None
    label_logprobs: tuple[float, ...] | None
    text: str | None
    prompt_tokens: int
    completion_tokens: int
    cached: bool

    @property
    def correct(self) -> bool:
        return self.pred == self.gold

    @property
    def valid(self) -> bool:
        return self.pred is not None
