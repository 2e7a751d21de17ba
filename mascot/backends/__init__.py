"""Backend registry: `load_backend(kind, ...)` builds one by name; heavy imports stay lazy so the
CPU install never imports vLLM."""

from __future__ import annotations

import importlib
from typing import Any

from mascot.backends.base import Backend, BackendInfo, Completion, GenerationParams, Messages
from mascot.errors import unknown_name

# name -> "module:Class"; imported only when chosen.
BACKENDS: dict[str, str] = {
    "transformers": "mascot.backends.hf:TransformersBackend",
    "vllm": "mascot.backends.vllm_backend:VLLMBackend",
    "openai": "mascot.backends.openai_backend:OpenAIBackend",
    "fake": "mascot.backends.fake:FakeBackend",
}


def backend_class(kind: str) -> type[Backend]:
    if kind not in BACKENDS:
        raise unknown_name("backend", kind, list(BACKENDS))
    module, cls = BACKENDS[kind].split(":")
    return getattr(importlib.import_module(module), cls)


def load_backend(kind: str, **kwargs: Any) -> Backend:
    """Build a backend by registry name, passing only the options it accepts."""
    cls = backend_class(kind)
    import inspect

    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in kwargs.items() if k in accepted and v is not None})


__all__ = ["BACKENDS", "Backend", "BackendInfo", "Completion", "GenerationParams", "Messages", "backend_class", "load_backend"]
