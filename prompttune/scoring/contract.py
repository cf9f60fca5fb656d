"""The serving contract (`serve`): how production turns the model's output into a label, declared once per run and
honoured by the search, the verdict, the reports and the exports, so the test confirms what production runs.

- `logprobs`: production scores the label words by log-probability (completions, or chat top log-probs) and
  applies the shipped label offsets (`calibrate`, `label_bias`); calibrated candidates are allowed.
- `generate`: production lets the model answer (`GENERATION`: greedy, a token cap, exactly-one-label extraction).
  No candidate may carry label offsets; the search and the verdict score every prompt by generation itself (a
  label-score proxy would rank prompts by what the model prefers, blind to whether it answers with a label at
  all), and an answer without exactly one label counts as wrong.
- `choice`: constrained decoding over the labels (vLLM structured-outputs choice, llama.cpp grammars): scored by
  that decoding itself (`Backend.choose`: greedy, each step the likeliest token that keeps the answer a label).
  Batch-calibration offsets ship as a `logit_bias` on each label's first token (`choice_bias`), which the run
  scores with, so they are allowed wherever those first tokens are distinct; contextual calibration (a bias
  measured per server) and chain-of-thought (constrained decoding cannot think first) are not.
"""

from __future__ import annotations

from dataclasses import dataclass

from prompttune.backends.backend import Backend
from prompttune.core.config import DEFAULT_SERVE, Serve
from prompttune.search_spaces.prompt import PromptSpec, fixed_part


@dataclass(frozen=True)
class GenerationContract:
    """The generation settings of `serve: generate` and of every generation check, pinned in one place so the
    exports can write them verbatim."""

    temperature: float
    max_tokens: int
    cot_max_tokens: int
    extraction: str


GENERATION = GenerationContract(
    temperature=0.0, max_tokens=16, cot_max_tokens=128,
    extraction="exactly one label: the label words are matched lower-cased as whole words (not inside a word or a "
               "path) in the answer, after the last 'final answer' for chain-of-thought prompts; exactly one label "
               "found is the answer, none or several is invalid (counted wrong)")

WORDS: dict[Serve, str] = {
    "logprobs": "production scores the label words by log-probability and applies the shipped label offsets",
    "generate": "production lets the model answer (greedy) and reads exactly one label from its text",
    "choice": "production constrains decoding to the labels (guided choice, enum, grammar)",
}


def carries_offsets(spec: PromptSpec) -> bool:
    """Whether the prompt's labels are shifted by offsets (contextual or batch calibration)."""
    return spec.calibrate or bool(spec.label_bias)


def distinct_first_tokens(backend: Backend, spec: PromptSpec) -> bool:
    """Each label continuation's first token (the backend's tokenizer) its own, so a `logit_bias` on it shifts
    that label alone. A backend without the model's tokenizer cannot say, so it never qualifies."""
    first = backend.first_tokens(list(fixed_part(spec, []).label_continuations))
    return first is not None and len(set(first)) == len(first)


def choice_bias(spec: PromptSpec) -> tuple[float, ...]:
    """The `logit_bias` each label's first token gets under `choice`: minus its batch-calibration offset, centred
    so the labels' shifts sum to zero (offsets are defined up to a constant; centring moves the labels against
    each other only, not against other allowed tokens more than needed). Empty without offsets."""
    if not spec.label_bias:
        return ()
    mean = sum(spec.label_bias) / len(spec.label_bias)
    return tuple(round(mean - b, 6) for b in spec.label_bias)


def offsets_fit(serve: Serve, backend: Backend, spec: PromptSpec) -> bool:
    """Whether production under `serve` can apply the prompt's label offsets exactly as the run scored them: under
    `choice`, as a first-token `logit_bias` the target honours under its constraint (batch offsets only: a
    contextual bias is measured per server) on labels whose first tokens are distinct."""
    if serve == "choice":
        return (not spec.calibrate and bool(backend.capabilities().logit_bias)
                and distinct_first_tokens(backend, spec))
    return serve == "logprobs"


def admits(serve: Serve, backend: Backend, spec: PromptSpec) -> bool:
    """A candidate fits the contract: no offsets, or offsets production reproduces; under `choice`, no
    chain-of-thought (the answer is constrained to a label from its first token)."""
    if serve == "choice" and spec.cot:
        return False
    return not carries_offsets(spec) or offsets_fit(serve, backend, spec)


def contract_line(serve: Serve, declared: bool) -> str:
    """The run's first line: the contract and, where nobody declared one, how to declare it."""
    line = f"serving contract: {serve} ({WORDS[serve]})"
    if not declared:
        line += ("; the default, as neither the task file nor --serve sets one: set `serve: generate` if "
                 "production lets the model answer, `serve: logprobs` if it reads the labels' log-probabilities")
    return line


def resolve(given: Serve | None, task_serve: Serve | None) -> tuple[Serve, bool]:
    """The run's contract (the CLI/API's, else the task file's, else the default) and whether one was declared."""
    chosen = given or task_serve
    return chosen or DEFAULT_SERVE, chosen is not None


def scored_by(serve: Serve) -> str:
    """How the verdict under `serve` scored its prompts, in words."""
    return {"generate": "generation", "choice": "constrained decoding"}.get(serve, "label log-probabilities")


def least_budget(search_calls: int, dev_n: int) -> int:
    """The --budget to name in a budget error: the search's `search_calls` and a full dev evaluation."""
    return max(search_calls, dev_n)
