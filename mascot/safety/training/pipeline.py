"""`safety train`: cross-validate on the training split only (stratified k-fold), pick the thresholds from the
out-of-fold scores (`mascot.safety.training.thresholds`), fit the final classifiers and write them to
`mascot/data/safety/model/` (or another folder). The shipped recipe's options are the defaults here; how they
were chosen: docs/safety.md and `benchmarks/safety_cv.py`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from mascot.errors import InputError
from mascot.safety.classifier import MODEL_DIR, read_meta
from mascot.safety.lexical import LexicalModel, combine
from mascot.safety.lexical import out_of_fold as lexical_out_of_fold
from mascot.safety.training.data import Example, TrainingSets, load_replies, message_training_examples
from mascot.safety.training.fitting import FitConfig, Fitter, config_dict, save
from mascot.safety.training.thresholds import (
    REPLY_MAX_FPR,
    concern_tradeoff,
    threshold_for_fpr,
    with_message_thresholds,
)

LEXICAL_WEIGHT = 0.5  # weight of the character n-gram model in the message score (out-of-fold comparison, docs/safety.md)
FIT_LAYERS, FIT_EPOCHS, FIT_LR = 6, 5, 1e-3  # chosen by cross-validation on the training split (docs/safety.md)
SHIP_CHOICES = ("fold", "refit")


def train(cfg: FitConfig, folds: int = 3, ship: str = "fold", out_root: Path | None = None, only: str | None = None,
          sets: TrainingSets = TrainingSets(), lexical_weight: float = LEXICAL_WEIGHT) -> None:
    """Fit the message classifier (on the training pool of `sets`) and the reply classifier, or `only` one; the
    USE layer follows the message classifier (its stack reads that classifier's out-of-fold scores)."""
    import torch

    torch.set_num_threads(1)
    if only in (None, "messages"):
        train_one("messages", message_training_examples(sets=sets), folds, cfg, ship, out_root,
                  {"training_sets": sets.as_dict()}, lexical_weight)
    if only in (None, "replies"):
        train_one("replies", load_replies(), folds, cfg, ship, out_root)
    if only is None:
        from mascot.safety.training.multilingual import train_multilingual

        train_multilingual(folds, cfg.seed, out_root, out_root or MODEL_DIR)


def train_one(name: str, examples: list[Example], folds: int, cfg: FitConfig, ship: str, out_root: Path | None,
              extra_meta: dict | None = None, lexical_weight: float = 0.0) -> None:
    """Cross-validate, choose thresholds and save classifier `name` (`messages` or `replies`) under `out_root`.

    ship="fold" saves the first cross-validation fold's model, trained like the models whose scores set the
    thresholds; "refit" refits on the whole training split (its scores are more confident, so the thresholds
    transfer badly, docs/safety.md)."""
    if not 0.0 <= lexical_weight <= 1.0:
        raise InputError(f"--lexical-weight must be between 0 and 1, got {lexical_weight}.")
    if ship not in SHIP_CHOICES:
        raise InputError(f"--ship must be one of {', '.join(SHIP_CHOICES)}, got {ship!r}.")

    train_split = [e for e in examples if e.split == "train"]
    texts = [e.text for e in train_split]
    labels = [e.positive for e in train_split]
    started = time.time()
    fitter = Fitter(texts, cfg)
    idx = list(range(len(train_split)))
    oof, first_fold = fitter.out_of_fold(idx, labels, folds)
    y = np.array(labels)
    lexical = None
    extra_meta = dict(extra_meta or {})
    if lexical_weight > 0:  # the same folds as the encoder's, so the combined out-of-fold scores stay out of fold
        lex_oof, lexical = lexical_out_of_fold(texts, labels, folds, cfg.seed)
        if ship == "refit":
            lexical = LexicalModel.fit(texts, labels)
        extra_meta |= {"lexical_weight": lexical_weight, "oof_encoder_scores": [round(float(s), 6) for s in oof],
                       "oof_lexical_scores": [round(float(s), 6) for s in lex_oof]}
        oof = combine(oof, lex_oof, lexical_weight)
    meta = {"name": name, "config": config_dict(cfg), "folds": folds, "train_size": len(train_split), "shipped": ship,
            "oof_scores": [round(float(s), 6) for s in oof], "oof_labels": [bool(v) for v in y],
            "oof_categories": [e.category for e in train_split], **extra_meta}
    if name == "replies":
        t = threshold_for_fpr(oof, y, REPLY_MAX_FPR)
        meta |= {"thresholds": {"crisis": t, "concern": t}, "targets": {"reply_max_fpr": REPLY_MAX_FPR}}
    else:
        meta = with_message_thresholds(meta)
    fitted = first_fold if ship == "fold" else fitter.fit(idx, labels)
    meta["train_seconds"] = round(time.time() - started, 1)
    folder = (out_root or MODEL_DIR) / name
    if lexical is not None:
        lexical.save(folder)
    elif (folder / "lexical.npz").exists():
        (folder / "lexical.npz").unlink()  # an encoder-only classifier must not pick up another model's lexical file
    out = save(name, fitted, meta, out_root or MODEL_DIR)  # the metadata last: it names the whole model
    print(f"{name}: thresholds {meta['thresholds']}; cross-validated {meta.get('cv')} -> {out}")


def rethreshold() -> None:
    """Re-derive the shipped message classifier's thresholds from its saved out-of-fold scores (no retraining)."""
    meta = with_message_thresholds(read_meta("messages"))
    path = MODEL_DIR / "messages" / "classifier.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    tmp.replace(path)
    print(f"messages: thresholds {meta['thresholds']}; cross-validated {meta['cv']} -> {path}")
    print("\nConcern tier, out of fold: budget on everyday openings -> threshold, recall (crisis or concern), FPR on all negatives")
    for r in concern_tradeoff(meta):
        print(f"  {r['budget']:.2f} -> {r['threshold']:.4f}: everyday {r['everyday']:.3f}, recall {r['recall']:.3f}, "
              f"negatives {r['negatives']:.3f}")
