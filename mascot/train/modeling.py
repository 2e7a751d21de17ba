"""Model helpers for the trainers: local-only loading, parameter counts, and atomic adapter saves."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mascot.files.model_files import EMBEDDED_NAME, resolve_model
from mascot.train.processes import is_main_process
from mascot.train.progress import atomic_path

# Files a shipped adapter folder may hold; anything else (optimizer states, checkpoint-*) stays out.
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "README.md")


def base_display_name(model: str) -> str:
    """What adapter_config.json records as the base (a portable name, not this machine's cache path)."""
    return f"HuggingFaceTB/{EMBEDDED_NAME}" if model in ("embedded", "", EMBEDDED_NAME) else model


def load_tokenizer(model: str, padding_side: str = "left") -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model(model), local_files_only=True)
    tok.padding_side = padding_side
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def num_layers(model: Any) -> int | None:
    """Transformer depth of a model object or a model name/path (config only, no weights)."""
    if not isinstance(model, str):
        cfg = model.config
    else:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(resolve_model(model), local_files_only=True)
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return getattr(cfg, "num_hidden_layers", None)


def _dtype(name: str) -> Any:
    from mascot.backends.transformers_backend import pick_dtype

    return pick_dtype(name, "cpu")


def load_causal_lm(model: str, dtype: str = "float32") -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(resolve_model(model), dtype=_dtype(dtype), local_files_only=True)


def load_seq_cls(model: str, dtype: str = "float32", pad_token_id: int | None = None) -> Any:
    """The base model with a fresh scalar head (num_labels=1), TRL's expected-key warnings silenced."""
    from transformers import AutoModelForSequenceClassification
    from trl.trainer.reward_trainer import suppress_seqcls_warning

    with suppress_seqcls_warning():
        m = AutoModelForSequenceClassification.from_pretrained(
            resolve_model(model), num_labels=1, dtype=_dtype(dtype), local_files_only=True
        )
    if pad_token_id is not None:
        m.config.pad_token_id = pad_token_id
    return m


def parameter_counts(model: Any) -> dict[str, Any]:
    """Trainable / total parameters and the trainable share in percent."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    if hasattr(model, "get_nb_trainable_parameters"):  # PEFT counts the frozen base correctly
        trainable, total = model.get_nb_trainable_parameters()
    return {"trainable": int(trainable), "total": int(total), "share_pct": round(100.0 * trainable / max(total, 1), 4)}


def lora_state(model: Any) -> dict[str, Any]:
    """A CPU copy of the LoRA (and modules_to_save) tensors, to check that training changed them."""
    return {n: p.detach().float().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_adapter(model: Any, target: str | Path, base_name: str, adapter_name: str = "default") -> dict[str, Any]:
    """Save one PEFT adapter as a standard folder (adapter_config.json + adapter_model.safetensors)
    atomically, recording a portable base-model name; returns the files and their sizes (nothing is written by
    a process other than the main one of a multi-process run)."""
    if not is_main_process():
        return {}
    target = Path(target)
    cfg = model.peft_config[adapter_name]
    old = cfg.base_model_name_or_path
    cfg.base_model_name_or_path = base_name
    try:
        with atomic_path(target) as tmp:
            model.save_pretrained(str(tmp), selected_adapters=[adapter_name], save_embedding_layers=False)
            src = tmp / adapter_name if adapter_name != "default" and (tmp / adapter_name).is_dir() else tmp
            if src != tmp:  # PEFT nests non-default adapters in a subfolder
                for f in src.iterdir():
                    shutil.move(str(f), tmp / f.name)
                src.rmdir()
            for f in list(tmp.iterdir()):
                if f.name not in ADAPTER_FILES:
                    shutil.rmtree(f) if f.is_dir() else f.unlink()
    finally:
        cfg.base_model_name_or_path = old
    return {f.name: f.stat().st_size for f in sorted(target.iterdir())}


def trainable_share_from_config(config: Any, r: int, alpha: int, target_modules: list[str],
                                last_layers: int | None = None) -> dict[str, Any]:
    """LoRA trainable share for a model config, computed on the meta device (no weights needed).

    >>> # Qwen3-8B, r=16 on q/k/v/o -> 0.187 % (the paper's figure)
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = {}
    if last_layers:
        n = config.get_text_config().num_hidden_layers
        layers = {"layers_to_transform": list(range(max(0, n - last_layers), n))}
    peft_model = get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, target_modules=list(target_modules),
                                                  task_type="CAUSAL_LM", **layers))
    return parameter_counts(peft_model)


def qwen3_8b_config() -> Any:
    """The published Qwen3-8B architecture (config.json values), for sizing without the weights."""
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                       tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6)
