"""`python -m mascot safety train|thresholds|eval`: fit the crisis classifiers and measure the detector.

`train` cross-validates on the training split only and writes the classifiers (`mascot.safety.training.pipeline`);
`thresholds` re-derives the message thresholds from the saved out-of-fold scores; `eval` scores every held-out
set (`mascot.safety.evaluation`), and `--json` also writes the figures that docs/safety.md quotes and the tests
re-check. This module only parses arguments: importing it loads no model.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mascot.errors import InputError
from mascot.safety.classifier import MODEL_DIR
from mascot.safety.evaluation import REPORT, evaluate, print_report
from mascot.safety.multilingual import HEAD_KINDS
from mascot.safety.training.data import TrainingSets
from mascot.safety.training.fitting import FitConfig
from mascot.safety.training.multilingual import (
    OTHER_CRISIS_MAX_FPR,
    PER_LANGUAGE,
    PER_LANGUAGE_MODES,
    STACK_CRISIS_MAX_FPR,
    USE_HEAD,
    USE_SETS,
    USE_WEIGHTS,
)
from mascot.safety.training.pipeline import (
    FIT_EPOCHS,
    FIT_LAYERS,
    FIT_LR,
    LEXICAL_WEIGHT,
    SHIP_CHOICES,
    rethreshold,
    train,
)
from mascot.safety.training.thresholds import CONCERN_MAX_FPR, CONCERN_ORDINARY_MAX_FPR

# the message classifier's training sets (`TrainingSets` fields) and what each holds
SET_FLAGS = {
    "confusable": "the lines of the categories the classifier confused (crisis_train_confusable.txt)",
    "farewells_plans": "the farewells, plans and look-alike lines (crisis_train_farewells_plans.txt)",
    "retired_heldout": "the retired held-out set (crisis_heldout_retired.txt; `eval` then measures on it)",
    "everyday": "the everyday-life lines (crisis_train_everyday.txt)",
    "retired_fresh": "the retired fresh English sets (crisis_heldout_retired_fresh.txt)",
    "blind": "the blind writers' training lines (crisis_train_blind.txt)",
    "retired_later": "the later retired English sets (crisis_heldout_retired_later.txt)",
    "blind_later": "the later blind writers' training lines (crisis_train_blind_later.txt)",
    "good_news": "the good-news lines (crisis_train_good_news.txt: 'got the keys ... today' and the like)",
    "multilingual_dev": "the multilingual development lines (crisis_dev_multilingual.txt; not shipped: English recall fell, docs/safety.md)",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="safety_command", required=True)
    t = sub.add_parser("train", help="cross-validate thresholds and fit the classifiers (CPU, minutes)")
    t.add_argument("--folds", type=int, default=3)
    t.add_argument("--epochs", type=int, default=FIT_EPOCHS)
    t.add_argument("--layers", type=int, default=FIT_LAYERS, help="top encoder layers adapted by the LoRA")
    t.add_argument("--lr", type=float, default=FIT_LR)
    t.add_argument("--no-augment", action="store_true", help="do not add a noisy variant of each training line")
    for name, what in SET_FLAGS.items():  # each training set: --no-<set> leaves a shipped one out, --<set> adds another
        on = getattr(TrainingSets(), name)
        t.add_argument(f"--{'no-' if on else ''}{name.replace('_', '-')}", action="store_true",
                       help=f"{'leave out' if on else 'add'} {what}")
    t.add_argument("--lexical-weight", type=float, default=LEXICAL_WEIGHT,
                   help="weight of the character n-gram model in the message score, 0 to 1 (0: the encoder alone)")
    t.add_argument("--only", choices=["messages", "replies", "multilingual"], default=None,
                   help="multilingual: the USE layer's head, stack weight and thresholds (seconds; reads the message "
                        "classifier's saved out-of-fold scores)")
    t.add_argument("--use-head", choices=HEAD_KINDS, default=USE_HEAD,
                   help="the USE layer's head: a logistic regression, or an RBF-kernel SVM calibrated on its out-of-fold scores")
    t.add_argument("--crisis-max-fpr", type=float, default=STACK_CRISIS_MAX_FPR,
                   help="multilingual: the English stack's crisis threshold at this out-of-fold false-positive rate")
    t.add_argument("--other-crisis-max-fpr", type=float, default=OTHER_CRISIS_MAX_FPR,
                   help="multilingual: the crisis threshold outside English at this out-of-fold false-positive rate")
    t.add_argument("--per-language-thresholds", choices=PER_LANGUAGE_MODES, default=PER_LANGUAGE,
                   help="multilingual: crisis thresholds per language outside English, at the same out-of-fold FPR: "
                        "off, raise (only where above the shared one) or both")
    t.add_argument("--use-sets", default=",".join(USE_SETS),
                   help="multilingual: comma-separated training sets of the USE head beyond the classifier's pool "
                        "(default: the shipped head's; an unknown name is refused with the valid ones)")
    t.add_argument("--concern-max-fpr", type=float, default=CONCERN_MAX_FPR,
                   help="multilingual: the English stack's concern threshold at most this out-of-fold FPR on all negatives")
    t.add_argument("--concern-ordinary-max-fpr", type=float, default=CONCERN_ORDINARY_MAX_FPR,
                   help="multilingual: ... and at most this one on the everyday scenario openings (1: no such budget)")
    t.add_argument("--use-weights", default=",".join(map(str, USE_WEIGHTS)),
                   help="multilingual: comma-separated stack weights (the USE layer's share, 0 to 1) to choose from by "
                        "out-of-fold recall at the crisis threshold; one value fixes it")
    t.add_argument("--ship", choices=SHIP_CHOICES, default="fold",
                   help="fold: ship the first cross-validation fold's model, trained like the models whose scores set "
                        "the thresholds (default); refit: refit on the whole training split (its scores are more "
                        "confident, so the thresholds transfer badly, see docs/safety.md)")
    t.add_argument("--out", type=Path, default=None, help="write the classifiers under this folder instead of the shipped one")
    sub.add_parser("thresholds", help="re-derive the message thresholds from the saved out-of-fold scores (seconds)")
    e = sub.add_parser("eval", help="measure the detector on the held-out sets")
    e.add_argument("--json", type=Path, default=None, help=f"also write the figures as JSON (the shipped ones: {REPORT})")
    e.add_argument("--latency-runs", type=int, default=300, help="messages timed (each once)")
    e.add_argument("--model-dir", type=Path, default=None,
                   help="measure the classifiers saved under this folder (by `safety train --out`) instead of the shipped ones")
    e.add_argument("--sets", default=None,
                   help="comma-separated held-out sets to read (report keys such as heldout_large,heldout_blind); default: all")


def training_sets(args: argparse.Namespace) -> TrainingSets:
    """The training-only sets the `train` flags switch on (a shipped set unless `--no-<set>`, another with `--<set>`)."""
    shipped = TrainingSets()
    return TrainingSets(**{name: not getattr(args, f"no_{name}") if getattr(shipped, name) else getattr(args, name)
                           for name in SET_FLAGS})


def _weights(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(w) for w in text.split(",") if w.strip())
    except ValueError:
        raise InputError(f"--use-weights must be comma-separated numbers between 0 and 1, got {text!r}.") from None


def main(args: argparse.Namespace) -> int:
    if args.safety_command == "train" and args.only == "multilingual":
        from mascot.safety.training.multilingual import train_multilingual

        train_multilingual(args.folds, out_root=args.out, message_root=args.out or MODEL_DIR, head=args.use_head,
                           crisis_max_fpr=args.crisis_max_fpr, other_crisis_max_fpr=args.other_crisis_max_fpr,
                           sets=tuple(n.strip() for n in args.use_sets.split(",") if n.strip()),
                           per_language=args.per_language_thresholds, weights=_weights(args.use_weights),
                           concern_max_fpr=args.concern_max_fpr, concern_ordinary_max_fpr=args.concern_ordinary_max_fpr)
        return 0
    if args.safety_command == "train":
        cfg = FitConfig(layers=args.layers, epochs=args.epochs, lr=args.lr, augment=not args.no_augment)
        train(cfg, args.folds, args.ship, args.out, args.only, training_sets(args), args.lexical_weight)
        return 0
    if args.safety_command == "thresholds":
        rethreshold()
        return 0
    if args.latency_runs < 1:
        raise InputError("--latency-runs must be at least 1.")
    only = [k.strip() for k in args.sets.split(",") if k.strip()] if args.sets else None
    report = evaluate(args.latency_runs, args.model_dir, only)
    print_report(report)
    if args.json:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1), encoding="utf-8")
        tmp.replace(args.json)
    return 0
