"""`python -m mascot safety train|eval`: fit the crisis classifiers and measure the detector.

`train` cross-validates on the training split only (stratified k-fold), picks the crisis and
concern thresholds from the out-of-fold scores, fits the final classifier and writes it to
`mascot/data/safety/model/`. `eval` scores the held-out sets (the hash split of `crisis_messages.txt`,
`crisis_heldout_v3.txt`, `crisis_heldout_v4.txt`, the fresh `crisis_heldout_v5.txt`, the multilingual
`crisis_heldout_ml.txt` and `crisis_heldout_ml2.txt`, and `crisis_heldout_v2.txt`
for a model that predates round 3) with the pattern layer alone and the full detector: recall and false-positive rate with 95%
Wilson intervals, per category, the confusion matrix, the context cases, the output check and latency; `--json`
also writes the figures that docs/safety.md quotes and the tests re-check.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import Counter
from pathlib import Path

import numpy as np

from mascot.errors import InputError
from mascot.safety_data import (load_context_cases, load_heldout_ml, load_heldout_ml2, load_heldout_v2, load_heldout_v3, load_heldout_v4, load_heldout_v5,
                                load_meeting_openings, load_messages, load_ordinary, load_replies,
                                message_training_examples)
from mascot.stats import wilson_interval

log = logging.getLogger(__name__)

REPORT = Path(__file__).parent / "data" / "safety" / "report.json"
# Thresholds on the cross-validated (out-of-fold) scores: the crisis tier replaces the group's replies, so
# it is held to a false-positive rate on all negatives; the concern tier (Anchor asks about safety) is held to a
# false-positive rate on everyday scenario openings, so ordinary messages rarely get a safety question; the
# context floor (how suspicious a message must be alone before earlier turns can make it a crisis) is set for recall.
CRISIS_MAX_FPR = 0.05
CONCERN_ORDINARY_MAX_FPR = 0.05
CONTEXT_RECALL = 0.98
BENIGN_HISTORY = ("I've had a long week at work.", "My sister visited on Sunday.")
LEXICAL_WEIGHT = 0.5  # weight of the character n-gram model in the message score (out-of-fold comparison, docs/safety.md)
FIT_LAYERS, FIT_EPOCHS, FIT_LR = 6, 5, 1e-3  # the shipped recipe (chosen by cross-validation on the training split, docs/safety.md)
REPLY_MAX_FPR = 0.10  # the reply classifier is small: its threshold caps cross-validated false replacements


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="safety_command", required=True)
    t = sub.add_parser("train", help="cross-validate thresholds and fit the classifiers (CPU, minutes)")
    t.add_argument("--folds", type=int, default=3)
    t.add_argument("--epochs", type=int, default=FIT_EPOCHS)
    t.add_argument("--layers", type=int, default=FIT_LAYERS, help="top encoder layers adapted by the LoRA")
    t.add_argument("--lr", type=float, default=FIT_LR)
    t.add_argument("--no-augment", action="store_true", help="do not add a noisy variant of each training line")
    t.add_argument("--no-extra", action="store_true", help=f"leave out the round-2 training lines ({'crisis_train_extra.txt'})")
    t.add_argument("--no-round3", action="store_true", help="leave out the round-3 training lines and the retired v2 set")
    t.add_argument("--no-round4", action="store_true", help="leave out the round-4 training lines (crisis_train_extra4.txt)")
    t.add_argument("--round5", action="store_true",
                   help="add the multilingual development lines (crisis_dev_ml.txt; tried in stop 21, not shipped: "
                        "English recall fell, docs/safety.md)")
    t.add_argument("--lexical-weight", type=float, default=LEXICAL_WEIGHT,
                   help="weight of the character n-gram model in the message score, 0 to 1 (0: the encoder alone)")
    t.add_argument("--only", choices=["messages", "replies"], default=None)
    t.add_argument("--ship", choices=["fold", "refit"], default="fold",
                   help="fold: ship the first cross-validation fold's model, trained like the models whose scores set "
                        "the thresholds (default); refit: refit on the whole training split (its scores are more "
                        "confident, so the thresholds transfer badly, see docs/safety.md)")
    t.add_argument("--out", type=Path, default=None, help="write the classifiers under this folder instead of the shipped one")
    sub.add_parser("thresholds", help="re-derive the message thresholds from the saved out-of-fold scores (seconds)")
    e = sub.add_parser("eval", help="measure the detector on the held-out split")
    e.add_argument("--json", type=Path, default=None, help=f"also write the figures as JSON (the shipped ones: {REPORT})")
    e.add_argument("--latency-runs", type=int, default=300, help="messages timed (each once)")
    e.add_argument("--model-dir", type=Path, default=None,
                   help="measure the message classifier saved under this folder (by `safety train --out`) instead of the shipped one")


def _train_one(name: str, examples, folds: int, cfg, ship: str, out_root: Path | None, extra_meta: dict | None = None,  # type: ignore[no-untyped-def]
               lexical_weight: float = 0.0) -> None:
    from mascot.safety_lexical import LexicalModel, combine
    from mascot.safety_lexical import out_of_fold as lexical_out_of_fold
    from mascot.safety_model import MODEL_DIR, Fitter, config_dict, save, threshold_for_fpr

    if not 0.0 <= lexical_weight <= 1.0:
        raise InputError(f"--lexical-weight must be between 0 and 1, got {lexical_weight}.")

    train = [e for e in examples if e.split == "train"]
    texts = [e.text for e in train]
    labels = [e.positive for e in train]
    started = time.time()
    fitter = Fitter(texts, cfg)
    idx = list(range(len(train)))
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
    meta = {"name": name, "config": config_dict(cfg), "folds": folds, "train_size": len(train), "shipped": ship,
            "oof_scores": [round(float(s), 6) for s in oof], "oof_labels": [bool(v) for v in y],
            "oof_categories": [e.category for e in train], **extra_meta}
    if name == "replies":
        t = threshold_for_fpr(oof, y, REPLY_MAX_FPR)
        meta |= {"thresholds": {"crisis": t, "concern": t}, "targets": {"reply_max_fpr": REPLY_MAX_FPR}}
    else:
        meta = _with_message_thresholds(meta)
    fitted = first_fold if ship == "fold" else fitter.fit(idx, labels)
    meta["train_seconds"] = round(time.time() - started, 1)
    folder = (out_root or MODEL_DIR) / name
    if lexical is not None:
        lexical.save(folder)
    elif (folder / "lexical.npz").exists():
        (folder / "lexical.npz").unlink()  # an encoder-only classifier must not pick up an older lexical model
    out = save(name, fitted, meta, out_root or MODEL_DIR)  # the metadata last: it names the whole model
    print(f"{name}: thresholds {meta['thresholds']}; cross-validated {meta.get('cv')} -> {out}")


def _with_message_thresholds(meta: dict) -> dict:
    """`meta` with the message thresholds (and their cross-validated figures) derived from its out-of-fold scores."""
    from mascot.safety_model import message_thresholds

    if "oof_categories" not in meta:
        raise InputError("The message classifier's metadata has no `oof_categories`: retrain it with `python -m mascot safety train`.")
    oof, y = np.array(meta["oof_scores"]), np.array(meta["oof_labels"])
    ordinary = np.array([c == "ordinary" for c in meta["oof_categories"]])
    t = message_thresholds(oof, y, ordinary, CRISIS_MAX_FPR, CONCERN_ORDINARY_MAX_FPR, CONTEXT_RECALL)
    cv = {}
    for name in ("crisis", "concern", "context"):
        cv |= {f"recall_at_{name}": float((oof[y] >= t[name]).mean()), f"fpr_at_{name}": float((oof[~y] >= t[name]).mean()),
               f"ordinary_fpr_at_{name}": float((oof[ordinary] >= t[name]).mean())}
    targets = {"crisis_max_fpr": CRISIS_MAX_FPR, "concern_ordinary_max_fpr": CONCERN_ORDINARY_MAX_FPR, "context_recall": CONTEXT_RECALL}
    return {**meta, "thresholds": t, "targets": targets, "cv": cv}


def rethreshold() -> int:
    """Re-derive the shipped message classifier's thresholds from its saved out-of-fold scores (no retraining)."""
    from mascot.safety_model import MODEL_DIR, read_meta

    meta = _with_message_thresholds(read_meta("messages"))
    path = MODEL_DIR / "messages" / "classifier.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    tmp.replace(path)
    print(f"messages: thresholds {meta['thresholds']}; cross-validated {meta['cv']} -> {path}")
    print_concern_tradeoff(meta)
    return 0


