"""PEFT LoRA folder -> GGUF LoRA adapter that llama.cpp loads against a GGUF base model.

No pip package ships llama.cpp's own `convert_lora_to_gguf.py`, so this is the project's converter,
written with `gguf.GGUFWriter`. It does what llama.cpp's script does for Llama-architecture models:

- metadata `general.type=adapter`, `adapter.type=lora`, `adapter.lora.alpha`, `general.architecture`;
- names `...layers.N.self_attn.q_proj.lora_A.weight` -> `blk.N.attn_q.weight.lora_a` (and k, v, o and
  the MLP projections);
- the rows of lora_B for q_proj and k_proj get the head permutation that llama.cpp's converter applies
  to Llama q/k weights (n_head for q, n_head_kv for k): llama.cpp stores those weights permuted for its
  RoPE layout, so an unpermuted delta would be silently wrong;
- `use_rslora` (scale alpha/sqrt(r)) is written as alpha*sqrt(r), since llama.cpp scales by alpha/r.

Converted files are cached under `<cache_dir>/lora-gguf/` keyed by a hash of the adapter's files, the base
model's shape and the converter version, and written atomically.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mascot.errors import BackendError

CONVERTER_VERSION = 1
SUPPORTED_ARCHS = ("llama",)  # architectures whose q/k layout (and permutation) this converter knows
_TARGETS = {
    "q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
    "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down",
}
_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\.(?:self_attn|mlp)\.(\w+?)\.lora_([AB])(?:\.[\w-]+)?\.weight$")


@dataclass(frozen=True)
class BaseShape:
    """The hyper-parameters of a GGUF base model that an adapter must match."""

    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int

    @classmethod
    def from_metadata(cls, meta: dict[str, str], source: str = "the model") -> BaseShape:
        """Read the shape from GGUF key/value metadata (as llama.cpp reports it, all strings)."""
        arch = meta.get("general.architecture", "?")
        try:
            n_head = int(meta[f"{arch}.attention.head_count"])
            return cls(arch, int(meta[f"{arch}.block_count"]), int(meta[f"{arch}.embedding_length"]), n_head,
                       int(meta.get(f"{arch}.attention.head_count_kv", n_head)), int(meta[f"{arch}.feed_forward_length"]))
        except (KeyError, ValueError) as exc:
            raise BackendError(f"{source} (architecture {arch!r}) lacks the metadata key {exc}; LoRA adapters "
                               f"can be converted for these architectures only: {', '.join(SUPPORTED_ARCHS)}.") from exc

    def expected(self, proj: str) -> tuple[int, int]:
        """(out_features, in_features) of a targeted projection."""
        head = self.n_embd // self.n_head
        return {
            "q_proj": (self.n_head * head, self.n_embd), "k_proj": (self.n_head_kv * head, self.n_embd),
            "v_proj": (self.n_head_kv * head, self.n_embd), "o_proj": (self.n_embd, self.n_head * head),
            "gate_proj": (self.n_ff, self.n_embd), "up_proj": (self.n_ff, self.n_embd), "down_proj": (self.n_embd, self.n_ff),
        }[proj]


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's `LlamaModel.permute` for q/k weights, applied to the output rows of `w`."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _read_config(folder: Path) -> dict:
    cfg_file = folder / "adapter_config.json"
    if not cfg_file.exists():
        raise BackendError(f"{folder} is not a PEFT adapter folder (no adapter_config.json): point to the folder "
                           "that `save_pretrained` wrote.")
    try:
        return json.loads(cfg_file.read_text())
    except json.JSONDecodeError as exc:
        raise BackendError(f"{cfg_file} is not valid JSON ({exc}): the adapter folder is corrupt; re-save it.") from exc


def lora_scale_alpha(cfg: dict, folder: Path) -> float:
    """The `adapter.lora.alpha` to write: llama.cpp scales by alpha/r, rsLoRA by alpha/sqrt(r)."""
    if cfg.get("peft_type", "LORA") != "LORA":
        raise BackendError(f"{folder}: peft_type {cfg.get('peft_type')!r} is not LoRA; only LoRA adapters convert to GGUF.")
    for key in ("rank_pattern", "alpha_pattern"):
        if cfg.get(key):
            raise BackendError(f"{folder}: adapter_config.json sets {key} (per-module ranks or alphas), which a GGUF "
                               "LoRA cannot express (one alpha per file). Retrain without it, or use --backend transformers.")
    for key, what in (("use_dora", "DoRA"), ("modules_to_save", "modules_to_save"), ("lora_bias", "LoRA biases")):
        if cfg.get(key):
            raise BackendError(f"{folder}: {what} is not supported by llama.cpp LoRA adapters; use --backend transformers.")
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    return alpha * math.sqrt(r) if cfg.get("use_rslora") else alpha


# safetensors dtypes an adapter may hold -> the little-endian numpy type their bytes are read as
_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as float32, read with numpy alone, in name order.

    The format is an 8-byte header length, a JSON header (name -> dtype, shape, byte offsets) and the raw
    bytes. bfloat16, which numpy lacks, is widened exactly (its 16 bits are the top half of a float32), so
    loading an adapter never imports torch."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    if len(raw) < 8 or 8 + size > len(raw):
        raise ValueError(f"header of {size} bytes in a file of {len(raw)}")
    header = json.loads(raw[8:8 + size])
    body = memoryview(raw)[8 + size:]
    out: dict[str, np.ndarray] = {}
    for name in sorted(k for k in header if k != "__metadata__"):
        spec = header[name]
        if spec["dtype"] not in _SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name} has dtype {spec['dtype']}, not a float type")
        start, end = spec["data_offsets"]
        arr = np.frombuffer(body[start:end], dtype=_SAFETENSORS_DTYPES[spec["dtype"]]).reshape(spec["shape"])
        out[name] = (arr.astype(np.uint32) << 16).view(np.float32) if spec["dtype"] == "BF16" else arr.astype(np.float32)
    return out


def _load_tensors(folder: Path) -> dict[str, np.ndarray]:
    path = folder / "adapter_model.safetensors"
    if not path.exists():
        raise BackendError(f"{folder} has no adapter_model.safetensors: re-save the adapter with safe_serialization=True.")
    try:
        return read_safetensors(path)
    except Exception as exc:  # truncated or not a safetensors file
        raise BackendError(f"{path} could not be read ({str(exc)[:160]}): the file is corrupt; re-save the adapter.") from exc


def lora_tensors(folder: Path, cfg: dict, base: BaseShape) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array, checked against the base shape and permuted for q/k."""
    if base.arch not in SUPPORTED_ARCHS:
        raise BackendError(f"The GGUF model's architecture is {base.arch!r}; the LoRA converter supports "
                           f"{', '.join(SUPPORTED_ARCHS)} only. Use --backend transformers for adapters on this model.")
    trained_on = cfg.get("base_model_name_or_path", "?")
    out: dict[str, np.ndarray] = {}
    for key, arr in _load_tensors(folder).items():
        m = _KEY.search(key)
        if m is None or m.group(2) not in _TARGETS:
            raise BackendError(f"{folder}: tensor {key!r} is not a LoRA weight of an attention or MLP projection "
                               "(embeddings and lm_head adapters are not supported by llama.cpp); use --backend transformers.")
        layer, proj, ab = int(m.group(1)), m.group(2), m.group(3)
        out_f, in_f = base.expected(proj)
        want = (arr.shape[0], in_f) if ab == "A" else (out_f, arr.shape[1])
        if layer >= base.n_layer or arr.ndim != 2 or arr.shape != want:
            raise BackendError(
                f"Adapter {folder} was trained on another base model ({trained_on!r}): {key} has shape "
                f"{tuple(arr.shape)} but this GGUF model needs {want} in layer {layer} of {base.n_layer}. "
                "Load the base model it was trained on, or retrain the adapter on this one.")
        if ab == "B" and proj in ("q_proj", "k_proj"):
            arr = permute_rows(arr, base.n_head if proj == "q_proj" else base.n_head_kv)
        out[f"blk.{layer}.{_TARGETS[proj]}.weight.lora_{ab.lower()}"] = np.ascontiguousarray(arr, dtype=np.float32)
    pairs = {n.rsplit(".", 1)[0] for n in out}
    missing = [p for p in sorted(pairs) if f"{p}.lora_a" not in out or f"{p}.lora_b" not in out]
    if not out or missing:
        raise BackendError(f"{folder}: incomplete LoRA weights ({', '.join(missing) or 'no tensors'}); re-save the adapter.")
    return out


