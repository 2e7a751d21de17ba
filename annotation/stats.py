"""Preference statistics for pairwise studies: sign tests, Wilson intervals, Holm, rating tests.

The headline test is the paper's: an exact two-sided sign test (`scipy.stats.binomtest`, p=0.5) on
wins vs losses with ties and both-bad dropped; a ties-split variant gives half the ties to each side.
`study_stats(frame)` assembles everything (plus Bradley-Terry and agreement) for the CLI and the app.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binomtest, wilcoxon

from annotation.agreement import agreement_summary
from annotation.bradley_terry import BTRating, bradley_terry
from annotation.models import CRITERIA
from annotation.quality import annotator_quality, position_bias
from mascot.stats import holm, wilson_interval


def stars(p: float | None) -> str:
    """Significance stars: * p<0.05, ** p<0.01, *** p<0.001, '' otherwise (or when p is None)."""
    if p is None or math.isnan(p):
        return ""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


@dataclass(frozen=True)
class SignTest:
    """Counts and tests for one system against another (first system = 'wins')."""

    wins: int
    losses: int
    ties: int
    both_bad: int
    n: int
    win_rate: float  # wins / (wins + losses), the sign test's proportion
    ci_low: float
    ci_high: float
    p_value: float  # exact two-sided sign test, ties and both-bad excluded
    p_ties_split: float  # ties + both-bad split evenly between the sides (an odd one dropped)
    stars: str


def sign_test(wins: int, losses: int, ties: int = 0, both_bad: int = 0) -> SignTest:
    """Exact two-sided sign test of wins vs losses, with Wilson CI and the ties-split variant.

    >>> round(sign_test(138, 62).p_value, 8) < 0.001
    True
    """
    decisive = wins + losses
    p = binomtest(wins, decisive, 0.5, alternative="two-sided").pvalue if decisive else 1.0
    half = (ties + both_bad) // 2
    split_n = decisive + 2 * half
    p_split = binomtest(wins + half, split_n, 0.5).pvalue if split_n else 1.0
    low, high = wilson_interval(wins, decisive)
    return SignTest(
        wins,
        losses,
        ties,
        both_bad,
        decisive + ties + both_bad,
        wins / decisive if decisive else math.nan,
        low,
        high,
        float(p),
        float(p_split),
        stars(p),
    )


@dataclass(frozen=True)
class Comparison:
    """One pair of systems: the sign test plus Holm-adjusted p and shares for the stacked bar."""

    system: str
    baseline: str
    test: SignTest
    p_holm: float
    stars_holm: str

    @property
    def shares(self) -> dict[str, float]:
        """Fractions of all judgments: system wins, ties, both bad, baseline wins (sum to 1)."""
        n = self.test.n or 1
        t = self.test
        return {"wins": t.wins / n, "ties": t.ties / n, "both_bad": t.both_bad / n, "losses": t.losses / n}


def _orient(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """System pairs as (focal, other): the system in more judgments first (MASCOT vs each baseline);
    on a tie, the one more often listed as side a in the pairs file, then alphabetical."""
    counts = pd.concat([frame["system_a"], frame["system_b"]]).value_counts()
    as_a = frame["system_a"].value_counts()
    key = lambda s: (-counts.get(s, 0), -as_a.get(s, 0), s)  # noqa: E731
    distinct = frame[["system_a", "system_b"]].drop_duplicates()
    pairs = {tuple(sorted(p)) for p in zip(distinct["system_a"], distinct["system_b"])}
    out = [tuple(sorted(p, key=key)) for p in pairs]
    return sorted(out, key=lambda p: (key(p[0]), key(p[1])))  # type: ignore[return-value]


def compare_pairs(frame: pd.DataFrame) -> list[Comparison]:
    """Sign test for every pair of systems in `frame` (ordinary items only), Holm across pairs."""
    tests: list[tuple[str, str, SignTest]] = []
    for first, second in _orient(frame):
        rows = frame[
            ((frame.system_a == first) & (frame.system_b == second))
            | ((frame.system_a == second) & (frame.system_b == first))
        ]
        tests.append(
            (
                first,
                second,
                sign_test(
                    int((rows.winner == first).sum()),
                    int((rows.winner == second).sum()),
                    int((rows.choice == "tie").sum()),
                    int((rows.choice == "both_bad").sum()),
                ),
            )
        )
    adjusted = holm([t.p_value for _, _, t in tests])
    return [Comparison(a, b, t, p, stars(p)) for (a, b, t), p in zip(tests, adjusted)]


@dataclass(frozen=True)
class RatingTest:
    """Mean 1-5 rating of each system on one criterion, paired over judgments, with Wilcoxon p."""

    system: str
    baseline: str
    criterion: str
    n: int
    mean_system: float
    mean_baseline: float
    p_value: float | None  # None when fewer than one non-zero paired difference


def rating_tests(frame: pd.DataFrame, pairs: Sequence[tuple[str, str]]) -> list[RatingTest]:
    """Wilcoxon signed-rank test per (pair, criterion) on judgments that rated both sides."""
    out = []
    for first, second in pairs:
        a_first = (frame.system_a == first) & (frame.system_b == second)
        b_first = (frame.system_a == second) & (frame.system_b == first)
        for c in CRITERIA:
            x = pd.concat([frame.loc[a_first, f"{c}_a"], frame.loc[b_first, f"{c}_b"]])
            y = pd.concat([frame.loc[a_first, f"{c}_b"], frame.loc[b_first, f"{c}_a"]])
            ok = x.notna() & y.notna()
            x, y = x[ok].astype(float).to_numpy(), y[ok].astype(float).to_numpy()
            if len(x) == 0:
                continue
            p = float(wilcoxon(x, y).pvalue) if np.any(x != y) else None
            out.append(RatingTest(first, second, c, len(x), float(x.mean()), float(y.mean()), p))
    return out


@dataclass
class StudyStats:
    """Everything the stats command and the Studies tab show."""

    comparisons: list[Comparison]
    bradley_terry: list[BTRating]
    agreement: dict[str, Any]
    ratings: list[RatingTest]
    position_bias: dict[str, Any]
    quality: pd.DataFrame
    excluded: dict[str, int] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        """One row per comparison, the paper's way: counts, win rate [95% CI], p, stars, Holm p."""
        return pd.DataFrame(
            [
                {
                    "system": c.system,
                    "baseline": c.baseline,
                    "wins": c.test.wins,
                    "losses": c.test.losses,
                    "ties": c.test.ties,
                    "both_bad": c.test.both_bad,
                    "n": c.test.n,
                    "win_rate": round(c.test.win_rate, 4),
                    "ci_low": round(c.test.ci_low, 4),
                    "ci_high": round(c.test.ci_high, 4),
                    "p_value": c.test.p_value,
                    "stars": c.test.stars,
                    "p_ties_split": c.test.p_ties_split,
                    "p_holm": c.p_holm,
                    "stars_holm": c.stars_holm,
                }
                for c in self.comparisons
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN becomes None)."""

        def clean(v: Any) -> Any:
            if isinstance(v, float) and math.isnan(v):
                return None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, list):
                return [clean(x) for x in v]
            return v.item() if isinstance(v, np.generic) else v

        return clean(
            {
                "comparisons": [
                    {
                        **asdict(c.test),
                        "system": c.system,
                        "baseline": c.baseline,
                        "p_holm": c.p_holm,
                        "stars_holm": c.stars_holm,
                    }
                    for c in self.comparisons
                ],
                "bradley_terry": [asdict(r) for r in self.bradley_terry],
                "agreement": self.agreement,
                "ratings": [asdict(r) for r in self.ratings],
                "position_bias": self.position_bias,
                "quality": self.quality.to_dict(orient="records"),
                "excluded": self.excluded,
            }
        )


def study_stats(
    frame: pd.DataFrame,
    *,
    exclude_fast: bool = False,
    min_attention_accuracy: float | None = None,
    bootstrap: int = 200,
    seed: int = 0,
) -> StudyStats:
    """All statistics for the judgments in `frame` (from `annotation.frames.load_judgments`).

    Args:
        exclude_fast: drop judgments flagged as faster than the study's minimum time.
        min_attention_accuracy: drop every judgment of annotators below this attention-check accuracy.
        bootstrap: Bradley-Terry bootstrap rounds (0 disables intervals).
    """
    quality = annotator_quality(frame) if len(frame) else pd.DataFrame()
    data = frame[~frame.is_attention]
    excluded = {"attention_items": int(frame.is_attention.sum())}
    if exclude_fast:
        excluded["too_fast"] = int(data.too_fast.sum())
        data = data[~data.too_fast]
    if min_attention_accuracy is not None and len(quality):
        acc = 1 - quality.attention_failed / quality.attention_checks.where(quality.attention_checks > 0)
        bad = set(quality.annotator[acc < min_attention_accuracy])
        excluded["failed_attention_annotators"] = len(bad)
        excluded["failed_attention_judgments"] = int(data.annotator.isin(bad).sum())
        data = data[~data.annotator.isin(bad)]
    comparisons = compare_pairs(data)
    pairs = [(c.system, c.baseline) for c in comparisons]
    return StudyStats(
        comparisons=comparisons,
        bradley_terry=bradley_terry(data, bootstrap=bootstrap, seed=seed),
        agreement=agreement_summary(data),
        ratings=rating_tests(data, pairs),
        position_bias=position_bias(data),
        quality=quality,
        excluded=excluded,
    )
