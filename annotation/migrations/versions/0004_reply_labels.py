"""Single-reply labels: reply items (context, persona, reply, hidden system) and their labels.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reply_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=False),
        sa.Column("context", sa.Text(), nullable=False),
        sa.Column("persona", sa.String(length=200), nullable=False),
        sa.Column("persona_role", sa.String(length=200), nullable=False),
        sa.Column("reply", sa.Text(), nullable=False),
        sa.Column("system", sa.String(length=200), nullable=False),
        sa.Column("meta", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("study_id", "external_id", name="uq_reply_items_study_external"),
    )
    op.create_table(
        "reply_labels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("annotator", sa.String(length=200), nullable=False),
        sa.Column("acceptability", sa.String(length=32), nullable=False),
        sa.Column("persona_fit", sa.String(length=16), nullable=True),
        sa.Column("faults", sa.Text(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint(
            "acceptability IN ('acceptable', 'borderline', 'not_acceptable')",
            name="ck_reply_labels_acceptability",
        ),
        sa.CheckConstraint("persona_fit IN ('fits', 'partly', 'off')", name="ck_reply_labels_persona_fit"),
        sa.CheckConstraint("source IN ('app', 'import')", name="ck_reply_labels_source"),
        sa.ForeignKeyConstraint(["item_id"], ["reply_items.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("item_id", "annotator", name="uq_reply_labels_item_annotator"),
    )
    op.create_index("ix_reply_labels_study", "reply_labels", ["study_id"])


def downgrade() -> None:
    op.drop_index("ix_reply_labels_study", table_name="reply_labels")
    op.drop_table("reply_labels")
    op.drop_table("reply_items")
