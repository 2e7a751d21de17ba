"""Re-encode a GGUF model's low-bit weights once, for llama.cpp kernels that run faster on this CPU.

Why: llama.cpp's CPU matrix kernels for the embedded model's Q4_1 weights process prompts at about 310
tokens/s on 2 cores here, against about 670 for Q8_0, whose batched kernels (llamafile's tinyBLAS) handle
several tokens per weight pass (`benchmarks/llamacpp_speed.py` measures both: engines
`llamacpp-native` and `llamacpp-q8_0`). Prompt prefill
is what a chat turn waits for before its first token, and most of what batched rollouts spend. Q8_0 holds
every Q4_1 value to within 1/254 of its 32-weight block's largest magnitude (a sixteenth of a Q4_1 step),
so the model keeps its behaviour (greedy outputs are compared in `tests/test_llamacpp.py`).

`bf16` writes the de-quantised weights rounded to bfloat16 (8 significant bits: closer to the file than Q8_0,
mean next-token KL 0.0025 against 0.0046 nats, benchmarks/llamacpp_weights_kl.py). On CPUs with AVX512-BF16 (llama.cpp reports `AVX512_BF16 = 1`),
llama.cpp's bfloat16 matrix kernels run batches of rows faster than its Q8_0 ones: 16 chats decoding together
took about 36 ms a step against 47-53 for Q8_0 on 2 AMD EPYC cores, prompts prefilled in 1.2 against 1.7 s
(`benchmarks/llamacpp_speed.py` measures it); without that instruction set they are slower, so `auto` (the
backend's default) picks `bf16` only where llama.cpp reports it.

`f32` writes the exact de-quantised weights: the reference in which llama.cpp computes like transformers on
the same values, used to check the LoRA converter apart from quantisation noise.

Files are written once, atomically, to `<cache_dir>/gguf-recode/`, keyed by the source's name, size and
modification time, the target type and the recoder version, with every metadata field copied
(chat template and tokenizer included).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mascot.errors import BackendError

log = logging.getLogger(__name__)

RECODE_VERSION = 1
TARGETS = ("native", "q8_0", "bf16", "f32")
# low-bit formats re-encoded by `q8_0` (Q8_0, F16 and F32 tensors are kept as they are; `bf16` re-encodes Q8_0 too)
_LOW_BIT = ("Q4_0", "Q4_1", "Q5_0", "Q5_1")


def recoded_path(src: Path, target: str, cache_dir: str | Path | None = None) -> Path:
    """Where the re-encoding of `src` as `target` is kept under `cache_dir` (None: the default model cache)."""
    from mascot.files.model_files import default_cache_dir

    st = src.stat()
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    return root / "gguf-recode" / f"{src.stem}-{st.st_size}-{st.st_mtime_ns}-{target}-v{RECODE_VERSION}.gguf"


def recode_gguf(src: str | Path, target: str, cache_dir: str | Path | None = None) -> Path:
    """The GGUF at `src` with its weights as `target` (`native` returns `src`); converted once and cached under
    `cache_dir` (None: the default model cache)."""
    if target not in TARGETS:
        raise BackendError(f"Unknown llama.cpp weight format {target!r}; valid: {', '.join(TARGETS)} "
                           "(the `weights` option, MASCOT_LLAMACPP_WEIGHTS).")
    src = Path(src)
    if target == "native":
        return src
    out = recoded_path(src, target, cache_dir)
    if out.exists():
        return out
    import gguf  # only to convert: a cached file costs no import (about 0.15 s at start-up)

    try:
        reader = gguf.GGUFReader(str(src))
    except Exception as exc:  # gguf-py raises ValueError, struct/Index errors or OSError on damaged files
        raise BackendError(f"{src} is not a readable GGUF file ({exc}); reinstall it or pass another model.") from exc
    Q = gguf.GGMLQuantizationType
    if target == "q8_0" and not any(t.tensor_type.name in _LOW_BIT for t in reader.tensors):
        return src  # nothing to gain: already Q8_0, F16 or F32

    def convert(t: Any) -> tuple[np.ndarray, Any]:
        kind = t.tensor_type
        if kind in (Q.F32, Q.F16):
            return np.asarray(t.data, dtype=np.float32 if target == "f32" else t.data.dtype), None
        if target == "f32":
            return gguf.quants.dequantize(t.data, kind).astype(np.float32), None
        if kind.name in _LOW_BIT or (target == "bf16" and kind == Q.Q8_0):
            to = Q.BF16 if target == "bf16" else Q.Q8_0
            return gguf.quants.quantize(gguf.quants.dequantize(t.data, kind), to), to
        return t.data, kind

    try:
        write_gguf(reader, out, convert)
    except (gguf.quants.QuantError, NotImplementedError, ValueError) as exc:
        raise BackendError(f"Could not re-encode {src} as {target} ({exc}); set the weights to `native` "
                           "(MASCOT_LLAMACPP_WEIGHTS=native) to serve the file as it is.") from exc
    log.info("llama.cpp weights: wrote %s (%s of %s)", out, target, src.name)
    return out


def write_gguf(reader: Any, out: Path, convert: Callable[[Any], tuple[np.ndarray, Any]]) -> None:
    """Write `reader`'s GGUF to `out` with every metadata field copied (chat template and tokenizer included) and
    each tensor as `convert(tensor)` gives it: (data, its GGML type, or None to let gguf-py infer it from the
    array). Atomic: a temporary file in `out`'s folder, renamed when complete and removed on any failure."""
    import gguf

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".recode-", suffix=".gguf")
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp, str(reader.fields["general.architecture"].contents()))
        for field in reader.fields.values():
            if field.name in ("general.architecture", "general.file_type") or field.name.startswith("GGUF."):
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
        for t in reader.tensors:
            data, kind = convert(t)
            if kind is None:
                writer.add_tensor(t.name, data)
            else:
                writer.add_tensor(t.name, data, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
