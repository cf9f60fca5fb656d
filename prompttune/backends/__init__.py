"""Model backends: in-process transformers, OpenAI-compatible servers, vLLM's offline engine.

Heavy dependencies (torch models, httpx, vllm) load only when `build_backend` picks that backend.
"""

from prompttune.backends.factory import BACKENDS, add_backend_arguments, backend_options, build_backend

__all__ = ["BACKENDS", "add_backend_arguments", "backend_options", "build_backend"]
