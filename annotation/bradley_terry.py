"""Bradley-Terry strengths across any number of systems, with bootstrap intervals.

Fitted by the MM algorithm (Hunter 2004) on win counts; a tie or both-bad vote counts half a win for
each side. A weak prior (half a win each way on every compared pair) keeps strengths finite when a
system never wins. The bootstrap resamples judgments (multinomially over distinct outcomes, as in
FastChat's arena analysis) and refits all rounds at once with numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

PRIOR = 0.5
ELO_SCALE = 400 / math.log(10)  # log-strength -> Elo-style points (FastChat's 400 / ln 10)


@dataclass(frozen=True)
class BTRating:
    """One system's Bradley-Terry strength on an Elo-like scale (mean 1000), with a 95% interval."""

    system: str
    rating: float
    ci_low: float | None
    ci_high: float | None
    rank: int


def fit_strengths(
    wins: np.ndarray, compared: np.ndarray, tol: float = 1e-10, max_iter: int = 10_000
) -> np.ndarray:
    """Log-strengths (mean 0) for win matrices `wins[..., i, j]` = wins of i over j.

    Args:
        wins: shape (K, K) or (B, K, K); fractional counts allowed (ties are halves).
        compared: (K, K) boolean mask of pairs that were compared at all (where the prior goes).
    """
    w = np.asarray(wins, dtype=float) + PRIOR * compared
    squeeze = w.ndim == 2
    w = w[None] if squeeze else w
    games = w + np.swapaxes(w, 1, 2)
    total_wins = w.sum(axis=2)
    p = np.ones(w.shape[:2])
    for _ in range(max_iter):
        denom = (games / (p[:, :, None] + p[:, None, :])).sum(axis=2)
        new = np.where(denom > 0, total_wins / np.where(denom > 0, denom, 1), 1.0)
        new = new / np.exp(np.log(new).mean(axis=1, keepdims=True))
        done = np.max(np.abs(new - p)) < tol
        p = new
        if done:
            break
    logs = np.log(p)
    return logs[0] if squeeze else logs


def _cells(
    frame: pd.DataFrame, index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Distinct outcomes: (winner idx, loser idx, weight 1 or 0.5 for ties, count)."""
    decisive = frame[frame.winner.notna()]
    d = decisive.groupby(["winner", "loser"], observed=True).size()
    rows = [(index[w], index[lo], 1.0, n) for (w, lo), n in d.items()]
    tied = frame[frame.winner.isna()].groupby(["system_a", "system_b"], observed=True).size()
    rows += [(index[a], index[b], 0.5, n) for (a, b), n in tied.items()]
    arr = np.array(rows, dtype=float).reshape(-1, 4)
    return arr[:, 0].astype(int), arr[:, 1].astype(int), arr[:, 2], arr[:, 3]


def _matrices(i: np.ndarray, j: np.ndarray, weight: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """Win matrices for one or many count vectors (counts: (m,) or (B, m))."""
    counts = np.atleast_2d(counts)
    w = np.zeros((counts.shape[0], k, k))
    for c in range(len(i)):
        w[:, i[c], j[c]] += counts[:, c] * weight[c]
        if weight[c] < 1:  # a tie: the other half goes the other way
            w[:, j[c], i[c]] += counts[:, c] * weight[c]
    return w


def bradley_terry(frame: pd.DataFrame, *, bootstrap: int = 200, seed: int = 0) -> list[BTRating]:
    """Ratings for every system in `frame`, best first; intervals are bootstrap 2.5/97.5 percentiles."""
    if frame.empty:
        return []
    systems = sorted(set(frame.system_a) | set(frame.system_b))
    index = {s: n for n, s in enumerate(systems)}
    i, j, weight, counts = _cells(frame, index)
    compared = np.zeros((len(systems), len(systems)), dtype=bool)
    compared[i, j] = compared[j, i] = True
    point = fit_strengths(_matrices(i, j, weight, counts, len(systems))[0], compared)
    low = high = None
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        draws = rng.multinomial(int(counts.sum()), counts / counts.sum(), size=bootstrap)
        boot = fit_strengths(_matrices(i, j, weight, draws, len(systems)), compared)
        low, high = np.percentile(boot, 2.5, axis=0), np.percentile(boot, 97.5, axis=0)
    order = np.argsort(-point)
    return [
        BTRating(
            system=systems[s],
            rating=round(1000 + ELO_SCALE * point[s], 2),
            ci_low=None if low is None else round(1000 + ELO_SCALE * low[s], 2),
            ci_high=None if high is None else round(1000 + ELO_SCALE * high[s], 2),
            rank=rank + 1,
        )
        for rank, s in enumerate(order)
    ]
