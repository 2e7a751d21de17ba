"""Step 4: the persona reward model r_phi, TRL RewardTrainer (Bradley-Terry) + LoRA on the base model.

Input text = `rm_prompt(persona, context)` + response (+ EOS); held-out pairs (whole contexts never seen
in training) give the pair accuracy reported in the run card.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError
from mascot.train.configs import Stage1Config, build_reward_config, reward_lora_config
from mascot.models import resolve_model
from mascot.train.modeling import base_display_name, load_tokenizer, num_layers, lora_state, parameter_counts, save_adapter
from mascot.train.progress import ProgressLog, make_trainer_callback


def pair_accuracy(rm: Any, pairs: list[dict[str, Any]]) -> float | None:
    """Share of pairs whose chosen response the reward model scores higher (None without pairs)."""
    if not pairs:
        return None
    chosen = rm.score_texts([p["prompt"] for p in pairs], [p["chosen"] for p in pairs])
    rejected = rm.score_texts([p["prompt"] for p in pairs], [p["rejected"] for p in pairs])
    return sum(c > r for c, r in zip(chosen, rejected)) / len(pairs)


def train_reward_model(cfg: Stage1Config, train_pairs: list[dict[str, Any]], eval_pairs: list[dict[str, Any]],
                       target: Path, work_dir: Path, log: ProgressLog, *, model: Any = None, tokenizer: Any = None
                       ) -> dict[str, Any]:
    """Train and save the reward adapter to `target`; returns metrics (accuracies, loss, sizes, time).

    `model`/`tokenizer` may be passed pre-built (tests use a tiny random model); otherwise the recipe's
    base model is loaded from local files as AutoModelForSequenceClassification(num_labels=1).
    """
    from datasets import Dataset
    from trl import RewardTrainer

    from mascot.rewards.persona_rm import PersonaRewardModel

    if not train_pairs:
        raise ConfigError(
            "No training pairs: no candidates differed by at least delta "
            f"({cfg.delta}). Lower --delta, raise --k or --max-contexts, or add --extra-pairs."
        )
    t0 = time.time()
    tokenizer = tokenizer or load_tokenizer(cfg.model, padding_side="right")
    # A path lets TRL load AutoModelForSequenceClassification(num_labels=1) itself, after the config exists,
    # so DeepSpeed ZeRO-3 can partition it at load time on several GPUs.
    model = model if model is not None else resolve_model(cfg.model)
    cols = ("prompt", "chosen", "rejected")
    train_ds = Dataset.from_list([{k: p[k] for k in cols} for p in train_pairs])
    eval_ds = Dataset.from_list([{k: p[k] for k in cols} for p in eval_pairs]) if eval_pairs else None
    args = build_reward_config(cfg, work_dir, max_steps=cfg.max_steps, model_is_path=isinstance(model, str))
    if eval_ds is None:
        args.eval_strategy = "no"
    trainer = RewardTrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                            processing_class=tokenizer, peft_config=reward_lora_config(cfg, num_layers(model)),
                            callbacks=[make_trainer_callback(log, "reward_model")])
    counts = parameter_counts(trainer.model)
    before = lora_state(trainer.model)
    rm = PersonaRewardModel(trainer.model, tokenizer, max_length=args.max_length or 1024, batch_size=cfg.rm_batch_size)
    acc_before = pair_accuracy(rm, eval_pairs)
    trainer.model.train()
    result = trainer.train()
    after = lora_state(trainer.model)
    changed = sum(not before[n].equal(after[n]) for n in before)
    rm = PersonaRewardModel(trainer.model, tokenizer, max_length=args.max_length or 1024, batch_size=cfg.rm_batch_size)
    acc_eval = pair_accuracy(rm, eval_pairs)
    files = save_adapter(trainer.model, target, base_display_name(cfg.model))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "train_pairs": len(train_pairs), "eval_pairs": len(eval_pairs),
        "eval_accuracy_before": acc_before, "eval_accuracy": acc_eval,
        "train_loss": round(float(result.training_loss), 4), "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None, "steps": trainer.state.global_step,
        "changed_tensors": changed, "trainable_tensors": len(before), "params": counts, "files": files,
        "seconds": round(time.time() - t0, 1),
    }
