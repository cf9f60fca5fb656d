"""Hugging Face transformers backend: the CPU default, also usable on CUDA. Where the weights come from and how
they run is transformers_setup.py; the decoding caches, transformers_cache.py."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from prompttune.backends.backend import TokenizerBackend
from prompttune.backends.constrained import ChoiceWalk, first_logprobs, first_token_bias, token_pieces
from prompttune.backends.decode_cost import batch_decode_ratio
from prompttune.backends.gguf_parts import gguf_tokenizer_and_config
from prompttune.backends.transformers_cache import KV, append_cache, full_attention_only
from prompttune.backends.transformers_setup import (
    EMBEDDED_MODEL,
    check_device,
    check_model_source,
    embedded_model_path,
    physical_cores,
    resolve_dtype,
    reuse_by_default,
    without_gguf_dtype_advice,
)
from prompttune.core.errors import UserError
from prompttune.core.types import ChoiceRequest, ChoiceResult, GenerateRequest, GenerateResult, ScoreRequest, ScoreResult

# Below this many shared tokens the extra prefix pass and the cache copies cost more than they save.
_MIN_SHARED_TOKENS = 8


def _pick(values: torch.Tensor, at: list[tuple[int, ...]]) -> list[float]:
    """The entries of `values` at the index tuples `at`, read in one gather and one device-to-host copy:
    an `.item()` per entry would wait on the GPU once per label."""
    if not at:
        return []
    index = torch.tensor(at, device=values.device).T
    return values[tuple(index)].tolist()


def _batches(order: Sequence[int], lengths: Sequence[int], batch_size: int, max_batch_tokens: int,
             prefix: int = 0) -> Iterator[list[int]]:
    """Length-sorted buckets so padding stays small; bounded by rows and by the tokens the rows
    attend over (a cached `prefix` counts for every row: its keys and values are copied per row)."""
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) == batch_size
                      or (prefix + lengths[i]) * (len(batch) + 1) > max_batch_tokens):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def _common_length(rows: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix every row shares."""
    first, n = rows[0], min(len(r) for r in rows)
    for row in rows[1:]:
        n = next((k for k in range(n) if row[k] != first[k]), n)
    return n


