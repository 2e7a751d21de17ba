"""Monitoring counts for a running study: progress toward k per item, holds, quality flags, reply labels.

Uses the per-item judgment counter (`items.n_done`), so it stays cheap on large studies.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from annotation.models import Annotator, Assignment, Item, Judgment, ReplyItem, ReplyLabel, Study
from annotation.schemas import Overview


def study_overview(session: Session, *, study: Study, now: datetime) -> Overview:
    """Items (ordinary / checks), complete items, judgments, annotators, live holds, flags, reply labels."""
    count = lambda stmt: int(session.scalar(stmt) or 0)  # noqa: E731
    items = select(func.count()).where(Item.study_id == study.id)
    judgments = select(func.count()).where(Judgment.study_id == study.id)
    n_checks = count(items.where(Item.is_attention.is_(True)))
    return Overview(
        study_id=study.id,
        items=count(items) - n_checks,
        attention_items=n_checks,
        complete_items=count(
            items.where(Item.is_attention.is_(False), Item.n_done >= study.annotators_per_item)
        ),
        judgments=count(judgments),
        annotators=count(select(func.count()).where(Annotator.study_id == study.id)),
        live_holds=count(
            select(func.count()).where(
                Assignment.study_id == study.id, Assignment.status == "held", Assignment.expires_at > now
            )
        ),
        too_fast=count(judgments.where(Judgment.too_fast.is_(True))),
        attention_failed=count(judgments.where(Judgment.attention_passed.is_(False))),
        leak_items=count(items.where(Item.leak_terms != "")),
        reply_items=count(select(func.count()).where(ReplyItem.study_id == study.id)),
        reply_labels=count(select(func.count()).where(ReplyLabel.study_id == study.id)),
    )
