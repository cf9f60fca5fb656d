"""The tokenizer the openai backend renders chat prompts and finds labels' first tokens with: one named by
--tokenizer, or the embedded GGUF's own when a server runs that file."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from prompttune.core.errors import UserError


def load_tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load tokenizer {name!r}: {str(exc).splitlines()[0]}") from exc


def embedded_tokenizer_if_served(served: str) -> Any:
    """A server running the embedded GGUF (llama.cpp names it by its path) gets that file's own
    tokenizer, so chat prompts render exactly as in the transformers backend."""
    from prompttune.backends.transformers_setup import embedded_model_path

    try:
        gguf = embedded_model_path()
    except UserError:  # not installed, so not what the server runs either
        return None
    if Path(served).name != gguf.name:
        return None
    return _gguf_tokenizer(str(gguf))


@functools.lru_cache(maxsize=1)
def _gguf_tokenizer(path: str) -> Any:
    """A GGUF file's tokenizer, read once per process: parsing the file takes seconds, and the backends
    only read the tokenizer (chat templates, token counts), never change it, so they can share it."""
    from transformers import AutoTokenizer

    gguf = Path(path)
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
