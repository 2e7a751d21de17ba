"""SQLAlchemy 2.0 models of a study: pairwise (systems, items, annotators, assignments, judgments) and
single-reply labels (reply items, reply labels).

Sides "a" and "b" always refer to the item as imported (the pairs file). What the annotator saw as
"Response A" (left) is recorded separately on the assignment (`a_on_left`), so every judgment can be
mapped back to systems and checked for position bias. The schema itself is created by Alembic
migrations (`annotation/migrations`), never by `create_all`, so deployed databases can be upgraded.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from annotation.reply_labels import ACCEPTABILITY, LABEL_SOURCES, PERSONA_FIT

# Choice values stored on a judgment, in item orientation ("a" = the item's side a system).
CHOICES: tuple[str, ...] = ("a", "b", "tie", "both_bad")
# The three 1-5 rating criteria asked for each side (the paper's human-evaluation criteria).
CRITERIA: tuple[str, ...] = ("helpfulness", "emotional_appropriateness", "perceived_safety")
# Assignment life cycle: held (reserved, maybe expired) -> done, or -> released (expired and lost).
ASSIGNMENT_STATUSES: tuple[str, ...] = ("held", "done", "released")


def utcnow() -> datetime:
    """Timezone-naive UTC now: SQLite has no time zones, so every timestamp is stored as naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    """Declarative base shared by all annotation tables (its metadata drives the migrations)."""


class Study(Base):
    """A pairwise study: its settings for overlap, attention checks, timing flags and holds."""

    __tablename__ = "studies"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    instructions: Mapped[str] = mapped_column(Text, default="")
    annotators_per_item: Mapped[int] = mapped_column(Integer, default=2)
    attention_rate: Mapped[float] = mapped_column(Float, default=0.0)
    min_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    hold_minutes: Mapped[float] = mapped_column(Float, default=30.0)
    items_per_annotator: Mapped[int | None] = mapped_column(Integer, nullable=True)
    completion_code: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # Secret salt for the per-(annotator, item) left/right coin: unpredictable but stable.
    order_secret: Mapped[str] = mapped_column(String(64))
    # Secret part of the annotator link (`&key=...`): a new annotator id is admitted only with it.
    link_key: Mapped[str] = mapped_column(String(64))
    is_open: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    __table_args__ = (
        CheckConstraint("annotators_per_item >= 1", name="ck_studies_k_positive"),
        CheckConstraint("attention_rate >= 0 AND attention_rate < 1", name="ck_studies_attention_rate"),
    )


class System(Base):
    """A system (model or method) compared in a study; its name is never shown to annotators."""

    __tablename__ = "systems"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))

    __table_args__ = (UniqueConstraint("study_id", "name", name="uq_systems_study_name"),)


class Item(Base):
    """One pair to judge: a context plus the dialogues of system a and system b (turns as JSON)."""

    __tablename__ = "items"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(200))
    context: Mapped[str] = mapped_column(Text, default="")
    system_a_id: Mapped[int] = mapped_column(ForeignKey("systems.id"))
    system_b_id: Mapped[int] = mapped_column(ForeignKey("systems.id"))
    dialogue_a: Mapped[str] = mapped_column(Text)  # JSON list of {"speaker", "text"}
    dialogue_b: Mapped[str] = mapped_column(Text)
    is_attention: Mapped[bool] = mapped_column(Boolean, default=False)
    expected_choice: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # Comma-separated system names found in the item's texts (blinding risk), "" when clean.
    leak_terms: Mapped[str] = mapped_column(Text, default="")
    meta: Mapped[str] = mapped_column(Text, default="{}")  # JSON object, exported as is
    # Judgments recorded for this item, kept in the same transaction as each judgment insert, so that
    # picking the least-annotated item never has to aggregate the whole assignments table.
    n_done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    system_a: Mapped[System] = relationship(foreign_keys=[system_a_id])
    system_b: Mapped[System] = relationship(foreign_keys=[system_b_id])

    __table_args__ = (
        UniqueConstraint("study_id", "external_id", name="uq_items_study_external"),
        Index("ix_items_study_attention_done", "study_id", "is_attention", "n_done"),  # covers the pick
    )


class Annotator(Base):
    """A person judging a study, identified by an external id (e.g. a Prolific PID)."""

    __tablename__ = "annotators"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(200))  # NFKC-normalised and trimmed, as first seen
    # The id's identity (`annotation.identity.annotator_key`): ALICE, alice and the full-width ａｌｉｃｅ share it.
    match_key: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # SHA-256 of the key the server issued to the first browser session using this id (None: unbound).
    session_key: Mapped[str | None] = mapped_column(String(64), nullable=True)

    __table_args__ = (
        UniqueConstraint("study_id", "external_id", name="uq_annotators_study_external"),
        UniqueConstraint("study_id", "match_key", name="uq_annotators_study_match_key"),
    )


