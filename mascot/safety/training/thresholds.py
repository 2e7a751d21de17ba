"""The detector's thresholds, chosen on cross-validated (out-of-fold) scores of the training split only.

The crisis tier replaces the group's replies, so it is held to a false-positive rate on all negatives; the
concern tier (a persona asks about safety, and the group still answers) is held to a false-positive rate on
everyday scenario openings and another on all negatives, so ordinary messages seldom get a safety question; the
context floor (how suspicious a message must be alone
before earlier turns can make it a crisis) is set for recall. Figures: docs/safety.md.
"""

from __future__ import annotations

import numpy as np

from mascot.errors import ConfigError, InputError

CRISIS_MAX_FPR = 0.05
CONCERN_ORDINARY_MAX_FPR = 0.10
CONCERN_MAX_FPR = 0.12  # on all negatives: under the 0.15 budget for hard negatives, with room for new writers
CONTEXT_RECALL = 0.98
REPLY_MAX_FPR = 0.10  # the reply classifier is small: its threshold caps cross-validated false replacements


def choose_threshold(scores: np.ndarray, positive: np.ndarray, recall: float) -> float:
    """The highest threshold whose recall on `scores` of positives is at least `recall`."""
    pos = np.sort(scores[positive])
    if len(pos) == 0:
        raise ConfigError("No positive examples to choose a threshold from.")
    k = int(np.floor((1.0 - recall) * len(pos) + 1e-9))
    return float(pos[min(k, len(pos) - 1)])


def threshold_for_fpr(scores: np.ndarray, positive: np.ndarray, max_fpr: float) -> float:
    """The lowest threshold whose false-positive rate on `scores` of negatives is at most `max_fpr`."""
    neg = np.sort(scores[~positive])[::-1]
    if len(neg) == 0:
        raise ConfigError("No negative examples to choose a threshold from.")
    k = int(np.floor(max_fpr * len(neg) + 1e-9))  # this many negatives may score at or above it
    return float(np.nextafter(neg[k], np.float32(1.0))) if k < len(neg) else float(neg[-1])


def message_thresholds(oof: np.ndarray, positive: np.ndarray, ordinary: np.ndarray, crisis_max_fpr: float,
                       concern_ordinary_max_fpr: float, context_recall: float,
                       concern_max_fpr: float = 1.0) -> dict[str, float]:
    """The three thresholds of the message classifier, all from out-of-fold scores of the training split.

    crisis: the lowest whose false-positive rate on all negatives is at most `crisis_max_fpr` (the group is
    replaced); concern: the lowest whose false-positive rate is at most `concern_ordinary_max_fpr` on the everyday
    scenario openings (`ordinary`) and at most `concern_max_fpr` on all negatives (a persona asks about safety),
    never above crisis; context: the highest whose recall is at least `context_recall`, the floor a message must
    reach alone before earlier turns can upgrade it."""
    crisis = threshold_for_fpr(oof, positive, crisis_max_fpr)
    if not ordinary.any():
        raise ConfigError("No everyday openings among the cross-validated scores: the concern threshold needs them.")
    keep = ordinary | positive
    everyday = threshold_for_fpr(oof[keep], positive[keep], concern_ordinary_max_fpr)
    concern = min(crisis, max(everyday, threshold_for_fpr(oof, positive, concern_max_fpr)))
    context = min(concern, choose_threshold(oof, positive, context_recall))
    return {"crisis": crisis, "concern": concern, "context": context}


EVERYDAY = "everyday"  # the category of everyday openings to a companion app in the retired and blind sets


def budgeted_scores(meta: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out-of-fold scores, labels, everyday scenario openings) of the lines the budgets are measured on: the
    everyday openings of the retired and blind sets train the model but are left out, since so many easy
    negatives would loosen each false-positive rate the thresholds are chosen at."""
    keep = np.array([c != EVERYDAY for c in meta["oof_categories"]])
    ordinary = np.array([c == "ordinary" for c in meta["oof_categories"]])
    return np.array(meta["oof_scores"])[keep], np.array(meta["oof_labels"])[keep], ordinary[keep]


def with_message_thresholds(meta: dict) -> dict:
    """`meta` with the message thresholds (and their cross-validated figures) derived from its out-of-fold scores."""
    if "oof_categories" not in meta:
        raise InputError("The message classifier's metadata has no `oof_categories`: retrain it with `python -m mascot safety train`.")
    oof, y, ordinary = budgeted_scores(meta)
    t = message_thresholds(oof, y, ordinary, CRISIS_MAX_FPR, CONCERN_ORDINARY_MAX_FPR, CONTEXT_RECALL, CONCERN_MAX_FPR)
    cv = {}
    for name in ("crisis", "concern", "context"):
        cv |= {f"recall_at_{name}": float((oof[y] >= t[name]).mean()), f"fpr_at_{name}": float((oof[~y] >= t[name]).mean()),
               f"ordinary_fpr_at_{name}": float((oof[ordinary] >= t[name]).mean())}
    targets = {"crisis_max_fpr": CRISIS_MAX_FPR, "concern_ordinary_max_fpr": CONCERN_ORDINARY_MAX_FPR,
               "concern_max_fpr": CONCERN_MAX_FPR, "context_recall": CONTEXT_RECALL}
    return {**meta, "thresholds": t, "targets": targets, "cv": cv}


def concern_tradeoff(meta: dict, budgets: tuple[float, ...] = (0.02, 0.05, 0.10, 0.20, 0.35)) -> list[dict[str, float]]:
    """What other everyday-opening budgets for the concern tier would give, out of fold (training split only):
    per budget the threshold, the share of everyday openings flagged, recall (crisis or concern) and the FPR on
    all negatives."""
    oof, y, ordinary = budgeted_scores(meta)
    keep = ordinary | y
    rows = []
    for b in budgets:
        t = min(meta["thresholds"]["crisis"], threshold_for_fpr(oof[keep], y[keep], b))
        rows.append({"budget": b, "threshold": t, "everyday": float((oof[ordinary] >= t).mean()),
                     "recall": float((oof[y] >= t).mean()), "negatives": float((oof[~y] >= t).mean())})
    return rows