class TransformersBackend(TokenizerBackend):
    """In-process model; every prompt's shared prefix is computed once per call (`prefix_reuse`).

    Requests are grouped by their `prefix` hint (one group for requests without one); a group's
    shared part is the longest common prefix of its members' full-prompt token ids, so the tokens
    scored are exactly the full prompt's: a merge across the prefix/input boundary only shortens
    it. The prefix runs once, its key/value cache is expanded across each batch, and only the
    suffixes run, at their true positions. `prefix_reuse=False` forces the full-prompt path.
    Recent prefixes' states are kept across calls, up to `prefix_memo_bytes` (DSPy's threads send
    one program's valset in many small calls, each with that program's prefix).

    Settings chosen from measurement (benchmarks/throughput.py): torch uses one thread per
    physical core unless `threads` or OMP_NUM_THREADS says otherwise (hyperthreads share a core's
    FMA units, and more threads than cores oversubscribe). Batches hold at most `batch_size` rows
    and `max_batch_tokens` tokens attended (rows x (cached prefix + padded suffix)): on CPU
    (SmolLM2-135M, fp32, 1 thread, per CPU second) 4-demo scoring ran 5.4 prompts/s at 2048
    tokens, 5.0 at 8192 and 3.9 at 32 rows of 330 (10.5k), as activations and per-row cache
    copies outgrow the caches, so CPU defaults to 2048; other devices keep 8192.
    """

    options = ("dtype", "device", "batch_size")

    @classmethod
    def check(cls, config: Any) -> None:
        check_device(config.device)
        check_model_source(config.model)

    @classmethod
    def from_config(cls, config: Any) -> "TransformersBackend":
        return cls(config.model, dtype=config.dtype, device=config.device, batch_size=config.batch_size)

    def __init__(self, model: str = EMBEDDED_MODEL, dtype: str = "auto", device: str = "cpu",
                 batch_size: int = 32, max_batch_tokens: int | None = None, prefix_reuse: bool | None = None,
                 threads: int | None = None) -> None:
        check_device(device)
        check_model_source(model)
        self.device = device
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens or (2048 if device == "cpu" else 8192)
        torch_dtype = resolve_dtype(dtype, device)
        self.prefix_reuse = reuse_by_default(torch_dtype, device) if prefix_reuse is None else prefix_reuse
        self.prefix_memo_bytes = 256 * 2**20  # recent prefixes' key/value states kept across calls (0: none)
        self._prefixes: OrderedDict[tuple[int, ...], tuple[KV, int]] = OrderedDict()
        self.tokens_processed = 0  # tokens run through the model (not padding): the work done
        if threads or "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(threads or physical_cores())
        load_kwargs: dict = {}
        if model == EMBEDDED_MODEL:
            gguf = embedded_model_path()
            source, load_kwargs["gguf_file"] = str(gguf.parent), gguf.name
        elif model.endswith(".gguf"):
            source, load_kwargs["gguf_file"] = str(Path(model).parent), Path(model).name
        else:
            source = model
        try:
            if "gguf_file" in load_kwargs:  # its tokenizer and config saved beside it after the first load
                self.tokenizer, load_kwargs["config"] = gguf_tokenizer_and_config(Path(source) / load_kwargs["gguf_file"])
            else:
                self.tokenizer = AutoTokenizer.from_pretrained(source)
            with without_gguf_dtype_advice() if dtype == "auto" else contextlib.nullcontext():
                self.model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **load_kwargs)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot load model {model!r}: {str(exc).splitlines()[0]}") from exc
        self.model.to(device).eval()
        # transformers 5 renamed `past_key_values` to `cache`; take whichever this version has.
        self._cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model_id = f"{model}|{torch_dtype}".replace("torch.", "")
        # Decode on `AppendLayer`s where every layer would get a plain DynamicLayer (full attention);
        # sliding-window and other layer kinds keep the caches `generate` builds for them.
        self.append_cache = full_attention_only(self.model.config)
        # Several-token labels continue the prompt's cache, cropped back after each label: plain caches only.
        self.continue_labels = self.append_cache
        self._pieces: dict[str, list[int]] | None = None  # the vocabulary's token texts, for constrained decoding

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width, pad = max(len(r) for r in rows), self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self.device)
        return ids, mask

    def _prefix_groups(self, keys: Sequence[tuple[int, str]],
                       prompts: Sequence[list[int]]) -> list[tuple[int, list[int]]]:
        """(shared token count, request indices) by (request group, prefix hint) `keys`: within each request
        group (never batched with another: `ScoreRequest.group`), one group per prefix hint worth reusing,
        and one with 0 shared tokens for the rest of that request group, so those batches stay full."""
        by_group: dict[int, dict[str, list[int]]] = {}
        for i, (group, hint) in enumerate(keys):
            by_group.setdefault(group, {}).setdefault(hint if self.prefix_reuse else "", []).append(i)
        groups: list[tuple[int, list[int]]] = []
        for by_hint in by_group.values():
            if not self.prefix_reuse:
                groups += [(0, members) for members in by_hint.values()]
                continue
            rest: list[int] = []
            for members in by_hint.values():
                rows = [prompts[i] for i in members]
                # One token short of the shortest prompt, so every row keeps a suffix to read logits from.
                shared = min(_common_length(rows), min(len(r) for r in rows) - 1)
                if len(members) > 1 and shared >= _MIN_SHARED_TOKENS:
                    groups.append((shared, members))
                else:
                    rest += members
            groups += [(0, rest)] if rest else []
        return groups

    def _prefix_states(self, tokens: list[int]) -> KV:
        """Key/value states of the shared prefix: computed once per group, or kept from a recent call."""
        key = tuple(tokens)
        if key in self._prefixes:
            self._prefixes.move_to_end(key)
            return self._prefixes[key][0]
        self.tokens_processed += len(tokens)
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([tokens], device=self.device), use_cache=True,
                             logits_to_keep=1)
        kv = tuple((layer.keys, layer.values) for layer in out[self._cache_arg].layers)
        size = sum(t.numel() * t.element_size() for pair in kv for t in pair)
        if size <= self.prefix_memo_bytes:
            self._prefixes[key] = (kv, size)
            held = sum(n for _, n in self._prefixes.values())
            while held > self.prefix_memo_bytes:
                held -= self._prefixes.popitem(last=False)[1][1]
        return kv

    def _cache(self, kv: KV, rows: int) -> DynamicCache:
        """A fresh cache holding the prefix for `rows` rows (a forward pass extends it in place)."""
        return DynamicCache([(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in kv])

    def _inputs(self, rows: list[list[int]], kv: KV | None, positions: bool = False) -> tuple[torch.Tensor,
                                                                                            torch.Tensor, dict]:
        """Left-padded rows that continue the cached prefix `kv` ([prefix][pad][suffix]): ids, the mask
        over prefix and rows, and the model's cache and position arguments (positions as if unpadded;
        without a prefix only where asked: the model's own positions round differently in bf16)."""
        ids, mask = self._left_pad(rows)
        self.tokens_processed += int(mask.sum())
        width = 0 if kv is None else kv[0][0].shape[-2]
        extra: dict = {}
        if kv is not None or positions:
            extra["position_ids"] = width + (mask.cumsum(1) - 1).clamp(min=0)
        if kv is not None:
            extra[self._cache_arg] = self._cache(kv, len(rows))
            mask = torch.cat([mask.new_ones(len(rows), width), mask], dim=1)
        return ids, mask, extra

    def _forward_last(self, rows: list[list[int]], keep: int, kv: KV | None) -> torch.Tensor:
        """Log-softmax over the vocabulary for the last `keep` positions of left-padded rows that
        continue the cached prefix `kv`."""
        ids, mask, extra = self._inputs(rows, kv)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask, logits_to_keep=keep, **extra).logits
        return torch.log_softmax(logits.float(), dim=-1)

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        prompts = [self._encode(r.text) for r in requests]
        conts = [[self.tokenizer(c, add_special_tokens=False).input_ids for c in r.continuations]
                 for r in requests]
        logprobs: list[list[float]] = [[0.0] * len(r.continuations) for r in requests]
        for shared, members in self._prefix_groups([(r.group, r.prefix) for r in requests], prompts):
            kv = self._prefix_states(prompts[members[0]][:shared]) if shared else None
            self._score_group([prompts[i][shared:] for i in members], [conts[i] for i in members], kv,
                              [logprobs[i] for i in members])
        return [ScoreResult(tuple(logprobs[i]), len(prompts[i]), sum(len(c) for c in conts[i]))
                for i in range(len(requests))]

    def _score_group(self, prompts: list[list[int]], conts: list[list[list[int]]], kv: KV | None,
                     logprobs: list[list[float]]) -> None:
        """Fill `logprobs` in place for prompts that continue the cached prefix `kv`."""
        prefix = 0 if kv is None else kv[0][0].shape[-2]
        single = [i for i in range(len(prompts)) if all(len(c) == 1 for c in conts[i])]
        # Single-token labels: one forward per prompt, read the next-token distribution once.
        lengths = [len(p) for p in prompts]
        for batch in _batches(sorted(single, key=lengths.__getitem__), lengths, self.batch_size,
                              self.max_batch_tokens, prefix):
            last = self._forward_last([prompts[i] for i in batch], 1, kv)[:, -1, :]
            picked = iter(_pick(last, [(row, c[0]) for row, i in enumerate(batch) for c in conts[i]]))
            for i in batch:
                logprobs[i][:] = [next(picked) for _ in conts[i]]
        multi_rows = [i for i in range(len(prompts)) if i not in set(single)]
        if self.continue_labels:
            for batch in _batches(sorted(multi_rows, key=lengths.__getitem__), lengths, self.batch_size,
                                  self.max_batch_tokens, prefix):
                self._score_continuations([prompts[i] for i in batch], [conts[i] for i in batch], kv,
                                          [logprobs[i] for i in batch])
            return
        # Multi-token labels on other caches: teacher-force every label token on prompt+label rows.
        multi = [(i, j) for i in multi_rows for j in range(len(conts[i]))]
        row_len = {(i, j): lengths[i] + len(conts[i][j]) for i, j in multi}
        keys = sorted(multi, key=row_len.__getitem__)
        flat_lengths = [row_len[k] for k in keys]
        for batch in _batches(range(len(keys)), flat_lengths, self.batch_size, self.max_batch_tokens,
                              prefix):
            pairs = [keys[b] for b in batch]
            keep = max(len(conts[i][j]) for i, j in pairs) + 1
            out = self._forward_last([prompts[i] + conts[i][j] for i, j in pairs], keep, kv)
            picked = iter(_pick(out, [(row, keep - 1 - len(conts[i][j]) + k, t) for row, (i, j) in enumerate(pairs)
                                      for k, t in enumerate(conts[i][j])]))
            for i, j in pairs:
                logprobs[i][j] = sum(next(picked) for _ in conts[i][j])

    def _score_continuations(self, prompts: list[list[int]], conts: list[list[list[int]]], kv: KV | None,
                             logprobs: list[list[float]]) -> None:
        """Several-token labels: each prompt runs once, and each label's tokens continue its cache
        (cropped back after every label), where a row per label would run the example once per label."""
        ids, mask, extra = self._inputs(prompts, kv, positions=True)
        extra.setdefault(self._cache_arg, DynamicCache())
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1, **extra)
        first = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1)
        cache, start = out[self._cache_arg], extra["position_ids"][:, -1:] + 1
        for j in range(max(len(c) for c in conts)):
            # An empty continuation keeps log-probability 0.
            heads = [row for row, labels in enumerate(conts) if j < len(labels) and labels[j]]
            for row, value in zip(heads, _pick(first, [(row, conts[row][j][0]) for row in heads])):
                logprobs[row][j] = value
            tails = [labels[j][:-1] if j < len(labels) else [] for labels in conts]
            longest = max(len(tail) for tail in tails)
            if not longest:
                continue
            tail_mask = torch.tensor([[1] * len(tail) + [0] * (longest - len(tail)) for tail in tails],
                                     device=self.device)
            tail_ids = torch.tensor([tail + [self.tokenizer.pad_token_id] * (longest - len(tail)) for tail in tails],
                                    device=self.device)
            self.tokens_processed += int(tail_mask.sum())
            with torch.inference_mode():
                logits = self.model(input_ids=tail_ids, attention_mask=torch.cat([mask, tail_mask], dim=1),
                                    position_ids=start + torch.arange(longest, device=self.device),
                                    use_cache=True, **{self._cache_arg: cache}).logits
            cache.crop(-longest)  # back to the prompt (a negative count: every transformers reads it so)
            scores = torch.log_softmax(logits.float(), dim=-1)
            rows = [row for row, labels in enumerate(conts) if j < len(labels)]
            picked = iter(_pick(scores, [(row, k, token) for row in rows for k, token in enumerate(conts[row][j][1:])]))
            for row in rows:
                logprobs[row][j] += sum(next(picked) for _ in conts[row][j][1:])

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """Constrained greedy decoding over the whole vocabulary (`constrained.py`): every prompt's first step in
        batches, as label scoring reads its next-token distribution; the walks a first token leaves open (a piece
        two choices share, a choice that is a prefix of another) go on together, one token per pass."""
        self._pieces = self._pieces or token_pieces(self.tokenizer)
        prompts = [self._encode(r.text) for r in requests]
        labels = [[self.tokenizer(c, add_special_tokens=False).input_ids for c in r.choices] for r in requests]
        walks = [ChoiceWalk(r.choices, self._pieces, first_token_bias([t[0] for t in ids], r.first_token_bias),
                            (self.tokenizer.eos_token_id,)) for r, ids in zip(requests, labels)]
        scores: list[tuple[float, ...]] = [()] * len(requests)
        for shared, members in self._prefix_groups([(r.group, r.prefix) for r in requests], prompts):
            kv = self._prefix_states(prompts[members[0]][:shared]) if shared else None
            suffix = [len(prompts[i]) - shared for i in members]
            for batch in _batches(sorted(range(len(members)), key=suffix.__getitem__), suffix, self.batch_size,
                                  self.max_batch_tokens, shared):
                rows = [members[b] for b in batch]
                last = self._forward_last([prompts[i][shared:] for i in rows], 1, kv)[:, -1, :]
                for row, i in enumerate(rows):
                    scores[i] = first_logprobs(last[row], [t[0] for t in labels[i]], walks[i].bias)
                    if not walks[i].done:
                        walks[i].step(last[row])
                while going := [i for i in rows if not walks[i].done]:  # the open walks, one step each per pass
                    steps = self._forward_last([prompts[i][shared:] + list(walks[i].tokens) for i in going], 1, kv)
                    for row, i in enumerate(going):
                        walks[i].step(steps[row, -1, :])
        return [ChoiceResult(w.answer, s, len(p), len(t[w.answer]) if w.answer is not None else len(w.tokens))
                for w, s, p, t in zip(walks, scores, prompts, labels)]

    @functools.cached_property
    def batch_decode_ratio(self) -> float | None:
        return None if self.device == "cpu" else batch_decode_ratio(self.generate)  # CPU: see decode_cost

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        prompts = [self._encode(r.text) for r in requests]
        results: list[GenerateResult | None] = [None] * len(requests)
        by_budget: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            if r.temperature:
                results[i] = self._sample(prompts[i], r)
            else:
                by_budget.setdefault(r.max_new_tokens, []).append(i)
        for max_new, budget_members in by_budget.items():
            keys = [(requests[i].group, requests[i].prefix) for i in budget_members]
            for shared, group in self._prefix_groups(keys, [prompts[i] for i in budget_members]):
                members = [budget_members[g] for g in group]
                kv = self._prefix_states(prompts[members[0]][:shared]) if shared else None
                suffix = [len(prompts[i]) - shared for i in members]
                for batch in _batches(sorted(range(len(members)), key=suffix.__getitem__), suffix,
                                      self.batch_size, self.max_batch_tokens, shared):
                    rows = [prompts[members[b]] for b in batch]
                    for b, result in zip(batch, self._generate_batch(rows, max_new, shared, kv)):
                        results[members[b]] = result
        return [r for r in results if r is not None]

    def _sample(self, prompt: list[int], request: GenerateRequest) -> GenerateResult:
        """One seeded draw at the request's temperature (no top-k or top-p cut), alone in its batch
        and on a forked random state: the seed alone decides the text, whatever else is asked."""
        with torch.random.fork_rng(devices=[] if self.device == "cpu" else None):
            torch.manual_seed(request.seed)
            return self._generate_batch([prompt], request.max_new_tokens, 0, None, request.temperature)[0]

    def _generate_batch(self, rows: list[list[int]], max_new: int, shared: int,
                        kv: KV | None, temperature: float = 0.0) -> list[GenerateResult]:
        """Decoding of full prompts `rows` whose first `shared` tokens are cached in `kv`: greedy,
        or sampled at `temperature` from the torch random state."""
        ids, mask = self._left_pad([r[shared:] for r in rows])
        prefill = int(mask.sum())
        if kv is not None:
            ids = torch.cat([ids.new_tensor(rows[0][:shared]).expand(len(rows), -1), ids], dim=1)
            mask = torch.cat([mask.new_ones(len(rows), shared), mask], dim=1)
        extra: dict = {}
        if self.append_cache:
            extra = {self._cache_arg: append_cache(kv, len(rows))}
        elif kv is not None:
            extra = {self._cache_arg: self._cache(kv, len(rows))}
        width, pad = ids.shape[1], self.tokenizer.pad_token_id
        with torch.inference_mode():
            decoding = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature \
                else {"do_sample": False}
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new,
                                      output_scores=True, return_dict_in_generate=True,
                                      pad_token_id=pad, **decoding, **extra)
        self.tokens_processed += prefill + len(rows) * (len(out.scores) - 1)
        scores = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        results = []
        eos = set(self.tokenizer.all_special_ids)
        for row, prompt in enumerate(rows):
            new_tokens = out.sequences[row, width:].tolist()
            n = next((k for k, t in enumerate(new_tokens) if t in eos), len(new_tokens))
            text = self.tokenizer.decode(new_tokens[:n], skip_special_tokens=True)
            token_logprobs = tuple(float(x) for x in scores[row, :n].tolist())
            results.append(GenerateResult(text, token_logprobs, len(prompt), n))
        return results
