"""Choose and build a backend from the run configuration, and the command-line options for it.

Fields are read with defaults (`_field`) so a config that predates the serving options still works.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prompttune.backends.base import Backend
from prompttune.core.errors import UserError

BACKENDS = ("transformers", "openai", "vllm")
DEFAULTS: dict[str, Any] = {"backend": "transformers", "base_url": [], "api_key_env": None,
                            "tokenizer": None, "concurrency": 8, "timeout": 60.0, "retries": 4}


def _field(config: Any, name: str) -> Any:
    return getattr(config, name, DEFAULTS[name])


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Model and serving options; --model/--dtype/--device/--batch-size mean what they always did."""
    group = parser.add_argument_group("model backend")
    group.add_argument("--backend", choices=BACKENDS, default="transformers",
                       help="transformers (in process, default), openai (OpenAI-compatible servers) "
                            "or vllm (vLLM's offline engine, extra prompttune[vllm])")
    group.add_argument("--model", default="embedded:smollm2-135m-instruct",
                       help="HF id, local directory or .gguf file (default: the embedded SmolLM2-135M); "
                            "with --backend openai, the served model name")
    group.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default="auto")
    group.add_argument("--device", default="cpu", help="cpu or cuda[:N] (transformers backend)")
    group.add_argument("--batch-size", type=int, default=32, help="rows per forward pass (transformers)")
    group.add_argument("--base-url", action="append", default=[], metavar="URL",
                       help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (repeatable: "
                            "calls go to the least-loaded healthy server)")
    group.add_argument("--api-key-env", metavar="NAME",
                       help="environment variable holding the API key (default: OPENAI_API_KEY if set); "
                            "the key itself is never saved")
    group.add_argument("--tokenizer", help="tokenizer path or id: chat templates for --backend openai "
                                           "(default: the embedded model's own when a server runs it), "
                                           "tokenization for vllm (default: the model's)")
    group.add_argument("--concurrency", type=int, default=DEFAULTS["concurrency"],
                       help="requests in flight per server (openai)")
    group.add_argument("--timeout", type=float, default=DEFAULTS["timeout"],
                       help="seconds per HTTP request (openai)")
    group.add_argument("--retries", type=int, default=DEFAULTS["retries"],
                       help="retries per call on connection errors, 429 and 5xx (openai)")


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed options as config fields (`RunConfig(**backend_options(args), ...)`)."""
    names = ("model", "dtype", "device", "batch_size", *DEFAULTS)
    return {name: getattr(args, name) for name in names}


def _load_tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load tokenizer {name!r}: {str(exc).splitlines()[0]}") from exc


def _embedded_tokenizer_if_served(served: str) -> Any:
    """A server running the embedded GGUF (llama.cpp names it by its path) gets that file's own
    tokenizer, so chat prompts render exactly as in the transformers backend."""
    from prompttune.backends.transformers_backend import embedded_model_path

    try:
        gguf = embedded_model_path()
    except UserError:  # not installed, so not what the server runs either
        return None
    if Path(served).name != gguf.name:
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def build_backend(config: Any) -> Backend:
    """The backend named by `config.backend`, built from the config's model and serving fields."""
    kind = _field(config, "backend")
    urls = list(_field(config, "base_url"))
    if urls and kind != "openai":
        raise UserError("--base-url only applies to --backend openai")
    if kind == "transformers":
        from prompttune.backends.transformers_backend import TransformersBackend

        return TransformersBackend(config.model, dtype=config.dtype, device=config.device,
                                   batch_size=config.batch_size)
    if kind == "openai":
        from prompttune.backends.openai_backend import OpenAIBackend

        if not urls:
            raise UserError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        name = _field(config, "tokenizer")
        backend = OpenAIBackend(urls, config.model, api_key_env=_field(config, "api_key_env"),
                                tokenizer=_load_tokenizer(name) if name else None,
                                concurrency=_field(config, "concurrency"), timeout=_field(config, "timeout"),
                                retries=_field(config, "retries"))
        if name is None:  # the served name is known only once the server answered
            backend.tokenizer = _embedded_tokenizer_if_served(backend.model)
        return backend
    if kind == "vllm":
        from prompttune.backends.vllm_backend import VLLMBackend

        return VLLMBackend(config.model, dtype=config.dtype, tokenizer=_field(config, "tokenizer"))
    raise UserError(f"unknown backend {kind!r}; choose from {', '.join(BACKENDS)}")
