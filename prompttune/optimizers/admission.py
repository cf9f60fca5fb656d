"""What a candidate must meet before it is scored: every frozen text of the user's prompt verbatim, at most
`--max-prompt-tokens` tokens around an empty input, label offsets only where the serving contract can apply
them (`scoring/contract.py`), and the chat template only where the target renders one. The search driver asks
here for every candidate any optimizer wants scored, so none can be scored, selected or shipped without them."""

from __future__ import annotations

from typing import Literal, Mapping

from prompttune.backends.backend import Backend
from prompttune.core.config import Serve
from prompttune.core.types import Example
from prompttune.scoring import contract
from prompttune.scoring.evaluator import prompt_tokens
from prompttune.search_spaces.frozen import missing_frozen
from prompttune.search_spaces.prompt import PromptSpec, select_demos

Refusal = Literal["frozen", "tokens", "offsets", "chat"]  # the report names them (`optimize_report.REFUSALS`)


class Admission:
    """The run's limits on candidates, with each prompt's token count kept (it is also what the report plots)."""

    def __init__(self, backend: Backend, demo_pool: Mapping[str, Example], frozen: tuple[str, ...],
                 max_tokens: int | None, serve: Serve = "logprobs") -> None:
        self.backend, self.demo_pool, self.frozen, self.max_tokens = backend, demo_pool, frozen, max_tokens
        self.serve = serve
        self.counted: dict[PromptSpec, int] = {}

    def tokens(self, spec: PromptSpec) -> int:
        """Prompt tokens per request (`prompt_tokens`), counted once per prompt."""
        if spec not in self.counted:
            self.counted[spec] = prompt_tokens(self.backend, spec, select_demos(spec, self.demo_pool))
        return self.counted[spec]

    def refusal(self, spec: PromptSpec) -> Refusal | None:
        """Why the candidate may not be scored, or None."""
        if self.frozen and missing_frozen(spec, select_demos(spec, self.demo_pool), self.frozen):
            return "frozen"
        if self.max_tokens is not None and self.tokens(spec) > self.max_tokens:
            return "tokens"
        if not contract.admits(self.serve, self.backend, spec):
            return "offsets"
        if spec.chat and not self.backend.renders_chat:
            return "chat"
        return None
