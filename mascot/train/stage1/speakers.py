"""Step 5: GRPO-tune the speakers (TRL GRPOTrainer + LoRA) on the composite reward.

R = sum_i w_i * reward_i, by default z(r_phi) + 0.5 * r_fmt (paper §7.6-7.7); TRL logs each component as
`rewards/<name>/mean`. One adapter per persona (`adapter_mode: per-persona`) or one persona-conditioned
adapter shared by all (`shared`), saved as standard PEFT folders under `speakers/<persona.key>/`.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError
from mascot.files.model_files import resolve_model
from mascot.group.personas import Persona
from mascot.rewards import RewardContext, get_reward_funcs
from mascot.train.modeling import (
    base_display_name,
    load_tokenizer,
    lora_state,
    num_layers,
    parameter_counts,
    save_adapter,
)
from mascot.train.processes import is_main_process
from mascot.train.progress import ProgressLog, make_trainer_callback
from mascot.train.stage1.config import Stage1Config
from mascot.train.stage1.grpo_rollout import make_rollout
from mascot.train.trl_configs import build_grpo_config, build_sft_config, lora_config

CURVE_KEYS = ("reward", "reward_std", "rewards/persona_rm/mean", "rewards/format_reward/mean",
              "rewards/judge_reward/mean", "rewards/mood_reward/mean", "rewards/relevance_reward/mean",
              "rewards/consistency_reward/mean", "rewards/overlong_reward/mean", "persona_rm/raw_mean", "judge/raw_mean",
              "relevance/raw_mean", "consistency/raw_mean", "loss",
              "completions/mean_length", "completions/clipped_ratio", "kl", "entropy")


def curve_summary(history: list[dict[str, Any]], window: int = 10) -> dict[str, Any]:
    """First/last means (over `window` logged steps, fewer when the run is shorter) of each reward curve
    in a trainer's log history."""
    rows = [h for h in history if "reward" in h or "loss" in h and "train_runtime" not in h]
    out: dict[str, Any] = {}
    for key in CURVE_KEYS:
        vals = [float(h[key]) for h in rows if key in h and h[key] is not None]
        if vals:
            w = max(1, min(window, len(vals) // 2)) if len(vals) > 1 else 1  # first and last windows never overlap
            out[key] = {"first": round(sum(vals[:w]) / w, 4), "last": round(sum(vals[-w:]) / w, 4), "n": len(vals),
                        "window": w, "final": round(vals[-1], 4)}
    return out


def curve_checks(summary: dict[str, Any]) -> dict[str, Any]:
    """The acceptance checks (docs/training.md) for one adapter's GRPO run, from `curve_summary(window=10)`:
    mean total reward of the last window above the first, final clipped ratio <= 0.2, format reward
    not falling."""
    out: dict[str, Any] = {}
    r = summary.get("reward")
    if r:
        out["reward_rises"] = r["last"] > r["first"]
    c = summary.get("completions/clipped_ratio")
    if c:
        out["final_clipped_ratio"] = c.get("final")
        out["clipped_ok"] = c.get("final") is not None and c["final"] <= 0.2
        # the last step holds only num_generations completions (4 on CPU: 0, 0.25, 0.5, ...); the last window's
        # mean is the steadier reading, reported beside the check
        out["last_window_clipped_ratio"] = c.get("last")
    f = summary.get("rewards/format_reward/mean")
    if f:
        out["format_not_falling"] = f["last"] >= f["first"]
    return out


def plot_curves(curve: list[dict[str, Any]], target: Path, title: str) -> Path | None:
    """Reward components, clipped ratio and length per GRPO step as a PNG (matplotlib, no display)."""
    if not curve or not is_main_process():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c.get("step") or i + 1 for i, c in enumerate(curve)]
    panels = [("total reward", ["reward"]),
              ("reward components (weighted inputs)", [k for k in CURVE_KEYS if k.startswith("rewards/")]),
              ("raw scores", [k for k in CURVE_KEYS if k.endswith("/raw_mean")]),
              ("completions", ["completions/clipped_ratio", "completions/mean_length"])]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2))
    for ax, (name, keys) in zip(axes, panels):
        for key in keys:
            ys = [c.get(key) for c in curve]
            if any(y is not None for y in ys):
                if key == "completions/mean_length":
                    ax2 = ax.twinx()
                    ax2.plot(steps, ys, color="tab:gray", lw=1, label="mean length (tokens)")
                    ax2.set_ylabel("tokens")
                    ax2.legend(loc="upper right", fontsize=7)
                    continue
                ax.plot(steps, ys, lw=1.2, label=key.replace("rewards/", "").replace("/mean", ""))
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("GRPO step")
        ax.legend(loc="upper left", fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.stem + ".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(target)
    return target


def curves(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-step values of the reward curves (for the run card)."""
    return [{"step": h.get("step"), **{k: round(float(h[k]), 4) for k in CURVE_KEYS if k in h and h[k] is not None}}
            for h in history if "reward" in h]


def _free() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def warm_start(cfg: Stage1Config, name: str, rows: list[dict[str, Any]], model: Any, tokenizer: Any, work_dir: Path,
               log: ProgressLog, save_to: list[Path] | None = None) -> tuple[Any, dict[str, Any]]:
    """Optional supervised warm start: LoRA SFT (completion-only loss) on the persona's best candidates.
    Returns the PEFT model (its adapter trainable, to be continued by GRPO) and metrics."""
    from datasets import Dataset
    from trl import SFTTrainer

    t0 = time.time()
    args = build_sft_config(cfg, work_dir, model_is_path=isinstance(model, str))
    if cfg.max_steps is not None:
        args.max_steps = cfg.max_steps  # --max-steps caps every trainer, the warm start included
    data = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                         peft_config=lora_config(cfg, num_layers(model)),
                         callbacks=[make_trainer_callback(log, f"sft:{name}")])
    log.event(f"sft:{name}", "started", 0, args.max_steps if args.max_steps and args.max_steps > 0 else None)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    peft_model = trainer.model
    for target in save_to or []:  # the SFT-only ablation (`python -m mascot eval --systems sft`)
        save_adapter(peft_model, target, base_display_name(cfg.model))
    metrics = {"examples": len(rows), "steps": trainer.state.global_step, "first_loss": losses[0] if losses else None,
               "last_loss": losses[-1] if losses else None,
               "mean_target_score": round(sum(r["score"] for r in rows) / len(rows), 3),
               "seconds": round(time.time() - t0, 1)}
    del trainer
    log.event(f"sft:{name}", "done", metrics["steps"], metrics["steps"], metrics)
    return peft_model, metrics


def load_trainable_adapter(cfg: Stage1Config, adapter_dir: Path) -> Any:
    """The base model with a saved LoRA adapter, trainable, for GRPO to continue."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if not (adapter_dir / "adapter_config.json").exists():
        raise ConfigError(f"grpo_init_adapters: no adapter at {adapter_dir} (expected <dir>/<persona key>/adapter_config.json).")
    base = AutoModelForCausalLM.from_pretrained(resolve_model(cfg.model), dtype=cfg.train_dtype, local_files_only=True)
    return PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)


def train_speaker(cfg: Stage1Config, name: str, rows: list[dict[str, Any]], reward_ctx: RewardContext,
                  targets: list[Path], work_dir: Path, log: ProgressLog, *, model: Any = None, tokenizer: Any = None,
                  sft_rows: list[dict[str, Any]] | None = None, sft_targets: list[Path] | None = None,
                  curves_dir: Path | None = None) -> dict[str, Any]:
    """One GRPO run over `rows` (prompt, persona, rm_prompt, context), after an optional SFT warm start on
    `sft_rows`; saves the adapter to each target."""
    from datasets import Dataset
    from trl import GRPOTrainer

    if not rows:
        raise ConfigError(f"No GRPO prompts for {name}: check the candidates file and the personas list.")
    t0 = time.time()
    reward_funcs = get_reward_funcs(cfg.rewards, reward_ctx)
    tokenizer = tokenizer or load_tokenizer(cfg.model, padding_side="left")
    model = model if model is not None else resolve_model(cfg.model)  # TRL loads it (ZeRO-3 aware)
    sft_metrics = None
    if cfg.grpo_init_adapters and not sft_rows:
        model = load_trainable_adapter(cfg, Path(cfg.grpo_init_adapters) / name)
        sft_metrics = {"init_from": str(Path(cfg.grpo_init_adapters) / name)}
    elif sft_rows:
        model, sft_metrics = warm_start(cfg, name, sft_rows, model, tokenizer, work_dir / "sft", log, sft_targets)
        tokenizer.padding_side = "left"
    args = build_grpo_config(cfg, work_dir, max_steps=cfg.max_steps, model_is_path=isinstance(model, str))
    step = f"grpo:{name}"
    # a warm-started PeftModel continues its adapter; otherwise GRPOTrainer wraps the base with a fresh LoRA
    peft_config = None if sft_metrics is not None else lora_config(cfg, num_layers(model))
    rollout = make_rollout(cfg, tokenizer, args)  # None: TRL samples the completions itself
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, peft_config=peft_config,
                          callbacks=[make_trainer_callback(log, step)], rollout_func=rollout)
    counts = parameter_counts(trainer.model)
    before = lora_state(trainer.model)
    t_grpo = time.time()
    try:
        trainer.train()
    finally:
        if rollout is not None:
            rollout.close()
    grpo_seconds = time.time() - t_grpo
    after = lora_state(trainer.model)
    changed = sum(not before[n].equal(after[n]) for n in before)
    files = {}
    for target in targets:
        files = save_adapter(trainer.model, target, base_display_name(cfg.model))
    history = list(trainer.state.log_history)
    summary = curve_summary(history)
    curve = curves(history)
    plot = plot_curves(curve, curves_dir / f"{name}.png", f"GRPO {name}") if curves_dir is not None else None
    metrics = {
        "prompts": len(rows), "steps": trainer.state.global_step, "params": counts,
        "changed_tensors": changed, "trainable_tensors": len(before), "files": files,
        "reward_funcs": list(trainer.reward_func_names), "reward_weights": list(cfg.reward_weights),
        "summary": summary, "checks": curve_checks(summary), "curve": curve, "sft": sft_metrics,
        "plot": str(plot) if plot else None, "rollouts": cfg.grpo_rollouts,
        "seconds": round(time.time() - t0, 1),
    }
    metrics["grpo_seconds"] = round(grpo_seconds, 1)
    metrics["seconds_per_step"] = round(grpo_seconds / max(1, metrics["steps"]), 2)  # GRPO steps only
    del trainer, model
    _free()
    return metrics


def adapter_jobs(cfg: Stage1Config, personas: list[Persona], speakers_dir: Path) -> list[tuple[str, list[Persona], list[Path]]]:
    """(job name, personas whose prompts it trains on, adapter folders it writes) for the adapter mode."""
    if cfg.adapter_mode == "shared":
        return [("shared", personas, [speakers_dir / p.key for p in personas])]
    return [(p.key, [p], [speakers_dir / p.key]) for p in personas]
