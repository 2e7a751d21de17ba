"""The TRL trainer configs and PEFT LoRA configs of both training stages, and the recipe sections they come from.

A recipe's trainer sections go straight to TRL: `grpo:` (any `trl.GRPOConfig` field) in both stages, and in
Stage 1 also `reward_model:` (`trl.RewardConfig`) and `sft:` (`trl.SFTConfig`, the warm start). `check_section`
validates a section against its TRL class when a recipe loads; the builders make the TRL and PEFT objects only
when a trainer runs. A stage config passed to them has `seed`, `train_dtype`, its sections, `reward_weights`,
`grpo_defaults()` and the LoRA fields (`lora_r`, `lora_alpha`, `lora_dropout`, `lora_target_modules`,
`lora_layers`). Two rules hold for every builder:

- device: `validate_only=True` on a machine without CUDA builds a GPU recipe for the CPU (`device_safe`), with
  every other field as the recipe wrote it;
- layers: `lora_layers: N` puts LoRA on the last N layers and needs the model's layer count (`last_layers`).

    args = build_grpo_config(cfg, "work/grpo", max_steps=2, model_is_path=True)
    peft = lora_config(cfg, num_layers(model))
"""

from __future__ import annotations

import dataclasses
import difflib
import threading
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError

# recipe section -> the TRL config class its fields belong to
TRAINER_SECTIONS = {"reward_model": "RewardConfig", "grpo": "GRPOConfig", "sft": "SFTConfig"}
# fields the pipelines set themselves from top-level recipe fields; setting them in a section is an error
MANAGED = {"reward_model": ("output_dir",), "grpo": ("output_dir", "reward_weights"), "sft": ("output_dir",)}


# TRL's lazy top-level module is not safe to import from two threads at once (the app checks recipes in
# request threads): the first attribute access of one thread can find another's half-initialised module
_TRL_IMPORT = threading.Lock()


# ------------------------------------------------------------------- recipe sections
def trainer_fields(section: str) -> dict[str, Any]:
    """The init fields of the TRL config class that recipe section `section` fills (imports TRL)."""
    with _TRL_IMPORT:
        import trl

        cls = getattr(trl, TRAINER_SECTIONS[section])
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def check_section(section: str, values: Any, valid: dict[str, Any] | None = None) -> None:
    """Raise ConfigError unless `values` is a mapping of fields of the section's TRL class that the pipeline
    does not set itself; an unknown field names the similar ones."""
    if not isinstance(values, dict):
        raise ConfigError(f"Recipe section '{section}' must be a mapping of field: value.")
    valid = trainer_fields(section) if valid is None else valid
    for key in values:
        if key in MANAGED[section]:
            raise ConfigError(f"'{section}.{key}' is set by the pipeline itself; remove it from the recipe "
                              f"(use the top-level fields output_dir / reward_weights instead).")
        if key not in valid:
            close = difflib.get_close_matches(key, list(valid), n=5, cutoff=0.6)
            raise ConfigError(
                f"Unknown field '{section}.{key}'. It must be a field of trl.{TRAINER_SECTIONS[section]}"
                + (f"; similar fields: {', '.join(close)}" if close else "") + "."
            )


# ------------------------------------------------------------------- trainer configs
def device_safe(kw: dict[str, Any], validate_only: bool) -> dict[str, Any]:
    """Trainer kwargs that build on this machine when the config is only being validated.

    Without CUDA a GPU recipe is built for the CPU (`use_cpu`). Everything else stays as the recipe wrote it, so it
    is validated as written: TrainingArguments accepts `bf16` with `use_cpu`, and GRPOConfig checks the vLLM
    settings without starting vLLM."""
    if not validate_only:
        return kw
    import torch

    return kw if torch.cuda.is_available() else {**kw, "use_cpu": True}


