"""Which item an annotator gets next: exactly k annotators per item, least-annotated first.

Rules (all evaluated inside the caller's write transaction, so concurrent requests serialize):
- an item's load is its finished assignments plus unexpired holds; it is offered only while load < k;
- an annotator never gets the same item twice (also a unique constraint on assignments);
- a hold expires after the study's `hold_minutes`; expired holds stop counting and the item returns to
  the pool; if the holder comes back and the slot is still free, the hold is renewed instead;
- attention-check items are mixed in so that they make up `attention_rate` of each annotator's tasks;
- left/right order is a keyed coin per (annotator, item), stored on the assignment.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from annotation.models import Annotator, Assignment, Item, Study
from annotation.schemas import Progress


def order_coin(secret: str, annotator: str, item_external_id: str) -> bool:
    """True when side a goes left: an HMAC coin, random across pairs but identical on every reload."""
    digest = hmac.new(secret.encode(), f"{annotator}\x1f{item_external_id}".encode(), hashlib.sha256)
    return digest.digest()[0] & 1 == 1


def _spread(annotator_id: int, item_id: int) -> int:
    """Deterministic tie-break among equally loaded items, different per annotator (less contention)."""
    return ((item_id * 0x9E3779B1) ^ (annotator_id * 0x85EBCA6B)) & 0xFFFFFFFF


def _live(now: datetime) -> object:
    """SQL condition: an assignment that counts toward its item's load."""
    return or_(
        Assignment.status == "done",
        and_(Assignment.status == "held", Assignment.expires_at > now),
    )


def item_load(session: Session, *, item_id: int, now: datetime, exclude_id: int | None = None) -> int:
    """Finished assignments plus unexpired holds on one item (optionally not counting one assignment)."""
    stmt = select(func.count()).where(Assignment.item_id == item_id, _live(now))
    if exclude_id is not None:
        stmt = stmt.where(Assignment.id != exclude_id)
    return int(session.scalar(stmt) or 0)


def eligible_items(
    session: Session, *, study: Study, annotator_id: int, now: datetime, attention: bool
) -> list[tuple[int, int]]:
    """(item id, load) of items this annotator may still get; attention items ignore the k limit."""
    seen = select(Assignment.item_id).where(Assignment.annotator_id == annotator_id)
    stmt = select(Item.id).where(
        Item.study_id == study.id, Item.is_attention.is_(attention), Item.id.not_in(seen)
    )
    if attention:
        return [(item_id, 0) for item_id in session.scalars(stmt)]
    load = (
        select(Assignment.item_id, func.count().label("n"))
        .where(Assignment.study_id == study.id, _live(now))
        .group_by(Assignment.item_id)
        .subquery()
    )
    n = func.coalesce(load.c.n, 0)
    stmt = (
        select(Item.id, n)
        .outerjoin(load, load.c.item_id == Item.id)
        .where(
            Item.study_id == study.id,
            Item.is_attention.is_(False),
            Item.id.not_in(seen),
            n < study.annotators_per_item,
        )
    )
    return [(int(i), int(c)) for i, c in session.execute(stmt)]


def _counts(session: Session, annotator_id: int) -> tuple[int, int, int]:
    """(finished tasks, tasks finished or held, attention tasks finished or held) of an annotator."""
    rows = session.execute(
        select(Assignment.status, Item.is_attention, func.count())
        .join(Item, Item.id == Assignment.item_id)
        .where(Assignment.annotator_id == annotator_id, Assignment.status != "released")
        .group_by(Assignment.status, Item.is_attention)
    ).all()
    done = sum(c for s, _, c in rows if s == "done")
    taken = sum(c for _, _, c in rows)
    attention = sum(c for _, a, c in rows if a)
    return done, taken, attention


def _attention_due(study: Study, taken: int, attention_taken: int) -> bool:
    """Serve a check when fewer than floor(rate * (tasks + 1)) checks were served so far."""
    return study.attention_rate > 0 and attention_taken < math.floor(study.attention_rate * (taken + 1))


def acquire(
    session: Session, *, study: Study, annotator: Annotator, now: datetime
) -> Assignment | None:
    """Return the annotator's current assignment, renewing or creating one; None when finished.

    Must run in a write transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: the study row is locked).
    """
    hold = timedelta(minutes=study.hold_minutes)
    held = session.scalars(
        select(Assignment)
        .where(Assignment.annotator_id == annotator.id, Assignment.status == "held")
        .order_by(Assignment.served_at, Assignment.id)
    ).all()
    for assignment in held:
        if assignment.expires_at > now:
            return assignment  # resume: same item, same sides, after a reload
        is_check = assignment.item.is_attention
        load = item_load(session, item_id=assignment.item_id, now=now, exclude_id=assignment.id)
        if is_check or load < study.annotators_per_item:
            assignment.expires_at = now + hold
            return assignment
        assignment.status = "released"  # the slot went to someone else while this hold had lapsed
    if not study.is_open:
        return None
    done, taken, attention_taken = _counts(session, annotator.id)
    if study.items_per_annotator is not None and taken >= study.items_per_annotator:
        return None
    candidates = eligible_items(session, study=study, annotator_id=annotator.id, now=now, attention=False)
    if not candidates:
        return None  # never pad a finished annotator with attention checks alone
    if _attention_due(study, taken, attention_taken):
        checks = eligible_items(session, study=study, annotator_id=annotator.id, now=now, attention=True)
        if checks:
            candidates = checks
    item_id = min(candidates, key=lambda c: (c[1], _spread(annotator.id, c[0])))[0]
    item = session.get(Item, item_id)
    assert item is not None, f"item {item_id} vanished inside the transaction"
    assignment = Assignment(
        token=secrets.token_hex(16),
        study_id=study.id,
        item_id=item.id,
        annotator_id=annotator.id,
        a_on_left=order_coin(study.order_secret, annotator.external_id, item.external_id),
        status="held",
        served_at=now,
        expires_at=now + hold,
    )
    session.add(assignment)
    session.flush()
    return assignment


def progress(session: Session, *, study: Study, annotator_id: int, now: datetime) -> Progress:
    """`done / total` for an annotator; total replays the serving rules over what is still open to
    them, so it is exact unless other annotators take the last free slots first."""
    done, taken, attention_taken = _counts(session, annotator_id)
    held = taken - done
    remaining = len(eligible_items(session, study=study, annotator_id=annotator_id, now=now, attention=False))
    checks = 0
    if study.attention_rate > 0 and remaining:
        checks = len(eligible_items(session, study=study, annotator_id=annotator_id, now=now, attention=True))
    total = taken
    while remaining > 0 and (study.items_per_annotator is None or total < study.items_per_annotator):
        if checks > 0 and _attention_due(study, total, attention_taken):
            checks -= 1
            attention_taken += 1
        else:
            remaining -= 1
        total += 1
    return Progress(done=done, total=max(total, done + held))
