"""Fitting and validating the acceptability scorer on labelled replies (scikit-learn; never on the chat path).

    python -m mascot accept train      # fit on the training labels, cross-validated by opening
    python -m mascot accept validate   # once: the held-out labels, the scorer beside the offline judge
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mascot.acceptability.faults import detect
from mascot.acceptability.labels import LABELS, Labelled, load_labelled
from mascot.acceptability.scorer import AcceptabilityScorer, features, fit_features, minilm_encoder

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "acceptability"
TRAIN_FILE = DATA_DIR / "train.jsonl"
HELDOUT_FILE = DATA_DIR / "heldout.jsonl"
C_GRID = (0.03, 0.1, 0.3, 1.0, 3.0)


def embed_rows(rows: Sequence[Labelled]) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM embeddings of each row's last user message and reply (the runtime's numpy encoder)."""
    users = [r.dialogue.last_user_text() or "" for r in rows]
    replies = [r.record["reply"] for r in rows]
    texts = list(dict.fromkeys(users + replies))
    vecs = minilm_encoder().embed(texts)
    at = {t: i for i, t in enumerate(texts)}
    return vecs[[at[t] for t in users]], vecs[[at[t] for t in replies]]


def design(rows: Sequence[Labelled], personas: list[str], joint: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    u, r = embed_rows(rows)
    x = features(u, r, [detect(row.dialogue, row.record["reply"]) for row in rows], joint)
    xf = fit_features(r, [personas.index(row.record["persona"]) for row in rows], len(personas))
    return x, xf


def accept_score(p: np.ndarray) -> np.ndarray:
    return p[:, 2] + 0.5 * p[:, 1]


def _logreg(c: float):  # type: ignore[no-untyped-def]
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=3000)  # unweighted: its probabilities estimate label shares


def cross_validate(x: np.ndarray, y: np.ndarray, groups: np.ndarray, c: float, folds: int = 5) -> np.ndarray:
    """Out-of-fold class probabilities, folds split by opening (no opening in both sides)."""
    from sklearn.model_selection import GroupKFold

    out = np.zeros((len(y), 3))
    for tr, te in GroupKFold(n_splits=folds).split(x, y, groups):
        model = _logreg(c).fit(x[tr], y[tr])
        out[np.ix_(te, model.classes_)] = model.predict_proba(x[te])  # a class absent from a fold stays 0
    return out


