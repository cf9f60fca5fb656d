"""The embedded model's tokenizer and config saved beside it after the first load: the same tokens, chat
template and config as read from the GGUF file, and a broken folder falls back to the file; transformers'
float32 advice for packed GGUF weights is kept out of loads whose dtype `auto` chose."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from transformers.quantizers import quantizer_gguf

from prompttune.backends.gguf_parts import gguf_tokenizer_and_config, parts_folder
from prompttune.backends.transformers_setup import embedded_model_path, without_gguf_dtype_advice

pytestmark = pytest.mark.integration

TEXTS = ("Review: a dull, plodding mess\nSentiment:", "<|im_start|>user\nWall St. Bears Claw Back<|im_end|>\n",
         " négatif  ünïcode \t tabs\n\n  and   spaces ", "")


def _config(config) -> dict:
    return {k: v for k, v in config.to_dict().items() if k != "_name_or_path"}


def test_the_saved_parts_tokenize_and_configure_as_the_gguf_file(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPTTUNE_CACHE_DIR", str(tmp_path))
    gguf = embedded_model_path()
    folder = parts_folder(gguf)
    tokenizer, config = gguf_tokenizer_and_config(gguf)  # read from the file, then saved
    assert (folder / "config.json").is_file() and not list(folder.parent.glob(".writing-*"))
    saved_tokenizer, saved_config = gguf_tokenizer_and_config(gguf)
    assert Path(saved_tokenizer.name_or_path) == folder  # this time from the saved parts
    assert [saved_tokenizer(t)["input_ids"] for t in TEXTS] == [tokenizer(t)["input_ids"] for t in TEXTS]
    assert saved_tokenizer.chat_template == tokenizer.chat_template
    assert (saved_tokenizer.eos_token, saved_tokenizer.pad_token) == (tokenizer.eos_token, tokenizer.pad_token)
    assert _config(saved_config) == _config(config)

    (folder / "tokenizer.json").write_text("{not json")  # a broken folder: the file serves, as before
    fallback, _ = gguf_tokenizer_and_config(gguf)
    assert Path(fallback.name_or_path) != folder
    assert [fallback(t)["input_ids"] for t in TEXTS] == [tokenizer(t)["input_ids"] for t in TEXTS]


def test_the_misleading_gguf_dtype_advice_is_dropped_while_auto_loads() -> None:
    """transformers' own quantizer logger emits it; other warnings of that logger still pass."""
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    quantizer_gguf.logger.addHandler(handler)
    try:
        advice = "Loading a GGUF checkpoint with its weights packed is fastest in float32, and this one was asked"
        with without_gguf_dtype_advice():
            quantizer_gguf.logger.warning(advice)
            quantizer_gguf.logger.warning("no module could keep its weights packed")
        quantizer_gguf.logger.warning(advice)
    finally:
        quantizer_gguf.logger.removeHandler(handler)
    assert seen == ["no module could keep its weights packed", advice]