class Assignment(Base):
    """An item reserved for one annotator; its opaque token is all the browser ever holds."""

    __tablename__ = "assignments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token: Mapped[str] = mapped_column(String(64), unique=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"))
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id", ondelete="CASCADE"))
    # True when the item's side a is shown as "Response A" (left); None for imported judgments.
    a_on_left: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="held")
    served_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime)

    item: Mapped[Item] = relationship()

    __table_args__ = (
        # Never the same item twice to one annotator, even under concurrent requests.
        UniqueConstraint("item_id", "annotator_id", name="uq_assignments_item_annotator"),
        CheckConstraint("status IN ('held', 'done', 'released')", name="ck_assignments_status"),
        Index("ix_assignments_study_item_status", "study_id", "item_id", "status"),
        Index("ix_assignments_annotator_status", "annotator_id", "status"),
        Index("ix_assignments_study_status_expiry", "study_id", "status", "expires_at", "item_id"),
    )


class Judgment(Base):
    """One vote: the choice mapped back to systems, side shown on the left, ratings, timing, flags."""

    __tablename__ = "judgments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"))
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id", ondelete="CASCADE"))
    choice: Mapped[str] = mapped_column(String(16))  # a | b | tie | both_bad (item orientation)
    winner_system_id: Mapped[int | None] = mapped_column(ForeignKey("systems.id"), nullable=True)
    left_system_id: Mapped[int | None] = mapped_column(ForeignKey("systems.id"), nullable=True)
    helpfulness_a: Mapped[int | None] = mapped_column(Integer, nullable=True)
    helpfulness_b: Mapped[int | None] = mapped_column(Integer, nullable=True)
    emotional_appropriateness_a: Mapped[int | None] = mapped_column(Integer, nullable=True)
    emotional_appropriateness_b: Mapped[int | None] = mapped_column(Integer, nullable=True)
    perceived_safety_a: Mapped[int | None] = mapped_column(Integer, nullable=True)
    perceived_safety_b: Mapped[int | None] = mapped_column(Integer, nullable=True)
    comment: Mapped[str] = mapped_column(Text, default="")
    seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    too_fast: Mapped[bool] = mapped_column(Boolean, default=False)
    # None for normal items; True/False when the item is an attention check with a known answer.
    attention_passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    source: Mapped[str] = mapped_column(String(16), default="app")  # app | import
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    __table_args__ = (
        UniqueConstraint("assignment_id", name="uq_judgments_assignment"),
        UniqueConstraint("item_id", "annotator_id", name="uq_judgments_item_annotator"),
        CheckConstraint("choice IN ('a', 'b', 'tie', 'both_bad')", name="ck_judgments_choice"),
        *(
            CheckConstraint(f"{c}_{side} BETWEEN 1 AND 5", name=f"ck_judgments_{c}_{side}")
            for c in CRITERIA
            for side in "ab"
        ),
        Index("ix_judgments_study", "study_id"),
    )


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class ReplyItem(Base):
    """One reply to label on its own: the conversation before it, the persona who says it, the reply.

    `system` (what produced the reply) is stored for analysis and never shown to annotators.
    """

    __tablename__ = "reply_items"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(200))
    context: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of {"speaker", "text"}
    persona: Mapped[str] = mapped_column(String(200))
    persona_role: Mapped[str] = mapped_column(String(200), default="")
    reply: Mapped[str] = mapped_column(Text)
    system: Mapped[str] = mapped_column(String(200))
    meta: Mapped[str] = mapped_column(Text, default="{}")  # JSON object, exported as is

    __table_args__ = (UniqueConstraint("study_id", "external_id", name="uq_reply_items_study_external"),)


class ReplyLabel(Base):
    """One annotator's label of one reply item (vocabularies in `annotation.reply_labels`)."""

    __tablename__ = "reply_labels"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("reply_items.id", ondelete="CASCADE"))
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    annotator: Mapped[str] = mapped_column(String(200))
    acceptability: Mapped[str] = mapped_column(String(32))
    persona_fit: Mapped[str | None] = mapped_column(String(16), nullable=True)
    faults: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of FAULTS values
    comment: Mapped[str] = mapped_column(Text, default="")
    source: Mapped[str] = mapped_column(String(16), default="app")  # app | import
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    item: Mapped[ReplyItem] = relationship()

    __table_args__ = (
        UniqueConstraint("item_id", "annotator", name="uq_reply_labels_item_annotator"),
        CheckConstraint(_in("acceptability", ACCEPTABILITY), name="ck_reply_labels_acceptability"),
        CheckConstraint(_in("persona_fit", PERSONA_FIT), name="ck_reply_labels_persona_fit"),
        CheckConstraint(_in("source", LABEL_SOURCES), name="ck_reply_labels_source"),
        Index("ix_reply_labels_study", "study_id"),
    )