def print_concern_tradeoff(meta: dict, budgets: tuple[float, ...] = (0.02, 0.05, 0.10, 0.20, 0.35)) -> None:
    """What other everyday-opening budgets for the concern tier would give, out of fold (training split only)."""
    from mascot.safety_model import threshold_for_fpr

    oof, y = np.array(meta["oof_scores"]), np.array(meta["oof_labels"])
    ordinary = np.array([c == "ordinary" for c in meta["oof_categories"]])
    keep = ordinary | y
    print("\nConcern tier, out of fold: budget on everyday openings -> threshold, recall (crisis or concern), FPR on all negatives")
    for b in budgets:
        t = min(meta["thresholds"]["crisis"], threshold_for_fpr(oof[keep], y[keep], b))
        print(f"  {b:.2f} -> {t:.4f}: everyday {(oof[ordinary] >= t).mean():.3f}, recall {(oof[y] >= t).mean():.3f}, "
              f"negatives {(oof[~y] >= t).mean():.3f}")


def train(args: argparse.Namespace) -> int:
    import torch

    from mascot.safety_model import FitConfig

    torch.set_num_threads(1)
    cfg = FitConfig(layers=args.layers, epochs=args.epochs, lr=args.lr, augment=not args.no_augment)
    if args.only in (None, "messages"):
        _train_one("messages", message_training_examples(extra=not args.no_extra, round3=not args.no_round3,
                                                         round4=not args.no_round4, round5=args.round5),
                   args.folds, cfg, args.ship, args.out,
                   {"train_extra": not args.no_extra, "round3": not args.no_round3, "round4": not args.no_round4,
                    "round5": args.round5},
                   args.lexical_weight)
    if args.only in (None, "replies"):
        _train_one("replies", load_replies(), args.folds, cfg, args.ship, args.out)
    return 0


