"""Engine construction from a URL, SQLite tuning, and Alembic migrations run on open.

SQLite is the embedded default: WAL (readers never block the writer), foreign keys on, a busy
timeout, and write transactions that start with `BEGIN IMMEDIATE` so that concurrent writers queue
on the lock instead of failing on a read-to-write upgrade. Any other SQLAlchemy URL (PostgreSQL)
is used unchanged; there row locks (`FOR UPDATE`) serialize the few critical sections.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:  # POSIX advisory locks; elsewhere writers fall back to SQLite's own busy handler
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.pool import StaticPool

from mascot.errors import ConfigError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Execution option that marks a connection as a writer (SQLite: BEGIN IMMEDIATE).
WRITE_OPTION = "annotation_write"
SQLITE_BUSY_TIMEOUT_MS = 60_000


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """Per-connection SQLite settings; autocommit at the driver so we control BEGIN ourselves."""
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys = ON")
    cur.execute("PRAGMA journal_mode = WAL")
    # NORMAL is durable against process crashes in WAL mode (only an OS crash can lose the tail).
    cur.execute("PRAGMA synchronous = NORMAL")
    cur.close()


def _sqlite_begin(conn: Any) -> None:
    """Start each transaction explicitly: IMMEDIATE for writers, DEFERRED for readers."""
    mode = "IMMEDIATE" if conn.get_execution_options().get(WRITE_OPTION) else "DEFERRED"
    conn.exec_driver_sql(f"BEGIN {mode}")


def make_engine(url: str) -> Engine:
    """Build an engine for `url`; SQLite files get their folder created and the pragmas above.

    Args:
        url: any SQLAlchemy URL, e.g. ``sqlite:///data/annotation.db`` or ``postgresql+psycopg://…``.

    Returns:
        An engine. Pass it to :func:`migrate` (``open_database`` does both).
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(
            f"Invalid database URL {url!r}: {exc}. Use a SQLAlchemy URL such as "
            "sqlite:///data/annotation.db or postgresql+psycopg://user:pass@host/db."
        ) from exc
    if parsed.get_backend_name() != "sqlite":
        try:
            return create_engine(url, pool_pre_ping=True)
        except NoSuchModuleError as exc:  # a dialect or driver this install lacks
            raise ConfigError(
                f"Cannot use the database URL {parsed.render_as_string(hide_password=True)!r}: {exc}. Use "
                "sqlite:///PATH, or postgresql+psycopg://user:pass@host/db (psycopg is installed)."
            ) from None
    database = parsed.database or ""
    if database in ("", ":memory:"):
        # One shared in-memory connection, otherwise each pooled connection is a new empty DB.
        engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            pool_size=8,
            max_overflow=32,
            pool_timeout=60,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        )
    event.listen(engine, "connect", _sqlite_pragmas)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


class WriteGate:
    """Queues SQLite writers fairly: a thread lock in-process plus `flock` on a sidecar file across processes.

    Why: SQLite's busy handler retries with sleeps of up to 100 ms, so 16 writers hammering one file
    convoy at a few dozen transactions per second. Waiting on a lock instead wakes the next writer the
    moment the previous one commits. The kernel drops an `flock` when its process dies (even SIGKILL),
    so a crashed writer never blocks the others. For non-SQLite databases the gate does nothing.
    """

    def __init__(self, engine: Engine) -> None:
        self._thread_lock = threading.Lock()
        self._path: Path | None = None
        url = engine.url
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            self._path = Path(str(url.database)).expanduser().resolve().with_suffix(".writelock")
        self._file: Any = None
        self._pid = 0

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the gate for one write transaction."""
        if self._path is None:
            yield
            return
        with self._thread_lock:
            if fcntl is None:
                yield
                return
            if self._file is None or self._pid != os.getpid():
                # A forked child must not share its parent's open file (flock would see one owner).
                self._file = open(self._path, "a+b")  # noqa: SIM115 - kept open for the store's life
                self._pid = os.getpid()
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)


def writer(engine: Engine) -> Engine:
    """The same engine (same pool) flagged so that its transactions take the write lock up front."""
    return engine.execution_options(**{WRITE_OPTION: True})


def alembic_config() -> Config:
    """An Alembic config pointing at the packaged migrations; no alembic.ini is needed."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the schema to `revision` inside one write transaction (safe with many openers).

    On SQLite, foreign keys are switched off while migrating: batch migrations rebuild tables, and
    dropping the old copy with foreign keys on would cascade-delete every dependent row. The keys
    are checked once the migration is done, and switched back on.
    """
    cfg = alembic_config()
    sqlite = engine.url.get_backend_name() == "sqlite"
    with writer(engine).connect() as conn:
        if sqlite:  # must happen outside a transaction, hence on the driver connection
            conn.connection.driver_connection.execute("PRAGMA foreign_keys = OFF")
        try:
            with conn.begin():
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise ConfigError(
                            f"Migration to {revision} left {len(broken)} broken foreign key(s), "
                            f"e.g. {broken[0]}; "
                            "it was rolled back. Report this with the database file."
                        )
        finally:
            if sqlite:
                conn.connection.driver_connection.execute("PRAGMA foreign_keys = ON")


def open_database(url: str) -> Engine:
    """Build the engine for `url` and bring its schema up to date (the normal way to open a store)."""
    engine = make_engine(url)
    migrate(engine)
    return engine
