"""Cross-validated comparison of crisis-classifier recipes on the TRAINING split only (no held-out line is
read): out-of-fold recall at the shipped threshold rules and at fixed false-positive rates on the hard
negatives. This is how the shipped recipe was chosen (docs/safety.md).

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python benchmarks/safety_cv.py --layers 6 [--epochs 5] [--lr 1e-3]
        [--no-augment] [--no-confusable] [--no-farewells-plans] [--no-retired-heldout] [--no-everyday]
        [--rank 16] [--lexical-weight 0.5]

With a lexical weight above 0 it also prints the character n-gram model alone and the combined score (the
shipped message classifier, mascot/safety/lexical.py), all on the same folds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from mascot.safety.lexical import combine
from mascot.safety.lexical import out_of_fold as lexical_out_of_fold
from mascot.safety.training.data import TrainingSets, message_training_examples
from mascot.safety.training.fitting import FitConfig, Fitter
from mascot.safety.training.thresholds import (
    CONCERN_MAX_FPR,
    CONCERN_ORDINARY_MAX_FPR,
    CONTEXT_RECALL,
    CRISIS_MAX_FPR,
    message_thresholds,
    threshold_for_fpr,
)
from mascot.settings import apply_process_defaults

EASY_NEGATIVES = ("ordinary", "meeting", "short_everyday", "everyday_questions")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--no-confusable", action="store_true")
    p.add_argument("--no-farewells-plans", action="store_true")
    p.add_argument("--no-retired-heldout", action="store_true")
    p.add_argument("--no-everyday", action="store_true")
    p.add_argument("--lexical-weight", type=float, default=0.5)
    p.add_argument("--save-oof", type=Path, help="write the out-of-fold scores (.npy, training order) here")
    args = p.parse_args()
    apply_process_defaults()  # before torch starts its thread pool
    import torch

    torch.set_num_threads(1)
    sets = TrainingSets(confusable=not args.no_confusable, farewells_plans=not args.no_farewells_plans,
                        retired_heldout=not args.no_retired_heldout, everyday=not args.no_everyday)
    examples = message_training_examples(sets=sets)
    labels = [e.positive for e in examples]
    cfg = FitConfig(layers=args.layers, rank=args.rank, epochs=args.epochs, lr=args.lr, augment=not args.no_augment)
    started = time.time()
    oof, _ = Fitter([e.text for e in examples], cfg).out_of_fold(list(range(len(examples))), labels, args.folds)
    y = np.array(labels)
    if args.save_oof:
        np.save(args.save_oof, oof)
    print(f"{cfg} on {len(examples)} training examples, {args.folds} folds, {time.time() - started:.0f} s")
    scores = {"encoder": oof}
    if args.lexical_weight > 0:
        lex, _ = lexical_out_of_fold([e.text for e in examples], labels, args.folds, cfg.seed)
        scores |= {"lexical": lex, f"combined (lexical weight {args.lexical_weight})": combine(oof, lex, args.lexical_weight)}
    for name, s in scores.items():
        print(f"== {name}")
        report(s, y, np.array([e.category for e in examples]))


def report(oof: np.ndarray, y: np.ndarray, cats: np.ndarray) -> None:
    ordinary = cats == "ordinary"
    hard = ~y & ~np.isin(cats, EASY_NEGATIVES)
    t = message_thresholds(oof, y, ordinary, CRISIS_MAX_FPR, CONCERN_ORDINARY_MAX_FPR, CONTEXT_RECALL, CONCERN_MAX_FPR)
    print(f"thresholds {t}")
    for tier in ("crisis", "concern"):
        print(f"  at the {tier} threshold: recall {(oof[y] >= t[tier]).mean():.3f}, hard-negative FPR "
              f"{(oof[hard] >= t[tier]).mean():.3f}, everyday openings {(oof[ordinary] >= t[tier]).mean():.3f}")
    for fpr in (0.02, 0.05, 0.08, 0.10, 0.20):
        th = threshold_for_fpr(oof[y | hard], y[y | hard], fpr)
        print(f"  hard-negative FPR <= {fpr:.2f}: recall {(oof[y] >= th).mean():.3f}")


if __name__ == "__main__":
    main()
