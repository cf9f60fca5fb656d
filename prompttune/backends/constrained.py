"""Constrained decoding over a choice list, as servers decode it: vLLM's structured-outputs `choice` and a
llama.cpp grammar of alternatives mask, at each step, every token that would not keep the text a prefix of some
choice, add the request's `logit_bias`, and take the likeliest token (temperature 0). A choice may be spelt in any
tokens, not only its own tokenization (` S` + `ci/Tech` as well as ` Sci` + `/Tech`), and the end-of-sequence token
is allowed once the text is a whole choice. The walk below does exactly that with the model's whole vocabulary, so
an in-process run scores `serve: choice` as production decodes it, multi-token labels and labels sharing a first
token included.

The walk stops as soon as one choice alone is still reachable: the grammar then forces its remaining tokens, so the
answer is decided without decoding them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


def token_pieces(tokenizer: Any) -> dict[str, list[int]]:
    """Each vocabulary token's text (as it reads appended to decoded text) -> its ids. Byte-level BPE spells a
    leading space in the token; SentencePiece's word-start mark `▁` is a space too. Special tokens and tokens
    that are not whole characters (byte pieces) match no choice text, so they are left out."""
    special = set(tokenizer.all_special_ids)
    pieces: dict[str, list[int]] = {}
    for token, token_id in tokenizer.get_vocab().items():
        if token_id in special:
            continue
        text = tokenizer.convert_tokens_to_string([token])
        if token.startswith("▁") and not text.startswith(" "):
            text = " " + text
        if text and "\ufffd" not in text:
            pieces.setdefault(text, []).append(token_id)
    return pieces


@dataclass
class ChoiceWalk:
    """One request's walk: the text decoded so far and its tokens, over `choices`; `bias` maps token ids to the
    logit shift added at every step (the request's first-token bias), `end_ids` the tokens that end a choice."""

    choices: tuple[str, ...]
    pieces: dict[str, list[int]]
    bias: dict[int, float]
    end_ids: tuple[int, ...]
    text: str = ""
    tokens: tuple[int, ...] = ()
    answer: int | None = None
    done: bool = False

    def __post_init__(self) -> None:
        self._settle()

    def _live(self) -> list[int]:
        return [i for i, choice in enumerate(self.choices) if choice.startswith(self.text)]

    def _settle(self) -> None:
        """Decided once one choice alone is reachable after a first token (its remaining tokens are forced), or
        when none is (no token spells what is left)."""
        live = self._live()
        if len(live) == 1 and self.tokens:
            self.answer, self.done = live[0], True
        elif not self.allowed():
            self.done = True

    def allowed(self) -> list[int]:
        """Token ids that keep the text a prefix of a choice, and the end tokens where the text is a choice."""
        ids: set[int] = set()
        for i in self._live():
            rest = self.choices[i][len(self.text):]
            for k in range(1, len(rest) + 1):
                ids.update(self.pieces.get(rest[:k], ()))
        if self.text in self.choices:
            ids.update(self.end_ids)
        return sorted(ids)

    def step(self, logprobs: Sequence[float] | Any) -> None:
        """Take the likeliest allowed token (bias added) from the next-token log-probabilities `logprobs` (a 1-D
        tensor or sequence over the vocabulary); ties go to the lower token id."""
        allowed = self.allowed()
        scores = [float(logprobs[t]) + self.bias.get(t, 0.0) for t in allowed]
        token = allowed[max(range(len(allowed)), key=lambda j: (scores[j], -j))]
        if token in self.end_ids:
            self.answer, self.done = self.choices.index(self.text), True
            return
        self.tokens += (token,)
        self.text += self._piece(token)
        self._settle()

    def _piece(self, token: int) -> str:
        """The text `token` adds: the piece of what is left of a live choice that it spells."""
        for i in self._live():
            rest = self.choices[i][len(self.text):]
            for k in range(1, len(rest) + 1):
                if token in self.pieces.get(rest[:k], ()):
                    return rest[:k]
        raise ValueError(f"token {token} is not allowed here")


def choice_token_cap(choices: Sequence[str]) -> int:
    """The `max_tokens` a server's constrained answer needs: a grammar may spell a choice in tokens of one byte each
    (vLLM's structured outputs did, character by character), so the longest choice's bytes, plus the end token.
    A smaller cap can cut the answer off inside a choice, which is then no label at all."""
    return max(len(choice.encode()) for choice in choices) + 1


def first_token_bias(first_ids: Sequence[int], bias: Sequence[float]) -> dict[int, float]:
    """The `logit_bias` map of a request: choice i's first token id -> `bias[i]`. Labels that share a first token
    cannot be shifted apart by it, so offsets there are refused (the contract admits none)."""
    if not bias:
        return {}
    if len(set(first_ids)) < len(first_ids):
        raise ValueError("label offsets need each label's first token to be its own; these labels share one")
    return {token: float(b) for token, b in zip(first_ids, bias)}


def first_logprobs(logprobs: Any, first_ids: Sequence[int], bias: dict[int, float]) -> tuple[float, ...]:
    """Each choice's first token's log-probability at the first step with `bias` added, renormalised over the
    vocabulary as a server applies `logit_bias` before its softmax: the shift of the normaliser is known from the
    biased tokens alone, so the vocabulary is not read twice."""
    biased = [(float(logprobs[t]), b) for t, b in bias.items()]
    norm = float(np.log1p(sum(np.exp(lp + b) - np.exp(lp) for lp, b in biased))) if biased else 0.0
    return tuple(float(logprobs[t]) + bias.get(t, 0.0) - norm for t in first_ids)
