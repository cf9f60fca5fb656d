"""The key-value caches the transformers backend decodes on: a computed prompt prefix (`KV`) copied per row
into a cache whose layers append in place (`AppendLayer`), where the model's layers all use full attention."""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache

try:  # caches made of per-layer objects (transformers >= 4.56)
    from transformers.cache_utils import DynamicLayer
except ImportError:  # pragma: no cover - older transformers: decoding keeps DynamicCache
    DynamicLayer = None


KV = tuple[tuple[torch.Tensor, torch.Tensor], ...]

if DynamicLayer is not None:
    class AppendLayer(DynamicLayer):
        """A DynamicLayer that appends each step's keys and values into buffers with room to grow,
        where DynamicLayer concatenates the whole cache with them: a decoding step then copies one
        position per layer instead of every cached one (on SmolLM2-135M in fp32 that copy was about
        4% of the CPU time of a 256-token decode after a 700-1000-token prompt). `keys` and `values`
        are views of the filled part: the same values in the same shapes, so attention computes the
        same numbers (tests/test_prefix_reuse.py holds decoding to stock `generate` bit for bit).
        States another method replaced (crop, reorder, reset) are taken as they are at the next update."""

        _store: tuple[torch.Tensor, torch.Tensor] | None = None
        _view: torch.Tensor | None = None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            keys, values = self.keys, self.values
            filled = keys.shape[-2] if keys is not None and keys.dim() == key_states.dim() else 0
            if keys is not self._view:
                self._store = None
            total = filled + key_states.shape[-2]
            store = self._store
            if store is None or total > store[0].shape[-2] or store[0].shape[:-2] != key_states.shape[:-2]:
                room = total + max(total, 64)  # doubling: appends stay amortised O(1) copies
                store = (key_states.new_empty((*key_states.shape[:-2], room, key_states.shape[-1])),
                         value_states.new_empty((*value_states.shape[:-2], room, value_states.shape[-1])))
                if filled:
                    store[0][..., :filled, :] = keys
                    store[1][..., :filled, :] = values
                self._store = store
            store[0][..., filled:total, :] = key_states
            store[1][..., filled:total, :] = value_states
            self.keys, self.values = store[0][..., :total, :], store[1][..., :total, :]
            self._view = self.keys
            return self.keys, self.values


def full_attention_only(config: Any) -> bool:
    """Whether `generate` would cache every layer of this model in a plain DynamicLayer."""
    if DynamicLayer is None:
        return False
    try:
        layers = DynamicCache(config=config).layers
    except Exception:  # a transformers whose DynamicCache takes no config, or an unusual config
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def append_cache(kv: KV | None, rows: int) -> DynamicCache:
    """A decoding cache of `AppendLayer`s, holding the prefix `kv` (if any) for `rows` rows."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = AppendLayer
    for i, (k, v) in enumerate(kv or ()):
        cache.update(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1), i)
    return cache