def adapter_hash(folder: Path, base: BaseShape) -> str:
    """Content hash of the adapter files, the base shape and the converter version."""
    h = hashlib.sha256(f"v{CONVERTER_VERSION}|{base}".encode())
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        p = folder / name
        h.update(name.encode() + (p.read_bytes() if p.exists() else b""))
    return h.hexdigest()[:24]


def convert_lora(folder: str | Path, base: BaseShape, out_dir: str | Path | None = None,
                 cache_dir: str | Path | None = None) -> Path:
    """Convert a PEFT LoRA folder once; returns the GGUF adapter path, in `out_dir` or else in
    `<cache_dir>/lora-gguf/` (None: the default model cache). An adapter converted before is found by its
    content hash, without reading its tensors."""
    from mascot.files.model_files import default_cache_dir

    folder = Path(folder)
    cfg = _read_config(folder)
    alpha = lora_scale_alpha(cfg, folder)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    target = Path(out_dir or cache / "lora-gguf") / f"{adapter_hash(folder, base)}.gguf"
    if target.exists():
        return target
    tensors = lora_tensors(folder, cfg, base)
    import gguf

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".convert-", suffix=".gguf")
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp, base.arch)
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        writer.add_string("general.name", folder.name)
        for name, arr in tensors.items():
            writer.add_tensor(name, arr)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
