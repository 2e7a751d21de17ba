"""Study link keys (a new annotator id needs the study's full link) and case-insensitive annotator ids.

Every existing study gets a fresh random link key. Every annotator gets `match_key`, its id NFKC-normalised,
trimmed and casefolded. Where two existing ids of one study fold to the same key (`ALICE` and `alice`), the
oldest keeps it and the others get a key no typed id produces, so their judgments stay and nothing merges.

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-10 10:00:00
"""

from __future__ import annotations

import secrets
import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _fold(external_id: str) -> str:
    """annotation.identity.annotator_key as of this revision (kept here so the migration never changes)."""
    clean = unicodedata.normalize("NFKC", external_id).strip()
    return unicodedata.normalize("NFKC", clean.casefold())


def upgrade() -> None:
    conn = op.get_bind()
    op.add_column("studies", sa.Column("link_key", sa.String(length=64), nullable=True))
    for (study_id,) in conn.execute(sa.text("SELECT id FROM studies")).all():
        conn.execute(sa.text("UPDATE studies SET link_key = :k WHERE id = :id"),
                     {"k": secrets.token_urlsafe(12), "id": study_id})
    op.add_column("annotators", sa.Column("match_key", sa.String(length=200), nullable=True))
    seen: set[tuple[str, str]] = set()
    rows = conn.execute(sa.text("SELECT id, study_id, external_id FROM annotators ORDER BY id")).all()
    for annotator_id, study_id, external_id in rows:
        key = _fold(external_id)
        if (study_id, key) in seen:
            key = f"{key[:150]}\x1f#{annotator_id}"  # a control character: no cleaned id ever folds to this
        seen.add((study_id, key))
        conn.execute(sa.text("UPDATE annotators SET match_key = :k WHERE id = :id"), {"k": key, "id": annotator_id})
    with op.batch_alter_table("studies", schema=None) as batch_op:
        batch_op.alter_column("link_key", existing_type=sa.String(length=64), nullable=False)
    with op.batch_alter_table("annotators", schema=None) as batch_op:
        batch_op.alter_column("match_key", existing_type=sa.String(length=200), nullable=False)
        batch_op.create_unique_constraint("uq_annotators_study_match_key", ["study_id", "match_key"])


def downgrade() -> None:
    with op.batch_alter_table("annotators", schema=None) as batch_op:
        batch_op.drop_constraint("uq_annotators_study_match_key", type_="unique")
        batch_op.drop_column("match_key")
    with op.batch_alter_table("studies", schema=None) as batch_op:
        batch_op.drop_column("link_key")
