"""A GGUF model's tokenizer and config, kept beside it after the first load.

transformers reads a GGUF file's metadata once for the tokenizer, once for the config and once more
with the weights; on a 2-core CPU the first two took about 10 of the embedded model's 25 seconds to
load (the tokenizer's 49k strings are parsed field by field). Saved once as transformers saves them
(`tokenizer.json`, `config.json`) they load in a fraction of a second, so every later process —
each `optimize`, each compare worker, each test that starts one — starts that much sooner. The
folder is keyed by the file's path, size and modification time and transformers' version, written
whole or not at all (another process may write it at the same moment), and anything that fails here
falls back to reading the GGUF file, as before.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import transformers
from transformers import AutoConfig, AutoTokenizer


def cache_root() -> Path:
    """`PROMPTTUNE_CACHE_DIR`, else `$XDG_CACHE_HOME/prompttune` (`~/.cache/prompttune`)."""
    if given := os.environ.get("PROMPTTUNE_CACHE_DIR"):
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "prompttune"


def parts_folder(gguf: Path) -> Path:
    stat = gguf.stat()
    key = f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
    return cache_root() / "gguf-parts" / f"{gguf.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def gguf_tokenizer_and_config(gguf: Path) -> tuple[Any, Any]:
    """The tokenizer and config of `gguf`: from its saved parts when there are some, else read from the
    file and saved for the next load."""
    folder = parts_folder(gguf)
    if (folder / "config.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(folder), AutoConfig.from_pretrained(folder)
        except (OSError, ValueError):
            pass  # unreadable parts: read the file again (and leave the folder to whoever wrote it)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    _save(folder, tokenizer, config)
    return tokenizer, config


def _save(folder: Path, tokenizer: Any, config: Any) -> None:
    """Write the parts into a fresh folder and rename it into place (config.json last marks it whole)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".writing-"))
    except OSError:
        return  # no writable cache: every load reads the file, as before
    try:
        tokenizer.save_pretrained(staging)
        config.save_pretrained(staging)
        staging.rename(folder)
    except OSError:
        pass  # another process put its parts there first, or the disk refused: theirs, or none, serve
    finally:
        shutil.rmtree(staging, ignore_errors=True)
