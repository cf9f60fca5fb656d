"""vLLM's offline engine (optional extra `prompttune[vllm]`): batched scoring and generation in
process, with prefix caching so the instruction and demos shared by a candidate's prompts are
computed once.

Scoring is exact teacher forcing, tokenized like the transformers backend (prompt and label apart,
then concatenated): for each distinct (prompt, label prefix) one request of `max_tokens=1` reads the
log-probs of just the label tokens that can come next (`logprob_token_ids`). Unlike
`prompt_logprobs`, which makes vLLM skip its prefix cache, these requests all hit the cached prompt;
single-token labels cost one request per prompt.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prompttune.backends.backend import TokenizerBackend
from prompttune.backends.capabilities import IN_PROCESS, Capabilities
from prompttune.backends.constrained import choice_token_cap, first_logprobs, first_token_bias
from prompttune.core.errors import UserError
from prompttune.core.types import ChoiceRequest, ChoiceResult, GenerateRequest, GenerateResult, ScoreRequest, ScoreResult

_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp32": "float32"}


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise UserError("the vllm backend needs vLLM: pip install 'prompttune[vllm]'") from None
    return vllm


class VLLMBackend(TokenizerBackend):
    options = ("dtype", "tokenizer")

    @classmethod
    def from_config(cls, config: Any) -> "VLLMBackend":
        return cls(config.model, dtype=config.dtype, tokenizer=config.tokenizer)

    def __init__(self, model: str, dtype: str = "auto", tokenizer: str | None = None,
                 **engine_options: Any) -> None:
        """`engine_options` go to `vllm.LLM` unchanged (e.g. tensor_parallel_size, max_model_len)."""
        if model.startswith("embedded:") or model.endswith(".gguf"):
            raise UserError("vLLM cannot load the embedded GGUF model: export a safetensors copy "
                            "(benchmarks/vllm_export_model.py) and pass its folder with --model")
        self._vllm = _import_vllm()
        if "logprob_token_ids" not in self._vllm.SamplingParams.__struct_fields__:
            raise UserError("the vllm backend needs a vLLM whose SamplingParams has logprob_token_ids "
                            "(0.32 or newer): pip install -U 'prompttune[vllm]'")
        try:
            self.llm = self._vllm.LLM(model=model, tokenizer=tokenizer, dtype=_DTYPES[dtype],
                                      enable_prefix_caching=True, seed=0, **engine_options)
        except (OSError, ValueError) as exc:
            raise UserError(f"vLLM cannot load model {model!r}: {str(exc).splitlines()[0]}") from exc
        self.tokenizer = self.llm.get_tokenizer()
        self.model_id = f"vllm:{model}|{dtype}"

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        prompts = [self._encode(r.text) for r in requests]
        labels = [[self.tokenizer(c, add_special_tokens=False).input_ids for c in r.continuations]
                  for r in requests]
        wanted: dict[tuple[int, tuple[int, ...]], set[int]] = {}  # (prompt, label prefix) -> next ids
        for i, ids_per_label in enumerate(labels):
            for ids in ids_per_label:
                for k, token in enumerate(ids):
                    wanted.setdefault((i, tuple(ids[:k])), set()).add(token)
        keys = list(wanted)
        params = [self._vllm.SamplingParams(max_tokens=1, temperature=0.0,
                                            logprob_token_ids=sorted(wanted[k])) for k in keys]
        outputs = self.llm.generate([{"prompt_token_ids": prompts[i] + list(prefix)} for i, prefix in keys],
                                    params, use_tqdm=False)
        read = {key: out.outputs[0].logprobs[0] for key, out in zip(keys, outputs)}
        return [ScoreResult(tuple(sum(read[i, tuple(ids[:k])][t].logprob for k, t in enumerate(ids))
                                  for ids in ids_per_label),
                            len(prompts[i]), sum(len(ids) for ids in ids_per_label))
                for i, ids_per_label in enumerate(labels)]

    @property
    def decodes_together(self) -> bool:
        return True  # one `llm.generate` over the call's prompts

    def capabilities(self) -> Capabilities:
        """Everything in process; constrained decoding by vLLM's structured outputs, `logit_bias` beside it."""
        return replace(IN_PROCESS, constraints=("structured_outputs",))

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """serve choice: vLLM's own structured-outputs choice, greedy, the first-token bias as `logit_bias`, as
        `vllm serve` decodes it; the label scores are the choices' first tokens' log-probs (raw, as vLLM reports
        them), biased as `logit_bias` shifts them."""
        from vllm.sampling_params import StructuredOutputsParams

        prompts = [{"prompt_token_ids": self._encode(r.text)} for r in requests]
        firsts = [self.first_tokens(r.choices) for r in requests]
        biases = [first_token_bias(first, r.first_token_bias) for first, r in zip(firsts, requests)]
        params = [self._vllm.SamplingParams(max_tokens=choice_token_cap(r.choices), temperature=0.0,
                                            structured_outputs=StructuredOutputsParams(choice=list(r.choices)),
                                            logit_bias=bias or None, logprob_token_ids=sorted(set(first)))
                  for r, first, bias in zip(requests, firsts, biases)]
        results = []
        for r, prompt, first, bias, out in zip(requests, prompts, firsts, biases,
                                               self.llm.generate(prompts, params, use_tqdm=False)):
            completion = out.outputs[0]
            step = completion.logprobs[0] if completion.logprobs else {}
            scores = first_logprobs({t: step[t].logprob for t in first}, first, bias) if step else ()
            chosen = r.choices.index(completion.text) if completion.text in r.choices else None
            results.append(ChoiceResult(chosen, scores, len(prompt["prompt_token_ids"]), len(completion.token_ids)))
        return results

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        prompts = [{"prompt_token_ids": self._encode(r.text)} for r in requests]
        params = [self._vllm.SamplingParams(max_tokens=r.max_new_tokens, temperature=r.temperature,
                                            seed=r.seed if r.temperature else None, logprobs=0)
                  for r in requests]
        results = []
        for prompt, out in zip(prompts, self.llm.generate(prompts, params, use_tqdm=False)):
            completion = out.outputs[0]
            token_logprobs = tuple(step[t].logprob for step, t in zip(completion.logprobs or [],
                                                                      completion.token_ids))
            results.append(GenerateResult(completion.text, token_logprobs,
                                          len(prompt["prompt_token_ids"]), len(completion.token_ids)))
        return results