def _rate(k: int, n: int) -> dict:
    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": (k / n) if n else float("nan"), "low": lo, "high": hi}


def _fmt(r: dict) -> str:
    return f"{r['rate']:.3f} [{r['low']:.3f}, {r['high']:.3f}] ({r['k']}/{r['n']})" if r["n"] else "n/a"


def _measure(examples, tiers: list[str]) -> dict:  # type: ignore[no-untyped-def]
    """Recall (crisis messages flagged) and FPR (hard negatives flagged), strict = crisis tier,
    any = crisis or concern; overall and per category; plus the confusion matrix."""
    out: dict = {"overall": {}, "categories": {}, "confusion": {}}
    pos = [(e, t) for e, t in zip(examples, tiers) if e.positive]
    neg = [(e, t) for e, t in zip(examples, tiers) if not e.positive]
    for level, flagged in (("crisis", {"crisis"}), ("any", {"crisis", "concern"})):
        out["overall"][f"recall_{level}"] = _rate(sum(t in flagged for _, t in pos), len(pos))
        out["overall"][f"fpr_{level}"] = _rate(sum(t in flagged for _, t in neg), len(neg))
    for cat in sorted({e.category for e in examples}):
        items = [(e, t) for e, t in zip(examples, tiers) if e.category == cat]
        metric = "recall" if items[0][0].positive else "fpr"
        out["categories"][cat] = {"metric": metric,
                                  "crisis": _rate(sum(t == "crisis" for _, t in items), len(items)),
                                  "any": _rate(sum(t in ("crisis", "concern") for _, t in items), len(items))}
    c = Counter((e.label, t) for e, t in zip(examples, tiers))
    out["confusion"] = {label: {t: c[(label, t)] for t in ("crisis", "concern", "none")} for label in ("crisis", "negative")}
    return out


