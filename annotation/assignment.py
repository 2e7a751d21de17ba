"""Which item an annotator gets next: exactly k annotators per item, least-annotated first.

Rules (all evaluated inside the caller's write transaction, so concurrent requests serialize):
- an item's load is its finished assignments plus unexpired holds; it is offered only while load < k;
- an annotator never gets the same item twice (also a unique constraint on assignments);
- a hold expires after the study's `hold_minutes`; expired holds stop counting and the item returns to
  the pool; if the holder comes back and the slot is still free, the hold is renewed instead;
- an annotator who has not finished a task yet holds for at most NEWCOMER_HOLD_MINUTES, so ids opened and
  left (or opened by a script) free their slots soon;
- attention-check items are mixed in so that they make up `attention_rate` of each annotator's tasks;
- left/right order is a keyed coin per (annotator, item), stored on the assignment.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import BigInteger, DateTime, Integer, Select, String, and_, bindparam, cast, func, literal, or_, select
from sqlalchemy.orm import Session

from annotation.models import Annotator, Assignment, Item, Study
from annotation.schemas import Progress

# Longest hold of an annotator with no finished task (a first task takes a few minutes to read and judge).
NEWCOMER_HOLD_MINUTES = 10.0


def order_coin(secret: str, annotator: str, item_external_id: str) -> bool:
    """True when side a goes left: an HMAC coin, random across pairs but identical on every reload."""
    digest = hmac.new(secret.encode(), f"{annotator}\x1f{item_external_id}".encode(), hashlib.sha256)
    return digest.digest()[0] & 1 == 1


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


@lru_cache(maxsize=4)
def _eligible(attention: bool, with_count: bool) -> Select[Any]:
    """SELECT (item id, load, spread[, n_eligible]) of items an annotator may still get.

    Built once per shape with bind parameters (:study, :annotator, :now, :k), because constructing
    the statement costs more Python time than SQLite needs to run it. Attention items ignore k.
    `spread` is a per-annotator pseudo-random tie-break among equally loaded items, so concurrent
    annotators rarely contend for the same item. `n_eligible` counts all eligible rows (a window).
    """
    study_id, annotator_id = bindparam("study", type_=String), bindparam("annotator", type_=Integer)
    seen = select(Assignment.item_id).where(Assignment.annotator_id == annotator_id)
    # 64-bit arithmetic on every database: PostgreSQL's INTEGER would overflow on the multiplier
    spread = (cast(Item.id, BigInteger) * literal(2654435761, BigInteger) + cast(annotator_id, BigInteger) * 40503) % 1000003
    base = [Item.study_id == study_id, Item.is_attention.is_(attention), Item.id.not_in(seen)]
    if attention:
        stmt = select(Item.id, literal(0).label("load"), spread.label("spread")).where(*base)
    else:
        # Load = judgments (kept on the item) + unexpired holds; only held rows are aggregated here.
        holds = (
            select(Assignment.item_id, func.count().label("n"))
            .where(
                Assignment.study_id == study_id,
                Assignment.status == "held",
                Assignment.expires_at > bindparam("now", type_=DateTime),
            )
            .group_by(Assignment.item_id)
            .subquery()
        )
        n = Item.n_done + func.coalesce(holds.c.n, 0)
        k = bindparam("k", type_=Integer)
        stmt = (
            select(Item.id, n.label("load"), spread.label("spread"))
            .outerjoin(holds, holds.c.item_id == Item.id)
            # `n_done < k` is implied by `load < k` but lets the index skip finished items.
            .where(*base, Item.n_done < k, n < k)
        )
    if with_count:
        stmt = stmt.add_columns(func.count().over().label("n_eligible"))
        stmt = stmt.order_by(stmt.selected_columns.load, stmt.selected_columns.spread).limit(1)
    return stmt


def _params(study: Study, annotator_id: int, now: datetime) -> dict[str, Any]:
    return {"study": study.id, "annotator": annotator_id, "now": now, "k": study.annotators_per_item}


def pick_item(
    session: Session, *, study: Study, annotator_id: int, now: datetime, attention: bool
) -> tuple[int | None, int]:
    """(least-annotated eligible item or None, how many are eligible), in one query.

    The count is a window over the same rows, so choosing an item and sizing the rest of the
    annotator's queue cost one pass instead of two.
    """
    row = session.execute(_eligible(attention, True), _params(study, annotator_id, now)).first()
    return (None, 0) if row is None else (int(row[0]), int(row.n_eligible))


def count_eligible(
    session: Session, *, study: Study, annotator_id: int, now: datetime, attention: bool
) -> int:
    """How many items this annotator could still get (one aggregate query, no rows fetched)."""
    sub = _eligible(attention, False).subquery()
    stmt = select(func.count()).select_from(sub)
    return int(session.scalar(stmt, _params(study, annotator_id, now)) or 0)


@dataclass(frozen=True)
class Tally:
    """An annotator's tasks: finished, taken (finished or held) and attention checks taken."""

    done: int
    taken: int
    attention_taken: int


def tally(session: Session, annotator_id: int) -> Tally:
    """Count an annotator's finished and held tasks (released holds do not count)."""
    rows = session.execute(
        select(Assignment.status, Item.is_attention, func.count())
        .join(Item, Item.id == Assignment.item_id)
        .where(Assignment.annotator_id == annotator_id, Assignment.status != "released")
        .group_by(Assignment.status, Item.is_attention)
    ).all()
    return Tally(
        done=sum(c for s, _, c in rows if s == "done"),
        taken=sum(c for _, _, c in rows),
        attention_taken=sum(c for _, a, c in rows if a),
    )


