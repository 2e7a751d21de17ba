"""Backend registry: `load_backend(kind, ...)` builds one by name; heavy imports stay lazy so the
CPU install never imports vLLM."""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from mascot.backends.base import Backend, BackendInfo, Completion, GenerationParams, Messages
from mascot.errors import unknown_name

# name -> "module:Class"; imported only when chosen.
BACKENDS: dict[str, str] = {
    "llamacpp": "mascot.backends.llamacpp:LlamaCppBackend",
    "transformers": "mascot.backends.hf:TransformersBackend",
    "vllm": "mascot.backends.vllm_backend:VLLMBackend",
    "openai": "mascot.backends.openai_backend:OpenAIBackend",
    "fake": "mascot.backends.fake:FakeBackend",
}


AUTO = "auto"


def gpu_present() -> bool:
    """An NVIDIA GPU is visible (checked without importing torch, which costs seconds at startup)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return Path("/dev/nvidiactl").exists()


def resolve_kind(kind: str) -> str:
    """`auto` -> llamacpp on CPU (when llama-cpp-python is installed), transformers on a GPU; other names as given."""
    if kind != AUTO:
        return kind
    if not gpu_present() and importlib.util.find_spec("llama_cpp") is not None:
        return "llamacpp"
    return "transformers"


def backend_class(kind: str) -> type[Backend]:
    kind = resolve_kind(kind)
    if kind not in BACKENDS:
        raise unknown_name("backend", kind, [*BACKENDS, AUTO])
    module, cls = BACKENDS[kind].split(":")
    return getattr(importlib.import_module(module), cls)


def load_backend(kind: str, **kwargs: Any) -> Backend:
    """Build a backend by registry name, passing only the options it accepts."""
    cls = backend_class(kind)
    import inspect

    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in kwargs.items() if k in accepted and v is not None})


__all__ = ["AUTO", "BACKENDS", "Backend", "BackendInfo", "Completion", "GenerationParams", "Messages", "backend_class", "load_backend", "resolve_kind"]
