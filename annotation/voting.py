"""Recording a vote: map the shown choice back to systems, flag it, and close the assignment.

Runs inside the caller's write transaction. Idempotent: a second vote on a finished assignment
returns the first judgment. A vote on a lapsed hold whose slot went to someone else is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from annotation import assignment as assign
from annotation.blind import item_choice, side_ratings
from annotation.errors import InvalidInput, StudyNotFound
from annotation.models import Assignment, Item, Judgment, Study
from annotation.quality import API_SPEED_SECONDS, attention_passed, is_too_fast
from annotation.schemas import SHOWN_CHOICES, Ratings, SubmitResult

HOLD_EXPIRED_MESSAGE = (
    "This item was reserved for you for too long and went to another annotator, so this answer was "
    "not recorded. Continue with the next item."
)


@dataclass(frozen=True)
class Vote:
    """A vote as the annotator gave it: token, shown choice (A = left), ratings, comment, time."""

    token: str
    choice: str
    left: Ratings = Ratings()
    right: Ratings = Ratings()
    comment: str = ""
    seconds: float | None = None


MAX_COMMENT_CHARS = 2000


def check_comment(comment: str | None) -> str:
    """Validate a vote's free-text comment before opening a transaction (length, no NUL)."""
    text = comment or ""
    if not isinstance(text, str) or len(text) > MAX_COMMENT_CHARS or "\x00" in text:
        size = len(text) if isinstance(text, str) else 0
        raise InvalidInput(
            f"The comment is {size:,} characters long (or holds a NUL character); keep it under "
            f"{MAX_COMMENT_CHARS:,} plain characters and vote again."
        )
    return text


def check_choice(choice: str) -> str:
    """Validate a shown choice before opening a transaction."""
    if choice not in SHOWN_CHOICES:
        raise InvalidInput(f"Invalid choice {choice!r}: use one of {', '.join(SHOWN_CHOICES)}.")
    return choice


def record_vote(session: Session, vote: Vote, *, now: datetime) -> tuple[SubmitResult | None, Assignment]:
    """Write the judgment for `vote.token` (or find the existing one).

    Returns (result, assignment); result is None when the hold lapsed and the slot is taken, in
    which case the assignment is marked released and nothing else is written.
    """
    row = session.execute(
        select(Assignment, Item, Study)
        .join(Item, Item.id == Assignment.item_id)
        .join(Study, Study.id == Assignment.study_id)
        .where(Assignment.token == vote.token)
        .with_for_update(of=Assignment)
    ).first()
    if row is None:
        raise StudyNotFound(
            f"Unknown task token {vote.token!r}: reload the study page to get your current task."
        )
    current, item, study = row
    if current.status == "done":
        done = session.scalars(select(Judgment).where(Judgment.assignment_id == current.id)).one()
        return SubmitResult(done.id, True, done.too_fast, done.attention_passed), current
    lapsed = current.expires_at <= now and not item.is_attention
    if current.status == "released" or (
        lapsed
        and assign.item_load(session, item_id=item.id, now=now, exclude_id=current.id)
        >= study.annotators_per_item
    ):
        current.status = "released"
        return None, current
    a_left = bool(current.a_on_left)
    picked = item_choice(vote.choice, a_left)
    took = vote.seconds if vote.seconds is not None else (now - current.served_at).total_seconds()
    values = {
        "assignment_id": current.id,
        "study_id": study.id,
        "item_id": item.id,
        "annotator_id": current.annotator_id,
        "choice": picked,
        "winner_system_id": {"a": item.system_a_id, "b": item.system_b_id}.get(picked),
        "left_system_id": item.system_a_id if a_left else item.system_b_id,
        **side_ratings(vote.left, vote.right, a_left),
        "comment": (vote.comment or "").strip(),
        "seconds": took,
        "too_fast": is_too_fast(took, max(study.min_seconds, API_SPEED_SECONDS)),
        "attention_passed": attention_passed(picked, item.expected_choice if item.is_attention else None),
        "source": "app",
        "created_at": now,
    }
    # Three plain statements, no unit-of-work flush: this is the hot path of every vote.
    judgment_id = session.execute(insert(Judgment).values(values).returning(Judgment.id)).scalar_one()
    session.execute(update(Assignment).where(Assignment.id == current.id).values(status="done"))
    # SQL-side increment: safe against concurrent writers.
    session.execute(update(Item).where(Item.id == item.id).values(n_done=Item.n_done + 1))
    session.expire(current, ["status"])
    session.expire(item, ["n_done"])
    return SubmitResult(judgment_id, False, values["too_fast"], values["attention_passed"]), current
