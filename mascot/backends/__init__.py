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
    "llamacpp": "mascot.backends.llamacpp.backend:LlamaCppBackend",
    "transformers": "mascot.backends.transformers_backend:TransformersBackend",
    "vllm": "mascot.backends.vllm_backend:VLLMBackend",
    "openai": "mascot.backends.openai_backend:OpenAIBackend",
    "fake": "mascot.backends.fake:FakeBackend",
}


AUTO = "auto"


def gpu_present() -> bool:
    """An NVIDIA GPU is visible (checked without importing torch, which costs seconds at startup)."""
    # CUDA_VISIBLE_DEVICES is the CUDA runtime's own switch (not a MASCOT setting): "" or -1 hides every GPU
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return Path("/dev/nvidiactl").exists()


def is_gguf_model(model: str) -> bool:
    """The embedded model, a .gguf file, or a folder holding one (what the llamacpp backend serves)."""
    from mascot.files.model_files import EMBEDDED, EMBEDDED_NAME

    if model in (EMBEDDED, "", EMBEDDED_NAME, f"HuggingFaceTB/{EMBEDDED_NAME}"):
        return True
    path = Path(model)
    return path.suffix == ".gguf" or (path.is_dir() and any(path.glob("*.gguf")))


def resolve_kind(kind: str, model: str = "embedded", *, cache_dir: str | Path | None = None, probe: bool = True) -> str:
    """`auto` -> llamacpp on CPU for a GGUF model (when llama-cpp-python is installed and its build runs on this
    CPU: `mascot.backends.llamacpp.probe.llamacpp_runs`, its verdict kept under `cache_dir`; `probe=False` trusts
    the build), else transformers (a GPU, or a transformers model folder / hub name); other names as given."""
    if kind != AUTO:
        return kind
    if not gpu_present() and is_gguf_model(model) and importlib.util.find_spec("llama_cpp") is not None:
        from mascot.backends.llamacpp.probe import llamacpp_runs

        if llamacpp_runs(str(cache_dir) if cache_dir else None, probe):
            return "llamacpp"
    return "transformers"


def backend_class(kind: str, model: str = "embedded", *, cache_dir: str | Path | None = None,
                  probe: bool = True) -> type[Backend]:
    kind = resolve_kind(kind, model, cache_dir=cache_dir, probe=probe)
    if kind not in BACKENDS:
        raise unknown_name("backend", kind, [*BACKENDS, AUTO])
    module, cls = BACKENDS[kind].split(":")
    return getattr(importlib.import_module(module), cls)


def load_backend(kind: str, **kwargs: Any) -> Backend:
    """Build a backend by registry name, passing only the options it accepts (`Settings.backend_options()`
    holds options for several backends; `cache_dir` and `probe` also decide what `auto` resolves to)."""
    probe = kwargs.get("probe")
    cls = backend_class(kind, str(kwargs.get("model") or "embedded"), cache_dir=kwargs.get("cache_dir"),
                        probe=True if probe is None else bool(probe))
    import inspect

    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in kwargs.items() if k in accepted and v is not None})


__all__ = ["AUTO", "BACKENDS", "Backend", "BackendInfo", "Completion", "GenerationParams", "Messages", "backend_class", "load_backend", "resolve_kind"]
