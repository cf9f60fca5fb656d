"""`--dtype auto` per device and where prefix reuse is on by default (issue 42 item 4): fp32 on CUDA,
where bf16 was slower and strayed past 1e-2 nats; half precision on CUDA scores on the full-prompt path
unless reuse is asked for; CPU keeps its choices. No model is loaded and no GPU is needed."""

from __future__ import annotations

import pytest
import torch

from prompttune.backends.transformers_setup import resolve_dtype, reuse_by_default


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_auto_is_fp32_on_cuda_and_an_explicit_dtype_is_kept(device: str) -> None:
    assert resolve_dtype("auto", device) is torch.float32
    assert resolve_dtype("bf16", device) is torch.bfloat16
    assert resolve_dtype("fp32", device) is torch.float32


def test_auto_on_cpu_still_follows_native_bf16() -> None:
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert resolve_dtype("auto", "cpu") is (torch.bfloat16 if native else torch.float32)


@pytest.mark.parametrize(("dtype", "device", "reuse"), [
    (torch.bfloat16, "cuda", False),
    (torch.float16, "cuda:0", False),
    (torch.float32, "cuda", True),
    (torch.bfloat16, "cpu", True),
    (torch.float32, "cpu", True),
])
def test_prefix_reuse_is_off_by_default_only_for_half_precision_on_cuda(dtype: torch.dtype, device: str,
                                                                         reuse: bool) -> None:
    assert reuse_by_default(dtype, device) is reuse
