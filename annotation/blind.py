"""What the annotator sees, and the way back: blind tasks out, shown choices and ratings in.

A task carries masked texts and an opaque token only. "Response A" is the left side; whether that is
the item's side a is the assignment's stored coin (`a_on_left`), used again to map the vote back.
"""

from __future__ import annotations

import json

from sqlalchemy import select
from sqlalchemy.orm import Session

from annotation.models import CRITERIA, Assignment, Study, System
from annotation.quality import mask_system_names
from annotation.schemas import Progress, Ratings, Task, Turn

_SHOWN_TO_ITEM = {True: {"A": "a", "B": "b"}, False: {"A": "b", "B": "a"}}


def _turns(raw: str, names: list[str]) -> tuple[Turn, ...]:
    """Stored JSON turns -> masked `Turn`s, ready for the annotator."""
    return tuple(
        Turn(mask_system_names(t["speaker"], names), mask_system_names(t["text"], names))
        for t in json.loads(raw)
    )


def blind_task(session: Session, *, study: Study, assignment: Assignment, progress: Progress) -> Task:
    """The task for `assignment`, sides in the stored order, every system name masked as [system]."""
    names = list(session.scalars(select(System.name).where(System.study_id == study.id)))
    item = assignment.item
    left, right = (
        (item.dialogue_a, item.dialogue_b) if assignment.a_on_left else (item.dialogue_b, item.dialogue_a)
    )
    return Task(
        token=assignment.token,
        context=mask_system_names(item.context, names),
        left=_turns(left, names),
        right=_turns(right, names),
        progress=progress,
        instructions=mask_system_names(study.instructions, names),
    )


def item_choice(shown: str, a_on_left: bool) -> str:
    """A shown vote ("A" = left, "B", "tie", "both_bad") in item orientation ("a", "b", ...)."""
    return _SHOWN_TO_ITEM[a_on_left].get(shown, shown)


def side_ratings(left: Ratings, right: Ratings, a_on_left: bool) -> dict[str, int | None]:
    """Ratings given to the left/right responses as judgment columns `<criterion>_a` / `_b`."""
    ra, rb = (left, right) if a_on_left else (right, left)
    return {f"{c}_{side}": getattr(r, c) for side, r in (("a", ra), ("b", rb)) for c in CRITERIA}
