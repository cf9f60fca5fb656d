"""Random weights in the shape of an exported config and tokenizer (`vllm_export_model.py
--no-weights`): label-scoring throughput does not depend on the weights, so a GPU machine that the
real weights are not copied to can still time the real architecture.

Run: python benchmarks/gpu_random_model.py SKELETON_DIR OUT_DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("skeleton", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.skeleton))
    model.save_pretrained(args.out)
    AutoTokenizer.from_pretrained(args.skeleton).save_pretrained(args.out)
    print(f"wrote {args.out} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M random parameters)")


if __name__ == "__main__":
    main()
