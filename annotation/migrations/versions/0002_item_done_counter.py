"""Per-item judgment counter and covering indexes (fast least-annotated picking on big studies).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 19:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (no table rebuild): SQLite supports it with a constant default.
    op.add_column("items", sa.Column("n_done", sa.Integer(), server_default="0", nullable=False))
    op.execute(
        "UPDATE items SET n_done = (SELECT count(*) FROM judgments WHERE judgments.item_id = items.id)"
    )
    op.drop_index("ix_items_study_attention", table_name="items")
    op.create_index("ix_items_study_attention_done", "items", ["study_id", "is_attention", "n_done"])
    op.create_index(
        "ix_assignments_study_status_expiry", "assignments", ["study_id", "status", "expires_at", "item_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_assignments_study_status_expiry", table_name="assignments")
    op.drop_index("ix_items_study_attention_done", table_name="items")
    op.create_index("ix_items_study_attention", "items", ["study_id", "is_attention"])
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.drop_column("n_done")
