"""What a backend's target can honour, known before a run spends anything: which serving contracts (`serve`)
production can run on it, so that a declared contract the target cannot honour is one line before any call is
charged, and the run's first lines, `--dry-run`, config.json and the report say what the target honours.

A model run in process honours every contract (`IN_PROCESS`); an OpenAI-compatible server is probed once
(`openai_constraints.py`): log-probs by the backend's start-up probe, constrained decoding and `logit_bias` by a
handful of tiny requests that are charged to no run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from prompttune.core.config import SERVES, Serve
from prompttune.core.errors import UserError

CONSTRAINT_FORMS = ("grammar", "structured_outputs", "guided_choice", "response_format")
EXACT_CHOICE = ("in process", "grammar", "structured_outputs", "guided_choice")  # decode the labels as the run does
"""The request fields a server may constrain decoding by: llama.cpp's GBNF `grammar`, vLLM's
`structured_outputs: {"choice": [...]}` and its older `guided_choice`, OpenAI's `response_format` JSON-schema enum."""


@dataclass(frozen=True)
class Capabilities:
    """What the target honours; `contracts()` turns it into the serves a run may declare on it."""

    where: str  # "in process", or the server's URL
    endpoint: str  # "in process", "/v1/completions" or "/v1/chat/completions"
    logprobs: bool  # label log-probs can be read
    top_k: int | None  # top log-probs listed per token; None: no cap (exact log-probs of any token)
    constraints: tuple[str, ...]  # the forms of constrained decoding honoured (`CONSTRAINT_FORMS`, or "in process")
    logit_bias: bool | None  # honoured under the constraint; None: unknown (no constraint, or no tokenizer)

    def contracts(self) -> tuple[Serve, ...]:
        """The serves the target honours: `generate` always; `logprobs` with label log-probs; `choice` with exact
        constrained decoding over a choice (a grammar, structured outputs or guided choice: the server decodes
        each answer itself; a JSON-schema enum writes JSON quotes, another decoding)."""
        return tuple(serve for serve in SERVES if self.refusal(serve) is None)

    def refusal(self, serve: Serve) -> str | None:
        """Why the target cannot honour `serve`, in words; None where it can."""
        if serve == "logprobs" and not self.logprobs:
            return (f"the server at {self.where} returns no log-probs ({self.endpoint} without "
                    f"{'top_logprobs' if 'chat' in self.endpoint else 'logprobs'})")
        if serve == "choice" and not set(self.constraints) & set(EXACT_CHOICE):
            return (f"the server at {self.where} honours no exact constrained decoding over a choice "
                    f"({', '.join(CONSTRAINT_FORMS)} tried on {self.endpoint})")
        return None

    def require(self, serve: Serve, declared: bool) -> None:
        """A contract the target cannot honour is one line, before anything is charged, naming those it can."""
        if why := self.refusal(serve):
            named = f"--serve {serve}" if declared else f"serve {serve} (the default; declare another with --serve)"
            raise UserError(f"{named}: {why}; it honours: {', '.join(self.contracts())}")

    def describe(self) -> str:
        """One line: the contracts honoured, and the facts behind them."""
        logprobs = ("none" if not self.logprobs else "exact, any token" if self.top_k is None
                    else f"top-{self.top_k} per token")
        bias = {True: "honoured under the constraint", False: "not honoured under the constraint",
                None: "unknown (no tokenizer to name a token: --tokenizer)" if self.constraints
                else "unknown (no constraint to try it under)"}[self.logit_bias]
        where = self.where if self.where == self.endpoint else f"{self.where} ({self.endpoint})"
        return (f"target {where} honours {', '.join(self.contracts())}: log-probs {logprobs}; constrained decoding "
                f"{', '.join(self.constraints) or 'none'}; logit_bias {bias}")

    def record(self) -> dict[str, Any]:
        """For config.json: the fields and the contracts they give."""
        return asdict(self) | {"constraints": list(self.constraints), "contracts": list(self.contracts())}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "Capabilities":
        """Read back what `record` wrote."""
        fields = {name: record[name] for name in cls.__dataclass_fields__}
        return cls(**fields | {"constraints": tuple(fields["constraints"])})


IN_PROCESS = Capabilities("in process", "in process", logprobs=True, top_k=None, constraints=("in process",),
                          logit_bias=True)
"""A model run in process: exact log-probs of any token, exact constrained decoding, any logit shift."""
