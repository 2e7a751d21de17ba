"""Step 4: the persona reward model r_phi, TRL RewardTrainer (Bradley-Terry) + LoRA on the base model.

Input text = `rm_prompt(persona, context)` + response (+ EOS); held-out pairs (whole contexts never seen
in training) give the pair accuracy reported in the run card, with its 95 % interval and per pair source
(judge pairs, cross-persona negatives). `rm_kind: embedding` trains the sentence-embedding head of
`mascot.rewards.embedding_rm` instead.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError
from mascot.files.model_files import resolve_model
from mascot.train.modeling import (
    base_display_name,
    load_tokenizer,
    lora_state,
    num_layers,
    parameter_counts,
    save_adapter,
)
from mascot.train.progress import ProgressLog, make_trainer_callback
from mascot.train.stage1.config import Stage1Config
from mascot.train.trl_configs import build_reward_config, reward_lora_config


def pair_accuracy(rm: Any, pairs: list[dict[str, Any]]) -> float | None:
    """Share of pairs whose chosen response the reward model scores higher (None without pairs)."""
    report = accuracy_report(rm, pairs)
    return report["accuracy"] if report else None


def accuracy_with_ci(correct: list[bool]) -> dict[str, Any]:
    """Accuracy over pairs with its 95 % Wilson interval (scipy.stats.binomtest).

    >>> accuracy_with_ci([True, True, True, False])["accuracy"]
    0.75
    """
    from scipy.stats import binomtest

    n, k = len(correct), sum(bool(c) for c in correct)
    if n == 0:
        return {"accuracy": None, "n": 0, "correct": 0, "ci95": None}
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return {"accuracy": round(k / n, 4), "n": n, "correct": k, "ci95": [round(float(ci.low), 4), round(float(ci.high), 4)]}


def accuracy_report(rm: Any, pairs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Pair accuracy (chosen scored strictly higher), its 95 % interval, and the same per pair source
    (`judge` pairs vs `cross_persona` negatives); None without pairs."""
    if not pairs:
        return None
    chosen = rm.score_texts([p["prompt"] for p in pairs], [p["chosen"] for p in pairs])
    rejected = rm.score_texts([p["prompt"] for p in pairs], [p["rejected"] for p in pairs])
    correct = [c > r for c, r in zip(chosen, rejected)]
    out = accuracy_with_ci(correct)
    sources = sorted({str(p.get("source", "judge")) for p in pairs})
    out["by_source"] = {s: accuracy_with_ci([ok for ok, p in zip(correct, pairs) if str(p.get("source", "judge")) == s])
                        for s in sources}
    return out


def train_embedding_reward_model(cfg: Stage1Config, train_pairs: list[dict[str, Any]], eval_pairs: list[dict[str, Any]],
                                 target: Path) -> dict[str, Any]:
    """`rm_kind: embedding`: sweep + fit the MLP head on frozen sentence embeddings, save it, report accuracy."""
    from mascot.rewards.embedding_rm import EmbeddingRewardModel, _head, train_embedding_rm

    t0 = time.time()
    untrained = EmbeddingRewardModel(_head(384, cfg.rm_head_hidden))
    before = accuracy_report(untrained, eval_pairs)
    model, fit = train_embedding_rm(train_pairs, lrs=cfg.rm_head_lrs, weight_decays=cfg.rm_head_weight_decays,
                                    epochs=cfg.rm_head_epochs, hidden=cfg.rm_head_hidden, seed=cfg.seed)
    report = accuracy_report(model, eval_pairs)
    files = model.save(target)
    return {
        "kind": "embedding", "train_pairs": len(train_pairs), "eval_pairs": len(eval_pairs),
        "eval_accuracy_before": before["accuracy"] if before else None,
        "eval_accuracy": report["accuracy"] if report else None, "eval": report, **fit, "files": files,
        "seconds": round(time.time() - t0, 1),
    }


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
    if cfg.rm_kind == "embedding":
        return train_embedding_reward_model(cfg, train_pairs, eval_pairs, target)
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
    report = accuracy_report(rm, eval_pairs)
    acc_eval = report["accuracy"] if report else None
    files = save_adapter(trainer.model, target, base_display_name(cfg.model))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "kind": "llm", "train_pairs": len(train_pairs), "eval_pairs": len(eval_pairs),
        "eval_accuracy_before": acc_before, "eval_accuracy": acc_eval, "eval": report,
        "train_loss": round(float(result.training_loss), 4), "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None, "steps": trainer.state.global_step,
        "changed_tensors": changed, "trainable_tensors": len(before), "params": counts, "files": files,
        "seconds": round(time.time() - t0, 1),
    }
