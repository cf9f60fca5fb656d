"""The serving contract (`serve`): how production turns the model's output into a label, declared once per run and
honoured by the search, the verdict, the reports and the exports, so the test confirms what production runs.

- `logprobs`: production scores the label words by log-probability (completions, or chat top log-probs) and
  applies the shipped label offsets (`calibrate`, `label_bias`); calibrated candidates are allowed.
- `generate`: production lets the model answer (`GENERATION`: greedy, a token cap, exactly-one-label extraction).
  No candidate may carry label offsets; the search may rank by log-probs as a fast proxy, but the finalists and
  the verdict are scored by generation, where an answer without exactly one label counts as wrong.
- `choice`: constrained decoding over the labels (vLLM guided choice, JSON-schema enums, llama.cpp grammars):
  scored by label log-probs; offsets only where `logit_bias` reproduces them exactly, that is every label one
  token of its own, so the first token decides and a per-label logit shift is the offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from prompttune.backends.base import Backend
from prompttune.core.config import DEFAULT_SERVE, Serve
from prompttune.search_spaces.prompt import PromptSpec, fixed_part

FINALISTS = 3  # under `generate`, the top prompts of the search ranking rescored by generation on dev


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


def single_token_labels(backend: Backend, spec: PromptSpec) -> bool:
    """Every label continuation one token of the backend's (its exact count) and all distinct: then constrained
    decoding is decided by one token per label and `logit_bias` reproduces label offsets exactly. A backend
    without the model's tokenizer only bounds its counts, so it never qualifies."""
    continuations = fixed_part(spec, []).label_continuations
    return (len(set(continuations)) == len(continuations)
            and all(n == 1 for n in backend.count_tokens(list(continuations), continuation=True)))


def offsets_fit(serve: Serve, backend: Backend, spec: PromptSpec) -> bool:
    """Whether production under `serve` can apply the prompt's label offsets exactly as the run scored them: under
    `choice`, the target honours `logit_bias` under its constraint and every label is one token."""
    return serve == "logprobs" or (serve == "choice" and bool(backend.capabilities().logit_bias)
                                   and single_token_labels(backend, spec))


def admits(serve: Serve, backend: Backend, spec: PromptSpec) -> bool:
    """A candidate fits the contract: no offsets, or offsets production reproduces."""
    return not carries_offsets(spec) or offsets_fit(serve, backend, spec)


def contract_line(serve: Serve, declared: bool) -> str:
    """The run's first line: the contract and, where nobody declared one, how to declare it."""
    line = f"serving contract: {serve} ({WORDS[serve]})"
    if not declared:
        line += ("; the default, as neither the task file nor --serve sets one: set `serve: generate` if "
                 "production lets the model answer")
    return line


def resolve(given: Serve | None, task_serve: Serve | None) -> tuple[Serve, bool]:
    """The run's contract (the CLI/API's, else the task file's, else the default) and whether one was declared."""
    chosen = given or task_serve
    return chosen or DEFAULT_SERVE, chosen is not None


def scored_by(serve: Serve) -> str:
    """How the verdict under `serve` scored its prompts, in words."""
    return "generation" if serve == "generate" else "label log-probabilities"


def finalist_examples(budget: int, dev_n: int) -> int:
    """Dev examples the finalists are rescored on by generation: the whole dev split, or as many as keep the
    rescoring (the finalists and the baseline) within half the budget."""
    return min(dev_n, budget // (2 * (FINALISTS + 1)))


def calls_reserved(serve: Serve, budget: int, dev_n: int) -> int:
    """Search-budget calls kept back from the search for the finalists' rescoring by generation (the baseline
    included), so the whole run stays within the cap; none outside `generate`."""
    return (FINALISTS + 1) * finalist_examples(budget, dev_n) if serve == "generate" else 0
