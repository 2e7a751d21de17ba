"""Alembic environment for the annotation store: runs on the connection passed in by `annotation.db`.

Programmatic use only (`annotation.db.migrate`); batch mode is on so SQLite can alter tables.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from annotation.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations() -> None:
    """Migrate on the caller's connection, or on a fresh engine from `sqlalchemy.url` if none."""
    connection = config.attributes.get("connection")
    if connection is None:
        url = config.get_main_option("sqlalchemy.url")
        if not url:
            raise RuntimeError(
                "No database to migrate: call annotation.db.migrate(engine), or set "
                "sqlalchemy.url in the Alembic config."
            )
        with create_engine(url).begin() as conn:
            _run(conn)
    else:
        _run(connection)


def _run(connection: object) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
