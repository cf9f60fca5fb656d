"""Map generated text to a label: exactly one label word found → that label, else invalid."""

from __future__ import annotations

import re
from typing import Sequence

FINAL_ANSWER = re.compile(r"final answer\s*:?", re.IGNORECASE)


def extract_label(text: str, label_words: Sequence[str], cot: bool = False) -> int | None:
    """Lower-cased whole-word match; with CoT only the part after the last 'final answer' counts."""
    if cot:
        parts = FINAL_ANSWER.split(text)
        text = parts[-1] if len(parts) > 1 else ""
    lowered = text.lower()
    found = [i for i, word in enumerate(label_words)
             if re.search(r"(?<![\w/])" + re.escape(word.lower()) + r"(?![\w/])", lowered)]
    return found[0] if len(found) == 1 else None
