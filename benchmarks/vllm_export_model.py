"""Write a dense safetensors copy of the embedded GGUF model (vLLM cannot read that GGUF file).

transformers' `save_pretrained` refuses GGUF-loaded models, so this saves the state dict, config
and tokenizer itself. `--no-weights` writes only config and tokenizer (small enough to carry to a
GPU machine, where `gpu_random_model.py` fills in random weights of the same shape).

Run: python benchmarks/vllm_export_model.py OUT_DIR [--dtype fp32|bf16] [--no-weights]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from prompttune.backends.transformers_setup import embedded_model_path

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def export(out: Path, dtype: torch.dtype, weights: bool = True) -> None:
    gguf = embedded_model_path()
    source = {"pretrained_model_name_or_path": str(gguf.parent), "gguf_file": gguf.name}
    out.mkdir(parents=True, exist_ok=True)
    AutoTokenizer.from_pretrained(**source).save_pretrained(out)
    config = AutoConfig.from_pretrained(**source)
    config.dtype = dtype
    config.architectures = ["LlamaForCausalLM"]  # vLLM picks its model class from this
    config.save_pretrained(out)
    if not weights:
        return
    model = AutoModelForCausalLM.from_pretrained(**source, dtype=dtype)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # shares storage with the embeddings; safetensors refuses
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--no-weights", action="store_true")
    args = parser.parse_args()
    export(args.out, DTYPES[args.dtype], weights=not args.no_weights)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