def evaluate(runs: int = 200, model_root: Path | None = None) -> dict:
    """Every figure `safety eval` prints, as a dict (for the message classifier under `model_root`, or the shipped one)."""
    import torch

    from mascot.safety import CrisisDetector
    from mascot.safety_model import load_classifier

    torch.set_num_threads(1)
    test = [e for e in load_messages() if e.split == "test"]
    patterns = CrisisDetector(use_classifier=False)
    full = CrisisDetector(classifier=load_classifier("messages", model_root) if model_root else None)
    report: dict = {"test_size": len(test), "thresholds": {**dict(zip(("crisis", "concern"), full.thresholds)), "context": full.context_floor}}
    report["patterns"] = _measure(test, [patterns.check(e.text, record=False).tier for e in test])
    report["detector"] = _measure(test, [full.check(e.text, record=False).tier for e in test])
    report["detector_after_benign_turns"] = _measure(test, [full.check(e.text, BENIGN_HISTORY, record=False).tier for e in test])
    # v2 is held out only for a model that predates round 3 (round 3 retired it into the training pool)
    sets = ({"heldout_v3": load_heldout_v3(), "heldout_v4": load_heldout_v4(), "heldout_v5": load_heldout_v5(),
             "heldout_ml": load_heldout_ml(), "heldout_ml2": load_heldout_ml2()}
            | ({} if full.classifier.meta.get("round3") else {"heldout_v2": load_heldout_v2()}))
    for key, rows in sets.items():
        report[key] = {"test_size": len(rows),
                       "patterns": _measure(rows, [patterns.check(e.text, record=False).tier for e in rows]),
                       "detector": _measure(rows, [full.check(e.text, record=False).tier for e in rows])}
    ordinary = [e for e in load_ordinary() if e.split == "test"]
    flagged = [full.check(e.text, record=False).tier for e in ordinary]
    report["ordinary"] = {"fpr_crisis": _rate(flagged.count("crisis"), len(ordinary)),
                          "fpr_any": _rate(len(ordinary) - flagged.count("none"), len(ordinary))}
    # meeting openings the classifier never saw: all of them for a model that predates them, else the test split
    unseen = "meeting" in full.classifier.meta.get("untrained_categories", [])
    meeting = [e for e in load_meeting_openings() if unseen or e.split == "test"]
    flagged = [full.check(e.text, record=False).tier for e in meeting]
    report["meeting"] = {"fpr_crisis": _rate(flagged.count("crisis"), len(meeting)),
                         "fpr_any": _rate(len(meeting) - flagged.count("none"), len(meeting))}
    cases = load_context_cases()
    got = [full.check(c.turns[-1], c.turns[:-1], record=False).tier for c in cases]
    report["context"] = {"n": len(cases), "correct": sum(g == c.expected for g, c in zip(got, cases)),
                         "cases": [{"expected": c.expected, "got": g} for c, g in zip(cases, got)]}
    replies = [e for e in load_replies() if e.split == "test"]
    blocked = [full.check_reply(e.text, record=False).blocked for e in replies]
    report["output_check"] = {"bad_replaced": _rate(sum(b for b, e in zip(blocked, replies) if e.positive), sum(e.positive for e in replies)),
                              "good_replaced": _rate(sum(b for b, e in zip(blocked, replies) if not e.positive), sum(not e.positive for e in replies))}
    report["latency_ms"] = measure_latency(full, [e.text for e in test], runs)
    return report


def measure_latency(detector, texts: list[str], runs: int) -> dict:  # type: ignore[no-untyped-def]
    """Milliseconds per `check` of one message with two earlier user turns (model already loaded)."""
    import torch

    detector.check("hello", BENIGN_HISTORY, record=False)  # load the model outside the timing
    detector.classifier.clear_cache()  # every message and window is encoded inside the timing
    detector.check("hello", BENIGN_HISTORY, record=False)  # ...except the earlier turns, scored on the previous turn
    timings, cpu = [], []
    for text in texts[:runs]:  # each text once: no cached score flatters the figure
        start, start_cpu = time.perf_counter(), time.process_time()
        detector.check(text, BENIGN_HISTORY, record=False)
        timings.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return {"runs": len(timings), "median": float(np.median(timings)), "p95": float(np.percentile(timings, 95)),
            "max": float(np.max(timings)), "cpu_median": float(np.median(cpu)), "torch_threads": torch.get_num_threads()}


