"""Initial schema: studies, systems, items, annotators, assignments, judgments.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29 18:52:13.349151
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "studies",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("instructions", sa.Text(), nullable=False),
        sa.Column("annotators_per_item", sa.Integer(), nullable=False),
        sa.Column("attention_rate", sa.Float(), nullable=False),
        sa.Column("min_seconds", sa.Float(), nullable=False),
        sa.Column("hold_minutes", sa.Float(), nullable=False),
        sa.Column("items_per_annotator", sa.Integer(), nullable=True),
        sa.Column("completion_code", sa.String(length=100), nullable=True),
        sa.Column("order_secret", sa.String(length=64), nullable=False),
        sa.Column("is_open", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("annotators_per_item >= 1", name="ck_studies_k_positive"),
        sa.CheckConstraint("attention_rate >= 0 AND attention_rate < 1", name="ck_studies_attention_rate"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "annotators",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("study_id", "external_id", name="uq_annotators_study_external"),
    )
    op.create_table(
        "systems",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("study_id", "name", name="uq_systems_study_name"),
    )
    op.create_table(
        "items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=False),
        sa.Column("context", sa.Text(), nullable=False),
        sa.Column("system_a_id", sa.Integer(), nullable=False),
        sa.Column("system_b_id", sa.Integer(), nullable=False),
        sa.Column("dialogue_a", sa.Text(), nullable=False),
        sa.Column("dialogue_b", sa.Text(), nullable=False),
        sa.Column("is_attention", sa.Boolean(), nullable=False),
        sa.Column("expected_choice", sa.String(length=16), nullable=True),
        sa.Column("leak_terms", sa.Text(), nullable=False),
        sa.Column("meta", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["system_a_id"],
            ["systems.id"],
        ),
        sa.ForeignKeyConstraint(
            ["system_b_id"],
            ["systems.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("study_id", "external_id", name="uq_items_study_external"),
    )
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.create_index("ix_items_study_attention", ["study_id", "is_attention"], unique=False)

    op.create_table(
        "assignments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token", sa.String(length=64), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("annotator_id", sa.Integer(), nullable=False),
        sa.Column("a_on_left", sa.Boolean(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("served_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("status IN ('held', 'done', 'released')", name="ck_assignments_status"),
        sa.ForeignKeyConstraint(["annotator_id"], ["annotators.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("item_id", "annotator_id", name="uq_assignments_item_annotator"),
        sa.UniqueConstraint("token"),
    )
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        batch_op.create_index("ix_assignments_annotator_status", ["annotator_id", "status"], unique=False)
        batch_op.create_index(
            "ix_assignments_study_item_status", ["study_id", "item_id", "status"], unique=False
        )

    op.create_table(
        "judgments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("annotator_id", sa.Integer(), nullable=False),
        sa.Column("choice", sa.String(length=16), nullable=False),
        sa.Column("winner_system_id", sa.Integer(), nullable=True),
        sa.Column("left_system_id", sa.Integer(), nullable=True),
        sa.Column("helpfulness_a", sa.Integer(), nullable=True),
        sa.Column("helpfulness_b", sa.Integer(), nullable=True),
        sa.Column("emotional_appropriateness_a", sa.Integer(), nullable=True),
        sa.Column("emotional_appropriateness_b", sa.Integer(), nullable=True),
        sa.Column("perceived_safety_a", sa.Integer(), nullable=True),
        sa.Column("perceived_safety_b", sa.Integer(), nullable=True),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=True),
        sa.Column("too_fast", sa.Boolean(), nullable=False),
        sa.Column("attention_passed", sa.Boolean(), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("choice IN ('a', 'b', 'tie', 'both_bad')", name="ck_judgments_choice"),
        sa.CheckConstraint(
            "emotional_appropriateness_a BETWEEN 1 AND 5", name="ck_judgments_emotional_appropriateness_a"
        ),
        sa.CheckConstraint(
            "emotional_appropriateness_b BETWEEN 1 AND 5", name="ck_judgments_emotional_appropriateness_b"
        ),
        sa.CheckConstraint("helpfulness_a BETWEEN 1 AND 5", name="ck_judgments_helpfulness_a"),
        sa.CheckConstraint("helpfulness_b BETWEEN 1 AND 5", name="ck_judgments_helpfulness_b"),
        sa.CheckConstraint("perceived_safety_a BETWEEN 1 AND 5", name="ck_judgments_perceived_safety_a"),
        sa.CheckConstraint("perceived_safety_b BETWEEN 1 AND 5", name="ck_judgments_perceived_safety_b"),
        sa.ForeignKeyConstraint(["annotator_id"], ["annotators.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["assignment_id"], ["assignments.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["left_system_id"],
            ["systems.id"],
        ),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["winner_system_id"],
            ["systems.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("assignment_id", name="uq_judgments_assignment"),
        sa.UniqueConstraint("item_id", "annotator_id", name="uq_judgments_item_annotator"),
    )
    with op.batch_alter_table("judgments", schema=None) as batch_op:
        batch_op.create_index("ix_judgments_study", ["study_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("judgments", schema=None) as batch_op:
        batch_op.drop_index("ix_judgments_study")

    op.drop_table("judgments")
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        batch_op.drop_index("ix_assignments_study_item_status")
        batch_op.drop_index("ix_assignments_annotator_status")

    op.drop_table("assignments")
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.drop_index("ix_items_study_attention")

    op.drop_table("items")
    op.drop_table("systems")
    op.drop_table("annotators")
    op.drop_table("studies")
