"""Inter-annotator agreement: Cohen's kappa for two annotators per item, Krippendorff's alpha in general.

Labels are the item-oriented choices (a, b, tie, both_bad), so two annotators who preferred the same
system agree even if they saw it on different sides.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd


def cohen_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two label sequences; None when chance agreement is 1 (kappa undefined).

    >>> cohen_kappa(["a", "a", "b", "b"], ["a", "a", "b", "a"])
    0.5
    """
    assert len(first) == len(second), "kappa needs one label per item from each annotator"
    if not first:
        return None
    labels = sorted(set(first) | set(second), key=str)
    index = {label: n for n, label in enumerate(labels)}
    table = np.zeros((len(labels), len(labels)))
    for x, y in zip(first, second):
        table[index[x], index[y]] += 1
    table /= table.sum()
    observed = float(np.trace(table))
    expected = float(table.sum(axis=1) @ table.sum(axis=0))
    return None if expected >= 1 else (observed - expected) / (1 - expected)


def krippendorff_alpha(
    units: Sequence[Sequence[Any]], level: Literal["nominal", "interval"] = "nominal"
) -> float | None:
    """Krippendorff's alpha over units (items), each a list of the values its annotators gave.

    Missing values are simply absent; units with fewer than two values are not pairable and ignored.
    Returns None when there is no disagreement to expect (a single value overall).
    """
    pairable = [[v for v in u if v is not None] for u in units]
    pairable = [u for u in pairable if len(u) >= 2]
    values = sorted({v for u in pairable for v in u}, key=lambda v: (str(type(v)), v))
    if len(values) < 2:
        return None
    index = {v: n for n, v in enumerate(values)}
    counts = np.zeros((len(pairable), len(values)))
    for row, unit in enumerate(pairable):
        for v in unit:
            counts[row, index[v]] += 1
    return alpha_from_counts(counts, np.array(values, dtype=float) if level == "interval" else None)


def alpha_from_counts(counts: np.ndarray, interval_values: np.ndarray | None = None) -> float | None:
    """Alpha from a units x values count matrix (vectorized core of `krippendorff_alpha`)."""
    m = counts.sum(axis=1)
    counts = counts[m >= 2]
    m = m[m >= 2]
    if len(counts) == 0:
        return None
    # Coincidence matrix: o[c, k] = sum_u n_uc * (n_uk - [c == k]) / (m_u - 1).
    weighted = counts / (m - 1)[:, None]
    o = weighted.T @ counts - np.diag(weighted.sum(axis=0))
    n_c = o.sum(axis=1)
    n = n_c.sum()
    if interval_values is None:
        delta = 1.0 - np.eye(len(n_c))
    else:
        delta = (interval_values[:, None] - interval_values[None, :]) ** 2
    expected = (np.outer(n_c, n_c) * delta).sum()
    if expected == 0:
        return None
    return float(1.0 - (n - 1) * (o * delta).sum() / expected)


def agreement_summary(frame: pd.DataFrame) -> dict[str, Any]:
    """Percent agreement and Cohen's kappa on each item's first two judgments; alpha on all of them."""
    multi = frame[frame.groupby("item_id")["choice"].transform("size") >= 2]
    if multi.empty:
        return {"items": 0, "percent_agreement": None, "cohen_kappa": None, "krippendorff_alpha": None}
    ordered = multi.sort_values("judgment_id") if "judgment_id" in multi else multi
    firsts = ordered.groupby("item_id").head(2).copy()
    firsts["slot"] = firsts.groupby("item_id").cumcount()
    wide = firsts.pivot(index="item_id", columns="slot", values="choice")
    x, y = wide[0].tolist(), wide[1].tolist()
    # items x labels count matrix, built with numpy (pandas' crosstab is slow on 100k string rows).
    items, labels = pd.factorize(multi["item_id"])[0], pd.factorize(multi["choice"])[0]
    counts = np.zeros((items.max() + 1, labels.max() + 1))
    np.add.at(counts, (items, labels), 1)
    return {
        "items": int(len(wide)),
        "percent_agreement": float(np.mean([p == q for p, q in zip(x, y)])),
        "cohen_kappa": cohen_kappa(x, y),
        "krippendorff_alpha": alpha_from_counts(counts),
    }
