"""The backend registry: each backend by name, the options it declares, and the command-line
options for all of them. A backend class is imported only when chosen."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
from typing import Any, Iterator

from prompttune.backends.backend import Backend
from prompttune.core.config import BackendConfig
from prompttune.core.errors import UserError

REGISTRY = {
    "transformers": "prompttune.backends.transformers_backend:TransformersBackend",
    "openai": "prompttune.backends.openai_backend:OpenAIBackend",
    "vllm": "prompttune.backends.vllm_backend:VLLMBackend",
}
BACKENDS = tuple(REGISTRY)
DEFAULTS = BackendConfig()


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Model and serving options; --model/--dtype/--device/--batch-size mean what they always did."""
    group = parser.add_argument_group("model backend")
    group.add_argument("--backend", choices=BACKENDS, default="transformers",
                       help="transformers (in process, default), openai (OpenAI-compatible servers) "
                            "or vllm (vLLM's offline engine, extra prompttune[vllm])")
    group.add_argument("--model", default="embedded:smollm2-135m-instruct",
                       help="HF id, local directory or .gguf file (default: the embedded SmolLM2-135M); "
                            "with --backend openai, the served model name")
    group.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default=DEFAULTS.dtype,
                       help="weights' precision (transformers): auto is fp32 on CUDA (faster and exact there), "
                            "bf16 on a CPU that runs it natively, else fp32")
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
    group.add_argument("--api", choices=["auto", "completions", "chat"], default=DEFAULTS.api,
                       help="openai: /v1/completions, /v1/chat/completions (prompts sent as messages; labels read "
                            "from the first answer token's top log-probs), or auto (default: completions when the "
                            "server offers it, else chat)")
    group.add_argument("--concurrency", type=int, default=DEFAULTS.concurrency,
                       help="requests in flight per server (openai)")
    group.add_argument("--timeout", type=float, default=DEFAULTS.timeout,
                       help="seconds per HTTP request (openai)")
    group.add_argument("--retries", type=int, default=DEFAULTS.retries,
                       help="retries per call on connection errors, timeouts, 429 and 5xx (openai); when "
                            "every server is out for --timeout x --retries seconds the run stops, resumably")


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed options as config fields (`RunConfig(**backend_options(args), ...)`)."""
    return {name: getattr(args, name) for name in BackendConfig.model_fields}


def backend_class(name: str) -> type[Backend]:
    """The class registered under `name`, imported only now (each pulls in heavy dependencies)."""
    if name not in REGISTRY:
        raise UserError(f"unknown backend {name!r}; choose from {', '.join(REGISTRY)}")
    module, _, cls = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def check_backend(config: BackendConfig) -> type[Backend]:
    """The backend named by `config.backend`, once every option it was given is one it reads and its
    own cheap checks pass: bad input fails here, before any weights load."""
    cls = backend_class(config.backend)
    for name in sorted(BackendConfig.model_fields.keys() - {"backend", "model", *cls.options}):
        if getattr(config, name) != getattr(DEFAULTS, name):
            raise UserError(f"--{name.replace('_', '-')} does not apply to --backend {config.backend} "
                            f"(it reads --model{''.join(' --' + o.replace('_', '-') for o in cls.options)})")
    cls.check(config)
    return cls


def build_backend(config: BackendConfig) -> Backend:
    """The backend named by `config.backend`, checked first (`check_backend`)."""
    return check_backend(config).from_config(config)


@contextlib.contextmanager
def loading(config: BackendConfig, quietly: bool) -> Iterator[None]:
    """Around building `config`'s backend: `quietly` (a library call without `progress=True`, which prints
    nothing), what loading writes to the terminal goes nowhere: the progress bars of transformers, the hub
    and the GGUF conversion (tqdm binds `sys.stderr` when a bar starts) and anything else the loaders print.
    The backend's module is imported first, outside the redirection: libraries bind their log handlers to
    `sys.stderr` on import, and one bound to the redirected stream would swallow every later message."""
    if not quietly:
        yield
        return
    backend_class(config.backend)
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        yield
