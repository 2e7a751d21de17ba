"""Cross-validated comparison of crisis-classifier recipes on the TRAINING split only (no held-out line is
read): out-of-fold recall at the shipped threshold rules and at fixed false-positive rates on the hard
negatives. This is how the shipped recipe was chosen (docs/safety.md).

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python benchmarks/safety_cv.py --layers 6 [--epochs 5] [--lr 1e-3]
        [--no-augment] [--no-extra] [--no-round3] [--rank 16] [--lexical-weight 0.5]

With a lexical weight above 0 it also prints the character n-gram model alone and the combined score (the
shipped message classifier, mascot/safety_lexical.py), all on the same folds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mascot  # noqa: E402,F401  (sets the OpenMP wait policy before torch starts)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from mascot.safety_cli import CONCERN_ORDINARY_MAX_FPR, CONTEXT_RECALL, CRISIS_MAX_FPR  # noqa: E402
from mascot.safety_data import message_training_examples  # noqa: E402
from mascot.safety_lexical import combine  # noqa: E402
from mascot.safety_lexical import out_of_fold as lexical_out_of_fold  # noqa: E402
from mascot.safety_model import FitConfig, Fitter, message_thresholds, threshold_for_fpr  # noqa: E402

EASY_NEGATIVES = ("ordinary", "meeting", "short_everyday", "everyday_questions")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--no-extra", action="store_true")
    p.add_argument("--no-round3", action="store_true")
    p.add_argument("--lexical-weight", type=float, default=0.5)
    p.add_argument("--save-oof", type=Path, help="write the out-of-fold scores (.npy, training order) here")
    args = p.parse_args()
    torch.set_num_threads(1)
    examples = message_training_examples(extra=not args.no_extra, round3=not args.no_round3)
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
    t = message_thresholds(oof, y, ordinary, CRISIS_MAX_FPR, CONCERN_ORDINARY_MAX_FPR, CONTEXT_RECALL)
    print(f"thresholds {t}")
    for tier in ("crisis", "concern"):
        print(f"  at the {tier} threshold: recall {(oof[y] >= t[tier]).mean():.3f}, hard-negative FPR "
              f"{(oof[hard] >= t[tier]).mean():.3f}, everyday openings {(oof[ordinary] >= t[tier]).mean():.3f}")
    for fpr in (0.02, 0.05, 0.08, 0.10, 0.20):
        th = threshold_for_fpr(oof[y | hard], y[y | hard], fpr)
        print(f"  hard-negative FPR <= {fpr:.2f}: recall {(oof[y] >= th).mean():.3f}")


if __name__ == "__main__":
    main()