def metrics(score: np.ndarray, y: np.ndarray, boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """AUC of a score for 'acceptable' and for 'not not-acceptable', with bootstrap 95% intervals, and the
    accuracy of the best threshold for the second (reported, not tuned on the data it is measured on)."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"n": int(len(y)), "counts": {lab: int((y == i).sum()) for i, lab in enumerate(LABELS)}}
    for name, target in (("auc_acceptable", y == 2), ("auc_not_unacceptable", y >= 1)):
        if target.all() or not target.any():
            out[name] = None
            continue
        auc = float(roc_auc_score(target, score))
        draws = []
        for _ in range(boot):
            i = rng.integers(0, len(y), len(y))
            if target[i].any() and not target[i].all():
                draws.append(roc_auc_score(target[i], score[i]))
        out[name] = {"auc": round(auc, 3), "ci95": [round(float(np.percentile(draws, q)), 3) for q in (2.5, 97.5)]}
    return out


def accuracy_at(score: np.ndarray, y: np.ndarray, threshold: float) -> float:
    """Accuracy of 'not not-acceptable' predicted as score >= threshold."""
    return float(((score >= threshold) == (y >= 1)).mean())


def joint_out_of_fold(rows: Sequence[Labelled], groups: np.ndarray, cfg: Any, folds: int) -> tuple[np.ndarray, Any]:
    """The joint encoder (the bundled MiniLM's top layers through a LoRA, with a logistic head, fitted as the crisis
    classifiers are: `mascot.safety.training.fitting`) on 'not not-acceptable': its out-of-fold probabilities for
    the stacked head, and the encoder fitted on every row."""
    from sklearn.model_selection import GroupKFold

    from mascot.acceptability.scorer import joint_text
    from mascot.safety.training.fitting import Fitter

    fitter = Fitter([joint_text(r.dialogue, r.record["reply"]) for r in rows], cfg)
    ok = [r.label >= 1 for r in rows]
    oof = np.zeros(len(rows))
    for tr, te in GroupKFold(n_splits=folds).split(np.zeros(len(rows)), ok, groups):
        oof[te] = fitter.predict(fitter.fit(list(tr), ok), list(te))
    return oof, fitter.fit(list(range(len(rows))), ok)


def train_scorer(train_file: Path | Sequence[Path] = TRAIN_FILE, output: Path | None = None,
                 personas: Sequence[str] = (), joint: bool = False, joint_epochs: int = 4) -> dict[str, Any]:
    """Fit both heads on the training labels (one export, or several read in order); choose C by cross-validation
    grouped by opening; save. With `joint`, a fine-tuned joint encoder's out-of-fold log-odds join the features
    (stacking)."""
    files = [train_file] if isinstance(train_file, (str, Path)) else list(train_file)
    rows = [r for f in files for r in load_labelled(Path(f))]
    personas = list(personas) or sorted({r.record["persona"] for r in rows})
    y = np.array([r.label for r in rows])
    groups = np.array([r.scenario for r in rows])
    joint_oof, joint_fitted, joint_cfg = None, None, None
    if joint:
        from mascot.safety.training.fitting import FitConfig

        joint_cfg = FitConfig(layers=2, rank=16, epochs=joint_epochs, lr=1e-3)
        joint_oof, joint_fitted = joint_out_of_fold(rows, groups, joint_cfg, folds=5)
    x, xf = design(rows, personas, joint_oof)
    cv = {}
    for c in C_GRID:
        cv[c] = metrics(accept_score(cross_validate(x, y, groups, c)), y, boot=200)
    best = max(C_GRID, key=lambda c: (cv[c]["auc_not_unacceptable"] or {}).get("auc", 0) +
               (cv[c]["auc_acceptable"] or {}).get("auc", 0))
    oof = accept_score(cross_validate(x, y, groups, best))
    # the decision threshold for reporting accuracy: the out-of-fold one that is most accurate
    grid = np.linspace(0.05, 0.95, 91)
    threshold = float(grid[np.argmax([accuracy_at(oof, y, t) for t in grid])])
    head = _logreg(best).fit(x, y)
    weights = np.zeros((x.shape[1], 3), np.float32)
    bias = np.full(3, -30.0, np.float32)  # a class never labelled gets no probability
    weights[:, head.classes_] = head.coef_.T if len(head.classes_) > 2 else np.c_[-head.coef_[0], head.coef_[0]] / 2
    bias[head.classes_] = head.intercept_ if len(head.classes_) > 2 else [-head.intercept_[0] / 2, head.intercept_[0] / 2]
    from sklearn.linear_model import LogisticRegression

    fit_head = LogisticRegression(C=1.0, max_iter=3000, fit_intercept=False).fit(xf, np.array([r.fits for r in rows]))
    card = {
        "trained_on": ",".join(Path(f).name for f in files), "n": len(rows), "C": best, "threshold": threshold, "joint": bool(joint),
        "cross_validation": {str(c): cv[c] for c in C_GRID},
        "cv_accuracy_at_threshold": round(accuracy_at(oof, y, threshold), 3),
    }
    scorer = AcceptabilityScorer(weights, bias,
                                 fit_head.coef_[0].astype(np.float32), 0.0, personas, card)
    if output is not None:
        scorer.save(output)
        if joint_fitted is not None:
            from sklearn.metrics import roc_auc_score

            from mascot.safety.training.fitting import config_dict, save

            card["joint_cv_auc_not_unacceptable"] = round(float(roc_auc_score(y >= 1, joint_oof)), 3)
            save("joint", joint_fitted, {"config": config_dict(joint_cfg), "target": "not not_acceptable"}, root=output)
            scorer.card = card
            scorer.save(output)
    return card


def first_label_per_reply(rows: Sequence[Labelled]) -> list[Labelled]:
    """One label per reply (the first given; a second labeller's only count toward agreement)."""
    seen: set[str] = set()
    out = []
    for r in rows:
        if r.record["id"] not in seen:
            seen.add(r.record["id"])
            out.append(r)
    return out


def judge_overall(rows: Sequence[Labelled], pack_name: str = "emotional-support") -> np.ndarray:
    """The offline judge's aggregate score of each labelled reply (what the evaluation tables report)."""
    from mascot.group.personas import load_pack
    from mascot.judges import JudgeItem, load_judge

    pack = load_pack(pack_name)
    by_name = {p.name: p for p in pack.personas}
    roster = pack.active
    judge = load_judge("offline")
    items = [JudgeItem(by_name[r.record["persona"]], roster, r.dialogue, r.record["reply"], pack.setting) for r in rows]
    verdicts = judge.score_batch(items)
    return np.array([v.aggregate if v.valid else 0.0 for v in verdicts])


def validate(scorer_dir: Path | None = None, heldout_file: Path = HELDOUT_FILE) -> dict[str, Any]:
    """The held-out report: the scorer, the fault detectors alone and the offline judge's Overall, side by side."""
    rows = first_label_per_reply(load_labelled(heldout_file))
    scorer = AcceptabilityScorer.load(scorer_dir)
    y = np.array([r.label for r in rows])
    scores = scorer.score_many([(r.dialogue, r.record["persona"], r.record["reply"]) for r in rows])
    s = np.array([x.acceptability for x in scores])
    faults = -np.array([len(x.faults) for x in scores], float)
    judge = judge_overall(rows)
    threshold = float(scorer.card.get("threshold", 0.5))
    per_system: dict[str, Any] = {}
    for name in sorted({r.record["system"] for r in rows}):  # per source, for the report
        m = np.array([r.record["system"] == name for r in rows])
        per_system[name] = {lab: int((y[m] == i).sum()) for i, lab in enumerate(LABELS)}
        per_system[name]["predicted_not_unacceptable"] = round(float((s[m] >= threshold).mean()), 3)
    return {
        "heldout": str(heldout_file.name), "n": len(rows),
        "scorer": {**metrics(s, y), "accuracy": round(accuracy_at(s, y, threshold), 3), "threshold": threshold},
        "fault_count": metrics(faults, y),
        "judge_overall": {**metrics(judge, y)},
        "per_system": per_system,
    }
