"""The job table: every launched command, its state and where its log and progress live, in any SQLAlchemy
database (SQLite by default, PostgreSQL for several app processes).

States: queued -> running -> finished | failed | cancelled (queued -> cancelled too). A job that is queued or
running holds its command's key in `active_key`, which is unique, so the same command cannot be queued twice
however many researchers or app processes press Launch at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Boolean, DateTime, Integer, String, Text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from mascot.errors import ConfigError

STATES = ("queued", "running", "finished", "failed", "cancelled")
ACTIVE = ("queued", "running")


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    title: Mapped[str] = mapped_column(String(200))
    argv: Mapped[str] = mapped_column(Text)  # JSON list
    folder: Mapped[str] = mapped_column(Text)  # the job's own folder: log.txt, exit.json
    progress_path: Mapped[str] = mapped_column(Text)
    result_path: Mapped[str] = mapped_column(Text, default="")  # a JSON report the console shows as a table
    state: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    active_key: Mapped[str | None] = mapped_column(String(64), unique=True, nullable=True)
    heavy: Mapped[bool] = mapped_column(Boolean, default=True)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    host: Mapped[str] = mapped_column(String(255), default="")  # the machine the job's process runs on
    returncode: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    started: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    ended: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


@dataclass(frozen=True)
class Job:
    """A read-only snapshot of one job."""

    id: str
    kind: str
    title: str
    argv: list[str]
    folder: str
    progress_path: str
    result_path: str
    state: str
    heavy: bool
    pid: int | None
    host: str
    returncode: int | None
    message: str
    created: datetime
    started: datetime | None
    ended: datetime | None

    @property
    def command(self) -> str:
        import shlex

        return shlex.join(self.argv)

    @property
    def log_path(self) -> str:
        return f"{self.folder}/log.txt"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @classmethod
    def of(cls, row: JobRow) -> Job:
        return cls(row.id, row.kind, row.title, json.loads(row.argv), row.folder, row.progress_path, row.result_path,
                   row.state, row.heavy, row.pid, row.host, row.returncode, row.message, row.created, row.started, row.ended)

    def as_dict(self) -> dict[str, Any]:
        return {k: (v.isoformat(timespec="seconds") if isinstance(v, datetime) else v) for k, v in self.__dict__.items()}


def make_engine(url: str) -> Engine:
    """An engine with the job table created, built as the annotation store builds its own (`annotation.db`: SQLite
    in WAL with a busy timeout, the folder created); every transaction takes the write lock at BEGIN, so two
    processes claiming the next job queue instead of both reading 'nothing running'."""
    from annotation.db import make_engine as store_engine
    from annotation.db import writer

    try:
        engine = writer(store_engine(url))
        Base.metadata.create_all(engine)
    except (OperationalError, OSError) as exc:
        raise ConfigError(f"Cannot open the job table at {make_url(url).render_as_string(hide_password=True)}: "
                          f"{getattr(exc, 'orig', exc)}. Check MASCOT_JOBS_DB_URL (or MASCOT_DATA_DIR) and that the folder is "
                          "writable.") from None
    return engine
