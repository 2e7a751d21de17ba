"""The llamacpp backend: the GGUF model on CPU through llama-cpp-python, persona LoRAs switched per call.

`LlamaCppBackend` (backend.py) holds the public API; backend.py's docstring maps the modules it is composed
of. `probe.py` checks, without loading llama.cpp here, that the installed build runs on this CPU.

Importing this package loads nothing heavy (no numpy, no llama_cpp): `LlamaCppBackend` is imported on first
use, so `auto` can ask the probe without paying for the backend.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LlamaCppBackend"]


def __getattr__(name: str) -> Any:
    if name == "LlamaCppBackend":
        from mascot.backends.llamacpp.backend import LlamaCppBackend

        return LlamaCppBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