def _attention_due(rate: float, taken: int, attention_taken: int) -> bool:
    """Serve a check when fewer than floor(rate * (tasks + 1)) checks were served so far."""
    return rate > 0 and attention_taken < math.floor(rate * (taken + 1))


def estimate_total(study: Study, t: Tally, remaining: int, checks: int) -> int:
    """Tasks this annotator will have done when finished: replays the serving rule (quota, checks
    mixed in at the rate, no checks once ordinary items run out) over what is still open to them."""
    quota = study.items_per_annotator if study.items_per_annotator is not None else math.inf
    total, attention_taken = t.taken, t.attention_taken
    if checks == 0 or study.attention_rate == 0:
        return total + int(min(remaining, max(0, quota - total)))
    rate = study.attention_rate  # plain locals: this loop can run once per remaining item
    while remaining > 0 and total < quota:
        if checks > 0 and _attention_due(rate, total, attention_taken):
            checks -= 1
            attention_taken += 1
        else:
            remaining -= 1
        total += 1
    return total


def progress(session: Session, *, study: Study, annotator_id: int, now: datetime) -> Progress:
    """`done / total` for an annotator; exact unless others take the last free slots first."""
    t = tally(session, annotator_id)
    remaining = count_eligible(session, study=study, annotator_id=annotator_id, now=now, attention=False)
    checks = 0
    if study.attention_rate > 0 and remaining:
        checks = count_eligible(session, study=study, annotator_id=annotator_id, now=now, attention=True)
    return Progress(done=t.done, total=max(estimate_total(study, t, remaining, checks), t.taken))


def acquire(
    session: Session, *, study: Study, annotator: Annotator, now: datetime
) -> tuple[Assignment | None, Progress]:
    """The annotator's current assignment (renewed or newly created; None when finished) and progress.

    Must run in a write transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: the study row is locked).
    """
    # One small query gives both the tally and any held task (an annotator has at most a few dozen).
    mine = session.execute(
        select(Assignment.id, Assignment.status, Item.is_attention)
        .join(Item, Item.id == Assignment.item_id)
        .where(Assignment.annotator_id == annotator.id, Assignment.status != "released")
    ).all()
    newcomer = not any(status == "done" for _, status, _ in mine)
    hold = timedelta(minutes=min(study.hold_minutes, NEWCOMER_HOLD_MINUTES) if newcomer else study.hold_minutes)
    released: set[int] = set()
    held_ids = [i for i, status, _ in mine if status == "held"]
    if held_ids:
        held = session.scalars(
            select(Assignment)
            .where(Assignment.id.in_(held_ids))
            .order_by(Assignment.served_at, Assignment.id)
        ).all()
        for assignment in held:
            if assignment.expires_at <= now:
                load = item_load(session, item_id=assignment.item_id, now=now, exclude_id=assignment.id)
                if not assignment.item.is_attention and load >= study.annotators_per_item:
                    assignment.status = "released"  # the slot went to someone else while the hold lapsed
                    released.add(assignment.id)
                    continue
                assignment.expires_at = now + hold
            # Resume: same item, same sides, after a reload (or a renewed hold).
            return assignment, progress(session, study=study, annotator_id=annotator.id, now=now)
    kept = [(status, check) for i, status, check in mine if i not in released]
    t = Tally(
        done=sum(status == "done" for status, _ in kept),
        taken=len(kept),
        attention_taken=sum(bool(check) for _, check in kept),
    )
    finished = Progress(done=t.done, total=t.done)
    quota = study.items_per_annotator
    if not study.is_open or (quota is not None and t.taken >= quota):
        return None, finished
    item_id, remaining = pick_item(session, study=study, annotator_id=annotator.id, now=now, attention=False)
    if item_id is None:
        return None, finished  # never pad a finished annotator with attention checks alone
    checks, is_check = 0, False
    if study.attention_rate > 0:
        check_id, checks = pick_item(session, study=study, annotator_id=annotator.id, now=now, attention=True)
        if check_id is not None and _attention_due(study.attention_rate, t.taken, t.attention_taken):
            item_id, is_check = check_id, True
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
    # Progress from the numbers above: this new task is taken, and no longer eligible.
    t = Tally(t.done, t.taken + 1, t.attention_taken + is_check)
    total = estimate_total(study, t, remaining - (not is_check), checks - is_check)
    return assignment, Progress(done=t.done, total=max(total, t.taken))


def why_finished(session: Session, *, study: Study, annotator_id: int, done: int) -> str:
    """Why `acquire` gave this annotator nothing (a FINISH_REASONS value): "done" once they finished a task;
    otherwise "closed", "busy" (items they could take are held by others, whose holds may lapse) or "full"."""
    if done > 0:
        return "done"
    if not study.is_open:
        return "closed"
    seen = select(Assignment.item_id).where(Assignment.annotator_id == annotator_id)
    open_items = session.scalar(
        select(func.count()).where(
            Item.study_id == study.id, Item.is_attention.is_(False), Item.n_done < study.annotators_per_item,
            Item.id.not_in(seen),
        )
    )
    return "busy" if open_items else "full"
