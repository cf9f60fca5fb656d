"""The proposer: an LLM that writes instructions and critiques, charged to the search ledger."""

from __future__ import annotations

import re
from functools import partial
from typing import Callable, Sequence

from prompttune.backends.backend import Backend
from prompttune.core.types import GenerateRequest, Prompt
from prompttune.scoring.cache import cache_key
from prompttune.scoring.metering import Meter, generate_values


class Proposer:
    """Instruction writing and critiques, through the run's `Meter` like any model call: cached by
    model, prompt and decoding settings (`max_new_tokens`, temperature and seed), reserved on the
    search ledger before it runs, and charged once to a run that resumes or shares a `--cache`.

    `on_unusable_critique(text)` hears of the first critique that is not usable (`usable_critique`), once
    per proposer (one per run): a small task model writing its own critiques is the usual cause, and the
    run can say so in one line."""

    def __init__(self, backend: Backend, meter: Meter, max_new_tokens: int = 64,
                 on_unusable_critique: Callable[[str], None] | None = None) -> None:
        self.backend, self.meter, self.max_new_tokens = backend, meter, max_new_tokens
        self.on_unusable_critique = on_unusable_critique
        self.unusable_critiques = 0
        self.decoded_with: dict[str, str] = {}  # text of the last set prefetched together -> its digest, till asked

    def __call__(self, request: str, max_new_tokens: int | None = None, temperature: float = 0.0,
                 seed: int = 0) -> str:
        """The model's answer to `request`, sent as one user turn: greedy, or sampled (`complete`)."""
        text = self.backend.to_text(Prompt(messages=(("user", request),)))
        return self.complete(text, max_new_tokens or self.max_new_tokens, temperature, seed)

    def prefetch(self, requests: Sequence[str], together: bool = False) -> None:
        """Have the model write greedy answers to several `requests` in one generate call before they are
        asked (`Meter.prefetch`), so a pool of servers answers them at once; each is still charged and cached
        when `__call__` asks for it. Each is decoded as if alone (its own `group`: its text does not depend
        on the others), or with `together` in one batch: faster on a backend that decodes one group at a
        time (transformers), with texts that depend on the set, which is then always decoded whole."""
        texts = [self.backend.to_text(Prompt(messages=(("user", request),))) for request in requests]
        # Together, its texts depend on the set: keyed with it, never taken for (or from) a text decoded alone.
        # Only the latest set counts: a text of an earlier set never asked is decoded afresh when it is.
        self.decoded_with = dict.fromkeys(texts, cache_key(*texts)) if together else {}
        keys = [self._key(text, self.max_new_tokens, 0.0, 0, self.decoded_with.get(text)) for text in texts]
        self.meter.prefetch([([key], [GenerateRequest(text, self.max_new_tokens, group=0 if together else group)])
                             for group, (key, text) in enumerate(zip(keys, texts))],
                            partial(generate_values, self.backend), together=together)

    def complete(self, text: str, max_new_tokens: int, temperature: float = 0.0, seed: int = 0) -> str:
        """The continuation of the final prompt text `text`: greedy, or a sample at `temperature`
        drawn with `seed` (one text per (text, temperature, seed), so the cache may key on them)."""
        key = self._key(text, max_new_tokens, temperature, seed, self.decoded_with.pop(text, None))
        request = GenerateRequest(text, max_new_tokens, temperature=temperature, seed=seed)
        [value], _ = self.meter.run([key], "propose", [request], self.backend.token_bounds,
                                    partial(generate_values, self.backend))
        return value["text"]

    def _key(self, text: str, max_new_tokens: int, temperature: float, seed: int, together: str | None) -> str:
        return cache_key(self.backend.model_id, "propose", max_new_tokens, temperature, seed, text,
                         *([together] if together else []))

    def critique(self, request: str, instruction: str, label_words: Sequence[str]) -> str:
        """The critic's answer to `request` about `instruction`, on one line (as reports show it)."""
        feedback = " ".join(self(request).split())
        if not usable_critique(feedback, instruction, label_words):
            self.unusable_critiques += 1
            if self.unusable_critiques == 1 and self.on_unusable_critique is not None:
                self.on_unusable_critique(feedback)
        return feedback


def usable_critique(text: str, instruction: str, label_words: Sequence[str]) -> bool:
    """A critique an edit can follow: three words or more, on the task: naming a label word, or a word of
    four letters or more of the instruction (an empty answer, or a model rambling on about something else,
    names none)."""
    topic = ({word for word in re.findall(r"[a-z]{4,}", instruction.lower())}
             | {word for label in label_words for word in re.findall(r"[a-z]+", label.lower())}
             | {"instruction", "label", "labels"})
    return len(text.split()) >= 3 and bool(set(re.findall(r"[a-z]+", text.lower())) & topic)


def clean_instruction(text: str) -> str:
    """First non-empty line, without list markers, quotes or a leading 'Instruction:' label."""
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:[-*\d.)]+\s+|(?:new |improved )?instruction\s*:\s*)", "", line,
                      flags=re.IGNORECASE).strip().strip('"\'` ')
        if line:
            return line
    return ""


LABEL_CLAUSE = " Answer with one of: {labels}."


def with_label_list(text: str, label_words: Sequence[str]) -> str:
    """The instruction, keeping the label set: one that names neither `{labels}` nor every label
    word gets the `{labels}` clause appended, because small proposers drop placeholders yet write
    usable text."""
    lowered = text.lower()
    if "{labels}" in text or all(word.lower() in lowered for word in label_words):
        return text
    return text.rstrip() + LABEL_CLAUSE


def checked_instruction(text: str, label_words: Sequence[str]) -> str | None:
    """The proposal if usable, else None: 3+ words, at most 600 characters, and it keeps the
    label set (`with_label_list`)."""
    text = clean_instruction(text)
    if len(text.split()) < 3 or len(text) > 600:
        return None
    return with_label_list(text, label_words)