def _trainer_kwargs(cfg: Any, defaults: dict[str, Any], section: dict[str, Any], model_is_path: bool) -> dict[str, Any]:
    """The pipeline's defaults, then the recipe section; a model given as a path is loaded in `train_dtype`."""
    kw: dict[str, Any] = {"report_to": "none", "seed": cfg.seed, "save_strategy": "no", "logging_steps": 1, **defaults}
    kw.update(section)
    if model_is_path:  # TRL loads the model from a path with these kwargs; default to the recipe's dtype
        kw["model_init_kwargs"] = {"dtype": cfg.train_dtype, **(kw.get("model_init_kwargs") or {})}
    return kw


def build_reward_config(cfg: Any, output_dir: str | Path, *, max_steps: int | None = None,
                        validate_only: bool = False, model_is_path: bool = False) -> Any:
    """The `trl.RewardConfig` of Stage 1's reward model (recipe section `reward_model:`)."""
    from trl import RewardConfig

    kw = _trainer_kwargs(cfg, {"logging_steps": 5}, cfg.reward_model, model_is_path)
    if max_steps is not None:
        kw["max_steps"] = max_steps
    return RewardConfig(output_dir=str(output_dir), **device_safe(kw, validate_only))


def build_grpo_config(cfg: Any, output_dir: str | Path, *, max_steps: int | None = None,
                      validate_only: bool = False, model_is_path: bool = False) -> Any:
    """The `trl.GRPOConfig` of a stage: its `grpo_defaults()`, then its `grpo:` section; the reward weights come
    from the top-level `reward_weights`."""
    from trl import GRPOConfig

    kw = _trainer_kwargs(cfg, cfg.grpo_defaults(), cfg.grpo, model_is_path)
    kw["reward_weights"] = list(cfg.reward_weights)
    if max_steps is not None:
        kw["max_steps"] = max_steps
    return GRPOConfig(output_dir=str(output_dir), **device_safe(kw, validate_only))


def grpo_completion_budget(cfg: Any) -> int:
    """GRPO's token budget per completion, as `build_grpo_config` sets it: `grpo.max_completion_length`, else the
    stage's default."""
    return int(cfg.grpo.get("max_completion_length") or cfg.grpo_defaults()["max_completion_length"])


def build_sft_config(cfg: Any, output_dir: str | Path, *, validate_only: bool = False,
                     model_is_path: bool = False) -> Any:
    """The `trl.SFTConfig` of a warm start (completion-only loss), from the stage's `sft` fields."""
    from trl import SFTConfig

    kw = _trainer_kwargs(cfg, {}, cfg.sft, model_is_path)
    return SFTConfig(output_dir=str(output_dir), **device_safe(kw, validate_only))


# ------------------------------------------------------------------- LoRA
def last_layers(lora_layers: int | None, num_layers: int | None) -> dict[str, Any]:
    """PEFT's `layers_to_transform` for LoRA on the last `lora_layers` of `num_layers` layers ({} for all)."""
    if not lora_layers:
        return {}
    if not num_layers:
        raise ConfigError(f"lora_layers={lora_layers} needs the model's number of layers, which is unknown here: pass "
                          "num_layers (mascot.train.modeling.num_layers), or set lora_layers: null for LoRA on every layer.")
    n = min(lora_layers, num_layers)
    return {"layers_to_transform": list(range(num_layers - n, num_layers))}


def lora_config(cfg: Any, num_layers: int | None = None) -> Any:
    """The LoRA of a trained policy: a Stage-1 speaker or the Stage-2 director."""
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), bias="none", task_type="CAUSAL_LM",
                      **last_layers(cfg.lora_layers, num_layers))


def reward_lora_config(cfg: Any, num_layers: int | None = None) -> Any:
    """The LoRA of Stage 1's LLM reward model (its own rank and alpha when the recipe sets them)."""
    from peft import LoraConfig

    # modules_to_save=["score"]: the fresh scalar head must be trained and saved with the adapter.
    return LoraConfig(r=cfg.rm_lora_r or cfg.lora_r, lora_alpha=cfg.rm_lora_alpha or cfg.lora_alpha,
                      lora_dropout=cfg.lora_dropout, target_modules=list(cfg.lora_target_modules), bias="none",
                      task_type="SEQ_CLS", modules_to_save=["score"], **last_layers(cfg.lora_layers, num_layers))
