"""Annotator session key: the hash of a server-issued key, bound on first use of an annotator id.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN of a nullable column (no table rebuild); existing annotators bind on next use.
    op.add_column("annotators", sa.Column("session_key", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("annotators", schema=None) as batch_op:
        batch_op.drop_column("session_key")