def print_heldout(title: str, r: dict) -> None:
    """Overall and per-category figures and the confusion matrices of one held-out set."""
    print(f"== {title}: {r['test_size']} messages ==")
    print(f"{'':34} {'patterns alone':>34} {'full detector':>34}")
    for key, label in (("recall_crisis", "recall (tier crisis)"), ("recall_any", "recall (crisis or concern)"),
                       ("fpr_crisis", "false-positive rate (tier crisis)"), ("fpr_any", "FPR (crisis or concern)")):
        print(f"{label:34} {_fmt(r['patterns']['overall'][key]):>34} {_fmt(r['detector']['overall'][key]):>34}")
    print("\nPer category (95% Wilson intervals; recall for crisis categories, FPR for hard negatives):")
    print(f"{'category':22} {'metric':6} {'patterns: crisis':>30} {'detector: crisis':>30} {'detector: crisis|concern':>30}")
    for cat, m in r["detector"]["categories"].items():
        p = r["patterns"]["categories"][cat]
        print(f"{cat:22} {m['metric']:6} {_fmt(p['crisis']):>30} {_fmt(m['crisis']):>30} {_fmt(m['any']):>30}")
    for name in ("patterns", "detector"):
        print(f"\nConfusion matrix ({name}; rows = label, columns = tier):")
        print(f"{'':10} {'crisis':>8} {'concern':>8} {'none':>8}")
        for label, row in r[name]["confusion"].items():
            print(f"{label:10} {row['crisis']:>8} {row['concern']:>8} {row['none']:>8}")
    print()


def print_report(r: dict) -> None:
    t = r["thresholds"]
    print(f"Thresholds crisis={t['crisis']:.4f} concern={t['concern']:.4f} context floor={t.get('context', t['concern']):.4f}\n")
    print_heldout("Held-out split of crisis_messages.txt", r)
    if "heldout_v2" in r:
        print_heldout("Held-out set v2 (crisis_heldout_v2.txt)", r["heldout_v2"])
    if "heldout_v3" in r:
        print_heldout("Held-out set v3 (crisis_heldout_v3.txt)", r["heldout_v3"])
    if "heldout_v4" in r:
        print_heldout("Held-out set v4 (crisis_heldout_v4.txt)", r["heldout_v4"])
    if "heldout_v5" in r:
        print_heldout("Fresh held-out set v5 (crisis_heldout_v5.txt)", r["heldout_v5"])
    if "heldout_ml" in r:
        print_heldout("Multilingual held-out set ml1 (crisis_heldout_ml.txt; categories are languages)", r["heldout_ml"])
    if "heldout_ml2" in r:
        print_heldout("Multilingual held-out set ml2 (crisis_heldout_ml2.txt; categories are languages)", r["heldout_ml2"])
    a = r["detector_after_benign_turns"]["overall"]
    print(f"\nThe same messages after two harmless earlier turns: recall (crisis) {_fmt(a['recall_crisis'])}, "
          f"recall (crisis or concern) {_fmt(a['recall_any'])}, FPR (crisis) {_fmt(a['fpr_crisis'])}, "
          f"FPR (crisis or concern) {_fmt(a['fpr_any'])}")
    o = r["ordinary"]
    print(f"Everyday messages (bundled scenario openings, test split): FPR (crisis) {_fmt(o['fpr_crisis'])}, "
          f"FPR (crisis or concern) {_fmt(o['fpr_any'])}")
    m = r["meeting"]
    print(f"Meeting questions (bundled meeting openings the classifier never saw): FPR (crisis) {_fmt(m['fpr_crisis'])}, "
          f"FPR (crisis or concern) {_fmt(m['fpr_any'])}")
    c = r["context"]
    print(f"\nContext cases (last three user turns): {c['correct']}/{c['n']} tiers as expected")
    o = r["output_check"]
    print(f"Output check (held-out replies): bad replaced {_fmt(o['bad_replaced'])}; good replaced {_fmt(o['good_replaced'])}")
    lat = r["latency_ms"]
    print(f"Latency per check with two earlier turns (CPU, {lat['torch_threads']} torch thread(s), {lat['runs']} messages): "
          f"median {lat['median']:.1f} ms, p95 {lat['p95']:.1f} ms, max {lat['max']:.1f} ms wall; median {lat['cpu_median']:.1f} ms CPU")


def main(args: argparse.Namespace) -> int:
    if args.safety_command == "train":
        return train(args)
    if args.safety_command == "thresholds":
        return rethreshold()
    if args.latency_runs < 1:
        raise InputError("--latency-runs must be at least 1.")
    report = evaluate(args.latency_runs, args.model_dir)
    print_report(report)
    if args.json:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1), encoding="utf-8")
        tmp.replace(args.json)
    return 0
