"""Summary of single-reply labels: acceptability shares per system with Wilson 95% intervals, agreement.

Shares are over labels (each annotator's label counts once). Agreement uses the items labelled by two
or more annotators: the share whose first two labels give the same acceptability, Cohen's kappa of
those first two labels, and Krippendorff's alpha (nominal) over all labels of those items.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from annotation.agreement import cohen_kappa, krippendorff_alpha
from annotation.reply_labels import ACCEPTABILITY, FAULTS, PERSONA_FIT
from annotation.reply_store import reply_label_rows, reply_systems
from annotation.store import StudyStore
from mascot.stats import wilson_interval


@dataclass(frozen=True)
class LevelShare:
    """How many labels of a system gave one acceptability level, their share and its Wilson 95% interval."""

    count: int
    share: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class SystemReplies:
    """Label counts of one system's replies."""

    system: str
    items: int  # reply items of this system in the study
    labelled_items: int
    labels: int
    acceptability: dict[str, LevelShare]
    persona_fit: dict[str, int]  # labels giving each persona-fit value (unset ones not counted)
    faults: dict[str, int]  # labels naming each fault


@dataclass(frozen=True)
class ReplySummary:
    """Per-system acceptability and the agreement between annotators."""

    systems: list[SystemReplies]
    agreement: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field as plain Python values."""
        return asdict(self)

    def table(self) -> pd.DataFrame:
        """One row per system: items, labels, and per level its count and `share [low, high]` in percent."""
        rows = []
        for s in self.systems:
            row: dict[str, Any] = {"system": s.system, "items": s.items, "labels": s.labels}
            for level, v in s.acceptability.items():
                row[level] = v.count
                row[f"{level} %"] = (
                    "-" if v.share is None else f"{100 * v.share:.1f} [{100 * v.low:.1f}, {100 * v.high:.1f}]"  # type: ignore[operator]
                )
            rows.append(row)
        return pd.DataFrame(rows)


def _share(count: int, n: int) -> LevelShare:
    if n == 0:
        return LevelShare(count, None, None, None)
    low, high = wilson_interval(count, n)
    return LevelShare(count, count / n, None if math.isnan(low) else low, None if math.isnan(high) else high)


def acceptability_agreement(frame: pd.DataFrame) -> dict[str, Any]:
    """Agreement on acceptability over items with 2+ labels; `frame` rows in label order (first = oldest)."""
    empty = {"items": 0, "percent_agreement": None, "cohen_kappa": None, "krippendorff_alpha": None}
    if frame.empty:
        return empty
    multi = frame[frame.groupby("id")["acceptability"].transform("size") >= 2]
    if multi.empty:
        return empty
    firsts = multi.groupby("id", sort=False).head(2)
    wide = firsts.assign(slot=firsts.groupby("id").cumcount()).pivot(
        index="id", columns="slot", values="acceptability"
    )
    x, y = wide[0].tolist(), wide[1].tolist()
    units = multi.groupby("id")["acceptability"].agg(list).tolist()
    return {
        "items": int(len(wide)),
        "percent_agreement": sum(p == q for p, q in zip(x, y)) / len(x),
        "cohen_kappa": cohen_kappa(x, y),
        "krippendorff_alpha": krippendorff_alpha(units),
    }


def summarize_reply_labels(frame: pd.DataFrame, items: dict[str, int] | None = None) -> ReplySummary:
    """Summary of label rows (columns of `reply_label_rows`); `items` gives reply items per system."""
    items = dict(items or {})
    for system in frame["system"].unique() if len(frame) else ():
        items.setdefault(system, int(frame.loc[frame["system"] == system, "id"].nunique()))
    systems = []
    for system in sorted(items):
        rows = frame[frame["system"] == system] if len(frame) else frame
        n = len(rows)
        counts = rows["acceptability"].value_counts() if n else pd.Series(dtype=int)
        fits = rows["persona_fit"].value_counts() if n else pd.Series(dtype=int)
        named = [f for fs in rows["faults"] for f in fs] if n else []
        systems.append(
            SystemReplies(
                system=system,
                items=items[system],
                labelled_items=int(rows["id"].nunique()) if n else 0,
                labels=n,
                acceptability={level: _share(int(counts.get(level, 0)), n) for level in ACCEPTABILITY},
                persona_fit={value: int(fits.get(value, 0)) for value in PERSONA_FIT},
                faults={fault: named.count(fault) for fault in FAULTS},
            )
        )
    return ReplySummary(systems=systems, agreement=acceptability_agreement(frame))


def reply_label_summary(store: StudyStore, study_id: str) -> ReplySummary:
    """Per-system acceptability shares with Wilson 95% intervals, and agreement, for one study."""
    return summarize_reply_labels(reply_label_rows(store, study_id), reply_systems(store, study_id))
