"""The judge interface: score persona replies on the paper's five criteria (1–5 each).

A judge sees one persona's reply in context (the persona, the whole roster, the dialogue before
the reply, the setting) and returns a Verdict; `Verdict.aggregate` is the unweighted mean of the
five criteria, the score the preference pairs and the evaluation tables are built from.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from mascot.group.dialogue import Dialogue
from mascot.group.personas import Persona

# Short key -> the paper's criterion name (paper.md §3.3, the Table A columns in this order).
CRITERIA: dict[str, str] = {
    "emotion": "Emotional expressiveness",
    "empathy": "Empathetic support quality",
    "consistency": "Persona consistency",
    "relevance": "Relevance",
    "contribution": "Social contribution",
}
SCORE_MIN, SCORE_MAX = 1.0, 5.0


@dataclass
class JudgeItem:
    """One reply to judge: `dialogue` is the context before the reply (scenario plus the turns
    already given this round); `setting` is the pack's setting (emotional-support | meeting)."""

    persona: Persona
    roster: list[Persona]
    dialogue: Dialogue
    response: str
    setting: str = "emotional-support"


@dataclass
class Verdict:
    """A judge's scores (1–5 per criterion) or, when `valid` is False, why there are none."""

    scores: dict[str, float] | None
    valid: bool
    error: str = ""
    raw: str = ""
    meta: dict[str, object] = field(default_factory=dict)
    criteria: ClassVar[dict[str, str]] = CRITERIA  # what `aggregate` averages (the group judge has its own)

    @property
    def aggregate(self) -> float:
        """Unweighted mean of the criteria; NaN for an invalid verdict."""
        if not self.valid or not self.scores:
            return math.nan
        return sum(self.scores[k] for k in self.criteria) / len(self.criteria)

    @classmethod
    def invalid(cls, error: str, raw: str = "") -> Verdict:
        return cls(None, False, error, raw)

    def to_dict(self) -> dict[str, object]:
        return {"scores": self.scores, "valid": self.valid, "error": self.error, "raw": self.raw}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Verdict:
        scores = d.get("scores")
        return cls(dict(scores) if isinstance(scores, dict) else None, bool(d.get("valid")), str(d.get("error", "")), str(d.get("raw", "")))


def check_scores(scores: dict[str, float], criteria: Sequence[str] = CRITERIA) -> dict[str, float]:
    """Validate a complete 1–5 score dict over `criteria` (the individual ones by default, or the group
    judge's); raises ValueError naming the problem."""
    missing = [k for k in criteria if k not in scores]
    if missing:
        raise ValueError(f"missing criteria: {', '.join(missing)}")
    for k in criteria:
        v = scores[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not SCORE_MIN <= v <= SCORE_MAX:
            raise ValueError(f"{k} = {v!r} is not a number from 1 to 5")
    return {k: float(scores[k]) for k in criteria}


class Judge(ABC):
    """Scores batches of replies; implementations never raise on a bad judge answer (they return
    an invalid Verdict), only on configuration errors."""

    name: str = "base"

    @abstractmethod
    def score_batch(self, items: list[JudgeItem]) -> list[Verdict]:
        """One Verdict per item, in order."""

    def score(self, item: JudgeItem) -> Verdict:
        return self.score_batch([item])[0]

    def describe(self) -> str:
        """One line for run cards and result files."""
        return self.name
