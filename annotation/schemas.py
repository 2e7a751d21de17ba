"""Plain dataclasses exchanged with the store: study settings, pairs to import, blind tasks, results.

`Task` is the only object the annotator UI receives; it deliberately has no field that could hold a
system name, which is what keeps the annotator's browser blind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from annotation.errors import InvalidInput
from annotation.models import CHOICES, CRITERIA

# A vote as the annotator sees it: left ("A"), right ("B"), tie, or both bad.
ShownChoice = Literal["A", "B", "tie", "both_bad"]
SHOWN_CHOICES: tuple[str, ...] = ("A", "B", "tie", "both_bad")
STUDY_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class StudyConfig:
    """Settings of a study; validated on construction so bad values never reach the database."""

    id: str
    name: str = ""
    instructions: str = ""
    annotators_per_item: int = 2
    attention_rate: float = 0.0
    min_seconds: float = 0.0
    hold_minutes: float = 30.0
    items_per_annotator: int | None = None
    completion_code: str | None = None
    is_open: bool = True

    def __post_init__(self) -> None:
        if not STUDY_ID_PATTERN.match(self.id):
            raise InvalidInput(
                f"Invalid study id {self.id!r}: it appears in annotator URLs, so it must be 1-64 "
                "letters, digits, '.', '_' or '-', starting with a letter or digit (e.g. 'ed-human-1')."
            )
        if self.annotators_per_item < 1:
            raise InvalidInput(
                f"annotators_per_item={self.annotators_per_item} is invalid: each item needs at least "
                "one annotator. Use 2 for the paper's protocol."
            )
        if not 0.0 <= self.attention_rate < 1.0:
            raise InvalidInput(
                f"attention_rate={self.attention_rate} is invalid: it is the share of tasks that are "
                "attention checks, so it must be in [0, 1). Use e.g. 0.1 for one check in ten tasks."
            )
        if self.min_seconds < 0 or self.hold_minutes <= 0:
            raise InvalidInput(
                f"min_seconds={self.min_seconds} / hold_minutes={self.hold_minutes} are invalid: "
                "min_seconds must be >= 0 and hold_minutes > 0 (how long an item stays reserved)."
            )
        if self.items_per_annotator is not None and self.items_per_annotator < 1:
            raise InvalidInput(
                f"items_per_annotator={self.items_per_annotator} is invalid: leave it empty for no "
                "limit, or give a positive number of tasks per annotator."
            )


@dataclass(frozen=True)
class Turn:
    """One dialogue turn: who speaks (a persona or 'User') and what they say."""

    speaker: str
    text: str


@dataclass(frozen=True)
class PairSide:
    """One side of a pair as imported: the system that produced it and its dialogue."""

    system: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class PairItem:
    """One validated line of a pairs file."""

    item_id: str
    context: str
    a: PairSide
    b: PairSide
    attention_check: bool = False
    expected: str | None = None  # a | b | tie | both_bad, for attention checks
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ratings:
    """Optional 1-5 ratings of one response on the three criteria."""

    helpfulness: int | None = None
    emotional_appropriateness: int | None = None
    perceived_safety: int | None = None

    def __post_init__(self) -> None:
        for name in CRITERIA:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or not 1 <= value <= 5):
                raise InvalidInput(
                    f"Rating {name}={value!r} is invalid: ratings are whole numbers from 1 to 5, "
                    "or empty when not given."
                )


@dataclass(frozen=True)
class Progress:
    """How far an annotator is: `done` finished tasks out of an estimated `total`."""

    done: int
    total: int

    @property
    def label(self) -> str:
        """The `12 / 50` text shown above the task."""
        return f"{self.done} / {self.total}"


@dataclass(frozen=True)
class Task:
    """A blind task for the annotator UI: opaque token, context, left/right turns, progress."""

    token: str
    context: str
    left: tuple[Turn, ...]
    right: tuple[Turn, ...]
    progress: Progress
    instructions: str = ""


# Why an annotator got no task (`Finished.reason`): their work is done; every item has its judgments or was
# already judged by them ("full"); the open slots are held by others for now ("busy"); or the study is closed.
FINISH_REASONS: tuple[str, ...] = ("done", "full", "busy", "closed")


@dataclass(frozen=True)
class Finished:
    """Returned instead of a task when the annotator has nothing left to do (`reason`: one of FINISH_REASONS)."""

    progress: Progress
    completion_code: str | None = None
    reason: str = "done"


@dataclass(frozen=True)
class SubmitResult:
    """Outcome of a vote; `duplicate` is True when this assignment had already been answered."""

    judgment_id: int
    duplicate: bool
    too_fast: bool
    attention_passed: bool | None


@dataclass(frozen=True)
class ExternalJudgment:
    """A validated judgment from an import file (collected outside this tool)."""

    item_id: str
    annotator: str
    choice: str  # a | b | tie | both_bad, already mapped from the system name
    ratings_a: Ratings = Ratings()
    ratings_b: Ratings = Ratings()
    comment: str = ""
    seconds: float | None = None
    left_side: str | None = None  # "a" or "b" when the file says which system was shown left

    def __post_init__(self) -> None:
        assert self.choice in CHOICES, f"choice must be one of {CHOICES}, got {self.choice!r}"


@dataclass(frozen=True)
class Overview:
    """Monitoring counts for one study (researcher view)."""

    study_id: str
    items: int
    attention_items: int
    complete_items: int
    judgments: int
    annotators: int
    live_holds: int
    too_fast: int
    attention_failed: int
    leak_items: int
    reply_items: int = 0  # single replies to label (see `annotation.reply_store`)
    reply_labels: int = 0
